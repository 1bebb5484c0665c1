package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// A good release over two pools in waves 1, 50 %, 100 % under
// maxUnavailable 2: completed, every node running it, never more than 2
// out of service, the version its pools' baseline, every cordon lifted.
func TestRolloutCompletes(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 6, "1.0.0", 1)
	e.pool("b", 4, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a", "b"},
		Waves: []rollout.WaveSpec{{Nodes: ptr(1)}, {Percent: ptr(50)}, {Percent: ptr(100)}}, MaxUnavailable: ptr(2)})
	if r.Counts.Nodes != 10 || len(r.Waves) != 3 || r.Waves[0].Size != 1 || r.Waves[1].Size != 5 || r.Waves[2].Size != 10 {
		t.Fatalf("created: %+v", r)
	}
	peak := 0
	done := e.until(r.RolloutID, rollout.Completed, 200, func() { peak = max(peak, e.unavailable("a", "b")) })
	if peak > 2 || peak == 0 {
		t.Errorf("%d nodes out of service at once, maxUnavailable 2", peak)
	}
	if done.Counts.Updated != 10 {
		t.Errorf("counts %+v", done.Counts)
	}
	for _, k := range e.order {
		if n := e.node[k]; n.running == nil || n.running.Version != "2.0.0" {
			t.Errorf("%s runs %+v", k, n.running)
		}
	}
	e.pass() // finish: baselines, claims
	for _, p := range []string{"a", "b"} {
		if b, err := e.nodes.Baseline(context.Background(), p); err != nil || b == nil || b.Version != "2.0.0" {
			t.Errorf("baseline of %s: %+v %v", p, b, err)
		}
	}
	if n := e.unavailable("a", "b"); n != 0 {
		t.Errorf("%d nodes out of service after the rollout", n)
	}
	// Outside rollouts no node is moved: a node told what it runs.
	e.beatAll()
	// Another rollout over the pools is possible now (the claims released).
	e.release("3.0.0", 3)
	e.create(rollout.CreateRequest{Version: "3.0.0", Pools: []string{"a"}, Waves: []rollout.WaveSpec{{Percent: ptr(100)}}})
	_ = fleet.Ready
	_ = time.Second
}
