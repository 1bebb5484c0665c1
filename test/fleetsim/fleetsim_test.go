package fleetsim

import (
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/devstack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// The fleet simulation in make test: 50 agents in 5 pools, 40
// reservations created over half a minute, each starting 6–18 s after its
// create, 10 % of the agents killed and 4 % reporting a missing device a
// third of the way in; once every reservation is active the tenant
// releases them all and the live agents unbind them. It must end with the
// invariant checker clean, every heartbeat one write and at most one read,
// and every reservation either bound through its nodes or moved off a dead
// one and bound there (a stuck reservation is one not active after 20
// passes and 20 heartbeat intervals from the last window's start: enough
// for a node's silence, a move and a bind, however slow the machine's
// passes; waiting for windows to end instead made a slow pass a stuck
// reservation). Two hours provisioned ahead, not 72: the windows lie
// within them, and the 72 hours' 3,600 node-hours and 76 flag writes per
// dead node made the passes, not the fleet, the test's time
// (BenchmarkFleet keeps the default, and its windows end on their own).
func TestFleetSimulation(t *testing.T) {
	t.Parallel() // its own tables: the real-time waits of the package overlap
	checkFleet(t, Run(t, Config{Pools: 5, NodesPerPool: 10, Reservations: 40, Spread: 30 * time.Second, Lead: 12 * time.Second, Length: 20 * time.Second,
		Interval: 5 * time.Second, KillPct: 10, SickPct: 4, ProvisionHours: 2, ReleaseWhenActive: true, Seed: 1}))
}

// checkFleet is what every fleet simulation asserts of its result.
func checkFleet(t *testing.T, res Result) {
	t.Helper()
	t.Log(res)
	for _, v := range res.Violations {
		t.Errorf("invariant: %s", v)
	}
	if res.Heartbeats < res.Agents {
		t.Errorf("%d heartbeats from %d agents", res.Heartbeats, res.Agents)
	}
	if res.CallsPerBeat > 2.05 || res.WCUPerB < 0.99 {
		// one conditional write, and a read of the node only when its key is
		// not cached (once per minute per node and function)
		t.Errorf("%.2f calls and %.2f write units per heartbeat", res.CallsPerBeat, res.WCUPerB)
	}
	if res.Created < res.Bound || res.Bound == 0 {
		t.Errorf("%d created, %d bound", res.Created, res.Bound)
	}
	if res.Stuck > 0 {
		t.Errorf("%d reservations never active", res.Stuck)
	}
}

// BenchmarkFleet is the fleet: 500 agents in 10 pools, 200
// reservations over three minutes, 5 % of the agents killed and 2 % with
// a missing device. One run (b.N is ignored: the run is the measurement).
func BenchmarkFleet(b *testing.B) {
	var res Result
	for range b.N {
		res = Run(b, Config{Pools: 10, NodesPerPool: 50, Reservations: 200, Spread: 3 * time.Minute, Lead: time.Minute, Length: time.Minute,
			Interval: 30 * time.Second, KillPct: 5, SickPct: 2, Seed: 1})
		break
	}
	b.Log(res)
	b.ReportMetric(float64(res.Agents), "agents")
	b.ReportMetric(float64(res.Heartbeats), "heartbeats")
	b.ReportMetric(float64(res.HeartbeatP50.Microseconds())/1000, "hb-p50-ms")
	b.ReportMetric(float64(res.HeartbeatP99.Microseconds())/1000, "hb-p99-ms")
	b.ReportMetric(res.CallsPerBeat, "ddb-calls/hb")
	b.ReportMetric(res.RCUPerBeat, "rcu/hb")
	b.ReportMetric(res.WCUPerB, "wcu/hb")
	b.ReportMetric(res.BindP50.Seconds(), "bind-p50-s")
	b.ReportMetric(res.BindP99.Seconds(), "bind-p99-s")
	b.ReportMetric(float64(res.Replaced), "replaced")
	b.ReportMetric(float64(res.Stuck), "stuck")
	b.ReportMetric(float64(len(res.Violations)), "violations")
}
