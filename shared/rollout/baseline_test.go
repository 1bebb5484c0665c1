package rollout_test

import (
	"context"
	"testing"
	"time"

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

// A node that runs nothing is never told a baseline older than one stored
// before its report was accepted: a function that had just told another
// new node 1.0.0 tells this one, reporting 5 s after a rollout stored
// 2.0.0, 2.0.0 — not the 1.0.0 it would have kept for a minute, which the
// node would install and stay on (nodes move only in rollouts).
func TestNewNodeIsToldTheBaselineStoredBeforeItReported(t *testing.T) {
	e := newFleetEnv(t)
	ctx := context.Background()
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 2, "", 0) // two new hosts, running nothing; no baseline yet
	first, second := e.node[e.order[0]], e.node[e.order[1]]
	if first.running != nil || second.running != nil {
		t.Fatalf("told a release with no baseline: %+v, %+v", first.running, second.running)
	}
	set := func(v string, seq int64) {
		t.Helper()
		if err := e.nodes.SetBaseline(ctx, "a", fleet.Target{Version: v, Sequence: seq, RolloutID: "R" + v}); err != nil {
			t.Fatal(err)
		}
	}
	set("1.0.0", 1)
	e.clock.Advance(2 * time.Minute) // "no baseline", as the function last read it, is past
	e.beat(first)
	if first.running == nil || first.running.Version != "1.0.0" {
		t.Fatalf("the first new host runs %+v, want the baseline 1.0.0", first.running)
	}
	set("2.0.0", 2) // a rollout completed
	e.clock.Advance(5 * time.Second)
	e.beat(second)
	if second.running == nil || second.running.Version != "2.0.0" {
		t.Errorf("the second new host, reporting 5 s after 2.0.0 became the baseline, runs %+v (told %v)", second.running, versions(second.told))
	}
	e.beat(first) // runs 1.0.0: told what it runs, never moved outside a rollout
	if first.running.Version != "1.0.0" || len(first.told) != 1 {
		t.Errorf("the first new host runs %+v, told %v", first.running, versions(first.told))
	}
}

func versions(told []toldAt) []string {
	var out []string
	for _, t := range told {
		out = append(out, t.version)
	}
	return out
}
