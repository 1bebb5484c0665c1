package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// One refusal per rule of a heartbeat, each leaving the node as it was.
func TestHeartbeatRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 16)
	e.register(t, "p1", "gpu-node-0")
	e.register(t, "p1", "gpu-node-1")
	e.ready(t, "p1", "gpu-node-0")
	first := e.ready(t, "p1", "gpu-node-0")
	const stored = 2 // the last accepted counter
	if first.Node.State != api.Ready || first.Node.LastHeartbeatAt == nil {
		t.Fatalf("first heartbeat: %+v", first.Node)
	}
	stranger, _ := dsse.GenerateKey(dsse.AlgECDSAP256)
	good := func() api.Report { return e.report("p1", "gpu-node-0") }
	withCounter := func(c int64) api.Report { r := good(); r.Counter = c; return r }
	for _, tc := range []struct {
		name   string
		body   []byte
		pool   string
		node   string
		code   apierr.Code
		reason string
		field  string
	}{
		{"bad signature (a key nobody registered)", sign(t, good(), stranger), "p1", "gpu-node-0", apierr.InvalidInput, "bad_signature", "report.signatures"},
		{"another node's key", sign(t, good(), e.keys["p1/gpu-node-1"]), "p1", "gpu-node-0", apierr.InvalidInput, "bad_signature", "report.signatures"},
		{"replayed counter", sign(t, withCounter(stored-1), e.keys["p1/gpu-node-0"]), "p1", "gpu-node-0", apierr.Conflict, "replay", "report.payload.counter"},
		{"equal counter", sign(t, withCounter(stored), e.keys["p1/gpu-node-0"]), "p1", "gpu-node-0", apierr.Conflict, "replay", "report.payload.counter"},
		{"stale at (past)", sign(t, func() api.Report { r := good(); r.At = e.clock.Now().Add(-6 * time.Minute); return r }(), e.keys["p1/gpu-node-0"]), "p1", "gpu-node-0", apierr.InvalidInput, "stale", "report.payload.at"},
		{"stale at (future)", sign(t, func() api.Report { r := good(); r.At = e.clock.Now().Add(6 * time.Minute); return r }(), e.keys["p1/gpu-node-0"]), "p1", "gpu-node-0", apierr.InvalidInput, "stale", "report.payload.at"},
		{"payload names another node", sign(t, func() api.Report { r := good(); r.NodeID = "gpu-node-1"; return r }(), e.keys["p1/gpu-node-0"]), "p1", "gpu-node-0", apierr.InvalidInput, "mismatch", "report.payload.nodeId"},
		{"payload names another pool", sign(t, func() api.Report { r := good(); r.PoolID = "p2"; return r }(), e.keys["p1/gpu-node-0"]), "p1", "gpu-node-0", apierr.InvalidInput, "mismatch", "report.payload.poolId"},
		{"unregistered node", sign(t, good(), e.keys["p1/gpu-node-0"]), "p1", "gpu-node-7", apierr.NotFound, "", "nodeId"},
		{"no such pool", sign(t, good(), e.keys["p1/gpu-node-0"]), "p9", "gpu-node-0", apierr.NotFound, "", "poolId"},
		{"other payload type", mustSign(t, "application/vnd.bettercompute.release.v1+json", good(), e), "p1", "gpu-node-0", apierr.InvalidInput, "payload_type", "report.payloadType"},
		{"running left out", signRaw(t, `{"poolId":"p1","nodeId":"gpu-node-0","counter":99,"at":"`+e.clock.Now().Format(time.RFC3339)+`","health":{"devicesExpected":8,"devicesVisible":8,"checks":[]},"bindings":[]}`, e), "p1", "gpu-node-0", apierr.InvalidInput, "invalid_field", "report.payload.running"},
		{"counter written 7.0", signRaw(t, `{"poolId":"p1","nodeId":"gpu-node-0","counter":99.0,"at":"`+e.clock.Now().Format(time.RFC3339)+`","running":null,"health":{"devicesExpected":8,"devicesVisible":8,"checks":[]},"bindings":[]}`, e), "p1", "gpu-node-0", apierr.InvalidInput, "invalid_field", "report.payload.counter"},
		{"unknown member", signRaw(t, `{"poolId":"p1","nodeId":"gpu-node-0","counter":99,"at":"`+e.clock.Now().Format(time.RFC3339)+`","running":null,"health":{"devicesExpected":8,"devicesVisible":8,"checks":[]},"bindings":[],"extra":1}`, e), "p1", "gpu-node-0", apierr.InvalidInput, "malformed", "report.payload.extra"},
		{"binding state not known", signRaw(t, `{"poolId":"p1","nodeId":"gpu-node-0","counter":99,"at":"`+e.clock.Now().Format(time.RFC3339)+`","running":null,"health":{"devicesExpected":8,"devicesVisible":8,"checks":[]},"bindings":[{"reservationId":"r1","state":"maybe"}]}`, e), "p1", "gpu-node-0", apierr.InvalidInput, "invalid_field", "report.payload.bindings[0].state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.fleet.Heartbeat(ctx, "acme", tc.pool, tc.node, tc.body)
			ae := apierr.As(err)
			if ae == nil || ae.Code != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if tc.reason != "" && ae.Details["reason"] != tc.reason {
				t.Errorf("reason %v, want %s (%v)", ae.Details["reason"], tc.reason, err)
			}
			if tc.field != "" && ae.Details["field"] != tc.field {
				t.Errorf("field %v, want %s (%v)", ae.Details["field"], tc.field, err)
			}
			if tc.code == apierr.Conflict && ae.Details["latestCounter"] != int64(stored) {
				t.Errorf("latestCounter %v, want %d", ae.Details["latestCounter"], stored)
			}
			if n := e.node(t, "p1", "gpu-node-0"); !n.LastHeartbeatAt.Equal(*first.Node.LastHeartbeatAt) || n.State != api.Ready {
				t.Errorf("a refused heartbeat changed the node: %+v", n)
			}
		})
	}
	// The tenant must be the pool's owner.
	if _, err := e.fleet.Heartbeat(ctx, "globex", "p1", "gpu-node-0", sign(t, good(), e.keys["p1/gpu-node-0"])); apierr.CodeOf(err) != apierr.NotFound {
		t.Errorf("another tenant's heartbeat: %v", err)
	}
}

// A heartbeat's NOT_FOUND says which is missing, the pool or the node
// (details.field), to a tenant that owns the pool; to any other tenant a
// pool that exists is answered as one that does not — offered to it or
// not, its node registered or not — as every nodes method answers it.
func TestHeartbeatNotFoundSaysWhatIsMissing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 16)
	e.register(t, "p1", "gpu-node-0")
	e.ready(t, "p1", "gpu-node-0")
	if _, err := e.cap.Pools().Offer(ctx, "acme", "p1", "initech", "gpu", 8); err != nil {
		t.Fatal(err)
	}
	key := e.keys["p1/gpu-node-0"]
	beat := func(tenant, pool, node string) *apierr.Error {
		t.Helper()
		rep := e.report("p1", "gpu-node-0")
		rep.PoolID, rep.NodeID = pool, node
		_, err := e.fleet.Heartbeat(ctx, tenant, pool, node, sign(t, rep, key))
		ae := apierr.As(err)
		if ae == nil || ae.Code != apierr.NotFound {
			t.Fatalf("heartbeat %s %s/%s: %v, want NOT_FOUND", tenant, pool, node, err)
		}
		return ae
	}
	for _, tc := range []struct{ name, tenant, pool, node, field string }{
		{"the owner, a node not registered", "acme", "p1", "gpu-node-1", "nodeId"},
		{"the owner, a node not of the pool", "acme", "p1", "cpu-node-0", "nodeId"},
		{"the owner, no such pool", "acme", "p9", "gpu-node-0", "poolId"},
		{"another tenant, the pool's registered node", "globex", "p1", "gpu-node-0", "poolId"},
		{"another tenant, a node not registered", "globex", "p1", "gpu-node-1", "poolId"},
		{"another tenant, no such pool", "globex", "p9", "gpu-node-0", "poolId"},
		{"a tenant offered the pool", "initech", "p1", "gpu-node-0", "poolId"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae := beat(tc.tenant, tc.pool, tc.node)
			if ae.Details["field"] != tc.field {
				t.Errorf("field %v, want %s (%s)", ae.Details["field"], tc.field, ae.Message)
			}
		})
	}
	// Nothing tells another tenant whether the pool exists.
	exists, missing := beat("globex", "p1", "gpu-node-0"), beat("globex", "p9", "gpu-node-0")
	if strings.ReplaceAll(exists.Message, "p1", "p9") != missing.Message || len(exists.Details) != len(missing.Details) {
		t.Errorf("another tenant tells a pool that exists (%q %v) from one that does not (%q %v)", exists.Message, exists.Details, missing.Message, missing.Details)
	}
	// The other nodes methods say it the same way.
	if _, err := e.fleet.Get(ctx, "acme", "p1", "gpu-node-1"); apierr.As(err) == nil || apierr.As(err).Details["field"] != "nodeId" {
		t.Errorf("nodes.get of a node not registered: %v", err)
	}
	if _, err := e.fleet.Cordon(ctx, "globex", "p1", "gpu-node-0", "x"); apierr.As(err) == nil || apierr.As(err).Details["field"] != "poolId" {
		t.Errorf("nodes.cordon by another tenant: %v", err)
	}
}

func mustSign(t *testing.T, payloadType string, rep api.Report, e *env) []byte {
	payload, _ := json.Marshal(rep)
	env, err := dsse.Sign(payloadType, payload, e.keys["p1/gpu-node-0"])
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func signRaw(t *testing.T, payload string, e *env) []byte {
	env, err := dsse.Sign(api.ReportPayloadType, []byte(payload), e.keys["p1/gpu-node-0"])
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// 16 heartbeats of one node at once, counters 1..16 in any order: the node
// ends at 16 with exactly the report of 16 (no lost or mixed update), and
// every other one was either accepted in order or refused as a replay.
func TestConcurrentHeartbeats(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "p1", 8)
	e.register(t, "p1", "gpu-node-0")
	key := e.keys["p1/gpu-node-0"]
	bodies := make([][]byte, 16)
	for i := range bodies {
		c := int64(i + 1)
		detail := fmt.Sprintf("report %d", c)
		rep := api.Report{PoolID: "p1", NodeID: "gpu-node-0", Counter: c, At: e.clock.Now(),
			Health:   api.Health{DevicesExpected: 8, DevicesVisible: 8, Checks: []api.Check{{Name: "seq", OK: true, Detail: &detail}}},
			Bindings: []api.ReportedBinding{{ReservationID: fmt.Sprintf("r%02d", c), State: api.BindBound}}}
		bodies[i] = sign(t, rep, key)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(bodies))
	for i := len(bodies) - 1; i >= 0; i-- { // highest first: most of the rest are replays
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.fleet.Heartbeat(context.Background(), "acme", "p1", "gpu-node-0", bodies[i])
		}()
	}
	wg.Wait()
	accepted := 0
	for i, err := range errs {
		switch {
		case err == nil:
			accepted++
		case apierr.CodeOf(err) != apierr.Conflict || reason(err) != api.ReasonReplay:
			t.Errorf("heartbeat %d: %v", i+1, err)
		}
	}
	if accepted == 0 {
		t.Fatal("no heartbeat accepted")
	}
	rec, err := e.nodes.GetNode(context.Background(), "p1", "gpu", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Counter != 16 || rec.Health == nil || *rec.Health.Checks[0].Detail != "report 16" ||
		len(rec.Reported) != 1 || rec.Reported["r16"] != api.BindBound {
		t.Errorf("node after 16 racing heartbeats: counter %d, health %+v, reported %v", rec.Counter, rec.Health, rec.Reported)
	}
}

// Registration: the same again returns the node; another key or platform
// is CONFLICT; a node id outside the pool, a bad key, a pool the tenant does
// not own are refused.
func TestRegister(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 16)
	n := e.register(t, "p1", "gpu-node-1")
	if n.State != api.Registered || n.KeyID == "" || n.Cordon != nil || n.Running != nil {
		t.Fatalf("registered: %+v", n)
	}
	pem, _ := dsse.MarshalPublicKeyPEM(e.keys["p1/gpu-node-1"].Public())
	again, err := e.fleet.Register(ctx, "acme", "p1", "gpu-node-1", string(pem), "linux/amd64")
	if err != nil || again.KeyID != n.KeyID || !again.CreatedAt.Equal(n.CreatedAt) {
		t.Errorf("replay: %+v, %v", again, err)
	}
	other, _ := dsse.GenerateKey(dsse.AlgECDSAP256)
	otherPEM, _ := dsse.MarshalPublicKeyPEM(other.Public())
	for _, tc := range []struct {
		name, tenant, node, key, platform string
		code                              apierr.Code
		field                             string
	}{
		{"another key", "acme", "gpu-node-1", string(otherPEM), "linux/amd64", apierr.Conflict, "publicKey"},
		{"another platform", "acme", "gpu-node-1", string(pem), "linux/arm64", apierr.Conflict, "platform"},
		{"no such node", "acme", "gpu-node-2", string(pem), "linux/amd64", apierr.InvalidInput, "nodeId"},
		{"another resource", "acme", "cpu-node-0", string(pem), "linux/amd64", apierr.InvalidInput, "nodeId"},
		{"not a key", "acme", "gpu-node-0", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "linux/amd64", apierr.InvalidInput, "publicKey"},
		{"two keys", "acme", "gpu-node-0", string(pem) + string(otherPEM), "linux/amd64", apierr.InvalidInput, "publicKey"},
		{"not the owner", "globex", "gpu-node-0", string(pem), "linux/amd64", apierr.NotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.fleet.Register(ctx, tc.tenant, "p1", tc.node, tc.key, tc.platform)
			ae := apierr.As(err)
			if ae == nil || ae.Code != tc.code || (tc.field != "" && ae.Details["field"] != tc.field) {
				t.Errorf("got %v, want %s on %s", err, tc.code, tc.field)
			}
		})
	}
	if _, err := e.fleet.Get(ctx, "acme", "p1", "gpu-node-0"); apierr.CodeOf(err) != apierr.NotFound {
		t.Errorf("a refused registration left a node: %v", err)
	}
	ns, _, err := e.fleet.List(ctx, "acme", "p1", "", capacityPage(10))
	if err != nil || len(ns) != 1 || ns[0].NodeID != "gpu-node-1" {
		t.Errorf("list: %+v, %v", ns, err)
	}
	if !strings.HasPrefix(n.NodeID, "gpu-node-") {
		t.Errorf("node id %q", n.NodeID)
	}
}

// A heartbeat's cost: one conditional write when the function's caches
// are warm. Cold, it reads the node (its key, cached a minute, never
// trusted past a key change) and — only for a node that runs no release,
// which is told its pool's baseline — the pool's sweep item: "no
// baseline" is kept a minute per pool, a baseline is read each time it is
// told (never an older one than stored before the report). Never more,
// whatever the node reports.
func TestHeartbeatCost(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "p1", 16)
	e.register(t, "p1", "gpu-node-0")
	count := func(what string, want int64) {
		t.Helper()
		e.rt.Reset()
		e.ready(t, "p1", "gpu-node-0")
		if got := e.rt.Count(); got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
	}
	count("cold: the node's key, the pool's baseline, the write", 3)
	count("warm", 1)
	count("warm again", 1)
	e.clock.Advance(api.KeyCacheTTL + time.Second)
	count("both caches' minute past", 3)
	count("warm", 1)
	// Once the pool has a baseline (after "none" expired), a node that runs
	// nothing reads it with each report until it runs a release.
	if err := e.nodes.SetBaseline(context.Background(), "p1", fleet.Target{Version: "1.0.0", Sequence: 1}); err != nil {
		t.Fatal(err)
	}
	count("warm, none still kept", 1)
	e.clock.Advance(api.KeyCacheTTL + time.Second)
	count("cold, a baseline to tell", 3)
	count("warm, a baseline to tell", 2)

	// A replay (warm): the write that fails and one read of the node to
	// say its latest counter — the record the failed write reads is kept,
	// not read again.
	rep := e.report("p1", "gpu-node-0")
	rep.Counter -= 2
	e.rt.Reset()
	if _, err := e.beat(t, rep); apierr.CodeOf(err) != apierr.Conflict {
		t.Fatalf("replay: %v, want CONFLICT", err)
	}
	if got := e.rt.Count(); got != 2 {
		t.Errorf("replay: %d round trips, want 2", got)
	}
}
