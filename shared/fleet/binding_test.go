package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// bound is the report of a binding.
func bound(id string) api.ReportedBinding {
	return api.ReportedBinding{ReservationID: id, State: api.BindBound}
}

func unbound(id string) api.ReportedBinding {
	return api.ReportedBinding{ReservationID: id, State: api.BindUnbound}
}

// A reservation on a managed node: binding at window start, bind in the
// node's answer, never active before the node reported it bound; at
// release, unbind until the node reports it unbound, and the next holder of
// the devices is listed after the previous one's unbind.
func TestBindingThroughNode(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "p1", 8)
	e.register(t, "p1", "gpu-node-0")
	e.ready(t, "p1", "gpu-node-0")
	e.pass(t) // the sweep lifts the new node's flags: it is ready
	if _, err := e.cap.Pools().Offer(context.Background(), "acme", "p1", "acme", "gpu", 16); err != nil {
		t.Fatal(err)
	}
	r, err := e.create(t, "p1", 8, time.Minute, time.Hour)
	if err != nil {
		t.Fatalf("create on the ready node: %v", err)
	}
	next, err := e.create(t, "p1", 8, time.Hour, 2*time.Hour)
	if err != nil {
		t.Fatalf("create of the next holder: %v", err)
	}
	e.clock.Advance(time.Minute)
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Binding {
		t.Fatalf("at window start: %s", got.State)
	}
	ans := e.ready(t, "p1", "gpu-node-0")
	if len(ans.Desired.Bindings) != 1 || ans.Desired.Bindings[0].Action != api.ActionBind ||
		ans.Desired.Bindings[0].ReservationID != r.ReservationID || len(ans.Desired.Bindings[0].DeviceIDs) != 8 ||
		ans.NextHeartbeatSeconds != int(api.BusyInterval/time.Second) {
		t.Fatalf("answer: %+v", ans)
	}
	// However many passes run, not active until the node says bound.
	for range 3 {
		e.pass(t)
		if got := e.get(t, r.ReservationID); got.State != api.Binding {
			t.Fatalf("active before the node reported bound: %s", got.State)
		}
	}
	e.ready(t, "p1", "gpu-node-0", bound(r.ReservationID))
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active {
		t.Fatalf("after the node reported bound: %s", got.State)
	}
	e.check(t)
	// The window ends: released at once (quota, devices), the node told to
	// unbind; the next holder's bind comes after that unbind.
	e.clock.Advance(time.Hour)
	// The node kept heartbeating through the hour (else the sweep, in the
	// same pass as the next holder's binding, finds it unreachable).
	e.ready(t, "p1", "gpu-node-0", bound(r.ReservationID))
	e.pass(t)
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Released {
		t.Fatalf("after the window: %s", got.State)
	}
	ans = e.ready(t, "p1", "gpu-node-0", bound(r.ReservationID))
	var actions []string
	for _, b := range ans.Desired.Bindings {
		actions = append(actions, b.Action+" "+b.ReservationID)
	}
	if want := []string{"unbind " + r.ReservationID, "bind " + next.ReservationID}; !slices.Equal(actions, want) {
		t.Fatalf("bindings %v, want %v (next: %+v)", actions, want, e.get(t, next.ReservationID))
	}
	e.ready(t, "p1", "gpu-node-0", unbound(r.ReservationID), bound(next.ReservationID))
	e.pass(t)
	if got := e.get(t, next.ReservationID); got.State != api.Active {
		t.Errorf("next holder: %s", got.State)
	}
	n := e.node(t, "p1", "gpu-node-0")
	if len(n.Bindings) != 1 || n.Bindings[0].ReservationID != next.ReservationID {
		t.Errorf("node bindings after the unbind was reported: %+v", n.Bindings)
	}
	e.check(t)
	// Released by the tenant: unbind at once.
	if _, err := e.cap.Reservations().Release(context.Background(), "acme", next.ReservationID); err != nil {
		t.Fatal(err)
	}
	if n := e.node(t, "p1", "gpu-node-0"); len(n.Bindings) != 1 || n.Bindings[0].Action != api.ActionUnbind {
		t.Errorf("after release: %+v", n.Bindings)
	}
	e.check(t)
}

// An unmanaged pool binds at once, as before: one pass from placed to
// active at window start, no node read beyond one BatchGetItem.
func TestUnmanagedBindsAtOnce(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "p1", 16)
	r, err := e.create(t, "p1", 4, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active {
		t.Fatalf("unmanaged: %s", got.State)
	}
	e.check(t)
}

// Every node but one cordoned, unhealthy, unreachable or never heard from:
// creates — 32 racing, and one booked beyond the flags' horizon — land on
// the ready one or are CAPACITY_EXHAUSTED, never on another.
func TestPlacementHonoursFleet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 40) // nodes 0..4 of 8
	for k := range 5 {
		e.register(t, "p1", nodeName(k))
	}
	e.ready(t, "p1", nodeName(0))
	e.ready(t, "p1", nodeName(1))
	sick := e.report("p1", nodeName(2))
	sick.Health.DevicesVisible = 7
	if _, err := e.beat(t, sick); err != nil {
		t.Fatal(err)
	}
	e.ready(t, "p1", nodeName(3)) // then silent: unreachable
	// node 4: registered, never heard from.
	if _, err := e.fleet.Cordon(ctx, "acme", "p1", nodeName(1), "fan"); err != nil {
		t.Fatal(err)
	}
	for range 4 { // node 3 silent past UnreachableAfter intervals; the others report
		e.clock.Advance(api.DefaultInterval)
		e.ready(t, "p1", nodeName(0))
		e.ready(t, "p1", nodeName(1))
		sick := e.report("p1", nodeName(2))
		sick.Health.Checks[0].OK = false
		if _, err := e.beat(t, sick); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(time.Second)
	e.pass(t)
	want := map[string]api.NodeState{nodeName(0): api.Ready, nodeName(1): api.Ready, nodeName(2): api.Unhealthy,
		nodeName(3): api.Unreachable, nodeName(4): api.Registered}
	for id, st := range want {
		if n := e.node(t, "p1", id); n.State != st {
			t.Fatalf("%s: %s, want %s", id, n.State, st)
		}
	}
	var wg sync.WaitGroup
	results := make([]capacity.Reservation, 32)
	errs := make([]error, 32)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.create(t, "p1", 1, time.Minute, time.Hour)
		}()
	}
	wg.Wait()
	placed := 0
	for i, err := range errs {
		switch {
		case err == nil:
			placed++
			if got := results[i].NodeIDs; len(got) != 1 || got[0] != nodeName(0) {
				t.Errorf("placed on %v", got)
			}
		case apierr.CodeOf(err) == apierr.CapacityExhausted:
		case apierr.CodeOf(err) == apierr.Unavailable:
			// contention on one node: allowed, never a wrong node
		default:
			t.Errorf("create %d: %v", i, err)
		}
	}
	if placed == 0 || placed > 8 {
		t.Errorf("%d of 32 placed on the one 8-device ready node", placed)
	}
	// Far ahead (past the flagged horizon): the nodes' items decide.
	far, err := e.create(t, "p1", 8, 10*24*time.Hour, 10*24*time.Hour+time.Hour)
	if err != nil || len(far.NodeIDs) != 1 || far.NodeIDs[0] != nodeName(0) {
		t.Errorf("far ahead: %v on %v", err, far.NodeIDs)
	}
	if far, err = e.create(t, "p1", 8, 10*24*time.Hour, 10*24*time.Hour+time.Hour); apierr.CodeOf(err) != apierr.CapacityExhausted {
		t.Errorf("a second far-ahead whole node: %v %v", err, far.NodeIDs)
	}
	e.check(t)
	// Uncordon: placed on again.
	if _, err := e.fleet.Uncordon(ctx, "acme", "p1", nodeName(1)); err != nil {
		t.Fatal(err)
	}
	r, err := e.create(t, "p1", 8, time.Minute, time.Hour)
	if err != nil || r.NodeIDs[0] != nodeName(1) {
		t.Errorf("after uncordon: %v on %v", err, r.NodeIDs)
	}
	e.check(t)
}

func nodeName(k int) string { return capacity.NodeID("gpu", k) }

// A node killed before its reservation's window starts: at the start the
// reservation gets node_unreachable and is moved onto the ready node (new
// devices, quota unchanged, old devices freed); with nowhere to go it waits.
func TestReplacement(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 24)
	for k := range 3 {
		e.register(t, "p1", nodeName(k))
		e.ready(t, "p1", nodeName(k))
	}
	e.pass(t)
	r, err := e.create(t, "p1", 8, 10*time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	victim := r.NodeIDs[0]
	// Everything else is kept busy but one node.
	other, err := e.create(t, "p1", 8, 10*time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	q0, _ := e.cap.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"})
	// The victim goes silent; the others keep reporting.
	for step := time.Duration(0); step < 10*time.Minute; step += 30 * time.Second {
		e.clock.Advance(30 * time.Second)
		for k := range 3 {
			if nodeName(k) != victim {
				e.ready(t, "p1", nodeName(k))
			}
		}
		e.pass(t)
	}
	if n := e.node(t, "p1", victim); n.State != api.Unreachable {
		t.Fatalf("victim: %s", n.State)
	}
	got := e.get(t, r.ReservationID)
	if got.State != api.Binding || !hasReason(got, api.ReasonNodeUnreachable) || !hasReason(got, api.ReasonReplaced) {
		t.Fatalf("after the window started: %s %+v", got.State, got.History)
	}
	if got.NodeIDs[0] == victim || got.NodeIDs[0] == other.NodeIDs[0] || len(got.DeviceIDs) != 8 {
		t.Fatalf("moved onto %v (victim %s, other %v)", got.NodeIDs, victim, other.NodeIDs)
	}
	if q, _ := e.cap.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"}); q.Used != q0.Used {
		t.Errorf("quota moved: %d → %d", q0.Used, q.Used)
	}
	e.check(t)
	// Told to bind on its new node (the pass after the move), then bound
	// there: active. A bound reported before it was told is no answer.
	e.ready(t, "p1", got.NodeIDs[0], bound(r.ReservationID))
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Binding {
		t.Errorf("active from a bound that answered no bind: %s", got.State)
	}
	e.ready(t, "p1", got.NodeIDs[0], bound(r.ReservationID))
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active {
		t.Errorf("after binding on the new node: %s", got.State)
	}
	e.check(t)

	// Nowhere to go: the only other node is busy; it waits, noted once.
	e2 := newEnv(t)
	e2.pool(t, "p2", 16)
	for k := range 2 {
		e2.register(t, "p2", nodeName(k))
		e2.ready(t, "p2", nodeName(k))
	}
	e2.pass(t)
	a, _ := e2.create(t, "p2", 8, 10*time.Minute, time.Hour)
	b, _ := e2.create(t, "p2", 8, 10*time.Minute, time.Hour)
	e2.clock.Advance(10*time.Minute + time.Second)
	e2.ready(t, "p2", b.NodeIDs[0])
	e2.pass(t)
	e2.pass(t)
	stuck := e2.get(t, a.ReservationID)
	if stuck.State != api.Binding || stuck.NodeIDs[0] != a.NodeIDs[0] || hasReason(stuck, api.ReasonReplaced) {
		t.Errorf("with nowhere to go: %s on %v, %+v", stuck.State, stuck.NodeIDs, stuck.History)
	}
	e2.check(t)
}

var errCrash = errors.New("injected crash")

// The crash matrix of binding: a crash after every step of binding, of a
// move and of an unbind, then passes and reports as usual: the reservation
// ends up active on ready nodes, no device double-booked, nothing leaked.
func TestBindingCrashMatrix(t *testing.T) {
	for _, point := range capacity.BindFaultPoints {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			fired := false
			e.cap.Faults = func(p string) error {
				if p == point && !fired {
					fired = true
					return errCrash
				}
				return nil
			}
			e.pool(t, "p1", 24)
			for k := range 3 {
				e.register(t, "p1", nodeName(k))
				e.ready(t, "p1", nodeName(k))
			}
			e.pass(t)
			r, err := e.create(t, "p1", 8, 5*time.Minute, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			victim := ""
			if strings.HasPrefix(point, "move.") {
				victim = r.NodeIDs[0] // goes silent: the reservation moves
			}
			converge := func(rounds int, report func(k int) []api.ReportedBinding) {
				for range rounds {
					e.clock.Advance(30 * time.Second)
					for k := range 3 {
						if nodeName(k) != victim {
							e.ready(t, "p1", nodeName(k), report(k)...)
						}
					}
					_, _ = e.rc.Pass(context.Background()) // an injected crash fails one item
				}
			}
			boundHere := func(k int) []api.ReportedBinding {
				n := e.node(t, "p1", nodeName(k))
				var out []api.ReportedBinding
				for _, b := range n.Bindings {
					if b.Action == api.ActionBind {
						out = append(out, bound(b.ReservationID))
					} else {
						out = append(out, unbound(b.ReservationID))
					}
				}
				return out
			}
			converge(16, boundHere)
			got := e.get(t, r.ReservationID)
			if got.State != api.Active || (victim != "" && got.NodeIDs[0] == victim) {
				t.Fatalf("after the crash at %s: %s on %v (victim %q), history %+v", point, got.State, got.NodeIDs, victim, got.History)
			}
			if _, err := e.cap.Reservations().Release(context.Background(), "acme", r.ReservationID); err != nil && !errors.Is(err, errCrash) {
				t.Fatal(err)
			}
			e.clock.Advance(api.StaleAfter)
			converge(6, boundHere)
			if !fired {
				t.Errorf("the flow never reached %s", point)
			}
			for k := range 3 {
				if n := e.node(t, "p1", nodeName(k)); len(n.Bindings) != 0 {
					t.Errorf("%s still lists %+v", n.NodeID, n.Bindings)
				}
			}
			e.check(t)
		})
	}
}
