package registry

import (
	"context"
	"fmt"

	"github.com/bettercompute/control-plane/shared/apierr"
)

// Finish finishes what crashed registrations left (the reconciler, each
// pass): the release the channel head names is logged and recorded if its
// registration did not finish, the log's checkpoint is signed up to the
// log's size, and the releases of logged entries are recorded
// (finishLogged). It says whether it had anything to do.
func (s *Service) Finish(ctx context.Context) (bool, error) {
	if s.Log == nil {
		return false, nil
	}
	_, prev, err := s.headUnfinished(ctx)
	if err != nil {
		return false, err
	}
	if len(prev) > 0 && s.now().Sub(prev[0].PendingAt) < PendingStale {
		prev = nil // its registration may still be running: leave it to it
	}
	if _, err := s.finish(ctx, prev); err != nil {
		return false, err
	}
	n, err := s.Log.Size(ctx)
	if err != nil {
		return false, err
	}
	_, size, err := s.Log.Store.Checkpoint(ctx)
	if err != nil {
		return false, err
	}
	signed := size
	if size < n {
		if _, signed, err = s.Log.SignCovering(ctx, n); err != nil {
			return false, apierr.Dependency("kms", err)
		}
	}
	recorded, err := s.finishLogged(ctx, signed)
	if err != nil {
		return false, err
	}
	return len(prev) > 0 || size < n || recorded > 0, nil
}

// finishLogged converges the releases on the log: every entry's release
// is recorded (desired) — a registration that crashed between its append
// and its record, with no later registration's claim passing through it,
// would otherwise stay logged but never listed. From the recorded mark up
// to the signed size (a release is recorded only once a checkpoint covers
// it), at most FinishBatch entries per call: a claimed item is recorded at
// its entry's index once PendingStale passed (before, its registration may
// still be running, and the walk stops there), a recorded one skipped; then
// the mark moves, only forward. It returns how many it recorded; in steady
// state it reads the mark alone.
func (s *Service) finishLogged(ctx context.Context, signed int64) (int, error) {
	mark, err := s.Store.RecordedMark(ctx)
	if err != nil {
		return 0, err
	}
	recorded, i := 0, mark
walk:
	for ; i < min(signed, mark+FinishBatch); i++ {
		e, ok, err := s.Log.Store.Entry(ctx, i)
		if err != nil {
			return recorded, err
		}
		if !ok {
			return recorded, fmt.Errorf("registry: release log: no entry %d below the signed size %d", i, signed)
		}
		it, ok, err := s.Store.Item(ctx, e.Version)
		if err != nil {
			return recorded, err
		}
		switch {
		case ok && it.State == Recorded && it.Sequence == e.Sequence:
		case ok && it.State == Claimed && it.Sequence == e.Sequence && s.now().Sub(it.PendingAt) < PendingStale:
			break walk // its registration may still be running: left to it, and the mark waits
		case ok && it.State == Claimed && it.Sequence == e.Sequence:
			if _, err := s.record(ctx, it, i); err != nil {
				return recorded, err
			}
			recorded++
		default:
			return recorded, fmt.Errorf("registry: release log: entry %d is %s@%d, whose item is %q (sequence %d)", i, e.Version, e.Sequence, it.State, it.Sequence)
		}
	}
	if i > mark {
		if _, err := s.Store.MoveRecordedMark(ctx, i); err != nil {
			return recorded, err
		}
	}
	return recorded, nil
}
