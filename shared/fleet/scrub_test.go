package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// told collects what one node's answers listed, in order: "unbind R" and
// "bind R" as they first appear (not the entries a test filled it with).
type told []string

func (l *told) add(ans api.HeartbeatResult) {
	for _, b := range ans.Desired.Bindings {
		if s := b.Action + " " + b.ReservationID; !strings.HasPrefix(b.ReservationID, fillID) && !slices.Contains(*l, s) {
			*l = append(*l, s)
		}
	}
}

// first says whether a appears in l before b (b absent: true if a is).
func (l told) first(a, b string) bool {
	i, j := slices.Index(l, a), slices.Index(l, b)
	return i >= 0 && (j < 0 || i <= j)
}

// beatAll has every node of nodes report healthy (so none goes
// unreachable while the clock moves), with what each says it holds.
func (e *env) beatAll(t *testing.T, pool string, nodes []int, says map[int][]api.ReportedBinding) map[int]api.HeartbeatResult {
	t.Helper()
	out := map[int]api.HeartbeatResult{}
	for _, k := range nodes {
		out[k] = e.ready(t, pool, nodeName(k), says[k]...)
	}
	return out
}

// A reservation placed on a node before it registered (bound at once
// there, unmanaged) that moves off it while still binding: the node
// registered meanwhile, the adoption left the binding reservation to the
// binding step, and the binding step moved it off the node (registered:
// not ready). The node was never told to bind it, so the move's unbind of
// the nodes told to bind (Bound) missed it: the next holder of its devices
// was told to bind alone. The move scrubs such a node before it frees the
// old devices (issue 39, item 1) — and when that scrub cannot be written
// (the node holds api.MaxBindings pending entries), the move keeps that
// node's old devices, unfinished, until a later pass writes it.
func TestMoveScrubsANodeRegisteredWhileBinding(t *testing.T) {
	t.Run("scrubbed", func(t *testing.T) { moveOffARegisteredNode(t, false) })
	t.Run("node full", func(t *testing.T) { moveOffARegisteredNode(t, true) })
}

func moveOffARegisteredNode(t *testing.T, full bool) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 32)
	managed := []int{1, 2, 3}
	for _, k := range managed {
		e.register(t, "p1", nodeName(k))
		e.ready(t, "p1", nodeName(k))
	}
	e.pass(t)
	// r on nodes 0 (unmanaged) and 1: the other two cordoned while it is
	// placed.
	for _, k := range []int{2, 3} {
		if _, err := e.fleet.Cordon(ctx, "acme", "p1", nodeName(k), "keep r off"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := e.create(t, "p1", 16, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.NodeIDs, []string{nodeName(0), nodeName(1)}) {
		t.Fatalf("r placed on %v", r.NodeIDs)
	}
	for _, k := range []int{2, 3} {
		if _, err := e.fleet.Uncordon(ctx, "acme", "p1", nodeName(k)); err != nil {
			t.Fatal(err)
		}
	}
	// Its window starts: bound at once on node 0, told to node 1, which
	// has not reported it bound yet — r stays binding.
	e.clock.Advance(time.Minute)
	e.beatAll(t, "p1", managed, nil)
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Binding || !slices.Equal(got.Bound, []int{1}) {
		t.Fatalf("at window start: %s, bound %v", got.State, got.Bound)
	}
	// Node 0 registers: the adoption leaves binding r to the binding step.
	e.register(t, "p1", nodeName(0))
	var fill []api.ReportedBinding
	if full {
		fill = e.fillEntries(t, "p1", 0, r.Window)
	}
	var node0 told
	e.clock.Advance(10 * time.Second)
	e.beatAll(t, "p1", managed, nil)
	e.pass(t) // node 0 is registered, not ready: r moves off nodes 0 and 1
	moved := e.get(t, r.ReservationID)
	if !hasReason(moved, api.ReasonReplaced) || slices.Contains(moved.NodeIDs, nodeName(0)) {
		t.Fatalf("r was not moved off node 0: on %v, %+v", moved.NodeIDs, moved.History)
	}
	// Node 0 turns ready; the next holder takes nodes 0 and 1 — once node
	// 0 was told to unbind r.
	node0.add(e.ready(t, "p1", nodeName(0)))
	e.clock.Advance(10 * time.Second)
	e.beatAll(t, "p1", managed, nil)
	e.pass(t)
	next, err := e.create(t, "p1", 16, 0, time.Hour)
	if full {
		if got := e.get(t, r.ReservationID); !slices.Equal(got.MovedFrom, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
			t.Errorf("the move's scrub of node 0 not written: r keeps %v of its old devices, want node 0's", got.MovedFrom)
		}
		switch {
		case err == nil:
			t.Errorf("a create took node 0's devices before node 0 was told to unbind %s: %v", r.ReservationID, next.NodeIDs)
		case apierr.CodeOf(err) != apierr.CapacityExhausted:
			t.Fatal(err)
		}
		e.check(t)
		e.drain(t, &node0, fill, managed, func() bool { return e.get(t, r.ReservationID).MovedFrom == nil })
		if err != nil {
			next, err = e.create(t, "p1", 16, 0, time.Hour)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(next.NodeIDs, []string{nodeName(0), nodeName(1)}) {
		t.Fatalf("the next holder placed on %v", next.NodeIDs)
	}
	e.bindsAfter(t, &node0, managed, r.ReservationID, next.ReservationID)
}

// fillEntries fills node k with api.MaxBindings pending unbinds of other
// reservations, and returns the report that says them done.
func (e *env) fillEntries(t *testing.T, pool string, k int, w api.Window) []api.ReportedBinding {
	t.Helper()
	p, err := e.store.GetPool(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	pr := capacity.PoolResource{PoolID: pool, Topology: p.Topology("gpu")}
	var done []api.ReportedBinding
	for i := range api.MaxBindings {
		id := fmt.Sprintf("%s%022d", fillID, i)
		nb := capacity.NodeBinding{TenantID: "acme", Mask: 1, Window: w}
		if err := e.nodes.Scrub(context.Background(), pr, k, id, nb, capacity.NodeState{}); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		done = append(done, unbound(id))
	}
	return done
}

// drain: node 0 reports its filled entries done, with the others and a
// pass every 10 s, until the sweep forgot them and until says so.
func (e *env) drain(t *testing.T, node0 *told, fill []api.ReportedBinding, others []int, until func() bool) {
	t.Helper()
	drained := func() bool {
		for _, b := range e.node(t, "p1", nodeName(0)).Bindings {
			if strings.HasPrefix(b.ReservationID, fillID) {
				return false
			}
		}
		return until()
	}
	for i := 0; !drained(); i++ {
		if i == 20 {
			t.Fatalf("node 0 not drained after %d passes: %+v", i, e.node(t, "p1", nodeName(0)).Bindings)
		}
		e.clock.Advance(10 * time.Second)
		node0.add(e.ready(t, "p1", nodeName(0), fill...))
		e.beatAll(t, "p1", others, nil)
		e.pass(t)
	}
}

// bindsAfter runs the next holder's window start — node 0 and the others
// reporting, passes — and checks node 0 was told to unbind prev before it
// was told to bind next.
func (e *env) bindsAfter(t *testing.T, node0 *told, others []int, prev, next string) {
	t.Helper()
	for range 3 {
		e.clock.Advance(5 * time.Second)
		node0.add(e.ready(t, "p1", nodeName(0)))
		e.beatAll(t, "p1", others, nil)
		e.pass(t)
		node0.add(e.ready(t, "p1", nodeName(0)))
	}
	unbindPrev, bindNext := "unbind "+prev, "bind "+next
	if !slices.Contains(*node0, bindNext) {
		t.Fatalf("node 0 never told to bind the next holder: %v", *node0)
	}
	if !node0.first(unbindPrev, bindNext) {
		t.Fatalf("node 0, which held %s bound at once, was told %v: not to unbind it before the next holder's bind", prev, *node0)
	}
	e.check(t)
}

// A release whose scrub cannot be written — the node, registered after
// the reservation's window started (bound at once while unmanaged, never
// told: the adoption left it to a binding pass that had read the node
// before it registered), holds api.MaxBindings pending entries — keeps
// the devices there: a create that would take them is refused, and once
// the node's entries drain the scrub is written (the release's sweep,
// due until then) before any other bind on those devices. It used to be
// logged and dropped: the devices were freed and the next tenant placed
// and told to bind them with no unbind before it (issue 39, item 3).
func TestUnwrittenScrubKeepsTheDevicesUntilWritten(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 16)
	e.register(t, "p1", nodeName(1))
	e.ready(t, "p1", nodeName(1))
	e.pass(t)
	// Node 1 stays cordoned: node 0's devices are the only ones to take.
	if _, err := e.fleet.Cordon(ctx, "acme", "p1", nodeName(1), "keep to node 0"); err != nil {
		t.Fatal(err)
	}
	r, err := e.create(t, "p1", 8, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.ready(t, "p1", nodeName(1))
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active || got.NodeIDs[0] != nodeName(0) {
		t.Fatalf("unmanaged node 0: %s on %v", got.State, got.NodeIDs)
	}
	e.fleet.Adopter = passingAdopter{}
	e.register(t, "p1", nodeName(0))
	e.fleet.Adopter = e.cap.Bindings()
	// Node 0 holds its maximum of pending entries: unbinds of earlier
	// tenants it has not reported done.
	fill := e.fillEntries(t, "p1", 0, r.Window)
	var node0 told
	node0.add(e.ready(t, "p1", nodeName(0)))
	e.ready(t, "p1", nodeName(1))
	e.pass(t) // node 0 is ready: the sweep lifts its flags
	if _, err := e.cap.Reservations().Release(ctx, "acme", r.ReservationID); err != nil {
		t.Fatal(err)
	}
	if got := e.get(t, r.ReservationID); !slices.Equal(got.Unscrubbed, []int{0}) {
		t.Errorf("released with its scrub not written: unscrubbed %v, want [0]", got.Unscrubbed)
	}
	e.check(t)
	next, err := e.create(t, "p1", 8, 0, time.Hour)
	switch {
	case err == nil:
		t.Errorf("a create took node 0's devices before node 0 was told to unbind %s: %v", r.ReservationID, next.NodeIDs)
	case apierr.CodeOf(err) != apierr.CapacityExhausted:
		t.Fatal(err)
	}
	// The node reports its earlier unbinds done: the sweep forgets them, and
	// the release's sweep (due while the scrub is owed) writes the scrub.
	e.drain(t, &node0, fill, []int{1}, func() bool { return len(e.get(t, r.ReservationID).Unscrubbed) == 0 })
	if err != nil {
		if next, err = e.create(t, "p1", 8, 0, time.Hour); err != nil {
			t.Fatalf("once the scrub was written: %v", err)
		}
	}
	e.bindsAfter(t, &node0, []int{1}, r.ReservationID, next.ReservationID)
}

// fillID starts the ids of the entries a test fills a node with.
const fillID = "FILL"
