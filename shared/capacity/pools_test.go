package capacity_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/paging"
)

func TestCreatePool(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := e.pool(t, "acme", "p1", map[string]int{"gpu.h100": 2, "cpu": 1})
	want := []api.Device{{DeviceID: "cpu-0", Resource: "cpu", NodeID: "cpu-node-0"}, {DeviceID: "gpu.h100-0", Resource: "gpu.h100", NodeID: "gpu.h100-node-0"}, {DeviceID: "gpu.h100-1", Resource: "gpu.h100", NodeID: "gpu.h100-node-0"}}
	if len(p.Devices) != len(want) {
		t.Fatalf("devices %v", p.Devices)
	}
	for i := range want {
		if p.Devices[i] != want[i] {
			t.Errorf("device %d = %v, want %v", i, p.Devices[i], want[i])
		}
	}
	if p.OwnerTenantID != "acme" || !p.CreatedAt.Equal(e.clock.Now()) {
		t.Errorf("pool %+v", p)
	}
	for r, n := range map[string]int64{"gpu.h100": 2, "cpu": 1} {
		q := must(e.svc.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: r}))
		if q.Max != n || q.Used != 0 {
			t.Errorf("owner quota %s = %+v", r, q)
		}
	}
	e.clock.Advance(time.Minute)
	again := must(e.svc.Pools().Create(ctx, "acme", "p1", map[string]int{"cpu": 1, "gpu.h100": 2}, nil))
	if !again.CreatedAt.Equal(p.CreatedAt) || len(again.Devices) != 3 {
		t.Errorf("replay returned %+v", again)
	}
	cases := []struct {
		name   string
		tenant string
		res    map[string]int
		code   apierr.Code
	}{
		{"other definition", "acme", map[string]int{"gpu.h100": 3, "cpu": 1}, apierr.Conflict},
		{"fewer resources", "acme", map[string]int{"gpu.h100": 2}, apierr.Conflict},
		{"id owned by another tenant", "globex", map[string]int{"gpu.h100": 2, "cpu": 1}, apierr.Conflict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := e.svc.Pools().Create(ctx, c.tenant, "p1", c.res, nil); code(err) != c.code {
				t.Errorf("got %v, want %s", err, c.code)
			}
		})
	}
	t.Run("another node size is another definition", func(t *testing.T) {
		_, err := e.svc.Pools().Create(ctx, "acme", "p1", map[string]int{"gpu.h100": 2, "cpu": 1}, map[string]int{"gpu.h100": 2})
		if code(err) != apierr.Conflict {
			t.Errorf("got %v", err)
		}
	})
	t.Run("node size of a resource the pool lacks", func(t *testing.T) {
		_, err := e.svc.Pools().Create(ctx, "acme", "p9", map[string]int{"gpu": 2}, map[string]int{"tpu": 2})
		if code(err) != apierr.InvalidInput || detail(err, "field") != "nodeSize.tpu" {
			t.Errorf("got %v", err)
		}
	})
	// Owner sees it, a tenant it was offered to sees it, others do not.
	if _, err := e.svc.Pools().Get(ctx, "globex", "p1"); code(err) != apierr.NotFound {
		t.Errorf("globex sees p1 before an offer: %v", err)
	}
	e.offer(t, "acme", "p1", "globex", "cpu", 0)
	if got := must(e.svc.Pools().Get(ctx, "globex", "p1")); got.PoolID != "p1" || len(got.Devices) != 3 {
		t.Errorf("globex get %+v", got)
	}
	if _, err := e.svc.Pools().Get(ctx, "initech", "p1"); code(err) != apierr.NotFound {
		t.Errorf("initech sees p1: %v", err)
	}
	e.check(t)
}

func TestListPoolsPages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, id := range []string{"c", "a", "b", "d"} {
		e.pool(t, "acme", id, map[string]int{"gpu": 1})
	}
	e.pool(t, "globex", "z", map[string]int{"gpu": 1})
	var ids []string
	page := paging.Page{Limit: 3}
	for i := 0; ; i++ {
		ps, next := must2(e.svc.Pools().List(ctx, "acme", page))
		for _, p := range ps {
			ids = append(ids, p.PoolID)
		}
		if next == nil {
			break
		}
		page.After = next
	}
	if joined(ids) != "a,b,c,d" {
		t.Errorf("pools %v", ids)
	}
	// A full last page carries no cursor (no empty page to fetch).
	for _, limit := range []int{2, 4} {
		page := paging.Page{Limit: limit}
		pages := 0
		for {
			_, next := must2(e.svc.Pools().List(ctx, "acme", page))
			pages++
			if next == nil {
				break
			}
			page.After = next
		}
		if pages != 4/limit {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, 4/limit)
		}
	}
	rs, next := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{}, paging.Page{Limit: 1}))
	if len(rs) != 0 || next != nil {
		t.Errorf("empty list: %v %v", rs, next)
	}
	ps, _ := must2(e.svc.Pools().List(ctx, "initech", paging.Page{Limit: 10}))
	if len(ps) != 0 {
		t.Errorf("initech lists %v", ps)
	}
}

func TestOfferAndQuotas(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4, "cpu": 2})
	cases := []struct {
		name, tenant, pool, res string
		max                     int64
		code                    apierr.Code
		field                   any
	}{
		{"not the owner", "globex", "p1", "gpu", 1, apierr.NotFound, nil},
		{"unknown pool", "acme", "nope", "gpu", 1, apierr.NotFound, nil},
		{"unknown resource", "acme", "p1", "tpu", 1, apierr.InvalidInput, "resource"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.svc.Pools().Offer(ctx, c.tenant, c.pool, "globex", c.res, c.max)
			if code(err) != c.code || detail(err, "field") != c.field {
				t.Errorf("got %v", err)
			}
		})
	}
	k := capacity.QuotaKey{TenantID: "globex", PoolID: "p1", Resource: "gpu"}
	if q := must(e.svc.Quotas().Get(ctx, k)); q.Max != 0 || q.Used != 0 || q.TenantID != "globex" {
		t.Errorf("missing row = %+v, want max 0 used 0", q)
	}
	q := must(e.svc.Pools().Offer(ctx, "acme", "p1", "globex", "gpu", 10)) // max may exceed the devices
	if q.Max != 10 || q.Used != 0 || q.TenantID != "globex" || q.Resource != "gpu" {
		t.Errorf("offer = %+v", q)
	}
	r := must(e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 3, 0, time.Hour), allow))
	// Lowering max below used evicts nothing; no new admission fits.
	q = must(e.svc.Pools().Offer(ctx, "acme", "p1", "globex", "gpu", 1))
	if q.Max != 1 || q.Used != 3 {
		t.Errorf("lowered = %+v", q)
	}
	if got := must(e.svc.Reservations().Get(ctx, "globex", r.ReservationID)); got.State != api.Placed {
		t.Errorf("evicted: %+v", got)
	}
	_, err := e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 1, 0, time.Hour), allow)
	if code(err) != apierr.QuotaExceeded {
		t.Errorf("admitted over a lowered max: %v", err)
	}
	must(e.svc.Reservations().Release(ctx, "globex", r.ReservationID))
	must(e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 1, 0, time.Hour), allow))
	// An owner may offer to itself; a max-0 row is still listed.
	must(e.svc.Pools().Offer(ctx, "acme", "p1", "acme", "gpu", 7))
	must(e.svc.Pools().Offer(ctx, "acme", "p1", "globex", "cpu", 0))
	qs, _ := must2(e.svc.Quotas().List(ctx, "acme", "p1", paging.Page{Limit: 10}))
	if len(qs) != 2 || qs[0].Resource != "cpu" || qs[1].Resource != "gpu" || qs[1].Max != 7 {
		t.Errorf("acme quotas %+v", qs)
	}
	qs, _ = must2(e.svc.Quotas().List(ctx, "globex", "", paging.Page{Limit: 10}))
	if len(qs) != 2 || qs[0].Max != 0 || qs[1].Used != 1 {
		t.Errorf("globex quotas %+v", qs)
	}
	e.pool(t, "acme", "p10", map[string]int{"gpu": 1})
	qs, _ = must2(e.svc.Quotas().List(ctx, "acme", "p1", paging.Page{Limit: 10}))
	if len(qs) != 2 {
		t.Errorf("pool filter p1 matched p10: %+v", qs)
	}
	e.check(t)
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

// Devices are grouped into nodes of nodeSize (default 8; the last node may
// be smaller); a pool of more than capacity.InlineDevices devices is
// described by its counts and node sizes instead of a device list.
func TestPoolTopology(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := must(e.svc.Pools().Create(ctx, "acme", "topo", map[string]int{"gpu": 10, "cpu": 3}, map[string]int{"gpu": 4}))
	if p.NodeSize["gpu"] != 4 || p.NodeSize["cpu"] != api.DefaultNodeSize || !p.DevicesListed || len(p.Devices) != 13 {
		t.Fatalf("pool %+v", p)
	}
	nodes := map[string]string{}
	for _, d := range p.Devices {
		nodes[d.DeviceID] = d.NodeID
	}
	for dev, node := range map[string]string{"gpu-0": "gpu-node-0", "gpu-3": "gpu-node-0", "gpu-4": "gpu-node-1", "gpu-9": "gpu-node-2", "cpu-2": "cpu-node-0"} {
		if nodes[dev] != node {
			t.Errorf("%s on %s, want %s", dev, nodes[dev], node)
		}
	}
	if top := p.Topology("gpu"); top.Nodes() != 3 || top.Size(2) != 2 {
		t.Errorf("topology %+v: %d nodes, last of %d", top, top.Nodes(), top.Size(2))
	}
	big := must(e.svc.Pools().Create(ctx, "acme", "big", map[string]int{"gpu": 100_000}, nil))
	if big.DevicesListed || len(big.Devices) != 0 || big.Resources["gpu"] != 100_000 {
		t.Errorf("a 100,000-device pool listed %d devices (listed %v)", len(big.Devices), big.DevicesListed)
	}
	if got := must(e.svc.Pools().Get(ctx, "acme", "big")); got.DevicesListed || got.NodeSize["gpu"] != 8 {
		t.Errorf("get big %+v", got)
	}
	e.check(t)
}

// TestPoolAndQuotaListsMatchGet: every listed pool and quota row equals get
// of the same id, field by field. The pools differ in the fields a decoder
// reusing one variable would leak from row to row: resources, node sizes,
// listed or unlisted devices, owner.
func TestPoolAndQuotaListsMatchGet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	must(e.svc.Pools().Create(ctx, "acme", "a-two", map[string]int{"gpu.h100": 16, "cpu": 2}, map[string]int{"gpu.h100": 4}))
	e.pool(t, "acme", "b-one", map[string]int{"gpu": 1})
	e.pool(t, "acme", "c-big", map[string]int{"gpu": api.InlineDevices + 8})
	e.pool(t, "globex", "d-offered", map[string]int{"tpu": 3})
	e.offer(t, "globex", "d-offered", "acme", "tpu", 2)
	e.offer(t, "acme", "b-one", "acme", "gpu", 1)
	must(e.svc.Admission().Create(ctx, e.req("acme", "b-one", "gpu", 1, 0, time.Hour), allow))

	// Pages of one and one page of all: a decoder sharing state across
	// rows shows only when a page holds several.
	var pools []capacity.Pool
	for _, limit := range []int{1, 10} {
		for page := (paging.Page{Limit: limit}); ; {
			ps, next := must2(e.svc.Pools().List(ctx, "acme", page))
			pools = append(pools, ps...)
			if next == nil {
				break
			}
			page.After = next
		}
	}
	if len(pools) != 8 {
		t.Fatalf("listed %d pools, want 4 twice", len(pools))
	}
	for _, l := range pools {
		if g := must(e.svc.Pools().Get(ctx, "acme", l.PoolID)); !reflect.DeepEqual(l, g) {
			t.Errorf("pool %s: list and get differ:\nlist %+v\nget  %+v", l.PoolID, l, g)
		}
	}

	var quotas []api.Quota
	for _, limit := range []int{1, 10} {
		for page := (paging.Page{Limit: limit}); ; {
			qs, next := must2(e.svc.Quotas().List(ctx, "acme", "", page))
			quotas = append(quotas, qs...)
			if next == nil {
				break
			}
			page.After = next
		}
	}
	if len(quotas) < 8 {
		t.Fatalf("listed %d quota rows, want at least 4 twice: %+v", len(quotas), quotas)
	}
	used := false
	for _, l := range quotas {
		g := must(e.svc.Quotas().Get(ctx, capacity.QuotaKey{TenantID: l.TenantID, PoolID: l.PoolID, Resource: l.Resource}))
		if l != g {
			t.Errorf("quota %s/%s: list %+v, get %+v", l.PoolID, l.Resource, l, g)
		}
		used = used || l.Used > 0
	}
	if !used {
		t.Errorf("no quota row with used > 0 in the mix: %+v", quotas)
	}
}
