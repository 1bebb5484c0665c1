// Package fleetsim is the fleet simulation (docs/fleet.md, "The fleet
// simulation"): reference agents (shared/agent) heartbeat through the local
// gateway against dynalite in real time, with the reconciler passing every
// second, while reservations start and end on their nodes, some agents are
// killed and some report unhealthy devices. Run measures what an operator
// asks of it: heartbeat latency, calls and capacity units per heartbeat,
// how long binding takes from a window's start to active, how many
// reservations were moved off dead nodes and how many were stuck, and the
// invariant checker's verdict at the end. The test runs a small fleet in
// make test; the benchmark runs 500 agents in make bench.
package fleetsim

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/agent"
	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/test/teststack"
)

// Config is one simulation's shape.
type Config struct {
	Pools        int           // pools of NodesPerPool nodes of 8 devices
	NodesPerPool int           //
	Reservations int           // created over Spread, each starting Lead (±50 %) after its create and lasting Length (to twice that)
	Spread       time.Duration // how long creates go on
	Lead, Length time.Duration
	Interval     time.Duration // the idle heartbeat interval (nodes are unreachable after 3)
	KillPct      int           // agents killed (they stop) a third into the run
	SickPct      int           // agents that start reporting a missing device a third into the run
	// ProvisionHours is the app's provisioned horizon (0: its default, 72):
	// each pool's hours are provisioned by the first passes, and each node
	// that dies or falls sick flags that many hours (and 4 more).
	ProvisionHours int
	// ReleaseWhenActive: the tenant releases the reservations once each is
	// active (or its deadline passed) instead of waiting for their windows
	// to end, which then last an hour. A stuck reservation is then one not
	// active within the deadline, counted in passes and heartbeats rather
	// than in a window's seconds, so a busy machine makes the run slower,
	// never a reservation stuck.
	ReleaseWhenActive bool
	Seed              uint64
}

// Result is what a run measured.
type Result struct {
	Agents, Heartbeats                int
	HeartbeatP50, HeartbeatP99        time.Duration // server-side, as the gateway logged each
	CallsPerBeat, RCUPerBeat, WCUPerB float64
	Created, Bound                    int            // reservations placed; those that reached active
	BindP50, BindP99                  time.Duration  // window start → active
	BindPassesP50, BindPassesP99      float64        // the same in reconciler passes
	Replaced, Stuck                   int            // moved off a dead node; never active before their window ended (or the deadline, with ReleaseWhenActive)
	Refused                           map[string]int // creates not placed, by answer
	Violations                        []string
	Passes                            int
	Took                              time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("%d agents, %d heartbeats: p50 %s p99 %s, %.2f calls %.2f RCU %.2f WCU per heartbeat; "+
		"%d reservations (refused %v), %d bound: window start → active p50 %s (%.1f passes) p99 %s (%.1f passes); %d replaced, %d stuck; %d passes in %s; %d violations",
		r.Agents, r.Heartbeats, r.HeartbeatP50, r.HeartbeatP99, r.CallsPerBeat, r.RCUPerBeat, r.WCUPerB,
		r.Created, r.Refused, r.Bound, r.BindP50.Round(time.Millisecond), r.BindPassesP50, r.BindP99.Round(time.Millisecond), r.BindPassesP99,
		r.Replaced, r.Stuck, r.Passes, r.Took.Round(time.Second), len(r.Violations))
}

// requestLog collects the gateway's request lines: method, latency, cost.
type requestLog struct {
	mu    sync.Mutex
	lines []logLine
	// splitViews is each pool's NodesSplitView in its last sweep line.
	splitViews map[string]int64
}

type logLine struct {
	method        string
	status        int
	ms, rcu, wcu  float64
	dynamoCalls   int
	principalNode bool
	at            time.Time // when the gateway logged it (the rollout simulation's windows)
}

func (l *requestLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *requestLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *requestLog) WithGroup(string) slog.Handler            { return l }
func (l *requestLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "fleet pool" {
		var pool string
		var n int64
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case fleet.DimensionPool:
				pool = a.Value.String()
			case fleet.MetricNodesSplitView:
				n = a.Value.Int64()
			}
			return true
		})
		l.mu.Lock()
		if l.splitViews == nil {
			l.splitViews = map[string]int64{}
		}
		l.splitViews[pool] = n
		l.mu.Unlock()
		return nil
	}
	if r.Message != "request" {
		return nil
	}
	line := logLine{at: r.Time}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "method":
			line.method = a.Value.String()
		case "status":
			line.status = int(a.Value.Int64())
		case api.MetricLatency:
			line.ms = a.Value.Float64()
		case api.MetricDynamoCalls:
			line.dynamoCalls = int(a.Value.Int64())
		case api.MetricRCU:
			line.rcu = a.Value.Float64()
		case api.MetricWCU:
			line.wcu = a.Value.Float64()
		}
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

// Run runs one simulation and returns what it measured; tb fails on an
// error of the harness itself (not on what is measured).
func Run(tb testing.TB, cfg Config) Result {
	tb.Helper()
	sim := startFleet(tb, cfg)
	defer sim.stop()
	sim.register()
	sim.startReconciler()
	sim.startAgents()
	sim.awaitReady()
	sim.load()
	sim.settle()
	return sim.result()
}

// fleetRun is one fleet simulation in progress: what its steps share.
type fleetRun struct {
	tb    testing.TB
	cfg   Config
	rng   *rand.Rand // the seed's: the load's nodes, pools, counts and windows
	st    *teststack.Stack
	logs  *requestLog
	admin *client.Client
	// ctx ends the agents and the reconciler; settle replaces it with
	// context.Background for the reads after the fleet stopped.
	ctx  context.Context
	stop context.CancelFunc

	setup, begin time.Time // Run's start; the load's start, once the fleet is ready
	nodes        []*fleetNode
	agents       sync.WaitGroup
	reconciling  chan struct{} // closed when the reconciler's loop returns

	passMu sync.Mutex // guards passes while the reconciler runs
	passes int

	created []createdReservation
	refused map[string]int // creates not placed, by answer
}

// fleetNode is one registered node and its agent.
type fleetNode struct {
	pool, id string
	agent    *agent.Agent
	driver   *agent.RecordingDriver
	actx     context.Context // the agent's: done once the load killed it
	cancel   context.CancelFunc
}

// alive: the load did not kill the node's agent.
func (n *fleetNode) alive() bool { return n.actx.Err() == nil }

// createdReservation is a reservation the load placed.
type createdReservation struct {
	id, pool string
	window   api.Window
}

// startFleet starts the stack the fleet reports to.
func startFleet(tb testing.TB, cfg Config) *fleetRun {
	tb.Helper()
	setup := time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 17))
	policy, err := iam.ParsePolicy([]byte(`{"grants": [
	  {"principal": "admin", "permissions": ["*"], "scopes": ["*"]},
	  {"principal": "fleet-agent", "permissions": ["compute:nodes:report"], "scopes": ["node:*"]}]}`))
	if err != nil {
		tb.Fatal(err)
	}
	logs := &requestLog{}
	st := teststack.Start(tb, teststack.WithDecider(policy),
		teststack.WithConfig(func(c *app.Config) {
			c.HeartbeatInterval = cfg.Interval
			if cfg.ProvisionHours > 0 {
				c.ProvisionHours = cfg.ProvisionHours
			}
		}),
		teststack.WithAppOptions(app.WithLogger(slog.New(logs))))
	ctx, stop := context.WithCancel(context.Background())
	return &fleetRun{tb: tb, cfg: cfg, rng: rng, st: st, logs: logs, admin: client.New(st.URL, "dev:admin"),
		ctx: ctx, stop: stop, setup: setup, begin: setup, refused: map[string]int{}}
}

// post calls method as the admin; a non-200 answer is an error.
func (sim *fleetRun) post(method string, in, out any) error {
	return post(sim.ctx, sim.admin, method, in, out)
}

// register creates the pools and registers their nodes, each with an
// agent not yet running.
func (sim *fleetRun) register() {
	sim.tb.Helper()
	cfg := sim.cfg
	for p := range cfg.Pools {
		pool := fmt.Sprintf("sim-%02d", p)
		if err := sim.post("pools.create", map[string]any{"tenantId": "acme", "poolId": pool,
			"resources": map[string]any{"gpu": cfg.NodesPerPool * 8}}, nil); err != nil {
			sim.tb.Fatal(err)
		}
		for k := range cfg.NodesPerPool {
			key, _ := dsse.GenerateKey(dsse.AlgEd25519)
			pem, _ := dsse.MarshalPublicKeyPEM(key.Public())
			id := capacity.NodeID("gpu", k)
			if err := sim.post("nodes.register", map[string]any{"tenantId": "acme", "poolId": pool, "nodeId": id,
				"publicKey": string(pem), "platform": "linux/amd64"}, nil); err != nil {
				sim.tb.Fatal(err)
			}
			sim.nodes = append(sim.nodes, &fleetNode{pool: pool, id: id, driver: agent.NewRecordingDriver(8), agent: nil})
			n := sim.nodes[len(sim.nodes)-1]
			n.agent = newAgent(sim.tb, sim.st.URL, pool, id, key, n.driver)
		}
	}
}

// startReconciler passes every second (what the local gateway's timer
// does) until ctx ends.
func (sim *fleetRun) startReconciler() {
	sim.reconciling = make(chan struct{})
	go sim.reconcile(sim.ctx)
}

func (sim *fleetRun) reconcile(ctx context.Context) {
	defer close(sim.reconciling)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = sim.st.App.Reconcile(ctx)
			sim.passMu.Lock()
			sim.passes++
			sim.passMu.Unlock()
		}
	}
}

// startAgents runs every node's agent until ctx ends or the load kills it.
func (sim *fleetRun) startAgents() {
	for _, n := range sim.nodes {
		actx, cancel := context.WithCancel(sim.ctx)
		n.actx, n.cancel = actx, cancel
		sim.agents.Add(1)
		go func() { defer sim.agents.Done(); _ = n.agent.Run(actx) }()
	}
}

// awaitReady waits for a first round of heartbeats and a pass to make
// every node ready.
func (sim *fleetRun) awaitReady() {
	sim.tb.Helper()
	waitFor(sim.tb, 2*sim.cfg.Interval+5*time.Second, func() bool {
		var ready int
		for p := range sim.cfg.Pools {
			var out struct{ Nodes []json.RawMessage }
			if sim.post("nodes.list", map[string]any{"tenantId": "acme", "poolId": fmt.Sprintf("sim-%02d", p), "state": "ready", "limit": 1000}, &out) == nil {
				ready += len(out.Nodes)
			}
		}
		return ready == len(sim.nodes)
	})
	// One more pass after every node reported ready lifts their flags (the
	// first passes also provisioned the pools' hours ahead): the load
	// starts from a fleet that takes placements.
	if err := sim.st.App.Reconcile(sim.ctx); err != nil {
		sim.tb.Fatal(err)
	}
	sim.begin = time.Now()
}

// load creates the reservations spread over the run; a third in, it kills
// agents and makes devices go missing.
func (sim *fleetRun) load() {
	sim.tb.Helper()
	cfg := sim.cfg
	perm := sim.rng.Perm(len(sim.nodes))
	kills := len(sim.nodes) * cfg.KillPct / 100
	sick := len(sim.nodes) * cfg.SickPct / 100
	for i := range cfg.Reservations {
		at := sim.begin.Add(time.Duration(i) * cfg.Spread / time.Duration(cfg.Reservations))
		if d := time.Until(at); d > 0 {
			time.Sleep(d) // pacing the load in real time, not synchronization
		}
		if i == cfg.Reservations/3 {
			for _, j := range perm[:kills] {
				sim.nodes[j].cancel()
			}
			for _, j := range perm[kills : kills+sick] {
				sim.nodes[j].driver.SetVisible(7)
			}
		}
		sim.create(i)
	}
}

// create creates the load's i-th reservation on a pool the seed picks;
// it is placed, or its refusal counted.
func (sim *fleetRun) create(i int) {
	sim.tb.Helper()
	cfg, rng := sim.cfg, sim.rng
	pool := fmt.Sprintf("sim-%02d", rng.IntN(cfg.Pools))
	start := time.Now().Add(cfg.Lead/2 + time.Duration(rng.Int64N(int64(cfg.Lead))))
	count := []int{1, 2, 4, 8}[rng.IntN(4)]
	end := start.Add(cfg.Length + time.Duration(rng.Int64N(int64(cfg.Length))))
	if cfg.ReleaseWhenActive {
		end = start.Add(time.Hour)
	}
	var out struct{ Reservation capacity.Reservation }
	err := sim.post("reservations.create", map[string]any{"tenantId": "acme", "poolId": pool, "resource": "gpu", "count": count,
		"window": map[string]any{"start": start.UTC().Format(time.RFC3339Nano), "end": end.UTC().Format(time.RFC3339Nano)}}, &out)
	if err == nil {
		sim.created = append(sim.created, createdReservation{out.Reservation.ReservationID, pool, out.Reservation.Window})
	} else {
		sim.refused[firstCode(err.Error())]++
		if os.Getenv("BC_FLEETSIM_DEBUG") != "" {
			sim.tb.Logf("create %d on %s ×%d at %s: %v", i, pool, count, time.Since(sim.begin).Round(time.Second), err)
		}
	}
}

// settle lets every window end (or, with ReleaseWhenActive, releases
// every reservation once active and waits for the live agents to unbind
// them), then stops the fleet and settles.
func (sim *fleetRun) settle() {
	sim.tb.Helper()
	if sim.cfg.ReleaseWhenActive {
		sim.releaseWhenActive()
	} else {
		last := time.Time{}
		for _, m := range sim.created {
			if m.window.End.After(last) {
				last = m.window.End
			}
		}
		time.Sleep(time.Until(last) + 3*time.Second) // real time passes for the windows: pacing, not synchronization
	}
	sim.stop()
	sim.agents.Wait()
	<-sim.reconciling
	sim.ctx = context.Background()
	// Passes until the checker finds nothing (at least 3): on a busy
	// machine a flow cut at its deadline is the reconciler's to finish once
	// it is stale (capacity.StaleAfter), so quiescence may take that long;
	// a state no pass mends by then still fails the run.
	deadline := time.Now().Add(api.StaleAfter + time.Minute)
	for pass := 1; ; pass++ {
		if err := sim.st.App.Reconcile(context.Background()); err != nil {
			sim.tb.Fatal(err)
		}
		if pass < 3 {
			continue
		}
		vs, err := capacity.Check(context.Background(), sim.st.App.CapacityStore())
		if (err == nil && len(vs) == 0) || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Second) // the reconciler's period: pacing, not synchronization
	}
}

// releaseWhenActive waits until every reservation is active, for as many
// passes and heartbeats as binding, a node's silence and a move take
// (unreachable after 3 intervals, a move, a bind: 20 intervals and passes
// at least, more on a busy machine, whose passes are slower); then the
// tenant releases each one, and the live agents unbind what they held.
func (sim *fleetRun) releaseWhenActive() {
	sim.tb.Helper()
	enough := func(since time.Time, passes int) bool {
		sim.passMu.Lock()
		defer sim.passMu.Unlock()
		return sim.passes-passes >= 20 && time.Since(since) >= 20*sim.cfg.Interval
	}
	last := time.Time{}
	for _, m := range sim.created {
		if m.window.Start.After(last) {
			last = m.window.Start
		}
	}
	time.Sleep(time.Until(last)) // the last window's start: pacing, not synchronization
	sim.passMu.Lock()
	since, passes := time.Now(), sim.passes
	sim.passMu.Unlock()
	for !enough(since, passes) && !sim.allActive() {
		time.Sleep(time.Second) // the reconciler's period: polling a state, with a bound in passes
	}
	for _, m := range sim.created {
		if err := sim.post("reservations.release", map[string]any{"tenantId": "acme", "reservationId": m.id}, nil); err != nil {
			sim.tb.Fatal(err)
		}
	}
	waitFor(sim.tb, 3*sim.cfg.Interval, func() bool {
		for _, n := range sim.nodes {
			if sim.ctx.Err() == nil && n.alive() && len(n.driver.Held()) > 0 {
				return false
			}
		}
		return true
	})
}

// allActive: every reservation the load placed is active.
func (sim *fleetRun) allActive() bool {
	for _, m := range sim.created {
		var out struct{ Reservation capacity.Reservation }
		if err := sim.post("reservations.get", map[string]any{"tenantId": "acme", "reservationId": m.id}, &out); err != nil ||
			out.Reservation.State != api.Active {
			return false
		}
	}
	return true
}

// result is what the run measured, read once the fleet settled.
func (sim *fleetRun) result() Result {
	sim.tb.Helper()
	res := Result{Agents: len(sim.nodes), Created: len(sim.created), Passes: sim.passes, Refused: sim.refused}
	sim.heartbeats(&res)
	sim.binding(&res)
	vs, err := capacity.Check(context.Background(), sim.st.App.CapacityStore())
	if err != nil {
		sim.tb.Fatal(err)
	}
	for _, v := range vs {
		res.Violations = append(res.Violations, v.String())
	}
	res.Took = time.Since(sim.setup)
	return res
}

// heartbeats is the heartbeats' latency and cost from the gateway's log.
func (sim *fleetRun) heartbeats(res *Result) {
	var lat []float64
	var calls, rcu, wcu float64
	sim.logs.mu.Lock()
	for _, l := range sim.logs.lines {
		if l.method == "nodes.heartbeat" && l.status == 200 {
			lat = append(lat, l.ms)
			calls += float64(l.dynamoCalls)
			rcu += l.rcu
			wcu += l.wcu
		}
	}
	sim.logs.mu.Unlock()
	res.Heartbeats = len(lat)
	if len(lat) > 0 {
		sort.Float64s(lat)
		res.HeartbeatP50 = ms(lat[len(lat)/2])
		res.HeartbeatP99 = ms(lat[len(lat)*99/100])
		n := float64(len(lat))
		res.CallsPerBeat, res.RCUPerBeat, res.WCUPerB = calls/n, rcu/n, wcu/n
	}
}

// binding is how the reservations bound, from each one's history.
func (sim *fleetRun) binding(res *Result) {
	sim.tb.Helper()
	var bind []time.Duration
	for _, m := range sim.created {
		var out struct{ Reservation capacity.Reservation }
		if err := sim.post("reservations.get", map[string]any{"tenantId": "acme", "reservationId": m.id}, &out); err != nil {
			sim.tb.Fatal(err)
		}
		r := out.Reservation
		active := false
		for _, ev := range r.History {
			switch {
			case ev.State == api.Active:
				active = true
				bind = append(bind, ev.At.Sub(r.Window.Start))
			case ev.Reason == api.ReasonReplaced:
				res.Replaced++
			}
		}
		if !active {
			res.Stuck++
		}
	}
	res.Bound = len(bind)
	if len(bind) > 0 {
		slices.Sort(bind)
		res.BindP50, res.BindP99 = bind[len(bind)/2], bind[len(bind)*99/100]
		res.BindPassesP50, res.BindPassesP99 = res.BindP50.Seconds(), res.BindP99.Seconds()
	}
}

// firstCode is the API error code in an answer's body.
func firstCode(body string) string {
	for _, c := range []string{"QUOTA_EXCEEDED", "CAPACITY_EXHAUSTED", "UNAVAILABLE", "INVALID_INPUT", "INTERNAL"} {
		if strings.Contains(body, c) {
			return c
		}
	}
	return "other"
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func newAgent(tb testing.TB, url, pool, id string, key crypto.Signer, d *agent.RecordingDriver) *agent.Agent {
	tb.Helper()
	a, err := agent.New(agent.Config{Client: client.New(url, "dev:fleet-agent"), TenantID: "acme", PoolID: pool, NodeID: id,
		Key: key, Platform: "linux/amd64", Devices: 8, Driver: d, StateDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// waitFor polls cond until it holds. d is about how long that takes on an
// idle machine; the deadline is generous (ten times d, at least three
// minutes), so a loaded machine makes the test slower, never wrong.
func waitFor(tb testing.TB, d time.Duration, cond func() bool) {
	tb.Helper()
	start := time.Now()
	deadline := start.Add(max(10*d, 3*time.Minute))
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("fleet not ready after %s", time.Since(start).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// splitView is pool's NodesSplitView in its last sweep line (-1: none yet).
func (l *requestLog) splitView(pool string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, ok := l.splitViews[pool]; ok {
		return n
	}
	return -1
}
