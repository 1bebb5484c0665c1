package fleetsim

// The rollout simulation (the scenario): reference agents in pools
// heartbeat through the local gateway in real time (their sleeps scaled by
// RolloutConfig.BeatScale), the reconciler passes every second, some nodes
// hold reservations. Run A rolls a good release out in waves 1, 1 %, 10 %,
// 50 %, 100 % under maxUnavailable 5 % and maxFailedNodes 2; run B rolls
// out one that 30 % of wave 3's agents fail to start healthy, so it
// aborts and rolls back. After every pass the simulation samples every
// node record: how many are out of service, and which were ever given a
// target.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/dynamo/rolloutdb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/rollout"
	"github.com/bettercompute/control-plane/test/teststack"
)

// RolloutConfig is one rollout simulation's shape.
type RolloutConfig struct {
	Pools, NodesPerPool int
	Reserved            int           // nodes holding a whole-node reservation from run A's start
	ShortHold, LongHold time.Duration // every third reservation is long (it outlasts DrainWait: skipped busy); the rest short
	Interval            time.Duration // the app's idle heartbeat interval (≥ 5 s)
	BeatScale           float64       // agents sleep the answers' intervals × this (1: real time)
	Bake, DrainWait     int           // seconds
	MaxUnavailablePct   int           // maxUnavailable, in percent of the nodes (rounded up; 0: 5 %)
	FailPct             int           // of wave 3's nodes, failing run B's release (their starter says unhealthy)
	Timeout             time.Duration // per run
	Idle                time.Duration // the window of heartbeats and passes without a rollout, before run A
	ProvisionHours      int           // the app's hours provisioned ahead (0: its default); the first pass provisions them for every pool
	Seed                uint64
}

// RunStats is one rollout's outcome.
type RunStats struct {
	RolloutID       string
	State           api.RolloutState
	Reason          string
	Counts          api.Counts
	Waves           []int   // cumulative sizes
	Seconds         float64 // create → terminal
	UpdatedPerMin   float64 // nodes updated per minute, first wave's start → last wave's end (A)
	PeakUnavailable int
	Passes          int
	BusyUpdated     int // A: reserved nodes updated after their reservation ended
	BusySkipped     int // A: reserved nodes skipped (busy)
	// B: the pass that marked the threshold-crossing failure (the
	// (maxFailedNodes+1)-th) to aborting and to rolled_back, in passes and
	// seconds; and from that agent's failed start.
	Failing                           int
	ToAbortPasses, ToRolledBackPasses int
	ToAbort, ToRolledBack             time.Duration
	AgentToAbort                      time.Duration
	RolledBack                        int // updated nodes sent back, done
}

// PassGroup is the reconciler's passes of one phase.
type PassGroup struct {
	Label            string
	WaveSize, Active int // the current wave's cumulative size; most nodes out for the rollout at a pass's start
	Passes           int
	MeanMS, MaxMS    float64
	Calls, RCU, WCU  float64 // means per pass (every DynamoDB call of the pass, capacity and sweep included)
	MaxCalls         int
}

// BeatCost is heartbeats' cost in a window.
type BeatCost struct {
	Beats           int
	Calls, RCU, WCU float64 // per heartbeat
	P50             time.Duration
}

// RolloutResult is what a rollout simulation measured.
type RolloutResult struct {
	Agents, Pools, MaxUnavailable int
	A, B                          RunStats
	Groups                        []PassGroup
	Beats                         map[string]BeatCost // idle, A, B
	Violations                    []string
	Setup, Took                   time.Duration // start → fleet ready (before the idle window); start → end
}

func (r RolloutResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d agents in %d pools, maxUnavailable %d, in %s (setup %s); %d violations\n", r.Agents, r.Pools, r.MaxUnavailable,
		r.Took.Round(time.Second), r.Setup.Round(time.Second), len(r.Violations))
	fmt.Fprintf(&b, "A: %s (%s) in %.1f s, %d passes, waves %v, counts %+v, %.1f nodes updated/min, peak unavailable %d; reserved: %d updated after their reservation, %d skipped busy\n",
		r.A.State, r.A.Reason, r.A.Seconds, r.A.Passes, r.A.Waves, r.A.Counts, r.A.UpdatedPerMin, r.A.PeakUnavailable, r.A.BusyUpdated, r.A.BusySkipped)
	fmt.Fprintf(&b, "B: %s (%s) in %.1f s, %d passes, counts %+v, peak unavailable %d; %d failing in wave 3; threshold failure → aborting %d passes %.2f s (agent's failed start → aborting %.2f s), → rolled_back %d passes %.2f s; %d rolled back\n",
		r.B.State, r.B.Reason, r.B.Seconds, r.B.Passes, r.B.Counts, r.B.PeakUnavailable, r.B.Failing, r.B.ToAbortPasses, r.B.ToAbort.Seconds(), r.B.AgentToAbort.Seconds(),
		r.B.ToRolledBackPasses, r.B.ToRolledBack.Seconds(), r.B.RolledBack)
	for _, k := range []string{"idle", "A", "B"} {
		c := r.Beats[k]
		fmt.Fprintf(&b, "heartbeats %-4s: %d, %.2f calls %.2f RCU %.2f WCU per heartbeat, p50 %s\n", k, c.Beats, c.Calls, c.RCU, c.WCU, c.P50.Round(10*time.Microsecond))
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "passes %-22s wave size %4d, ≤%3d active: %3d passes, %.0f ms mean %.0f ms max, %.1f calls (max %d) %.1f RCU %.1f WCU per pass\n",
			g.Label, g.WaveSize, g.Active, g.Passes, g.MeanMS, g.MaxMS, g.Calls, g.MaxCalls, g.RCU, g.WCU)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "violation: %s\n", v)
	}
	return b.String()
}

// RunRollout runs runs A and B on one fleet and returns what they measured;
// tb fails on an error of the harness itself.
func RunRollout(tb testing.TB, cfg RolloutConfig) RolloutResult {
	tb.Helper()
	sim := newRolloutRun(tb, cfg)
	defer sim.stop()
	sim.startFleet()
	sim.startReconciler()
	defer func() {
		if sim.ctx.Err() == nil {
			sim.stopAll()
		}
	}()
	sim.awaitReady()
	sim.idle()
	sim.reserve()
	sim.runA()
	// The agents run on from run A into run B (the same processes): a
	// node run A updated to 2.0.0 must install 2.0.0 again when run B
	// rolls it back. (Before 1561ae1 the agent kept its mark "never try
	// again" on a release it had installed, and the rollback of every such
	// node failed at its deadline; this simulation restarted the agents
	// between the runs to get past it.)
	doneB, failing, failedAt := sim.runB()
	sim.stopAll() // every pass recorded (the last may have ended run B)
	sim.timeAbort(doneB, failing, failedAt)
	sim.finish()
	return sim.res
}

// rolloutRun is one rollout simulation in progress: what its steps share.
type rolloutRun struct {
	tb  testing.TB
	cfg RolloutConfig
	rng *rand.Rand // the seed's: the reservations' pools, run B's failing nodes
	h   *rig
	// ctx ends the agents and the reconciler (stopAll).
	ctx  context.Context
	stop context.CancelFunc
	res  RolloutResult // filled in step by step; violate adds to it

	began       time.Time
	nodes       []*simNode
	byRef       map[string]*simNode
	pools       []string
	rstore      *rolloutdb.Store
	fstore      *fleetdb.Store
	reconciling chan struct{} // closed when the reconciler's loop returns
	idleFrom    time.Time
	reserved    map[string]held // pool/node → its reservation
	aFrom, aTo  time.Time       // run A: create → terminal
	bFrom, bTo  time.Time       // run B: create → terminal

	// mu guards what the reconciler's loop writes and the runs read.
	mu       sync.Mutex
	passes   []passRec
	current  string                     // the rollout in progress
	targeted map[string]map[string]bool // node → target versions ever seen
}

// held is a whole-node reservation of run A's.
type held struct {
	end  time.Time
	long bool
	id   string
}

func newRolloutRun(tb testing.TB, cfg RolloutConfig) *rolloutRun {
	tb.Helper()
	began := time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 29))
	h := newRig(tb, cfg.Interval, teststack.WithConfig(func(c *app.Config) {
		if cfg.ProvisionHours > 0 {
			c.ProvisionHours = cfg.ProvisionHours
		}
	}))
	ctx, stop := context.WithCancel(context.Background())
	return &rolloutRun{tb: tb, cfg: cfg, rng: rng, h: h, ctx: ctx, stop: stop,
		res: RolloutResult{Pools: cfg.Pools, Beats: map[string]BeatCost{}}, began: began,
		byRef: map[string]*simNode{}, reserved: map[string]held{}, targeted: map[string]map[string]bool{}}
}

func (sim *rolloutRun) violate(f string, args ...any) {
	sim.res.Violations = append(sim.res.Violations, fmt.Sprintf(f, args...))
}

// startFleet registers the releases, the pools and their nodes (all
// running 1.0.0) and starts every node's agent.
func (sim *rolloutRun) startFleet() {
	sim.tb.Helper()
	tb, h, cfg := sim.tb, sim.h, sim.cfg
	h.register(tb, h.sign(tb, h.statement("1.0.0", 1)))
	h.register(tb, h.sign(tb, h.statement("2.0.0", 2)))
	h.register(tb, h.sign(tb, h.statement("3.0.0", 3)))
	v1 := &api.Version{Version: "1.0.0", Sequence: 1}
	for p := range cfg.Pools {
		pool := fmt.Sprintf("ro-%02d", p)
		sim.pools = append(sim.pools, pool)
		h.must(tb, "pools.create", map[string]any{"tenantId": "acme", "poolId": pool, "resources": map[string]any{"gpu": cfg.NodesPerPool * 8}}, nil)
		for _, n := range sim.registerNodes(pool, v1) {
			sim.nodes = append(sim.nodes, n)
			sim.byRef[n.ref()] = n
		}
	}
	sim.res.Agents = len(sim.nodes)
	for _, n := range sim.nodes {
		h.run(tb, sim.ctx, n, cfg.BeatScale)
	}
}

// registerNodes registers pool's nodes running v1, 8 at a time.
func (sim *rolloutRun) registerNodes(pool string, v1 *api.Version) []*simNode {
	sim.tb.Helper()
	cfg := sim.cfg
	made := make([]*simNode, cfg.NodesPerPool)
	errs := make([]error, cfg.NodesPerPool)
	dirs := make([]string, cfg.NodesPerPool)
	for k := range dirs {
		dirs[k] = sim.tb.TempDir()
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < cfg.NodesPerPool; k += 8 {
				made[k], errs[k] = sim.h.newNode(pool, capacity.NodeID("gpu", k), "", v1, nil, dirs[k])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		sim.tb.Fatal(err)
	}
	return made
}

// stopAll stops the reconciler and every agent, and waits for them.
func (sim *rolloutRun) stopAll() {
	sim.stop()
	for _, n := range sim.nodes {
		n.stop()
	}
	<-sim.reconciling
}

// awaitReady waits for every node to report ready with what it runs,
// then for two more passes (the flags lifted; the first pass provisioned
// the pools' hours).
func (sim *rolloutRun) awaitReady() {
	sim.tb.Helper()
	waitFor(sim.tb, 3*sim.cfg.Interval+10*time.Second, func() bool {
		ready := 0
		for _, pool := range sim.pools {
			_ = sim.fstore.PoolNodes(sim.ctx, pool, func(r fleet.Record) error {
				if r.State == api.Ready && r.Running != nil {
					ready++
				}
				return nil
			})
		}
		return ready == len(sim.nodes)
	})
	c0 := sim.passCount()
	waitFor(sim.tb, time.Minute, func() bool { return sim.passCount() >= c0+2 })
}

// idle is a quiet stretch: heartbeats and passes without a rollout.
func (sim *rolloutRun) idle() {
	sim.idleFrom = time.Now()
	sim.res.Setup = sim.idleFrom.Sub(sim.began)
	time.Sleep(sim.cfg.Idle) // pacing: the idle window, not synchronization
	pct := cmp.Or(sim.cfg.MaxUnavailablePct, 5)
	sim.res.MaxUnavailable = (len(sim.nodes)*pct + 99) / 100
}

// reserve creates the reservations: whole nodes, from now, on pools the
// seed picks.
func (sim *rolloutRun) reserve() {
	sim.tb.Helper()
	cfg := sim.cfg
	for i := range cfg.Reserved {
		hold, long := cfg.ShortHold, i%3 == 2
		if long {
			hold = cfg.LongHold
		}
		end := time.Now().Add(hold)
		var out struct{ Reservation capacity.Reservation }
		pool := sim.pools[sim.rng.IntN(len(sim.pools))]
		if err := sim.h.post(sim.ctx, "reservations.create", map[string]any{"tenantId": "acme", "poolId": pool, "resource": "gpu", "count": 8,
			"window": map[string]any{"end": end.UTC().Format(time.RFC3339Nano)}}, &out); err != nil {
			sim.tb.Fatalf("reservation %d: %v", i, err)
		}
		for _, nid := range out.Reservation.NodeIDs {
			sim.reserved[pool+"/"+nid] = held{out.Reservation.Window.End, long, out.Reservation.ReservationID}
		}
	}
}

// create creates the rollout of version to every pool and makes it the
// one the passes are labelled by.
func (sim *rolloutRun) create(version string) api.Rollout {
	sim.tb.Helper()
	var out struct{ Rollout api.Rollout }
	sim.h.must(sim.tb, "rollouts.create", map[string]any{"tenantId": platformTenant, "version": version, "pools": sim.pools,
		"waves":          []map[string]any{{"nodes": 1}, {"percent": 1}, {"percent": 10}, {"percent": 50}, {"percent": 100}},
		"maxUnavailable": sim.res.MaxUnavailable, "maxFailedNodes": 2, "bakeSeconds": sim.cfg.Bake, "progressDeadlineSeconds": 60,
		"drain": map[string]any{"waitSeconds": sim.cfg.DrainWait, "onTimeout": "skip"}}, &out)
	sim.mu.Lock()
	sim.current = out.Rollout.RolloutID
	sim.mu.Unlock()
	return out.Rollout
}

// await polls rollout id until its state is one want accepts.
func (sim *rolloutRun) await(id string, want func(api.RolloutState) bool) (api.Rollout, time.Time) {
	sim.tb.Helper()
	deadline := time.Now().Add(sim.cfg.Timeout)
	for {
		r, err := sim.h.getRollout(sim.ctx, id)
		if err == nil && want(r.State) {
			return r, time.Now()
		}
		if time.Now().After(deadline) {
			sim.tb.Fatalf("rollout %s after %s: %s (%s), counts %+v, history %+v", id, sim.cfg.Timeout, r.State, r.Reason, r.Counts, r.History)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// runA rolls out a good release: every node is updated, a reserved one
// after its reservation ended or skipped busy.
func (sim *rolloutRun) runA() {
	sim.tb.Helper()
	res := &sim.res
	sim.aFrom = time.Now()
	ra := sim.create("2.0.0")
	doneA, aTo := sim.await(ra.RolloutID, api.RolloutState.Terminal)
	sim.aTo = aTo
	res.A = stats(doneA, sim.aFrom, sim.aTo)
	first, last, peak := sim.window(sim.aFrom, sim.aTo)
	res.A.Passes, res.A.PeakUnavailable = last-first+1, peak
	if doneA.State != api.Completed {
		sim.violate("run A ended %s (%s), counts %+v", doneA.State, doneA.Reason, doneA.Counts)
	}
	if len(doneA.Waves) > 0 && doneA.Waves[0].StartedAt != nil && doneA.Waves[len(doneA.Waves)-1].FinishedAt != nil {
		span := doneA.Waves[len(doneA.Waves)-1].FinishedAt.Sub(*doneA.Waves[0].StartedAt)
		res.A.UpdatedPerMin = float64(doneA.Counts.Updated) / span.Minutes()
	}
	for _, p := range sim.h.rolloutNodes(sim.tb, ra.RolloutID) {
		k := p.PoolID + "/" + p.NodeID
		r, busy := sim.reserved[k]
		switch {
		case busy && p.Step == api.Updated && !p.UpdatedAt.Before(r.end):
			res.A.BusyUpdated++
		case busy && p.Step == api.Skipped && p.Reason == rollout.ReasonBusy:
			res.A.BusySkipped++
		case busy:
			sim.violate("run A: %s reserved until %s: %s (%s) at %s", k, r.end.Format(time.TimeOnly), p.Step, p.Reason, p.UpdatedAt.Format(time.TimeOnly))
		case p.Step != api.Updated:
			sim.violate("run A: %s not reserved: %s (%s)", k, p.Step, p.Reason)
		}
	}
	for _, r := range sim.reserved {
		if r.long {
			_ = sim.h.post(sim.ctx, "reservations.release", map[string]any{"tenantId": "acme", "reservationId": r.id}, nil)
		}
	}
}

// runB rolls out a release 30 % of wave 3's agents fail to start healthy:
// it must abort and roll back. It returns the rollout at its end, the
// failing nodes and the times their failures were marked, in order.
func (sim *rolloutRun) runB() (api.Rollout, map[string]bool, []time.Time) {
	sim.tb.Helper()
	res := &sim.res
	sim.bFrom = time.Now()
	rb := sim.create("3.0.0")
	failing, inWaves13 := sim.failWave3(rb)
	doneB, bTo := sim.await(rb.RolloutID, api.RolloutState.Terminal)
	sim.bTo = bTo
	res.B = stats(doneB, sim.bFrom, sim.bTo)
	res.B.Failing = len(failing)
	first, last, peak := sim.window(sim.bFrom, sim.bTo)
	res.B.Passes, res.B.PeakUnavailable = last-first+1, peak
	if doneB.State != api.RolledBack || doneB.Reason != rollout.ReasonFailures {
		sim.violate("run B ended %s (%s), counts %+v", doneB.State, doneB.Reason, doneB.Counts)
	}
	progB := sim.h.rolloutNodes(sim.tb, rb.RolloutID)
	failedAt := sim.checkProgressB(progB, failing)
	sim.checkNodesB(progB, inWaves13)
	return doneB, failing, failedAt
}

// failWave3 makes FailPct of rb's wave 3 (seed-picked) fail to start 3.0.0
// healthy; it returns those nodes and every node of waves 1–3.
func (sim *rolloutRun) failWave3(rb api.Rollout) (failing, inWaves13 map[string]bool) {
	sizes := make([]int, len(rb.Waves))
	for i, w := range rb.Waves {
		sizes[i] = w.Size
	}
	order := slices.Clone(sim.nodes)
	slices.SortFunc(order, func(a, b *simNode) int {
		return cmp.Compare(rollout.OrderKey(rb.RolloutID, a.pool, a.id), rollout.OrderKey(rb.RolloutID, b.pool, b.id))
	})
	wave3 := order[sizes[1]:sizes[2]]
	failing = map[string]bool{}
	n := (len(wave3)*sim.cfg.FailPct + 99) / 100 // res.B.Failing, once run B's stats are in
	for _, i := range sim.rng.Perm(len(wave3))[:n] {
		wave3[i].starter.failOn("3.0.0", "health probe: bcd 3.0.0 exited 1")
		failing[wave3[i].ref()] = true
	}
	inWaves13 = map[string]bool{}
	for _, n := range order[:sizes[2]] {
		inWaves13[n.ref()] = true
	}
	return failing, inWaves13
}

// checkProgressB checks run B's progress: only failing nodes failed, and
// every updated one rolled back. It returns when the failures were marked,
// in order.
func (sim *rolloutRun) checkProgressB(progB []api.NodeProgress, failing map[string]bool) []time.Time {
	res := &sim.res
	var failedAt []time.Time
	for _, p := range progB {
		k := p.PoolID + "/" + p.NodeID
		if p.Step == api.Failed {
			failedAt = append(failedAt, p.UpdatedAt)
			if !failing[k] {
				sim.violate("run B: %s failed (%s) without failing", k, p.Reason)
			}
		}
		if p.Step == api.Updated {
			if p.Rollback == rollout.RollbackDone {
				res.B.RolledBack++
			} else {
				sim.violate("run B: updated node %s: rollback %q", k, p.Rollback)
			}
		}
	}
	slices.SortFunc(failedAt, func(a, b time.Time) int { return a.Compare(b) })
	return failedAt
}

// checkNodesB checks the agents after run B: each runs what it ran when
// run B took it, and none outside waves 1–3 was given 3.0.0.
func (sim *rolloutRun) checkNodesB(progB []api.NodeProgress, inWaves13 map[string]bool) {
	prevB := map[string]*api.Version{}
	for _, p := range progB {
		prevB[p.PoolID+"/"+p.NodeID] = p.Previous
	}
	for _, n := range sim.nodes {
		// Every node runs what it ran when run B took it (2.0.0, or 1.0.0
		// when run A skipped it busy): updated ones rolled back, failed
		// ones fell back, the rest never moved.
		if got, want := n.agent.Running(), prevB[n.ref()]; got == nil || want == nil || *got != *want {
			sim.violate("after run B %s runs %+v, not %+v", n.ref(), got, want)
		}
		if !inWaves13[n.ref()] {
			sim.mu.Lock()
			told := sim.targeted[n.ref()]["3.0.0"]
			sim.mu.Unlock()
			for _, s := range n.starter.log() {
				told = told || s.version == "3.0.0"
			}
			if told {
				sim.violate("run B: %s (outside waves 1–3) was given 3.0.0", n.ref())
			}
		}
	}
}

// timeAbort measures run B from the threshold-crossing failure to aborting
// and to rolled_back, once every pass is recorded (after stopAll).
func (sim *rolloutRun) timeAbort(doneB api.Rollout, failing map[string]bool, failedAt []time.Time) {
	res := &sim.res
	at := func(state api.RolloutState) time.Time {
		for _, ev := range doneB.History {
			if ev.State == state {
				return ev.At
			}
		}
		return time.Time{}
	}
	if th := 2; len(failedAt) > th { // maxFailedNodes 2: the third failure crosses it
		t3, tAbort, tBack := failedAt[th], at(api.Aborting), at(api.RolledBack)
		// The same pass marks the failure and aborts: the event's time is
		// the pass's, truncated to the millisecond, the progress's is not.
		res.B.ToAbort, res.B.ToRolledBack = max(0, tAbort.Sub(t3)), tBack.Sub(t3)
		i3, iA, iB := passOf(sim.passes, t3, &sim.mu), passOf(sim.passes, tAbort, &sim.mu), passOf(sim.passes, tBack, &sim.mu)
		res.B.ToAbortPasses, res.B.ToRolledBackPasses = iA-i3, iB-i3
		if i3 < 0 || iA < 0 || iB < 0 || iA-i3 > 2 {
			sim.violate("run B: aborting %d passes (%s) after the third failure (passes %d, %d, %d)", iA-i3, res.B.ToAbort, i3, iA, iB)
		}
		var starts []time.Time
		for k := range failing {
			for _, s := range sim.byRef[k].starter.log() {
				if s.version == "3.0.0" && s.err != nil {
					starts = append(starts, s.at)
				}
			}
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		if len(starts) > th {
			res.B.AgentToAbort = tAbort.Sub(starts[th])
		}
	} else {
		sim.violate("run B: %d failures, want more than 2", len(failedAt))
	}
}

// finish checks the caps and sums the heartbeats and passes.
func (sim *rolloutRun) finish() {
	res := &sim.res
	for _, r := range []RunStats{res.A, res.B} {
		if r.PeakUnavailable > res.MaxUnavailable {
			sim.violate("rollout %s: %d nodes out of service at once, maxUnavailable %d", r.RolloutID, r.PeakUnavailable, res.MaxUnavailable)
		}
	}
	res.Beats["idle"] = beats(sim.h.logs, sim.idleFrom, sim.aFrom)
	res.Beats["A"] = beats(sim.h.logs, sim.aFrom, sim.aTo)
	res.Beats["B"] = beats(sim.h.logs, sim.bFrom, sim.bTo)
	res.Groups = groups(sim.passes, sim.aFrom)
	for _, p := range sim.passes {
		if p.errs > 0 {
			sim.violate("a pass at %s had %d errors", p.start.Format(time.TimeOnly), p.errs)
		}
	}
	res.Took = time.Since(sim.began)
}

func stats(r api.Rollout, from, to time.Time) RunStats {
	s := RunStats{RolloutID: r.RolloutID, State: r.State, Reason: r.Reason, Counts: r.Counts, Seconds: to.Sub(from).Seconds()}
	for _, w := range r.Waves {
		s.Waves = append(s.Waves, w.Size)
	}
	return s
}

// beats is the cost of the heartbeats the gateway logged in [from, to).
func beats(l *requestLog, from, to time.Time) BeatCost {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c BeatCost
	var lat []float64
	for _, line := range l.lines {
		if line.method != "nodes.heartbeat" || line.status != 200 || line.at.Before(from) || !line.at.Before(to) {
			continue
		}
		lat = append(lat, line.ms)
		c.Calls += float64(line.dynamoCalls)
		c.RCU += line.rcu
		c.WCU += line.wcu
	}
	c.Beats = len(lat)
	if c.Beats > 0 {
		n := float64(c.Beats)
		c.Calls, c.RCU, c.WCU = c.Calls/n, c.RCU/n, c.WCU/n
		sort.Float64s(lat)
		c.P50 = ms(lat[len(lat)/2])
	}
	return c
}
