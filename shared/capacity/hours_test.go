package capacity_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/paging"
)

// storedNodeHours are the node-hours of an hour that are stored.
func (e *env) storedNodeHours(tb testing.TB, pool, res string, t capacity.Topology, h capacity.Hour) []capacity.NodeHour {
	tb.Helper()
	var out []capacity.NodeHour
	pr := capacity.PoolResource{PoolID: pool, Topology: t}
	if err := e.store.Hour(context.Background(), pr, h, func(nh capacity.NodeHour) error { out = append(out, nh); return nil }); err != nil {
		tb.Fatal(err)
	}
	return out
}

// Node-hours are stored by the first placement on them: a create in hours
// nothing is stored for writes only its own node, whatever the pool's size,
// and further hours of its window only for that node.
func TestNodeHoursStoredOnFirstUse(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := e.pool(t, "acme", "p1", map[string]int{"gpu": 4096})
	top := p.Topology("gpu")
	now := capacity.HourOf(e.clock.Now())
	e.rt.Reset()
	r := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 4, 0, 3*time.Hour), allow))
	if r.State != api.Placed || len(r.NodeIDs) != 1 {
		t.Fatalf("four devices in unprovisioned hours: %+v", r)
	}
	// Nothing stored to read candidates from: the pool is read, the hours
	// scanned (empty), and the chosen node's hours read before the writes.
	t.Logf("first create in hours nothing is stored for: %d round trips", e.rt.Count())
	for h := now; h < now+3; h++ {
		nhs := e.storedNodeHours(t, "p1", "gpu", top, h)
		if len(nhs) != 1 || capacity.NodeID("gpu", nhs[0].Node) != r.NodeIDs[0] || nhs[0].Untouched != 4 {
			t.Fatalf("hour +%d: %d node-hours stored (%+v), want only the placement's", h-now, len(nhs), nhs)
		}
	}
	if n := len(e.storedNodeHours(t, "p1", "gpu", top, now+3)); n != 0 {
		t.Errorf("the hour after the window: %d node-hours stored", n)
	}
	// The next single device goes to the node already used (best fit),
	// found by the ordered read: 5 round trips, no pool read, no scan.
	e.rt.Reset()
	one := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow))
	if one.State != api.Placed || one.NodeIDs[0] != r.NodeIDs[0] {
		t.Fatalf("%+v, want it on %s", one, r.NodeIDs[0])
	}
	if e.rt.Count() != 5 {
		t.Errorf("create on a stored node-hour: %d round trips, want 5", e.rt.Count())
	}
	e.check(t)
}

// The reconciler keeps ProvisionHours hours of every pool provisioned
// (whole nodes are then found by the ordered read too) and marks the pool
// due at the next hour's start; a small budget spreads the work over
// passes.
func TestReconcilerProvisionsHoursAhead(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := e.pool(t, "acme", "p1", map[string]int{"gpu": 20, "cpu": 3})
	now := capacity.HourOf(e.clock.Now())
	const horizon = 6
	rc := e.reconciler()
	rc.Capacity.ProvisionHours = horizon
	rc.ProvisionBudget = 3 // node-hours: one hour of gpu (3 nodes) per pass, or so
	passes := 0
	for ; passes < 2*horizon+2; passes++ {
		res := must(rc.Pass(ctx))
		if res.Provisioned == 0 {
			break
		}
	}
	if passes < horizon {
		t.Errorf("a budget of 3 node-hours provisioned %d hours of two resources in %d passes", 2*horizon, passes)
	}
	for _, res := range []string{"gpu", "cpu"} {
		top := p.Topology(res)
		for h := now; h < now+horizon; h++ {
			if got := len(e.storedNodeHours(t, "p1", res, top, h)); got != top.Nodes() {
				t.Errorf("%s hour +%d: %d node-hours, want %d", res, h-now, got, top.Nodes())
			}
		}
		if got := len(e.storedNodeHours(t, "p1", res, top, now+horizon)); got != 0 {
			t.Errorf("%s: %d node-hours stored beyond the hours ahead", res, got)
		}
	}
	// Done for this hour: the pool is due again at the next, for one more.
	if res := must(rc.Pass(ctx)); res.Provisioned != 0 || res.Found != 0 {
		t.Errorf("a pass after provisioning: %+v", res)
	}
	e.clock.Advance(time.Hour)
	res := must(rc.Pass(ctx))
	if res.Provisioned != 2 { // one new hour of each resource
		t.Errorf("next hour's pass provisioned %d hours, want 2", res.Provisioned)
	}
	// Provisioned hours keep what was placed before them.
	r := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 8, time.Hour, 2*time.Hour), allow))
	if r.State != api.Placed {
		t.Fatalf("%+v", r)
	}
	e.check(t)
}

// Choose: devices within a node as aligned blocks; Spread takes any node
// that fits.
func TestChooseBlocks(t *testing.T) {
	top := capacity.Topology{Resource: "gpu", Devices: 32, NodeSize: 8}
	one := func(c capacity.Candidate, count int, id string) capacity.Mask {
		t.Helper()
		p, err := capacity.Choose(top, capacity.Request{ID: id, Count: count, Topology: api.OnNodes, Window: hours(1, 2)}, []capacity.Candidate{c})
		if err != nil || len(p) != 1 {
			t.Fatalf("count %d: %v %v", count, p, err)
		}
		return p[0].Mask
	}
	for i := range 20 {
		id := "r" + strconv.Itoa(i)
		// Device 5 busy: a quad is 0–3, never straddling 4–7.
		if m := one(node(0, 8, alloc{"x", 1 << 5, 0, 3}), 4, id); m != 0b1111 {
			t.Errorf("%s: quad %08b", id, m)
		}
		// Device 0 busy: a pair is 2–3, 4–5 or 6–7, never 1–2.
		if m := one(node(0, 8, alloc{"x", 1, 0, 3}), 2, id); m != 0b1100 && m != 0b110000 && m != 0b11000000 {
			t.Errorf("%s: pair %08b", id, m)
		}
		// Devices 0–1 used earlier in the day: the pair they form first.
		if m := one(node(0, 8, alloc{"x", 0b11, 0, 1}), 2, id); m != 0b11 {
			t.Errorf("%s: pair %08b, want the one used earlier", id, m)
		}
		// Three devices: a free quad, three of it.
		if m := one(node(0, 8, alloc{"x", 1 << 1, 0, 3}), 3, id); m != 0b1110000 {
			t.Errorf("%s: three %08b", id, m)
		}
	}
	// Devices scattered so no aligned pair is free: any two free ones.
	if m := one(node(0, 8, alloc{"x", 0b10101010, 0, 3}), 2, "s"); m.Count() != 2 || m&0b10101010 != 0 {
		t.Errorf("scattered pair %08b", m)
	}
	// Best fit takes the fullest node every time; Spread spreads.
	cands := []capacity.Candidate{node(0, 8, alloc{"a", 0b111111, 0, 3}), node(1, 8, alloc{"b", 0b1111, 0, 3}), node(2, 8), node(3, 8)}
	best, spread := map[int]int{}, map[int]int{}
	for i := range 64 {
		req := capacity.Request{ID: "r" + strconv.Itoa(i), Count: 2, Topology: api.OnNodes, Window: hours(1, 2)}
		p := must(capacity.Choose(top, req, cands))
		best[p[0].Node]++
		req.Spread = true
		p = must(capacity.Choose(top, req, cands))
		spread[p[0].Node]++
	}
	if best[0] != 64 {
		t.Errorf("best fit chose %v, want node 0 every time", best)
	}
	if len(spread) != 4 || spread[0] > 32 {
		t.Errorf("spread chose %v, want all four nodes", spread)
	}
}

// pools.usage: a page of nodes with their busy intervals over a span, ids
// for the owner only, totals per page, paging by node.
func TestPoolUsage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 20}) // nodes of 8, 8, 4
	e.offer(t, "acme", "p1", "globex", "gpu", 20)
	now := e.clock.Now()
	whole := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 8, 0, 2*time.Hour), allow))
	later := must(e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 2, 3*time.Hour, 30*time.Hour), allow))
	usage := func(tenant string, limit int, after map[string]string) (api.Usage, map[string]string) {
		t.Helper()
		u, next, err := e.svc.Pools().Usage(ctx, capacity.UsageRequest{TenantID: tenant, PoolID: "p1", Resource: "gpu",
			Page: paging.Page{Limit: limit, After: after}})
		if err != nil {
			t.Fatal(err)
		}
		return u, next
	}
	u, next := usage("acme", 0, nil)
	if next != nil || len(u.Nodes) != 3 || u.NodeCount != 3 || !u.From.Equal(now) || !u.To.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("usage %+v next %v", u, next)
	}
	if u.Page != (api.UsageTotals{Nodes: 3, Devices: 20, BusyNow: 8, WholeFreeNow: 2, WholeFreeAll: 1,
		BusyDeviceSecs: 8*2*3600 + 2*21*3600}) {
		t.Errorf("totals %+v", u.Page)
	}
	byID := map[string]api.Busy{}
	for _, n := range u.Nodes {
		for _, b := range n.Busy {
			byID[b.ReservationID] = b
		}
	}
	if b := byID[whole.ReservationID]; len(b.DeviceIDs) != 8 || !b.Start.Equal(now) || !b.End.Equal(now.Add(2*time.Hour)) {
		t.Errorf("whole node %+v", b)
	}
	// Clipped to the span; the owner sees another tenant's reservation id.
	if b := byID[later.ReservationID]; len(b.DeviceIDs) != 2 || !b.End.Equal(now.Add(24*time.Hour)) {
		t.Errorf("later %+v", b)
	}
	// The tenant it is offered to sees the same intervals, without ids.
	g, _ := usage("globex", 0, nil)
	for _, n := range g.Nodes {
		for _, b := range n.Busy {
			if b.ReservationID != "" {
				t.Errorf("globex sees reservation id %s", b.ReservationID)
			}
		}
	}
	if g.Page != u.Page {
		t.Errorf("globex totals %+v, owner's %+v", g.Page, u.Page)
	}
	// Pages of two nodes.
	p1, next := usage("acme", 2, nil)
	p2, last := usage("acme", 2, next)
	if len(p1.Nodes) != 2 || next["node"] != "2" || len(p2.Nodes) != 1 || p2.Nodes[0].NodeID != "gpu-node-2" || last != nil {
		t.Errorf("pages: %d nodes then %v, %d nodes then %v", len(p1.Nodes), next, len(p2.Nodes), last)
	}
	if _, _, err := e.svc.Pools().Usage(ctx, capacity.UsageRequest{TenantID: "initech", PoolID: "p1", Resource: "gpu"}); code(err) != apierr.NotFound {
		t.Errorf("a tenant that cannot see the pool: %v", err)
	}
	if _, _, err := e.svc.Pools().Usage(ctx, capacity.UsageRequest{TenantID: "acme", PoolID: "p1", Resource: "tpu"}); code(err) != apierr.InvalidInput {
		t.Errorf("a resource not in the pool: %v", err)
	}
}

// A window is kept to the millisecond, as node-hour entries are: a create
// at a clock with nanoseconds (no start given) leaves entries and the
// reservation agreeing (found with bc check on make run).
func TestWindowsAreMilliseconds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 8})
	e.clock.Advance(123456789 * time.Nanosecond)
	end := e.clock.Now().Add(time.Hour + 987654321*time.Nanosecond)
	r := must(e.svc.Admission().Create(ctx, capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 1, End: end}, allow))
	if r.Window.Start.Nanosecond()%int(time.Millisecond) != 0 || r.Window.End.Nanosecond()%int(time.Millisecond) != 0 {
		t.Errorf("window %v kept sub-millisecond time", r.Window)
	}
	e.check(t)
}
