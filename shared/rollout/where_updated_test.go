package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// The version becomes the baseline only of the pools in which at least
// one node was updated: a pool whose every node failed keeps its own.
func TestBaselineOnlyWhereUpdated(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 2, "1.0.0", 1)
	e.pool("b", 1, "1.0.0", 1)
	e.pass()
	e.node[e.order[2]].onTold = func(v string) (bool, string) { return v != "2.0.0", "does not start" }
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a", "b"}, Waves: []api.WaveSpec{{Percent: ptr(100)}},
		MaxFailedNodes: ptr(1), MaxUnavailable: ptr(3)})
	got := e.until(r.RolloutID, api.Completed, 100, nil)
	if got.Counts.Updated != 2 || got.Counts.Failed != 1 {
		t.Fatalf("counts %+v", got.Counts)
	}
	e.round(time.Second) // finish
	if rec, _ := e.rstore.GetRollout(context.Background(), r.RolloutID); !rec.Finished {
		t.Fatal("not finished")
	}
	if b, err := e.nodes.Baseline(context.Background(), "a"); err != nil || b == nil || b.Version != "2.0.0" {
		t.Errorf("pool a baseline %+v %v, want 2.0.0", b, err)
	}
	if b, err := e.nodes.Baseline(context.Background(), "b"); err != nil || b != nil {
		t.Errorf("pool b (its node failed) baseline %+v %v, want none", b, err)
	}
}
