package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// window is the reservation window [now+from, now+to) on the harness clock.
func (h *harness) window(from, to time.Duration) map[string]any {
	return map[string]any{"start": h.clock.Now().Add(from).Format(time.RFC3339), "end": h.clock.Now().Add(to).Format(time.RFC3339)}
}

func TestCapacityOverTheWire(t *testing.T) {
	h := newHarness(t, setup{module: "capacity"})
	p := h.ok("admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resources": map[string]any{"gpu.h100": 2}})
	if devs, _ := p.obj("pool", "devices").([]any); len(devs) != 2 || p.obj("pool", "ownerTenantId") != "acme" {
		t.Fatalf("pool %v", p.Body)
	}
	q := h.ok("admin", "pools.offer", map[string]any{"tenantId": "acme", "poolId": "p1", "toTenantId": "globex", "resource": "gpu.h100", "max": 1})
	if q.obj("quota", "max") != 1.0 || q.obj("quota", "used") != 0.0 || q.obj("quota", "tenantId") != "globex" {
		t.Errorf("offer %v", q.Body)
	}
	r := h.ok("alice", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu.h100", "count": 1,
		"window": h.window(0, time.Hour), "clientToken": "t1"})
	id, _ := r.obj("reservation", "reservationId").(string)
	if r.obj("reservation", "state") != "placed" || id == "" || r.obj("reservation", "window", "end") != h.clock.Now().Add(time.Hour).Format(time.RFC3339) {
		t.Fatalf("create %v", r.Body)
	}
	if ids, _ := r.obj("reservation", "deviceIds").([]any); len(ids) != 1 || ids[0] != "gpu.h100-0" {
		t.Errorf("deviceIds %v", ids)
	}
	if again := h.ok("alice", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu.h100", "count": 1,
		"window": h.window(0, time.Hour), "clientToken": "t1"}); again.obj("reservation", "reservationId") != id {
		t.Errorf("replay %v", again.Body)
	}
	// Decided on the draft: bob may not create; the draft is kept, denied.
	d := h.call("bob", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu.h100", "count": 1, "window": h.window(0, time.Hour)})
	did, _ := d.detail("reservationId").(string)
	if d.Status != 403 || d.code() != "PERMISSION_DENIED" || did == "" {
		t.Fatalf("bob create %v", d.Body)
	}
	if g := h.ok("bob", "reservations.get", map[string]any{"tenantId": "acme", "reservationId": did}); g.obj("reservation", "state") != "denied" {
		t.Errorf("denied draft %v", g.Body)
	}
	// Refusals and their HTTP statuses.
	qe := h.call("admin", "reservations.create", map[string]any{"tenantId": "globex", "poolId": "p1", "resource": "gpu.h100", "count": 2, "window": h.window(0, time.Hour)})
	if qe.Status != 429 || qe.code() != "QUOTA_EXCEEDED" || qe.detail("reservationId") == nil {
		t.Errorf("quota %v", qe.Body)
	}
	h.ok("admin", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu.h100", "count": 1, "window": h.window(0, time.Hour)})
	ce := h.call("admin", "reservations.create", map[string]any{"tenantId": "globex", "poolId": "p1", "resource": "gpu.h100", "count": 1, "window": h.window(0, time.Hour)})
	if ce.Status != 409 || ce.code() != "CAPACITY_EXHAUSTED" || ce.detail("reservationId") == nil {
		t.Errorf("capacity %v", ce.Body)
	}
	qg := h.ok("alice", "quotas.get", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu.h100"})
	if qg.obj("quota", "used") != 2.0 || qg.obj("quota", "max") != 2.0 {
		t.Errorf("quota %v", qg.Body)
	}
	rel := h.ok("alice", "reservations.release", map[string]any{"tenantId": "acme", "reservationId": id})
	if rel.obj("reservation", "state") != "released" || rel.obj("reservation", "releasedBy") != "tenant" {
		t.Errorf("release %v", rel.Body)
	}
	l := h.ok("alice", "reservations.list", map[string]any{"tenantId": "acme", "state": "released"})
	if rs, _ := l.obj("reservations").([]any); len(rs) != 1 || l.obj("nextCursor") != nil {
		t.Errorf("list %v", l.Body)
	}
	empty := h.ok("admin", "quotas.list", map[string]any{"tenantId": "nobody"})
	if qs, ok := empty.obj("quotas").([]any); !ok || len(qs) != 0 {
		t.Errorf("empty list must be []: %v", empty.Body)
	}
	vs, err := capacity.Check(context.Background(), h.app.CapacityStore())
	if err != nil || len(vs) != 0 {
		t.Errorf("check: %v %v", vs, err)
	}
}

func TestCapacityWireValidation(t *testing.T) {
	h := newHarness(t, setup{module: "capacity"})
	h.ok("admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resources": map[string]any{"gpu": 2}})
	end := h.clock.Now().Add(time.Hour).Format(time.RFC3339)
	cases := []struct {
		name, method, body, field string
	}{
		{"pool id pattern", "pools.create", `{"tenantId":"acme","poolId":"P1","resources":{"gpu":1}}`, "poolId"},
		{"empty resources", "pools.create", `{"tenantId":"acme","poolId":"p2","resources":{}}`, "resources"},
		{"resource name pattern", "pools.create", `{"tenantId":"acme","poolId":"p2","resources":{"GPU":1}}`, "resources.GPU"},
		{"count 0", "pools.create", `{"tenantId":"acme","poolId":"p2","resources":{"gpu":0}}`, "resources.gpu"},
		{"count 100001", "pools.create", `{"tenantId":"acme","poolId":"p2","resources":{"gpu":100001}}`, "resources.gpu"},
		{"node size 65", "pools.create", `{"tenantId":"acme","poolId":"p2","resources":{"gpu":8},"nodeSize":{"gpu":65}}`, "nodeSize.gpu"},
		{"unknown topology", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1,"window":{"end":"` + end + `"},"topology":"rack"}`, "topology"},
		{"max above 1,000,000", "pools.offer", `{"tenantId":"acme","poolId":"p1","toTenantId":"x","resource":"gpu","max":1000001}`, "max"},
		{"max negative", "pools.offer", `{"tenantId":"acme","poolId":"p1","toTenantId":"x","resource":"gpu","max":-1}`, "max"},
		{"unknown field", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1,"window":{"end":"` + end + `"},"x":1}`, "x"},
		{"unknown field in window", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1,"window":{"end":"` + end + `","len":1}}`, "window.len"},
		{"end wrong type", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1,"window":{"end":5}}`, "window.end"},
		{"end null", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1,"window":{"end":null}}`, "window.end"},
		{"time without offset", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1,"window":{"end":"2026-12-01T10:00:00"}}`, "window.end"},
		{"count as string", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":"1","window":{"end":"` + end + `"}}`, "count"},
		{"count 1.5", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1.5,"window":{"end":"` + end + `"}}`, "count"},
		{"duplicate key", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1,"count":2,"window":{"end":"` + end + `"}}`, "count"},
		{"window missing", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1}`, "window"},
		{"clientToken too long", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"gpu","count":1,"window":{"end":"` + end + `"},"clientToken":"` + strings.Repeat("x", 65) + `"}`, "clientToken"},
		{"unknown state", "reservations.list", `{"tenantId":"acme","state":"running"}`, "state"},
		{"limit 0", "reservations.list", `{"tenantId":"acme","limit":0}`, "limit"},
		{"limit 1001", "pools.list", `{"tenantId":"acme","limit":1001}`, "limit"},
		{"bad reservation id", "reservations.get", `{"tenantId":"acme","reservationId":"a/b"}`, "reservationId"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := h.raw("admin", c.method, c.body)
			if w.Status != 400 || w.code() != "INVALID_INPUT" || w.detail("field") != c.field {
				t.Errorf("got %d %v, want INVALID_INPUT field %s", w.Status, w.Body, c.field)
			}
		})
	}
	// Nothing was written by any of those requests.
	if l := h.ok("admin", "reservations.list", map[string]any{"tenantId": "acme"}); len(l.obj("reservations").([]any)) != 0 {
		t.Errorf("bad input left reservations: %v", l.Body)
	}
	// A resource the pool lacks is found after the draft and the decision
	// (docs/reference/reservations.md): INVALID_INPUT, and the draft is kept rejected (invalid).
	w := h.raw("admin", "reservations.create", `{"tenantId":"acme","poolId":"p1","resource":"tpu","count":1,"window":{"end":"`+end+`"}}`)
	if w.Status != 400 || w.detail("field") != "resource" || w.detail("reservationId") == nil {
		t.Errorf("resource not in pool: %d %v", w.Status, w.Body)
	}
	if rs, _ := h.ok("admin", "reservations.list", map[string]any{"tenantId": "acme", "state": "rejected"}).obj("reservations").([]any); len(rs) != 1 || rs[0].(map[string]any)["reason"] != "invalid" {
		t.Errorf("after an unknown resource: %v", rs)
	}
	if rs, _ := h.ok("admin", "reservations.list", map[string]any{"tenantId": "acme"}).obj("reservations").([]any); len(rs) != 0 {
		t.Errorf("a failed create in the plain list: %v", rs)
	}
	if l := h.ok("admin", "pools.list", map[string]any{"tenantId": "acme"}); len(l.obj("pools").([]any)) != 1 {
		t.Errorf("bad input left pools: %v", l.Body)
	}
}

// Every capacity method is scoped to the caller's tenant.
func TestCapacityWireIsolation(t *testing.T) {
	h := newHarness(t, setup{module: "capacity"})
	h.ok("admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resources": map[string]any{"gpu": 4}})
	h.ok("admin", "pools.create", map[string]any{"tenantId": "globex", "poolId": "g1", "resources": map[string]any{"gpu": 4}})
	var acmeIDs []string
	for i := 0; i < 3; i++ {
		r := h.ok("admin", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu", "count": 1, "window": h.window(0, time.Hour)})
		acmeIDs = append(acmeIDs, r.obj("reservation", "reservationId").(string))
	}
	h.ok("admin", "reservations.create", map[string]any{"tenantId": "globex", "poolId": "g1", "resource": "gpu", "count": 1, "window": h.window(0, time.Hour)})
	notFound := []struct {
		method string
		body   map[string]any
	}{
		{"pools.get", map[string]any{"tenantId": "globex", "poolId": "p1"}},
		{"pools.offer", map[string]any{"tenantId": "globex", "poolId": "p1", "toTenantId": "globex", "resource": "gpu", "max": 4}},
		{"reservations.get", map[string]any{"tenantId": "globex", "reservationId": acmeIDs[0]}},
		{"reservations.release", map[string]any{"tenantId": "globex", "reservationId": acmeIDs[0]}},
		{"reservations.create", map[string]any{"tenantId": "globex", "poolId": "p1", "resource": "gpu", "count": 1, "window": h.window(0, time.Hour)}},
	}
	for _, c := range notFound {
		if w := h.call("admin", c.method, c.body); w.Status != 404 || w.code() != "NOT_FOUND" {
			t.Errorf("%s across tenants: %d %v", c.method, w.Status, w.Body)
		}
	}
	if w := h.call("admin", "pools.create", map[string]any{"tenantId": "globex", "poolId": "p1", "resources": map[string]any{"gpu": 4}}); w.code() != "CONFLICT" {
		t.Errorf("pool id of another tenant: %v", w.Body)
	}
	if w := h.ok("admin", "quotas.get", map[string]any{"tenantId": "globex", "poolId": "p1", "resource": "gpu"}); w.obj("quota", "max") != 0.0 || w.obj("quota", "used") != 0.0 {
		t.Errorf("quotas.get across tenants %v", w.Body)
	}
	for method, key := range map[string]string{"pools.list": "pools", "quotas.list": "quotas", "reservations.list": "reservations"} {
		w := h.ok("admin", method, map[string]any{"tenantId": "globex"})
		items, _ := w.obj(key).([]any)
		if len(items) != 1 {
			t.Errorf("%s for globex: %v", method, w.Body)
		}
		for _, it := range items {
			m := it.(map[string]any)
			if m["tenantId"] != nil && m["tenantId"] != "globex" || m["poolId"] != "g1" {
				t.Errorf("%s mixes tenants: %v", method, m)
			}
		}
	}
	// globex's refused attempt on p1 is its own rejected draft, listed when
	// rejected ones are asked for.
	if rs, _ := h.ok("admin", "reservations.list", map[string]any{"tenantId": "globex", "state": "rejected"}).obj("reservations").([]any); len(rs) != 1 ||
		rs[0].(map[string]any)["poolId"] != "p1" || rs[0].(map[string]any)["tenantId"] != "globex" {
		t.Errorf("globex's rejected reservations: %v", rs)
	}
	// Cursors are bound to the method, the tenant and the filters.
	page := h.ok("admin", "reservations.list", map[string]any{"tenantId": "acme", "limit": 1})
	cur, _ := page.obj("nextCursor").(string)
	if cur == "" {
		t.Fatalf("no cursor: %v", page.Body)
	}
	next := h.ok("admin", "reservations.list", map[string]any{"tenantId": "acme", "limit": 5, "cursor": cur})
	if rs := next.obj("reservations").([]any); len(rs) != 2 {
		t.Errorf("second page %v", next.Body)
	}
	bad := []struct {
		method string
		body   map[string]any
	}{
		{"reservations.list", map[string]any{"tenantId": "globex", "cursor": cur}},
		{"reservations.list", map[string]any{"tenantId": "acme", "cursor": cur, "state": "placed"}},
		{"reservations.list", map[string]any{"tenantId": "acme", "cursor": cur, "poolId": "p1"}},
		{"pools.list", map[string]any{"tenantId": "acme", "cursor": cur}},
		{"quotas.list", map[string]any{"tenantId": "acme", "cursor": cur}},
		{"reservations.list", map[string]any{"tenantId": "acme", "cursor": cur[:len(cur)-2] + "xx"}},
		{"reservations.list", map[string]any{"tenantId": "acme", "cursor": "e30.AAAA"}},
	}
	for _, c := range bad {
		if w := h.call("admin", c.method, c.body); w.Status != 400 || w.detail("field") != "cursor" {
			t.Errorf("%s with a foreign cursor %v: %v", c.method, c.body, w.Body)
		}
	}
}

// The per-request log line carries what the request cost in DynamoDB:
// round trips and the capacity units DynamoDB (here dynalite) reported.
func TestRequestLogCarriesCost(t *testing.T) {
	var buf bytes.Buffer
	h := newHarness(t, setup{module: "capacity", options: []app.Option{app.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil)))}})
	h.ok("admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resources": map[string]any{"gpu": 4}})
	// The first create of an hour stores its node-hour; the second is
	// measured: a window within one hour, and one over two.
	next := h.clock.Now().Truncate(time.Hour).Add(time.Hour)
	aligned := map[string]any{"start": next.Format(time.RFC3339), "end": next.Add(time.Hour).Format(time.RFC3339)}
	over := map[string]any{"start": next.Add(30 * time.Minute).Format(time.RFC3339), "end": next.Add(90 * time.Minute).Format(time.RFC3339)}
	h.ok("admin", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu", "count": 1, "window": over})
	type cost struct {
		Method string  `json:"method"`
		Calls  int     `json:"ddb_calls"`
		RCU    float64 `json:"ddb_rcu"`
		WCU    float64 `json:"ddb_wcu"`
	}
	measure := func(w map[string]any) cost {
		t.Helper()
		buf.Reset()
		h.ok("admin", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu", "count": 1, "window": w})
		var line cost
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("log %q: %v", buf.String(), err)
		}
		return line
	}
	line := measure(aligned)
	if line.Method != "reservations.create" || line.Calls != 5 || line.RCU <= 0 || line.WCU < 4 {
		t.Errorf("cost in the log line: %+v (%s)", line, buf.String())
	}
	// Two hours: the candidates' second hour is read, and both written.
	if two := measure(over); two.Calls != 7 {
		t.Errorf("a window over two hours: %+v, want 7 calls", two)
	}
	t.Logf("reservations.create: %d round trips, %.1f RCU, %.1f WCU", line.Calls, line.RCU, line.WCU)
}
