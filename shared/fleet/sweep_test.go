package fleet_test

import (
	"context"
	"testing"

	"github.com/bettercompute/control-plane/shared/fleet"
)

// A sweep writes at most SweepFlagBudget node-hour flags: a pool whose
// nodes all changed at once (here six registered nodes becoming ready,
// each lifting ~74 hours of flags) is synced a node or so per sweep, each
// sweep due again a second later, until every node is; with the default
// budget, in one pass.
func TestSweepFlagBudget(t *testing.T) {
	lifted := func(e *env) int {
		n := 0
		for k := range 6 {
			r, err := e.nodes.GetNode(context.Background(), "p1", "gpu", k)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Flagged {
				n++
			}
		}
		return n
	}
	setup := func() *env {
		e := newEnv(t)
		e.pool(t, "p1", 48)
		for k := range 6 {
			e.register(t, "p1", nodeName(k))
			e.ready(t, "p1", nodeName(k))
		}
		return e
	}

	e := setup()
	e.pass(t)
	if n := lifted(e); n != 6 {
		t.Fatalf("default budget: %d of 6 nodes lifted in one pass", n)
	}

	defer func(b int) { fleet.SweepFlagBudget = b }(fleet.SweepFlagBudget)
	fleet.SweepFlagBudget = envHours + fleet.FlagMarginHours + 2 // one node's hours a sweep, not two
	e = setup()
	e.pass(t)
	if n := lifted(e); n != 1 {
		t.Fatalf("budget %d: %d nodes lifted by the first sweep, want 1", fleet.SweepFlagBudget, n)
	}
	passes := 1
	for lifted(e) < 6 && passes < 20 {
		e.clock.Advance(fleet.SweepAgainAfter)
		for k := range 6 { // the nodes keep reporting
			e.ready(t, "p1", nodeName(k))
		}
		e.pass(t)
		passes++
	}
	if n := lifted(e); n != 6 || passes != 6 {
		t.Fatalf("budget %d: %d of 6 lifted after %d passes, want 6 after 6", fleet.SweepFlagBudget, n, passes)
	}
	e.check(t)
}
