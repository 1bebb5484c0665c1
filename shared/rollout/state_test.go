package rollout

import (
	"errors"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// The state machine's edges are docs/rollouts.md's States, and nothing else.
func TestStateMachine(t *testing.T) {
	want := map[[2]api.RolloutState]bool{
		{api.Progressing, api.Paused}: true, {api.Progressing, api.Completed}: true, {api.Progressing, api.Aborting}: true,
		{api.Paused, api.Progressing}: true, {api.Paused, api.Aborting}: true,
		{api.Aborting, api.Aborted}: true, {api.Aborting, api.RolledBack}: true,
	}
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, from := range api.RolloutStates {
		for _, to := range api.RolloutStates {
			if got := from.CanMoveTo(to); got != want[[2]api.RolloutState{from, to}] {
				t.Errorf("%s → %s: CanMoveTo %v", from, to, got)
			}
			r := Record{Rollout: api.Rollout{State: from}}
			err := r.move(to, at, "why")
			if want[[2]api.RolloutState{from, to}] {
				if err != nil || r.State != to || len(r.History) != 1 || r.History[0].State != to || r.History[0].Reason != "why" {
					t.Errorf("%s → %s: err %v, state %s, history %+v", from, to, err, r.State, r.History)
				}
			} else if !errors.Is(err, ErrTransition) || r.State != from || len(r.History) != 0 {
				t.Errorf("%s → %s: err %v, state %s, history %d; want ErrTransition and no change", from, to, err, r.State, len(r.History))
			}
			if from.Terminal() && from.CanMoveTo(to) {
				t.Errorf("terminal %s moves to %s", from, to)
			}
		}
	}
	r := Record{Rollout: api.Rollout{State: api.Paused}}
	if err := r.abort(ReasonAbortedBy, at, "operator"); err != nil || r.State != api.Aborting || r.Reason != ReasonAbortedBy {
		t.Errorf("abort from paused: %v, %s, %q", err, r.State, r.Reason)
	}
}

// A change on a copy of a pass's record (decide's next) leaves the pass's
// own waves and timeline as they are until the write lands.
func TestMarkWaveCopies(t *testing.T) {
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	rec := Record{Rollout: api.Rollout{State: api.Progressing, Waves: make([]api.Wave, 2)}}
	for range MaxHistory {
		rec.add(api.Progressing, at, "x")
	}
	next := rec
	next.markWave(1, false, at)
	if rec.Waves[1].StartedAt != nil || rec.History[MaxHistory-1].Reason != "x" {
		t.Fatalf("the original changed: wave %+v, last event %+v", rec.Waves[1], rec.History[MaxHistory-1])
	}
	if next.Waves[1].StartedAt == nil || len(next.History) != MaxHistory || next.History[MaxHistory-1].Reason != "wave-2" {
		t.Fatalf("the copy: wave %+v, %d events, last %+v", next.Waves[1], len(next.History), next.History[MaxHistory-1])
	}
}
