package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// A node that ran nothing when the rollout took it, and took its pool's
// baseline before its wave, is sent back to that baseline by the
// rollback: its previous release is recorded when it starts.
func TestPreviousRecordedAtStart(t *testing.T) {
	e := newFleetEnv(t)
	ctx := context.Background()
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 2, "", 0) // running nothing
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
		Waves: []api.WaveSpec{{Nodes: ptr(1)}, {Percent: ptr(100)}}, BakeSeconds: ptr(3600)})
	e.waitNodes(r.RolloutID, 2) // enumerated while they ran nothing, none started yet
	if err := e.nodes.SetBaseline(ctx, "a", fleet.Target{Version: "1.0.0", Sequence: 1, RolloutID: "earlier"}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute) // past the heartbeat's baseline cache
	e.beatAll()
	for _, k := range e.order {
		if n := e.node[k]; n.running == nil || n.running.Version != "1.0.0" {
			t.Fatalf("%s runs %+v, want the baseline 1.0.0", k, n.running)
		}
	}
	for range 60 {
		if got := e.get(r.RolloutID); len(got.Waves) > 0 && got.Waves[0].FinishedAt != nil {
			break
		}
		e.round(time.Second)
	}
	if got := e.get(r.RolloutID); got.Counts.Updated != 1 {
		t.Fatalf("after wave 1: %+v", got.Counts)
	}
	if _, err := e.rollouts.Abort(ctx, r.RolloutID, "regression"); err != nil {
		t.Fatal(err)
	}
	e.until(r.RolloutID, api.RolledBack, 100, nil)
	for _, k := range e.order {
		if n := e.node[k]; n.running == nil || n.running.Version != "1.0.0" {
			t.Errorf("%s runs %+v after the rollback, want 1.0.0", k, n.running)
		}
	}
	ns, _, _ := e.rollouts.Nodes(ctx, r.RolloutID, api.Updated, 10, "")
	if len(ns) != 1 || ns[0].Rollback != rollout.RollbackDone || ns[0].Previous == nil || ns[0].Previous.Version != "1.0.0" {
		t.Errorf("updated nodes %+v, want one rolled back to 1.0.0", ns)
	}
}
