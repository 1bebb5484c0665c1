//go:build sims

package fleetsim

import (
	"testing"
	"time"
)

// The rollout simulation of make sims (build tag sims: its 100 real
// agents and wall-clock passes took over three minutes of make test's
// budget, and its verdict depended on the machine's speed; make test
// covers the rollout protocol with the seeded simulations of
// shared/rollout and test/fleetproto): 100 agents in 5 pools, 6 holding a
// whole-node reservation (2 of them past the drain wait), heartbeats at
// the app's 5-s interval with the agents' sleeps scaled by 0.1 (a beat
// about every half second, so a 20-batch rollout fits the test's budget).
// Run A must complete with every reserved node updated after its
// reservation or skipped busy; run B must abort within 2 passes of its
// third failure, give no node outside waves 1–3 its release, and roll
// every node it updated back; neither may ever have more nodes out of
// service than maxUnavailable (10 %).
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
