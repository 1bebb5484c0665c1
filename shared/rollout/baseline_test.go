package rollout_test

import (
	"context"
	"testing"

	"github.com/bettercompute/control-plane/shared/fleet"
)

// A pool's baseline only ever moves to a higher sequence: a completed rollout whose finish lags a newer one's, or any
// equal or lower one, leaves it as it is, without an error.
func TestBaselineOnlyMovesUp(t *testing.T) {
	e := newFleetEnv(t)
	e.pool("a", 1, "", 0)
	ctx := context.Background()
	set := func(v string, seq int64) {
		t.Helper()
		if err := e.nodes.SetBaseline(ctx, "a", fleet.Target{Version: v, Sequence: seq, RolloutID: "R" + v}); err != nil {
			t.Fatalf("set %s: %v", v, err)
		}
	}
	want := func(v string) {
		t.Helper()
		b, err := e.nodes.Baseline(ctx, "a")
		if err != nil || b == nil || b.Version != v {
			t.Fatalf("baseline %+v (%v), want %s", b, err, v)
		}
	}
	set("3.0.0", 3)
	want("3.0.0")
	set("2.0.0", 2) // an older rollout's finish, late
	want("3.0.0")
	set("3.0.0-again", 3)
	want("3.0.0")
	set("4.0.0", 4)
	want("4.0.0")
	if err := e.nodes.SetBaseline(ctx, "unmanaged", fleet.Target{Version: "4.0.0", Sequence: 4}); err != nil {
		t.Errorf("a pool with no sweep item: %v", err)
	}
}
