package capacity_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/paging"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// The deterministic simulation of the capacity protocol. A seeded
// scheduler runs actors — creates of every shape, releases (of drafts and
// of reservations mid-create among them), retries of the same clientToken
// with the same and with another request, reconciler passes — as goroutines
// of which exactly one runs at a time: each stops at every call it makes to
// the store, against the real dynalite, and the scheduler picks by the seed
// which goes on next, when the clock moves, and whether the call fails
// before or after reaching the server, or the actor crashes there (a crash
// is the Lambda dying: nothing of that actor runs again; a flow past its
// function's timeout is cut off the same way). After every actor ended,
// reconciler passes run to quiescence and the invariant checker must find
// nothing; then every window ends and it must find nothing again, with
// every quota back to zero.
//
// The same seed replays the same run exactly: every choice comes from it,
// ids of creates without a token included, and a flow's own steps run one
// after another (Service.Serial). make test runs the seed corpus (simSeeds
// and testdata/fuzz); make fuzz explores more; BC_SIM_SEEDS=n runs n.

// simSeeds are the seeds make test runs: 1 and 3, which catch the
// documented revert (the occupancy map's write after a put, docs/capacity.md).
// BC_SIM_SEEDS=n runs seeds 1..n instead (make sims: 32).
var simSeeds = []uint64{1, 3}

func FuzzCapacitySimulation(f *testing.F) {
	seeds := simSeeds
	if v, err := strconv.Atoi(os.Getenv("BC_SIM_SEEDS")); err == nil && v > 0 {
		seeds = nil
		for seed := range v {
			seeds = append(seeds, uint64(seed+1))
		}
	}
	entry := map[uint64]int{} // the seed corpus's entry of each seed (seed#i)
	for i, seed := range seeds {
		f.Add(seed)
		entry[seed] = i
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		sim := runSimulation(t, seed)
		t.Logf("seed %d: %d actors, %d steps (%d crashed, %d failed calls), %d creates placed, %d releases answered, %d node-hours put beyond the horizon checked in their maps; answers %v",
			seed, sim.actorCount, len(sim.steps), sim.crashes, sim.failures, len(sim.placed), len(sim.released), sim.mapsChecked, sim.answers)
		if f := sim.fleet; f != nil {
			t.Logf("seed %d: fleet of %d nodes, nodes %d (during the run) and %d (holding a booking) failed: once windows started %d active through their nodes, %d moves, %d waiting",
				seed, simNodes, sim.failed, f.late, f.active, f.moved, f.waiting)
		}
		if t.Failed() {
			t.Logf("seed %d failed; replay: go test ./shared/capacity -run 'FuzzCapacitySimulation/seed#%d' (the seed corpus) or with this input under testdata/fuzz; last steps:\n%s",
				seed, entry[seed], sim.trace(400))
		}
	})
}

// simulation is one seed's run.
type simulation struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	far    *rand.Rand // draws the far-ahead windows (apart from rng: the other draws stay each seed's own)
	e      *env
	svc    *capacity.Service
	store  *simStore
	events chan simEvent
	steps  []string
	ids    int
	// counts for the log line
	actorCount, crashes, failures int
	answers                       map[string]int
	// outcomes of the actors, checked against what is stored at the end
	placed   map[string]bool // reservation ids a create answered placed
	released map[string]bool // ids a release answered 200
	windows  []api.Window
	// fleet: the pool's GPU nodes are managed (nil: unmanaged, as in
	// v0.5); failed is the node that fails mid-run (-1: none).
	fleet  *simFleet
	failed int
	// mapPuts are the node-hours creates put as missing beyond the
	// provisioned horizon, by the actor that put them, and mapExempt those
	// whose occupancy bit a fault excused (the put's or the map write's
	// outcome unknown to the create); see checkMaps.
	mapPuts     map[simMapKey]*actor
	mapExempt   map[simMapKey]bool
	mapsChecked int
}

type simMapKey struct {
	res  string
	node int
	hour capacity.Hour
}

// An actor is one API call or reconciler pass: a Lambda invocation.
type actor struct {
	id      int
	name    string
	run     func(ctx context.Context)
	resume  chan simDecision
	started time.Time
	limit   time.Duration // its function's timeout
	dead    bool
}

type simEvent struct {
	a    *actor
	op   string
	done bool
}

// simDecision is what the scheduler lets an actor's store call do.
type simDecision int

const (
	proceed     simDecision = iota
	failBefore              // the request never reaches the server (an error answer)
	failAfter               // the server does it, the answer is lost (an error answer)
	crashBefore             // the actor dies before the request
	crashAfter              // the server does it, then the actor dies
)

type actorKey struct{}

var (
	errCrashed  = errors.New("sim: the actor crashed")
	errInjected = errors.New("sim: injected dependency failure")
)

func runSimulation(t *testing.T, seed uint64) *simulation {
	e := newEnv(t)
	sim := &simulation{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), far: rand.New(rand.NewPCG(seed, 0xfa2)), e: e, events: make(chan simEvent),
		placed: map[string]bool{}, released: map[string]bool{}, answers: map[string]int{},
		mapPuts: map[simMapKey]*actor{}, mapExempt: map[simMapKey]bool{}}
	sim.store = &simStore{inner: e.store, sim: sim}
	sim.svc = &capacity.Service{Store: sim.store, Now: e.clock.Now, Logger: e.svc.Logger, Serial: true,
		Sleep: func(context.Context, time.Duration) error { return nil },
		NewID: func(time.Time) string { sim.ids++; return fmt.Sprintf("SIM%05dX%016d", sim.ids, seed) }}
	ctx := context.Background()
	// A pool of 20 nodes of 8 GPUs and 16 CPUs of one device each (a
	// placement of more than InlinePlacement nodes on either), owned by
	// acme, offered in part to globex.
	if _, err := e.svc.Pools().Create(ctx, "acme", "sim", map[string]int{"gpu": 160, "cpu": 16}, map[string]int{"gpu": 8, "cpu": 1}); err != nil {
		t.Fatal(err)
	}
	e.offer(t, "acme", "sim", "globex", "gpu", 40)
	e.offer(t, "acme", "sim", "globex", "cpu", 6)
	sim.failed = -1
	if sim.rng.IntN(2) == 0 {
		sim.startFleet(ctx)
	}
	if sim.rng.IntN(3) > 0 { // most runs on provisioned hours (the fast path), some not
		rc := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: e.svc, ProvisionHours: 6}, Due: &duedb.Store{DB: e.store.DB, Table: e.store.Table}, Serial: true}
		if _, err := rc.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	actors := sim.actors()
	sim.actorCount = len(actors)
	sim.schedule(ctx, actors)
	sim.quiesce(ctx)
	return sim
}

// actors draws this seed's mix of calls.
func (sim *simulation) actors() []*actor {
	var out []*actor
	add := func(name string, limit time.Duration, run func(ctx context.Context)) {
		out = append(out, &actor{id: len(out), name: name, run: run, resume: make(chan simDecision), limit: limit})
	}
	now := sim.e.clock.Now()
	type made struct {
		req capacity.CreateRequest
		id  string
	}
	var creates []made
	for i := range 6 + sim.rng.IntN(10) {
		req := sim.createRequest(now, i)
		id := ""
		if req.ClientToken != "" {
			id = capacity.TokenID(req.TenantID, req.Principal, req.ClientToken)
		}
		creates = append(creates, made{req, id})
	}
	for i, c := range creates {
		decide := sim.decider()
		add(fmt.Sprintf("create%d %s/%s×%d %s token=%q", i, c.req.TenantID, c.req.Resource, c.req.Count, c.req.Topology, c.req.ClientToken),
			capacity.FlowDeadline, sim.create(c.req, decide))
		if c.req.ClientToken != "" && sim.rng.IntN(3) == 0 {
			// A retry of the same token: the same request, or another one.
			again := c.req
			if sim.rng.IntN(3) == 0 {
				again.Count++
			}
			add(fmt.Sprintf("retry%d token=%q count=%d", i, again.ClientToken, again.Count), capacity.FlowDeadline, sim.create(again, decide))
		}
	}
	var targets, large []made
	for _, c := range creates {
		if c.id != "" {
			targets = append(targets, c)
			if c.req.Count > 8 {
				large = append(large, c)
			}
		}
	}
	for i := range 4 + sim.rng.IntN(7) {
		if len(targets) == 0 {
			break
		}
		c := targets[sim.rng.IntN(len(targets))]
		if len(large) > 0 && sim.rng.IntN(5) < 3 {
			c = large[sim.rng.IntN(len(large))] // releases racing large creates, most of them
		}
		wait := sim.rng.IntN(40) // scheduling points it lets pass first: often mid-create, sometimes after
		add(fmt.Sprintf("release%d %s", i, c.id), capacity.ReleaseTimeout, sim.release(c.req.TenantID, c.id, wait))
	}
	for i := range 2 + sim.rng.IntN(3) {
		add(fmt.Sprintf("reconcile%d", i), 50*time.Second, sim.pass())
	}
	if f := sim.fleet; f != nil {
		for range 3 {
			k := sim.rng.IntN(simNodes)
			add(fmt.Sprintf("agent node %d", k), 10*time.Second, f.agent(k, k != 7))
		}
		for sim.failed < 0 || f.off[sim.failed] {
			sim.failed = sim.rng.IntN(simNodes)
		}
		add(fmt.Sprintf("agent node %d fails", sim.failed), 10*time.Second, f.agent(sim.failed, false))
	}
	return out
}

// createRequest draws one create: a resource, a count of one device, a
// node, nine nodes or 128 devices (or anything up to 16), a topology, a
// window in the next hours (aligned to hours or not, one to five hours),
// a tenant, and mostly a clientToken.
func (sim *simulation) createRequest(now time.Time, i int) capacity.CreateRequest {
	r := sim.rng
	req := capacity.CreateRequest{TenantID: "acme", PoolID: "sim", Resource: "gpu", Principal: "alice", Topology: api.OnNodes}
	if r.IntN(4) == 0 {
		req.TenantID = "globex"
	}
	switch n := r.IntN(20); {
	case n < 3:
		req.Count = 1
	case n < 6:
		req.Count = 8
	case n < 11:
		req.Count = 72 // nine nodes of 8: a placement the charge's record cannot hold
	case n < 14:
		req.Count = 128
	default:
		req.Count = 1 + r.IntN(16)
	}
	if r.IntN(4) == 0 {
		req.Resource = "cpu"
		req.Count = min(req.Count, 1+r.IntN(12)) // nine and more nodes of one device
	}
	if r.IntN(4) == 0 {
		req.Topology = api.AnyDevices
	}
	start := now.Truncate(time.Hour).Add(time.Duration(r.IntN(4)) * time.Hour)
	if r.IntN(2) == 0 {
		start = start.Add(time.Duration(r.IntN(60)) * time.Minute)
	}
	start = maxT(start, now)
	if sim.far.IntN(5) == 0 {
		// Beyond the provisioned horizon (6 hours here): the occupancy maps'
		// path (docs/capacity.md, "Beyond the provisioned horizon").
		start = now.Truncate(time.Hour).Add(time.Duration(7+sim.far.IntN(30))*time.Hour + time.Duration(sim.far.IntN(2))*30*time.Minute)
	}
	req.Start = &start
	req.End = start.Add(time.Duration(30+r.IntN(270)) * time.Minute)
	sim.windows = append(sim.windows, api.Window{Start: start, End: req.End})
	if r.IntN(5) > 0 {
		req.ClientToken = fmt.Sprintf("job-%d", i)
	}
	return req
}

func maxT(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// decider is Better IAM: mostly allow, sometimes deny, sometimes down.
func (sim *simulation) decider() capacity.Decide {
	switch sim.rng.IntN(10) {
	case 0:
		return deny
	case 1:
		return func(context.Context, map[string]any) error {
			return apierr.Dependency("better-iam", errInjected)
		}
	}
	return allow
}

func (sim *simulation) create(req capacity.CreateRequest, decide capacity.Decide) func(ctx context.Context) {
	return func(ctx context.Context) {
		r, err := sim.svc.Admission().Create(ctx, req, decide)
		if err == nil && r.State == api.Placed {
			sim.placed[r.ReservationID] = true
		}
		sim.answers[string(apierr.CodeOf(err))]++
		if os.Getenv("BC_SIM_DEBUG") != "" && err != nil {
			sim.t.Logf("create %s: %v", req.ClientToken, err)
		}
		sim.noInternal("create", err)
	}
}

func (sim *simulation) release(tenant, id string, wait int) func(ctx context.Context) {
	return func(ctx context.Context) {
		for range wait {
			sim.yield(ctx, "wait")
		}
		r, err := sim.svc.Reservations().Release(ctx, tenant, id)
		sim.answers["release "+string(apierr.CodeOf(err))]++
		if err == nil {
			if !r.State.Terminal() {
				sim.t.Errorf("seed %d: release of %s answered %s", sim.seed, id, r.State)
			}
			sim.released[id] = true
		}
		sim.noInternal("release", err)
	}
}

func (sim *simulation) pass() func(ctx context.Context) {
	return func(ctx context.Context) {
		rc := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: sim.svc, ProvisionHours: 6}, Due: sim.store, Serial: true}
		if sim.fleet != nil {
			rc.Fleet = sim.fleet.svc
		}
		_, _ = rc.Pass(ctx)
	}
}

// noInternal: whatever was injected, an answer is never INTERNAL.
func (sim *simulation) noInternal(what string, err error) {
	if apierr.CodeOf(err) == apierr.Internal && !errors.Is(err, errCrashed) {
		sim.t.Errorf("seed %d: %s answered INTERNAL: %v", sim.seed, what, err)
	}
}

// schedule runs the actors to their end, one at a time.
func (sim *simulation) schedule(ctx context.Context, actors []*actor) {
	for _, a := range actors {
		go func() {
			actx := context.WithValue(ctx, actorKey{}, a)
			sim.yield(actx, "start")
			if !a.dead {
				a.run(actx)
			}
			sim.events <- simEvent{a: a, done: true}
		}()
	}
	waiting := map[int]*actor{}
	for range actors {
		ev := <-sim.events
		waiting[ev.a.id] = ev.a
	}
	for len(waiting) > 0 {
		ids := slices.Sorted(mapsKeys(waiting))
		a := waiting[ids[sim.rng.IntN(len(ids))]]
		delete(waiting, a.id)
		sim.tick()
		d := sim.decide()
		switch d {
		case crashBefore, crashAfter:
			sim.crashes++
		case failBefore, failAfter:
			sim.failures++
		}
		a.resume <- d
		ev := <-sim.events
		if ev.done {
			sim.steps = append(sim.steps, fmt.Sprintf("%s: done", a.name))
			continue
		}
		sim.steps = append(sim.steps, fmt.Sprintf("%s: %s", a.name, ev.op))
		waiting[a.id] = a
	}
}

func mapsKeys(m map[int]*actor) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// tick moves the clock now and then: mostly by up to a tenth of a second
// (a run's flows mostly finish within their functions' timeouts), and in
// about one run in three once past a lease, a flow's deadline or a
// draft's staleness (those in flight then are cut off).
func (sim *simulation) tick() {
	switch n := sim.rng.IntN(1000); {
	case n < 50:
		sim.e.clock.Advance(time.Duration(sim.rng.IntN(100)) * time.Millisecond)
	case n < 51:
		sim.e.clock.Advance(time.Duration(10+sim.rng.IntN(170)) * time.Second)
	}
}

// decide draws what the next store call does: about one in thirty fails
// or crashes, so a create of a dozen calls mostly gets through and a run
// still holds several crashes and failures.
func (sim *simulation) decide() simDecision {
	switch n := sim.rng.IntN(1000); {
	case n < 8:
		return crashBefore
	case n < 16:
		return crashAfter
	case n < 26:
		return failBefore
	case n < 36:
		return failAfter
	}
	return proceed
}

// yield stops the calling actor at a store call until the scheduler lets
// it go on; the decision says what the call may do. Calls made outside any
// actor (the test's own) go straight through.
func (sim *simulation) yield(ctx context.Context, op string) simDecision {
	a, ok := ctx.Value(actorKey{}).(*actor)
	if !ok {
		return proceed
	}
	if a.dead {
		return crashBefore
	}
	if op == "start" {
		a.started = sim.e.clock.Now()
	}
	sim.events <- simEvent{a: a, op: op}
	d := <-a.resume
	if op == "start" || op == "wait" {
		a.started = sim.e.clock.Now() // the call starts after
		return proceed
	}
	if sim.e.clock.Now().Sub(a.started) > a.limit {
		d = crashBefore // its function's timeout: stopped like a crash
	}
	if d == crashBefore || d == crashAfter {
		defer func() { a.dead = true }()
	}
	return d
}

// quiesce lets the reconciler finish what the actors left (no faults now),
// checks the invariants, then lets every window end and checks again.
func (sim *simulation) quiesce(ctx context.Context) {
	t, e := sim.t, sim.e
	rc := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: e.svc, ProvisionHours: 6}, Due: &duedb.Store{DB: e.store.DB, Table: e.store.Table}, Serial: true}
	if sim.fleet != nil {
		rc.Fleet = sim.fleet.quiet
	}
	settle := func(what string) {
		for i := 0; ; i++ {
			e.clock.Advance(api.StaleAfter + time.Second)
			if sim.fleet != nil {
				sim.fleet.everyNodeReports(ctx, sim.failed, sim.fleet.late)
			}
			res, err := rc.Pass(ctx)
			if err != nil {
				t.Fatalf("seed %d: %s: pass: %v", sim.seed, what, err)
			}
			if res.Errors == 0 && res.TransitionCount() == 0 && res.Repaired == 0 && res.Swept == 0 && res.Settled == 0 && res.Told == 0 {
				return
			}
			if i == 20 {
				t.Fatalf("seed %d: %s: no quiescence after %d passes: %+v", sim.seed, what, i, res)
			}
		}
	}
	settle("after the actors")
	sim.checkNow("after the actors")
	sim.checkMaps("after the actors")
	if sim.fleet != nil {
		sim.fleet.check(ctx, "after the actors", false)
		// Every window started (most still running): bound through the
		// nodes, moved off the failed one where room is.
		first := time.Time{}
		for _, w := range sim.windows {
			if first.IsZero() || w.Start.Before(first) {
				first = w.Start
			}
		}
		if d := first.Sub(e.clock.Now()); d > 0 {
			e.clock.Advance(d)
		}
		// A few whole nodes booked from the next minute, without faults: some
		// land on the node that failed (its sweep has not seen it yet), and
		// bind through their nodes or move.
		for i := range 6 {
			s := e.clock.Now().Add(time.Minute)
			r, err := e.svc.Admission().Create(ctx, capacity.CreateRequest{TenantID: "acme", PoolID: "sim", Resource: "gpu", Count: 8,
				Start: &s, End: s.Add(time.Hour), ClientToken: fmt.Sprintf("late-%d", i), Principal: "alice"}, allow)
			if err == nil {
				sim.windows = append(sim.windows, r.Window)
				if sim.fleet.late < 0 {
					// This one's node goes silent now: unreachable at its window's start.
					sim.fleet.late = r.Placement()[0].Node
				}
			}
		}
		settle("once windows started")
		sim.checkNow("once windows started")
		sim.fleet.check(ctx, "once windows started", false)
	}
	last := time.Time{}
	for _, w := range sim.windows {
		last = maxT(last, w.End)
	}
	e.clock.Advance(last.Sub(e.clock.Now()) + time.Minute)
	settle("after every window")
	sim.checkNow("after every window")
	if sim.fleet != nil {
		sim.fleet.check(ctx, "after every window", true)
	}
	snap, err := e.store.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range snap.Quotas {
		if q.Used != 0 || len(q.Charging) != 0 || len(q.Crediting) != 0 {
			t.Errorf("seed %d: every window ended, quota row %s still holds %+v", sim.seed, q.Key(), q)
		}
	}
	for _, nh := range snap.NodeHours {
		if len(nh.Entries) != 0 {
			t.Errorf("seed %d: every window ended, %s/%s node %d hour %s still holds %v", sim.seed, nh.Pool, nh.Resource, nh.Node, nh.Hour, nh.Entries)
		}
	}
}

// checkMaps: every node-hour a create put as missing, in an hour not
// provisioned, is named by the hour's occupancy map — unless a fault left
// the create unsure whether its put (or the map's write) happened, or the
// create died before writing the map: a node-hour stored and not named is
// offered as vacant, and the create that finds it so repairs the map.
// (That the map names only stored node-hours is capacity.Check's.)
func (sim *simulation) checkMaps(when string) {
	snap, err := sim.e.store.Snapshot(context.Background())
	if err != nil {
		sim.t.Fatal(err)
	}
	type hourKey struct {
		res  string
		hour capacity.Hour
	}
	maps := map[hourKey]capacity.HourMap{}
	for _, m := range snap.Maps {
		maps[hourKey{m.Resource, m.Hour}] = m
	}
	stored := map[simMapKey]bool{}
	for _, nh := range snap.NodeHours {
		stored[simMapKey{nh.Resource, nh.Node, nh.Hour}] = true
	}
	named := 0
	for k, a := range sim.mapPuts {
		if sim.mapExempt[k] || (a != nil && a.dead) || !stored[k] {
			continue
		}
		m := maps[hourKey{k.res, k.hour}]
		if m.Provisioned {
			continue
		}
		if !m.Stored(k.node) {
			by := "the test"
			if a != nil {
				by = fmt.Sprintf("actor %d (%s)", a.id, a.name)
			}
			sim.t.Errorf("seed %d: %s: %s node %d hour %s was put by %s and its hour's occupancy map does not name it", sim.seed, when, k.res, k.node, k.hour, by)
		}
		named++
	}
	sim.mapsChecked = named
}

// checkNow runs the invariant checker, no over-admission, and what the
// actors were answered against what is stored.
func (sim *simulation) checkNow(when string) {
	t := sim.t
	vs, err := capacity.Check(context.Background(), sim.e.store)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("seed %d: %s: invariant: %s", sim.seed, when, v)
	}
	snap, err := sim.e.store.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	held := map[capacity.QuotaKey]int64{}
	for _, r := range snap.Reservations {
		if r.State.Holding() {
			held[r.Quota()] += int64(r.Count)
		}
		if sim.placed[r.ReservationID] && !r.WasPlaced() {
			t.Errorf("seed %d: %s: %s answered placed, stored %s without having been placed", sim.seed, when, r.ReservationID, r.State)
		}
		if sim.released[r.ReservationID] && !r.State.Terminal() {
			t.Errorf("seed %d: %s: %s answered released, stored %s", sim.seed, when, r.ReservationID, r.State)
		}
	}
	for _, q := range snap.Quotas {
		if held[q.Key()] > q.Max {
			t.Errorf("seed %d: %s: %s holds %d of a max of %d", sim.seed, when, q.Key(), held[q.Key()], q.Max)
		}
	}
}

// trace is the last n steps of the run.
func (sim *simulation) trace(n int) string {
	steps := sim.steps[max(0, len(sim.steps)-n):]
	return strings.Join(steps, "\n")
}

// simStore is the store every actor's service goes through: each call is a
// point the scheduler interleaves at, and may fail or crash there.
type simStore struct {
	inner *capacitydb.Store
	sim   *simulation
}

var (
	_ capacity.Store     = (*simStore)(nil)
	_ reconcile.DueStore = (*simStore)(nil)
)

// simCall runs fn at a scheduling point as the decision says.
func simCall[T any](w *simStore, ctx context.Context, op string, fn func() (T, error)) (T, error) {
	var zero T
	switch d := w.sim.yield(ctx, op); d {
	case crashBefore:
		return zero, errCrashed
	case failBefore:
		return zero, errInjected
	case crashAfter, failAfter:
		_, _ = fn()
		if d == crashAfter {
			return zero, errCrashed
		}
		return zero, errInjected
	}
	return fn()
}

func simDo(w *simStore, ctx context.Context, op string, fn func() error) error {
	_, err := simCall(w, ctx, op, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

func (w *simStore) ClaimPool(ctx context.Context, p capacity.Pool, due time.Time) (capacity.Pool, error) {
	return simCall(w, ctx, "ClaimPool", func() (capacity.Pool, error) { return w.inner.ClaimPool(ctx, p, due) })
}
func (w *simStore) GetPool(ctx context.Context, id string) (capacity.Pool, error) {
	return simCall(w, ctx, "GetPool", func() (capacity.Pool, error) { return w.inner.GetPool(ctx, id) })
}
func (w *simStore) EnsureQuota(ctx context.Context, k capacity.QuotaKey, max int64, now time.Time) error {
	return simDo(w, ctx, "EnsureQuota", func() error { return w.inner.EnsureQuota(ctx, k, max, now) })
}
func (w *simStore) ShowPool(ctx context.Context, tenant string, p capacity.Pool) error {
	return simDo(w, ctx, "ShowPool", func() error { return w.inner.ShowPool(ctx, tenant, p) })
}
func (w *simStore) PoolDue(ctx context.Context, id string, next time.Time, h capacity.Hour) error {
	return simDo(w, ctx, "PoolDue", func() error { return w.inner.PoolDue(ctx, id, next, h) })
}
func (w *simStore) VisiblePool(ctx context.Context, tenant, id string) (capacity.Pool, error) {
	return simCall(w, ctx, "VisiblePool", func() (capacity.Pool, error) { return w.inner.VisiblePool(ctx, tenant, id) })
}
func (w *simStore) ListPools(ctx context.Context, tenant string, page paging.Page) ([]capacity.Pool, map[string]string, error) {
	return w.inner.ListPools(ctx, tenant, page)
}
func (w *simStore) SetQuotaMax(ctx context.Context, k capacity.QuotaKey, max int64, now time.Time) (api.Quota, error) {
	return simCall(w, ctx, "SetQuotaMax", func() (api.Quota, error) { return w.inner.SetQuotaMax(ctx, k, max, now) })
}
func (w *simStore) GetQuota(ctx context.Context, k capacity.QuotaKey) (api.Quota, error) {
	return simCall(w, ctx, "GetQuota", func() (api.Quota, error) { return w.inner.GetQuota(ctx, k) })
}
func (w *simStore) ListQuotas(ctx context.Context, tenant, pool string, page paging.Page) ([]api.Quota, map[string]string, error) {
	return w.inner.ListQuotas(ctx, tenant, pool, page)
}
func (w *simStore) Charge(ctx context.Context, k capacity.QuotaKey, id string, n int, p capacity.Placement, settle []string, due time.Time) (capacity.Charged, error) {
	return simCall(w, ctx, "Charge "+id, func() (capacity.Charged, error) { return w.inner.Charge(ctx, k, id, n, p, settle, due) })
}
func (w *simStore) Replace(ctx context.Context, k capacity.QuotaKey, id string, p capacity.Placement) error {
	return simDo(w, ctx, "Replace "+id, func() error { return w.inner.Replace(ctx, k, id, p) })
}
func (w *simStore) Settle(ctx context.Context, k capacity.QuotaKey, ids []string) error {
	return simDo(w, ctx, "Settle", func() error { return w.inner.Settle(ctx, k, ids) })
}
func (w *simStore) Pending(ctx context.Context, k capacity.QuotaKey, id string) (capacity.Charged, bool, error) {
	type pending struct {
		c  capacity.Charged
		ok bool
	}
	p, err := simCall(w, ctx, "Pending "+id, func() (pending, error) {
		c, ok, err := w.inner.Pending(ctx, k, id)
		return pending{c, ok}, err
	})
	return p.c, p.ok, err
}
func (w *simStore) Void(ctx context.Context, k capacity.QuotaKey, id string, n int) error {
	return simDo(w, ctx, "Void "+id, func() error { return w.inner.Void(ctx, k, id, n) })
}
func (w *simStore) Refund(ctx context.Context, k capacity.QuotaKey, id string, n int) error {
	return simDo(w, ctx, "Refund "+id, func() error { return w.inner.Refund(ctx, k, id, n) })
}
func (w *simStore) Credit(ctx context.Context, k capacity.QuotaKey, id string, n int) error {
	return simDo(w, ctx, "Credit "+id, func() error { return w.inner.Credit(ctx, k, id, n) })
}
func (w *simStore) CreditDone(ctx context.Context, k capacity.QuotaKey, id string) error {
	return simDo(w, ctx, "CreditDone "+id, func() error { return w.inner.CreditDone(ctx, k, id) })
}
func (w *simStore) Row(ctx context.Context, k capacity.QuotaKey) (capacity.QuotaRow, bool, error) {
	type row struct {
		r  capacity.QuotaRow
		ok bool
	}
	r, err := simCall(w, ctx, "Row", func() (row, error) {
		q, ok, err := w.inner.Row(ctx, k)
		return row{q, ok}, err
	})
	return r.r, r.ok, err
}
func (w *simStore) QuotaDue(ctx context.Context, k capacity.QuotaKey, next time.Time, clear bool) error {
	return simDo(w, ctx, "QuotaDue", func() error { return w.inner.QuotaDue(ctx, k, next, clear) })
}
func (w *simStore) Candidates(ctx context.Context, t capacity.PoolResource, h capacity.Hour, min, limit int, from uint32) ([]capacity.NodeHour, capacity.Scan, error) {
	type out struct {
		nhs  []capacity.NodeHour
		scan capacity.Scan
	}
	o, err := simCall(w, ctx, "Candidates", func() (out, error) {
		nhs, scan, err := w.inner.Candidates(ctx, t, h, min, limit, from)
		return out{nhs, scan}, err
	})
	return o.nhs, o.scan, err
}
func (w *simStore) Coverable(ctx context.Context, t capacity.PoolResource, h capacity.Hour, min, limit int) ([]capacity.NodeCount, capacity.Scan, error) {
	type out struct {
		ns   []capacity.NodeCount
		scan capacity.Scan
	}
	o, err := simCall(w, ctx, "Coverable", func() (out, error) {
		ns, scan, err := w.inner.Coverable(ctx, t, h, min, limit)
		return out{ns, scan}, err
	})
	return o.ns, o.scan, err
}
func (w *simStore) NodeHours(ctx context.Context, t capacity.PoolResource, keys []capacity.NodeHourKey) (map[capacity.NodeHourKey]capacity.NodeHour, error) {
	return simCall(w, ctx, "NodeHours", func() (map[capacity.NodeHourKey]capacity.NodeHour, error) { return w.inner.NodeHours(ctx, t, keys) })
}
func (w *simStore) Hour(ctx context.Context, t capacity.PoolResource, h capacity.Hour, fn func(capacity.NodeHour) error) error {
	return simDo(w, ctx, "Hour", func() error { return w.inner.Hour(ctx, t, h, fn) })
}
func (w *simStore) NodeRange(ctx context.Context, t capacity.PoolResource, h capacity.Hour, first, last int, fn func(capacity.NodeHour) error) error {
	return simDo(w, ctx, "NodeRange", func() error { return w.inner.NodeRange(ctx, t, h, first, last, fn) })
}
func (w *simStore) Occupancy(ctx context.Context, t capacity.PoolResource, hours []capacity.Hour) (map[capacity.Hour]capacity.Occupancy, error) {
	return simCall(w, ctx, "Occupancy", func() (map[capacity.Hour]capacity.Occupancy, error) { return w.inner.Occupancy(ctx, t, hours) })
}
func (w *simStore) Occupy(ctx context.Context, t capacity.PoolResource, h capacity.Hour, nodes []int) error {
	err := simDo(w, ctx, fmt.Sprintf("Occupy hour %s nodes %v", h, nodes), func() error { return w.inner.Occupy(ctx, t, h, nodes) })
	if errors.Is(err, errInjected) || errors.Is(err, errCrashed) {
		for _, n := range nodes {
			w.sim.mapExempt[simMapKey{t.Resource, n, h}] = true
		}
	}
	return err
}
func (w *simStore) Provision(ctx context.Context, t capacity.PoolResource, h capacity.Hour) (bool, error) {
	return simCall(w, ctx, "Provision", func() (bool, error) { return w.inner.Provision(ctx, t, h) })
}
func (w *simStore) Allocate(ctx context.Context, nh capacity.NodeHour, id string, e capacity.Entry) error {
	err := simDo(w, ctx, fmt.Sprintf("Allocate %s node %d hour %s", id, nh.Node, nh.Hour), func() error { return w.inner.Allocate(ctx, nh, id, e) })
	if !nh.Stored {
		k := simMapKey{nh.Resource, nh.Node, nh.Hour}
		a, _ := ctx.Value(actorKey{}).(*actor)
		w.sim.mapPuts[k] = a
		if errors.Is(err, errInjected) || errors.Is(err, errCrashed) {
			w.sim.mapExempt[k] = true
		}
	}
	return err
}
func (w *simStore) Free(ctx context.Context, t capacity.PoolResource, keys []capacity.NodeHourKey, id string) error {
	return simDo(w, ctx, fmt.Sprintf("Free %s (%d node-hours)", id, len(keys)), func() error { return w.inner.Free(ctx, t, keys, id) })
}
func (w *simStore) PutDraft(ctx context.Context, r capacity.Reservation) (capacity.Reservation, error) {
	return simCall(w, ctx, "PutDraft "+r.ReservationID, func() (capacity.Reservation, error) { return w.inner.PutDraft(ctx, r) })
}
func (w *simStore) GetReservation(ctx context.Context, tenant, id string) (capacity.Reservation, error) {
	return simCall(w, ctx, "GetReservation "+id, func() (capacity.Reservation, error) { return w.inner.GetReservation(ctx, tenant, id) })
}
func (w *simStore) Reservations(ctx context.Context, tenant string, ids []string) (map[string]capacity.Reservation, error) {
	return simCall(w, ctx, "Reservations", func() (map[string]capacity.Reservation, error) { return w.inner.Reservations(ctx, tenant, ids) })
}
func (w *simStore) Transition(ctx context.Context, to capacity.Reservation, from api.ReservationState) (capacity.Reservation, error) {
	return simCall(w, ctx, fmt.Sprintf("Transition %s %s→%s", to.ReservationID, from, to.State), func() (capacity.Reservation, error) {
		return w.inner.Transition(ctx, to, from)
	})
}
func (w *simStore) Amend(ctx context.Context, r, to capacity.Reservation) (capacity.Reservation, error) {
	return simCall(w, ctx, "Amend "+r.ReservationID, func() (capacity.Reservation, error) { return w.inner.Amend(ctx, r, to) })
}
func (w *simStore) Flag(ctx context.Context, t capacity.PoolResource, node int, h capacity.Hour, off bool, gen int64) error {
	return simDo(w, ctx, "Flag", func() error { return w.inner.Flag(ctx, t, node, h, off, gen) })
}
func (w *simStore) SetPlan(ctx context.Context, r capacity.Reservation, p capacity.Placement, ns int) error {
	return simDo(w, ctx, "SetPlan "+r.ReservationID, func() error { return w.inner.SetPlan(ctx, r, p, ns) })
}
func (w *simStore) TakeOver(ctx context.Context, r capacity.Reservation, old, lease time.Time) error {
	return simDo(w, ctx, "TakeOver "+r.ReservationID, func() error { return w.inner.TakeOver(ctx, r, old, lease) })
}
func (w *simStore) MarkCredited(ctx context.Context, r capacity.Reservation) error {
	return simDo(w, ctx, "MarkCredited "+r.ReservationID, func() error { return w.inner.MarkCredited(ctx, r) })
}
func (w *simStore) SetUnscrubbed(ctx context.Context, r capacity.Reservation, nodes []int) error {
	return simDo(w, ctx, "SetUnscrubbed "+r.ReservationID, func() error { return w.inner.SetUnscrubbed(ctx, r, nodes) })
}
func (w *simStore) ClaimDue(ctx context.Context, r capacity.Reservation, until time.Time) (capacity.Reservation, error) {
	return simCall(w, ctx, "ClaimDue "+r.ReservationID, func() (capacity.Reservation, error) { return w.inner.ClaimDue(ctx, r, until) })
}
func (w *simStore) ClearDue(ctx context.Context, r capacity.Reservation) error {
	return simDo(w, ctx, "ClearDue "+r.ReservationID, func() error { return w.inner.ClearDue(ctx, r) })
}
func (w *simStore) ListReservations(ctx context.Context, tenant string, f capacity.ListFilter, page paging.Page) ([]capacity.Reservation, map[string]string, error) {
	return w.inner.ListReservations(ctx, tenant, f, page)
}
func (w *simStore) Shards() int       { return w.due().Shards() }
func (w *simStore) due() *duedb.Store { return &duedb.Store{DB: w.inner.DB, Table: w.inner.Table} }
func (w *simStore) Due(ctx context.Context, shard int, now time.Time, fn func(reconcile.DueItem) bool) error {
	return simDo(w, ctx, fmt.Sprintf("Due shard %d", shard), func() error { return w.due().Due(ctx, shard, now, fn) })
}
