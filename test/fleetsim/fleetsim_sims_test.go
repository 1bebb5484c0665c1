//go:build sims

package fleetsim

import (
	"testing"
	"time"
)

// The fleet simulation of make sims: what make test's TestFleetSimulation
// asserts, on the larger fleet it ran before make test's budget: 50 agents
// in 5 pools at the 5-s interval, 40 reservations over a minute and a half.
func TestFleetSimulationLarge(t *testing.T) {
	t.Parallel() // its own tables: the real-time waits of the package overlap
	checkFleet(t, Run(t, Config{Pools: 5, NodesPerPool: 10, Reservations: 40, Spread: 30 * time.Second, Lead: 12 * time.Second, Length: 20 * time.Second,
		Interval: 5 * time.Second, KillPct: 10, SickPct: 4, ProvisionHours: 2, Seed: 1}))
}
