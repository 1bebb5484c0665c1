package fleetsim

import (
	"testing"
	"time"
)

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
