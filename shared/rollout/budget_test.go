package rollout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// budgetEnv is a rollout of 2.0.0 onto 8 nodes of pool a in one wave,
// maxUnavailable 3, walked (its order known) and nothing started yet.
func budgetEnv(t *testing.T) (*fleetEnv, api.Rollout) {
	t.Helper()
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 8, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
		Waves: []api.WaveSpec{{Percent: ptr(100)}}, MaxUnavailable: ptr(3)})
	e.waitNodes(r.RolloutID, 8)
	if n := e.unavailable("a"); n > 0 {
		t.Fatalf("%d nodes out before any start", n)
	}
	return e, r
}

// lastPending are the last n pending nodes of the rollout's order: never
// among the nodes a pass starts first.
func (e *fleetEnv) lastPending(id string, n int) []*simNode {
	e.t.Helper()
	ns, _, err := e.rollouts.Nodes(context.Background(), id, api.Pending, 100, "")
	if err != nil || len(ns) < n {
		e.t.Fatalf("pending nodes %d (%v), want %d", len(ns), err, n)
	}
	var out []*simNode
	for _, np := range ns[len(ns)-n:] {
		out = append(out, e.node[np.PoolID+"/"+np.NodeID])
	}
	return out
}

// started counts the rollout's nodes no longer pending.
func (e *fleetEnv) started(id string) int {
	e.t.Helper()
	ns, _, err := e.rollouts.Nodes(context.Background(), id, api.Pending, 100, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return len(e.order) - len(ns)
}

// afterPass checks what the pass left: started nodes, and out of service.
func (e *fleetEnv) afterPass(id string, started, out int, want string) {
	e.t.Helper()
	if s, o := e.started(id), e.unavailable("a"); s != started || o != out {
		e.t.Errorf("after the pass: %d started, %d out of service; want %s", s, o, want)
	}
}

// completes runs the rollout to its end, each start checked, never more
// than max nodes out of service.
func (e *fleetEnv) completes(t *testing.T, id string, max int) {
	t.Helper()
	e.rc.Faults = e.startsChecked(t, max, nil)
	e.until(id, api.Completed, 200, func() {
		if n := e.unavailable("a"); n > max {
			t.Fatalf("%d out of service, maxUnavailable %d", n, max)
		}
	})
}

// startsChecked is a fault hook that checks each start (a node just left
// pending, not yet cordoned) against the cap — fewer than maxUnavailable
// other nodes out of service, as the node records say — and then runs
// more at the named point.
func (e *fleetEnv) startsChecked(t *testing.T, max int, more func(point string)) func(string) error {
	return func(point string) error {
		if point == rollout.FaultStarted {
			if n := e.unavailable("a"); n >= max {
				t.Errorf("a node started with %d others out of service, maxUnavailable %d", n, max)
			}
		}
		if more != nil {
			more(point)
		}
		return nil
	}
}

// The budget is what the nodes say at each start, not what they said when
// the step began: nodes that go out of service between the step's first
// read and a start — reporting unhealthy between two starts, cordoned by
// an operator once the pass recorded its intent — take the room of the
// nodes it would have started next. Each start is checked against the
// node records at its write.
func TestBudgetAtEachStart(t *testing.T) {
	cordon := func(e *fleetEnv, n *simNode, on bool) {
		var err error
		if on {
			_, err = e.fleet.Cordon(context.Background(), "acme", n.pool, n.id, "maintenance")
		} else {
			_, err = e.fleet.Uncordon(context.Background(), "acme", n.pool, n.id)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		at      string // the fault point after which the nodes go out (once)
		nodes   int    // how many: with the started ones, maxUnavailable
		out     func(e *fleetEnv, n *simNode, out bool)
		started int
	}{
		{"reports between two starts", rollout.FaultCordoned, 2, func(e *fleetEnv, n *simNode, out bool) {
			n.healthy = !out
			if out {
				e.beat(n) // out at once; back in service after its next report
			}
		}, 1},
		{"operator cordons after the intent", rollout.FaultIntent, 3, cordon, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, r := budgetEnv(t)
			nodes := e.lastPending(r.RolloutID, c.nodes)
			went := false
			e.rc.Faults = e.startsChecked(t, 3, func(point string) {
				if point == c.at && !went {
					went = true
					for _, n := range nodes {
						c.out(e, n, true)
					}
				}
			})
			e.pass()
			if !went {
				t.Fatalf("the pass never reached %s", c.at)
			}
			e.afterPass(r.RolloutID, c.started, 3, fmt.Sprintf("%d started, 3 out of service (%d taken out)", c.started, c.nodes))
			for _, n := range nodes {
				c.out(e, n, false)
			}
			e.completes(t, r.RolloutID, 3)
		})
	}
}

// Concurrent passes start nodes one at a time (the intent), and even a
// pass that outlived its intent — held past IntentStale between its first
// and second start, which no function's timeout allows — while another
// pass started nodes, a node reporting unhealthy between that pass's
// starts, goes on starting only what the nodes then leave room for: never
// more than maxUnavailable out, whichever pass starts.
func TestConcurrentPassesStartWithinTheBudget(t *testing.T) {
	e, r := budgetEnv(t)
	sick := e.lastPending(r.RolloutID, 1)[0]
	inner, sickened := false, false
	other := *e.rc
	other.Faults = e.startsChecked(t, 3, func(point string) {
		if point == rollout.FaultCordoned && !sickened { // the inner pass's first start is out
			sickened = true
			sick.healthy = false
			e.beat(sick)
		}
	})
	e.rc.Faults = e.startsChecked(t, 3, func(point string) {
		if point != rollout.FaultCordoned || inner {
			return
		}
		inner = true
		e.clock.Advance(rollout.IntentStale + time.Second)
		if err := other.Advance(context.Background(), r.RolloutID); err != nil {
			t.Error(err)
		}
	})
	e.pass()
	if !inner || !sickened {
		t.Fatalf("the inner pass ran %v, started a node %v", inner, sickened)
	}
	e.afterPass(r.RolloutID, 2, 3, "one started by each pass, and the unhealthy one out")
	sick.healthy = true
	e.completes(t, r.RolloutID, 3)
}

// A pass whose write clearing its intent loses to another writer (here a
// write of the rollout between its starts) reads the rollout again and
// clears it there: dropped, the intent held every pass's starts — and
// every pause — for IntentStale.
func TestLostIntentClearIsRetried(t *testing.T) {
	e, r := budgetEnv(t)
	ctx := context.Background()
	raced := false
	e.rc.Faults = e.startsChecked(t, 3, func(point string) {
		if point != rollout.FaultCordoned || raced {
			return
		}
		raced = true
		cur, err := e.rstore.GetRollout(ctx, r.RolloutID)
		if err == nil {
			_, err = e.rstore.UpdateRollout(ctx, cur) // another writer: the stored version moves
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	e.pass()
	if !raced {
		t.Fatal("the pass started no node")
	}
	rec, err := e.rstore.GetRollout(ctx, r.RolloutID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Intent != nil {
		t.Errorf("after the pass: its intent %+v is left on the rollout (its clear lost to another write)", *rec.Intent)
	}
	e.afterPass(r.RolloutID, 3, 3, "3 started, 3 out of service")
	e.completes(t, r.RolloutID, 3)
}
