package rollout

import (
	"errors"
	"testing"
	"time"
)

// The state machine's edges are docs/rollouts.md's States, and nothing else.
func TestStateMachine(t *testing.T) {
	want := map[[2]State]bool{
		{Progressing, Paused}: true, {Progressing, Completed}: true, {Progressing, Aborting}: true,
		{Paused, Progressing}: true, {Paused, Aborting}: true,
		{Aborting, Aborted}: true, {Aborting, RolledBack}: true,
	}
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, from := range States {
		for _, to := range States {
			if got := from.CanMoveTo(to); got != want[[2]State{from, to}] {
				t.Errorf("%s → %s: CanMoveTo %v", from, to, got)
			}
			r := Record{Rollout: Rollout{State: from}}
			err := r.move(to, at, "why")
			if want[[2]State{from, to}] {
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
	r := Record{Rollout: Rollout{State: Paused}}
	if err := r.abort(ReasonAbortedBy, at, "operator"); err != nil || r.State != Aborting || r.Reason != ReasonAbortedBy {
		t.Errorf("abort from paused: %v, %s, %q", err, r.State, r.Reason)
	}
}

// A change on a copy of a pass's record (decide's next) leaves the pass's
// own waves and timeline as they are until the write lands.
func TestMarkWaveCopies(t *testing.T) {
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	rec := Record{Rollout: Rollout{State: Progressing, Waves: make([]Wave, 2)}}
	for range MaxHistory {
		rec.add(Progressing, at, "x")
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
