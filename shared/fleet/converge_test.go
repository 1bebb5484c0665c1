package fleet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// The interleavings an outside review reproduced (issue 21), each replayed
// deterministically: a writer is held at one store call (a channel, no
// sleeps) while another flow runs whole, then let go.

// hold is a fleet.Calendar that stops the first Flag call matching want
// until released: the writer has claimed its generation and is about to
// write its first node-hour.
type hold struct {
	inner   fleet.Calendar
	once    sync.Once
	want    func(off bool) bool
	stopped chan struct{}
	release chan struct{}
}

func newHold(inner fleet.Calendar, want func(off bool) bool) *hold {
	return &hold{inner: inner, want: want, stopped: make(chan struct{}), release: make(chan struct{})}
}

func (h *hold) Flag(ctx context.Context, t capacity.PoolResource, node int, hr capacity.Hour, off bool, gen int64) error {
	if h.want(off) {
		h.once.Do(func() {
			close(h.stopped)
			<-h.release
		})
	}
	return h.inner.Flag(ctx, t, node, hr, off, gen)
}

// flagsOff reports the node's stored node-hours over the flagged horizon:
// how many are off and how many are not.
func (e *env) flagsOff(tb testing.TB, pool string, node int) (off, on int) {
	tb.Helper()
	p, err := e.store.GetPool(context.Background(), pool)
	if err != nil {
		tb.Fatal(err)
	}
	pr := capacity.PoolResource{PoolID: pool, Topology: p.Topology("gpu")}
	var keys []capacity.NodeHourKey
	from := capacity.HourOf(e.clock.Now())
	for h := from; h < from+capacity.Hour(e.hours); h++ {
		keys = append(keys, capacity.NodeHourKey{Node: node, Hour: h})
	}
	got, err := e.store.NodeHours(context.Background(), pr, keys)
	if err != nil {
		tb.Fatal(err)
	}
	for _, k := range keys {
		if got[k].Off {
			off++
		} else {
			on++
		}
	}
	return off, on
}

// held runs fn on a fleet service whose flag writes stop at the first one
// h matches; it returns once fn is stopped there, and a wait for fn's end.
func (e *env) held(tb testing.TB, h *hold, fn func(s *fleet.Service) error) (wait func()) {
	tb.Helper()
	s := &fleet.Service{Store: e.nodes, Pools: e.store, Calendar: h, Now: e.clock.Now, Logger: e.fleet.Logger}
	done := make(chan error, 1)
	go func() { done <- fn(s) }()
	select {
	case <-h.stopped:
	case err := <-done:
		tb.Fatalf("the held writer ended before its first flag write: %v", err)
	}
	return func() {
		close(h.release)
		if err := <-done; err != nil {
			tb.Fatalf("the held writer: %v", err)
		}
	}
}

// Defect 1: a rollout lifts its cordon and starts unflagging; an
// operator's cordon lands in between, whole; the rollout's unflag goes on.
// The operator's cordon must hold: every node-hour off, nothing placed.
func TestOperatorCordonSurvivesARolloutsLift(t *testing.T) {
	e := newEnvHours(t, capacity.ProvisionHours) // the whole default horizon flagged and lifted
	ctx := context.Background()
	e.managed(t, "p1", 8, 1)
	rec, err := e.nodes.GetNode(ctx, "p1", "gpu", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = e.fleet.SetRolloutCordon(ctx, rec, &api.Cordon{By: api.ByRollout, RolloutID: "r1", Reason: "rollout", At: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if off, _ := e.flagsOff(t, "p1", 0); off != e.hours {
		t.Fatalf("rollout cordon: %d hours off", off)
	}
	wait := e.held(t, newHold(e.store, func(off bool) bool { return !off }), func(s *fleet.Service) error {
		_, err := s.SetRolloutCordon(ctx, rec, nil)
		return err
	})
	if _, err := e.fleet.Cordon(ctx, "acme", "p1", nodeName(0), "maintenance"); err != nil {
		t.Fatal(err)
	}
	wait()
	if off, on := e.flagsOff(t, "p1", 0); on != 0 {
		t.Errorf("operator cordon after the rollout's lift: %d hours off, %d not", off, on)
	}
	e.pass(t)
	if _, err := e.create(t, "p1", 8, 0, time.Hour); err == nil {
		t.Error("placed on the operator-cordoned node")
	}
	e.check(t)
}

// Defect 3: an operator's uncordon starts lifting; a rollout's cordon
// lands in between, whole; the uncordon goes on. The draining node must
// stay out of placement.
func TestRolloutCordonSurvivesAnUncordon(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 8)
	e.register(t, "p1", nodeName(0))
	e.ready(t, "p1", nodeName(0))
	if _, err := e.fleet.Cordon(ctx, "acme", "p1", nodeName(0), "maintenance"); err != nil {
		t.Fatal(err)
	}
	wait := e.held(t, newHold(e.store, func(off bool) bool { return !off }), func(s *fleet.Service) error {
		_, err := s.Uncordon(ctx, "acme", "p1", nodeName(0))
		return err
	})
	rec, err := e.nodes.GetNode(ctx, "p1", "gpu", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fleet.SetRolloutCordon(ctx, rec, &api.Cordon{By: api.ByRollout, RolloutID: "r1", Reason: "rollout", At: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	wait()
	if off, on := e.flagsOff(t, "p1", 0); on != 0 {
		t.Errorf("rollout cordon after the operator's uncordon: %d hours off, %d not", off, on)
	}
	if _, err := e.create(t, "p1", 8, 0, time.Hour); err == nil {
		t.Error("placed on the draining node")
	}
}

// Defect 2: the sweep flags an unhealthy node; a healthy report lands
// while it writes. The node may wait a pass, no more: after the next pass
// its node-hours are lifted and it takes placements.
func TestReadyNodeIsUnflaggedByTheNextPass(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.managed(t, "p1", 8, 1)
	// Silent for 3 intervals: the sweep marks it unreachable and flags it,
	// held at its first flag write while a healthy report lands.
	e.clock.Advance(time.Duration(api.UnreachableAfter)*api.DefaultInterval + time.Second)
	h := newHold(e.store, func(off bool) bool { return off })
	rc := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: e.cap}, Due: &duedb.Store{DB: e.store.DB, Table: e.store.Table}, Fleet: &fleet.Service{Store: e.nodes, Pools: e.store, Calendar: h, Now: e.clock.Now, Logger: e.fleet.Logger}}
	done := make(chan error, 1)
	go func() { _, err := rc.Pass(ctx); done <- err }()
	<-h.stopped
	e.ready(t, "p1", nodeName(0))
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	e.pass(t)
	if off, _ := e.flagsOff(t, "p1", 0); off != 0 {
		t.Errorf("a ready node after the next pass: %d hours off", off)
	}
	if _, err := e.create(t, "p1", 8, 0, time.Hour); err != nil {
		t.Errorf("a create on the ready node: %v", err)
	}
	e.check(t)
}

// Defect 8: a report that makes a node unhealthy takes it out of
// placement before the heartbeat answers — and counts it out of service
// (defect 7) in the same write.
func TestUnhealthyReportTakesTheNodeOutAtOnce(t *testing.T) {
	e := newEnvHours(t, capacity.ProvisionHours) // the whole default horizon flagged before the answer
	ctx := context.Background()
	e.managed(t, "p1", 16, 2)
	if n, err := e.nodes.CountOut(ctx, "p1"); err != nil || n != 0 {
		t.Fatalf("out of service before: %d %v", n, err)
	}
	rep := e.report("p1", nodeName(0))
	rep.Health.DevicesVisible = 7
	// Counted out of service from the report's own write: while its flag
	// writes are held, a rollout counting the pool already sees it.
	var ans api.HeartbeatResult
	wait := e.held(t, newHold(e.store, func(off bool) bool { return off }), func(s *fleet.Service) error {
		var err error
		ans, err = s.Heartbeat(ctx, "acme", "p1", nodeName(0), sign(t, rep, e.keys["p1/"+nodeName(0)]))
		return err
	})
	if n, err := e.nodes.CountOut(ctx, "p1"); err != nil || n != 1 {
		t.Errorf("out of service once the report was written: %d %v", n, err)
	}
	wait()
	if ans.Node.State != api.Unhealthy {
		t.Fatalf("unhealthy report: %+v", ans.Node.State)
	}
	for range 2 {
		r, err := e.create(t, "p1", 8, 0, time.Hour)
		if err == nil && r.NodeIDs[0] == nodeName(0) {
			t.Errorf("placed on %s, which just reported unhealthy", nodeName(0))
		}
	}
	// The steady state is one write again: a second unhealthy report
	// syncs nothing.
	e.rt.Reset()
	rep = e.report("p1", nodeName(0))
	rep.Health.DevicesVisible = 7
	if _, err := e.beat(t, rep); err != nil {
		t.Fatal(err)
	}
	if calls := e.rt.Count(); calls > 1 {
		t.Errorf("a steady unhealthy heartbeat made %d calls, want 1", calls)
	}
}

// A report that takes the node out of placement syncs its flags before
// it answers; a release that unbinds the node meanwhile is in the answer:
// the node is told to unbind, never to bind the released reservation. The
// answer used to be the node as the flags' claim read it, with the bind
// (the fleet protocol simulation, seed 36: a-terminal).
func TestAnswerAfterTheFlagsIsTheNodeAsWritten(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.managed(t, "p1", 8, 1)
	r, err := e.create(t, "p1", 8, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.ready(t, "p1", nodeName(0))
	e.pass(t)
	e.ready(t, "p1", nodeName(0), bound(r.ReservationID))
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active {
		t.Fatalf("before: %s", got.State)
	}
	rep := e.report("p1", nodeName(0), bound(r.ReservationID))
	rep.Health.DevicesVisible = 7
	var ans api.HeartbeatResult
	wait := e.held(t, newHold(e.store, func(off bool) bool { return off }), func(s *fleet.Service) error {
		var err error
		ans, err = s.Heartbeat(ctx, "acme", "p1", nodeName(0), sign(t, rep, e.keys["p1/"+nodeName(0)]))
		return err
	})
	if _, err := e.cap.Reservations().Release(ctx, "acme", r.ReservationID); err != nil {
		t.Fatal(err)
	}
	wait()
	if len(ans.Desired.Bindings) != 1 || ans.Desired.Bindings[0].ReservationID != r.ReservationID ||
		ans.Desired.Bindings[0].Action != api.ActionUnbind {
		t.Errorf("answered after the release: %+v, want its unbind", ans.Desired.Bindings)
	}
}

// Defect 9: a node registered while it holds an active reservation (bound
// at once while unmanaged) is told to bind it, and to unbind it at its
// end, before the next holder's bind.
func TestRegisteredNodeAdoptsWhatItHolds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.fleet.Adopter = e.cap.Bindings()
	e.pool(t, "p1", 8)
	r, err := e.create(t, "p1", 8, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active {
		t.Fatalf("unmanaged: %s", got.State)
	}
	e.register(t, "p1", nodeName(0))
	ans := e.ready(t, "p1", nodeName(0))
	e.pass(t) // the sweep lifts the ready node's flags
	if len(ans.Desired.Bindings) != 1 || ans.Desired.Bindings[0].Action != api.ActionBind || ans.Desired.Bindings[0].ReservationID != r.ReservationID {
		t.Fatalf("after registering: %+v", ans.Desired.Bindings)
	}
	e.ready(t, "p1", nodeName(0), bound(r.ReservationID))
	if _, err := e.cap.Reservations().Release(ctx, "acme", r.ReservationID); err != nil {
		t.Fatal(err)
	}
	next, err := e.create(t, "p1", 8, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.pass(t)
	ans = e.ready(t, "p1", nodeName(0), bound(r.ReservationID))
	var actions []string
	for _, b := range ans.Desired.Bindings {
		actions = append(actions, b.Action+" "+b.ReservationID)
	}
	if len(actions) != 2 || actions[0] != "unbind "+r.ReservationID || actions[1] != "bind "+next.ReservationID {
		t.Errorf("after the release: %v", actions)
	}
	e.check(t)
}

// Defect 4: a pass is held between recording a reservation's nodes and
// binding them; meanwhile acme releases it, globex books the same devices
// and an overlapping pass binds globex's. The held pass's bind must fail:
// no answer lists two binds on one device, nor a bind of a released one.
func TestBindNeverCrossesTenants(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 8)
	if _, err := e.cap.Pools().Offer(ctx, "acme", "p1", "globex", "gpu", 8); err != nil {
		t.Fatal(err)
	}
	e.register(t, "p1", nodeName(0))
	e.ready(t, "p1", nodeName(0))
	e.pass(t)
	r, err := e.create(t, "p1", 8, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	e.ready(t, "p1", nodeName(0))
	stopped, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.cap.Faults = func(p string) error {
		if p == capacity.FaultBindRecorded {
			once.Do(func() { close(stopped); <-release })
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { _, err := e.rc.Pass(ctx); done <- err }()
	<-stopped
	if _, err := e.cap.Reservations().Release(ctx, "acme", r.ReservationID); err != nil {
		t.Fatal(err)
	}
	s, end := e.clock.Now(), e.clock.Now().Add(time.Hour)
	next, err := e.cap.Admission().Create(ctx, capacity.CreateRequest{TenantID: "globex", PoolID: "p1", Resource: "gpu", Count: 8, Start: &s, End: end}, allow)
	if err != nil {
		t.Fatal(err)
	}
	other := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: &capacity.Service{Store: e.store, Now: e.clock.Now, Logger: e.cap.Logger, Nodes: e.nodes}}, Due: &duedb.Store{DB: e.store.DB, Table: e.store.Table}, Fleet: e.fleet}
	if _, err := other.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ans := e.ready(t, "p1", nodeName(0))
	for _, b := range ans.Desired.Bindings {
		if b.Action == api.ActionBind && b.ReservationID != next.ReservationID {
			t.Errorf("told to bind %s (%s) besides globex's %s: %+v", b.ReservationID, b.TenantID, next.ReservationID, ans.Desired.Bindings)
		}
	}
}

// Defect 5: bound on X, moved to Y off X's unhealthy report, X recovers
// still reporting it bound (not scrubbed yet), Y fails before binding and
// it moves back to X: X's stale "bound" answers the old bind, not this
// one. Active only after X scrubbed (unbound) and bound it again.
func TestActiveOnlyFromABoundThatAnswersABind(t *testing.T) {
	e := newEnv(t)
	e.managed(t, "p1", 16, 2)
	r, err := e.create(t, "p1", 8, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	x := r.NodeIDs[0]
	y := nodeName(1)
	if x == y {
		y = nodeName(0)
	}
	e.clock.Advance(2 * time.Minute)
	e.ready(t, "p1", y)
	e.ready(t, "p1", x)
	e.pass(t) // binding: X told to bind
	e.ready(t, "p1", y)
	rep := e.report("p1", x, bound(r.ReservationID))
	rep.Health.DevicesVisible = 7 // bound, but unhealthy
	if _, err := e.beat(t, rep); err != nil {
		t.Fatal(err)
	}
	e.pass(t) // moved to Y; X told to unbind
	if got := e.get(t, r.ReservationID); got.NodeIDs[0] != y {
		t.Fatalf("not moved to %s: %v", y, got.NodeIDs)
	}
	e.ready(t, "p1", x, bound(r.ReservationID)) // recovered, not scrubbed yet
	e.pass(t)                                   // its flags lifted; Y told to bind
	e.ready(t, "p1", x, bound(r.ReservationID))
	rep = e.report("p1", y)
	rep.Health.DevicesVisible = 7
	if _, err := e.beat(t, rep); err != nil {
		t.Fatal(err)
	}
	e.pass(t) // moved back to X
	if got := e.get(t, r.ReservationID); got.NodeIDs[0] != x {
		t.Fatalf("not moved back to %s: %v", x, got.NodeIDs)
	}
	for range 2 {
		e.ready(t, "p1", x, bound(r.ReservationID))
		e.pass(t)
		if got := e.get(t, r.ReservationID); got.State == api.Active {
			t.Fatal("active from X's stale bound (its entry is an unbind)")
		}
	}
	// Scrubbed: told to bind again — within two passes (the sweep forgetting
	// the unbind and the bind step racing it: the loser goes again).
	var ans api.HeartbeatResult
	for range 2 {
		e.ready(t, "p1", x, unbound(r.ReservationID))
		e.pass(t)
		if ans = e.ready(t, "p1", x); len(ans.Desired.Bindings) == 1 && ans.Desired.Bindings[0].Action == api.ActionBind {
			break
		}
	}
	if len(ans.Desired.Bindings) != 1 || ans.Desired.Bindings[0].Action != api.ActionBind {
		t.Fatalf("after the scrub: %+v", ans.Desired.Bindings)
	}
	e.ready(t, "p1", x, bound(r.ReservationID))
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active {
		t.Errorf("after X bound it again: %s", got.State)
	}
	e.check(t)
}

// Mass silence: most of a pool's nodes go silent in one sweep — the
// control plane's or the network's fault. None is marked unreachable (so
// nothing moves), the pool is marked disrupted; when they report again it
// ends. A node silent alone is marked as before; silence lasting past
// DisruptionHold is marked gradually.
func TestMassSilenceIsHeld(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.managed(t, "p1", 48, 6)
	unreachable := func() int { return e.unreachable(t, "p1", 6) }
	silentFor := time.Duration(api.UnreachableAfter)*api.DefaultInterval + time.Second
	e.clock.Advance(silentFor)
	for _, k := range []int{4, 5} {
		e.ready(t, "p1", nodeName(k))
	}
	e.pass(t) // 4 of 6 silent at once
	if n := unreachable(); n != 0 {
		t.Errorf("mass silence: %d nodes marked unreachable", n)
	}
	if since, err := e.nodes.Disrupted(ctx, "p1"); err != nil || since == nil {
		t.Errorf("mass silence not recorded: %v %v", since, err)
	}
	for k := range 6 {
		e.ready(t, "p1", nodeName(k))
	}
	e.clock.Advance(time.Second)
	e.pass(t)
	if since, _ := e.nodes.Disrupted(ctx, "p1"); since != nil {
		t.Errorf("disruption not over after every node reported: since %v", since)
	}
	// One node silent alone: unreachable, as before.
	e.clock.Advance(silentFor)
	for k := 1; k < 6; k++ {
		e.ready(t, "p1", nodeName(k))
	}
	e.pass(t)
	if n := unreachable(); n != 1 {
		t.Errorf("one silent node: %d unreachable, want 1", n)
	}
	// Every node silent past DisruptionHold: marked one a sweep.
	e.clock.Advance(silentFor)
	e.pass(t)
	if n := unreachable(); n != 1 {
		t.Fatalf("second mass silence: %d unreachable, want still 1", n)
	}
	e.clock.Advance(fleet.DisruptionHold)
	e.pass(t)
	if n := unreachable(); n != 1 {
		t.Errorf("the hold just ended: %d unreachable, want still 1 (a fresh grace)", n)
	}
	e.clock.Advance(silentFor)
	e.pass(t)
	if n := unreachable(); n != 2 {
		t.Errorf("past DisruptionHold and the grace: %d unreachable, want 2 (one more a sweep)", n)
	}
}

// The nodes of a mass silence come back one by one: once the silent are
// fewer than DisruptionMin the hold ends, and those still silent get a
// fresh UnreachableAfter intervals from then (Kubernetes' node lifecycle
// controller does the same leaving full disruption) — none is marked
// while the rest return (found by the fleet protocol simulation: the
// first sweep after the hold marked one that came back seconds later).
func TestMassSilenceReturnsOneByOne(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.managed(t, "p1", 48, 6)
	unreachable := func() int { return e.unreachable(t, "p1", 6) }
	silentFor := time.Duration(api.UnreachableAfter)*api.DefaultInterval + time.Second
	e.clock.Advance(silentFor)
	for _, k := range []int{4, 5} {
		e.ready(t, "p1", nodeName(k))
	}
	e.pass(t) // 4 of 6 silent at once: held
	if since, _ := e.nodes.Disrupted(ctx, "p1"); since == nil || unreachable() != 0 {
		t.Fatalf("mass silence: disrupted since %v, %d unreachable", since, unreachable())
	}
	e.clock.Advance(api.DefaultInterval)
	for _, k := range []int{2, 3, 4, 5} {
		e.ready(t, "p1", nodeName(k))
	}
	e.pass(t) // two still silent: fewer than DisruptionMin
	if n := unreachable(); n != 0 {
		t.Errorf("two of the silence's nodes back: %d marked unreachable, want 0 (their grace)", n)
	}
	e.clock.Advance(api.DefaultInterval)
	for k := range 6 {
		e.ready(t, "p1", nodeName(k))
	}
	e.pass(t)
	if since, _ := e.nodes.Disrupted(ctx, "p1"); since != nil || unreachable() != 0 {
		t.Errorf("every node back: disrupted since %v, %d unreachable", since, unreachable())
	}
	// One of the silence's nodes never comes back: marked once its grace
	// from the hold's end is over.
	e.clock.Advance(silentFor)
	for k := 1; k < 6; k++ {
		e.ready(t, "p1", nodeName(k))
	}
	e.pass(t)
	if n := unreachable(); n != 1 {
		t.Errorf("a node silent alone after the silence: %d unreachable, want 1", n)
	}
}

// A node whose reports stopped a little before the rest of a mass
// silence is marked alone (the others not late yet); it still counts
// towards the silence that follows, else 3 of 4 nodes going silent within
// 40 s leave 2 of 3 in contact — below DisruptionMin — and both are marked
// (found by the fleet protocol simulation, seed 1 of F09's schedule).
func TestMassSilenceCountsOneMarkedJustBefore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.managed(t, "p1", 48, 4)
	unreachable := func() int { return e.unreachable(t, "p1", 4) }
	silent := time.Duration(api.UnreachableAfter) * api.DefaultInterval
	lead := 40 * time.Second // over an interval: node 0 is quiet before the others are late
	e.clock.Advance(lead)    // node 0 stopped before this
	for k := 1; k < 4; k++ {
		e.ready(t, "p1", nodeName(k))
	}
	e.clock.Advance(silent - lead + time.Second) // nodes 1 and 2 stopped too
	e.ready(t, "p1", nodeName(3))
	e.pass(t)
	if n := unreachable(); n != 1 {
		t.Fatalf("node 0 silent alone: %d unreachable, want 1", n)
	}
	// The sweep comes late (passes crashed): node 0's silence is older
	// than the limit now, the others' too.
	e.clock.Advance(lead + silent)
	e.ready(t, "p1", nodeName(3))
	e.pass(t) // 0, 1 and 2 silent within 40 s: 3 of 4
	if n := unreachable(); n != 1 {
		t.Errorf("nodes 1 and 2 silent with node 0: %d unreachable, want 1 (held)", n)
	}
	if since, err := e.nodes.Disrupted(ctx, "p1"); err != nil || since == nil {
		t.Errorf("mass silence not recorded: %v %v", since, err)
	}
	// One that stopped earlier does not count: a pool whose hosts die
	// one by one is not disrupted.
	for k := 1; k < 4; k++ {
		e.ready(t, "p1", nodeName(k))
	}
	e.clock.Advance(time.Second)
	e.pass(t)
	e.clock.Advance(silent + time.Second)
	e.ready(t, "p1", nodeName(3))
	e.pass(t) // 0 marked a silence ago, 1 and 2 silent: 2 of 3 in contact
	if n := unreachable(); n != 3 {
		t.Errorf("two silent a silence after node 0: %d unreachable, want 3", n)
	}
}

// unreachable counts the pool's nodes 0..n-1 marked unreachable.
func (e *env) unreachable(tb testing.TB, pool string, n int) int {
	tb.Helper()
	out := 0
	for k := range n {
		r, err := e.nodes.GetNode(context.Background(), pool, "gpu", k)
		if err != nil {
			tb.Fatal(err)
		}
		if r.State == api.Unreachable {
			out++
		}
	}
	return out
}

// holdsNone is a RolloutHolds for which no rollout holds any node (or,
// with held, every node).
type holdsNone struct{ held bool }

func (h holdsNone) Holds(context.Context, string) (bool, error)   { return h.held, nil }
func (h holdsNone) Running(context.Context, string) (bool, error) { return h.held, nil }

// A rollout's cordon and target left on a node once the rollout finished
// (a start's cordon landing after an abort concluded the node) are lifted
// by the next sweep, and the node takes placements again; a running
// rollout's node keeps them.
func TestSweepLiftsWhatARolloutNoLongerHolds(t *testing.T) {
	for _, held := range []bool{true, false} {
		e := newEnv(t)
		ctx := context.Background()
		e.fleet.Rollouts = holdsNone{held: held}
		e.pool(t, "p1", 8)
		e.register(t, "p1", nodeName(0))
		e.ready(t, "p1", nodeName(0))
		rec, err := e.nodes.GetNode(ctx, "p1", "gpu", 0)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err = e.fleet.SetRolloutCordon(ctx, rec, &api.Cordon{By: api.ByRollout, RolloutID: "r1", Reason: "rollout", At: e.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.nodes.SetTarget(ctx, rec, "r1", &fleet.Target{Version: "2.0.0", Sequence: 2, RolloutID: "r1"}, 1); err != nil {
			t.Fatal(err)
		}
		e.ready(t, "p1", nodeName(0))
		e.pass(t)
		rec, err = e.nodes.GetNode(ctx, "p1", "gpu", 0)
		if err != nil {
			t.Fatal(err)
		}
		if kept := rec.Rollout != nil && rec.Target != nil; kept != held {
			t.Errorf("held %v: cordon %+v, target %+v after the sweep", held, rec.Rollout, rec.Target)
		}
		if off, _ := e.flagsOff(t, "p1", 0); (off > 0) != held {
			t.Errorf("held %v: %d hours off after the sweep", held, off)
		}
	}
}
