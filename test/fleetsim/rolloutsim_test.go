package fleetsim

import (
	"testing"
	"time"
)

// The rollout simulation in make test: 100 agents in 5 pools, 6 holding a
// whole-node reservation (2 of them past the drain wait), heartbeats at
// the app's 5-s interval with the agents' sleeps scaled by 0.1 (a beat
// about every half second, so a 20-batch rollout fits the test's budget). Run
// A must complete with every reserved node updated after its reservation
// or skipped busy; run B must abort within 2 passes of its third failure,
// give no node outside waves 1–3 its release, and roll every node it
// updated back; neither may ever have more nodes out of service than
// maxUnavailable (5).
func TestRolloutSimulation(t *testing.T) {
	res := RunRollout(t, RolloutConfig{Pools: 5, NodesPerPool: 20, Reserved: 6, ShortHold: 5 * time.Second, LongHold: 5 * time.Minute,
		Interval: 5 * time.Second, BeatScale: 0.1, Bake: 1, DrainWait: 6, MaxUnavailablePct: 10, FailPct: 30, Timeout: 3 * time.Minute, Idle: 3 * time.Second,
		ProvisionHours: 2, Seed: 1})
	t.Log(res)
	for _, v := range res.Violations {
		t.Errorf("violation: %s", v)
	}
	if res.A.Counts.Updated+res.A.Counts.Skipped != res.Agents || res.A.BusyUpdated+res.A.BusySkipped == 0 {
		t.Errorf("run A: counts %+v, %d busy updated, %d skipped", res.A.Counts, res.A.BusyUpdated, res.A.BusySkipped)
	}
	if res.B.RolledBack == 0 || res.B.Counts.Failed != 3 {
		t.Errorf("run B: %d rolled back, counts %+v", res.B.RolledBack, res.B.Counts)
	}
}

// BenchmarkRollout is the scenario at size: 1,000 agents in 20
// pools, 100 holding a whole-node reservation (a third of them past the
// 60-s drain wait), maxUnavailable 5 % (50), bake 5 s. The agents run in
// real time (BeatScale 1) at a 10-s idle heartbeat interval — not the
// 30-s default, to keep each wave's installs paced by heartbeats the test
// can afford, and not 5 s, which is 200 heartbeats a second on 2 cores.
// One run (b.N is ignored: the run is the measurement).
func BenchmarkRollout(b *testing.B) {
	var res RolloutResult
	for range b.N {
		res = RunRollout(b, RolloutConfig{Pools: 20, NodesPerPool: 50, Reserved: 100, ShortHold: 45 * time.Second, LongHold: 15 * time.Minute,
			Interval: 10 * time.Second, BeatScale: 1, Bake: 5, DrainWait: 60, FailPct: 30, Timeout: 20 * time.Minute, Idle: 20 * time.Second,
			ProvisionHours: 2, Seed: 1})
		break
	}
	b.Log(res)
	for _, v := range res.Violations {
		b.Errorf("violation: %s", v)
	}
	b.ReportMetric(float64(res.Agents), "agents")
	b.ReportMetric(float64(res.MaxUnavailable), "max-unavailable")
	b.ReportMetric(float64(max(res.A.PeakUnavailable, res.B.PeakUnavailable)), "peak-unavailable")
	b.ReportMetric(res.A.Seconds, "A-s")
	b.ReportMetric(res.A.UpdatedPerMin, "A-updated/min")
	b.ReportMetric(float64(res.B.ToAbortPasses), "B-abort-passes")
	b.ReportMetric(res.B.ToAbort.Seconds(), "B-abort-s")
	b.ReportMetric(float64(res.B.ToRolledBackPasses), "B-rolledback-passes")
	b.ReportMetric(res.B.ToRolledBack.Seconds(), "B-rolledback-s")
	b.ReportMetric(res.Beats["idle"].Calls, "idle-calls/hb")
	b.ReportMetric(res.Beats["A"].Calls, "A-calls/hb")
	b.ReportMetric(res.Beats["A"].RCU, "A-rcu/hb")
	b.ReportMetric(res.Beats["A"].WCU, "A-wcu/hb")
	b.ReportMetric(float64(len(res.Violations)), "violations")
}
