package rollout

// Abort, rollback (and its verify) and abandoning a rollout.

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// abort: draining nodes go back (advanceActive); installing and verifying
// ones finish or time out; then, with rollbackOnAbort, every updated node
// is sent back to the release it ran before, under maxUnavailable.
func (p *pass) abort(ctx context.Context, counts api.Counts) error {
	if counts.Draining+counts.Installing+counts.Verifying > 0 {
		return p.decide(ctx, counts, nil)
	}
	if !p.rec.Settings.RollbackOnAbort {
		return p.decide(ctx, counts, func(r *Record) error {
			return r.move(api.Aborted, p.now, r.Reason)
		})
	}
	// Nodes it updated not yet sent back, by the rollout's order (nodes
	// that ran the version before the rollout are not moved).
	due, err := p.rc.Store.ProgressByRollback(ctx, p.rec.RolloutID, RollbackDue, p.visits())
	if err != nil {
		return err
	}
	inFlight, err := p.rc.Store.ProgressByRollback(ctx, p.rec.RolloutID, RollbackInstalling, 1)
	if err != nil {
		return err
	}
	if len(due) == 0 && len(inFlight) == 0 {
		return p.decide(ctx, counts, func(r *Record) error {
			return r.move(api.RolledBack, p.now, r.Reason)
		})
	}
	if err := p.start(ctx, -1, func(limit int) ([]Progress, error) {
		return due[:min(limit, len(due))], nil
	}, p.rollback); err != nil {
		return err
	}
	return p.decide(ctx, counts, nil)
}

// rollback sends an updated node back to the release it ran before.
func (p *pass) rollback(ctx context.Context, pr Progress) error {
	next := pr
	if pr.Previous == nil {
		next.Rollback, next.Reason, next.UpdatedAt = RollbackDone, ReasonNoPrevious, p.now
		err := p.rc.Store.UpdateProgress(ctx, next, api.Updated, RollbackDue)
		if errors.Is(err, ErrStale) {
			err = nil
		}
		return err
	}
	if err := p.fits(ctx, pr); err != nil {
		return err
	}
	next.Rollback, next.UpdatedAt = RollbackInstalling, p.now
	next.Deadline = p.now.Add(time.Duration(p.rec.Settings.ProgressDeadlineSeconds) * time.Second)
	if err := p.rc.Store.UpdateProgress(ctx, next, api.Updated, RollbackDue); err != nil {
		if errors.Is(err, ErrStale) {
			return nil
		}
		return err
	}
	p.inFlight[nodeKey(pr.PoolID, pr.NodeID)] = true
	if err := p.rc.fault(FaultStarted); err != nil {
		return err
	}
	n, err := p.node(ctx, pr)
	if err != nil {
		return err
	}
	if n, _, err = p.cordon(ctx, next, n, true); err != nil {
		return err
	}
	if n == nil {
		return fleet.ErrNotFound
	}
	t := &fleet.Target{Version: pr.Previous.Version, Sequence: pr.Previous.Sequence, RolloutID: p.rec.RolloutID}
	if _, err := p.target(ctx, pr, *n, t, pr.Previous.Sequence); err != nil {
		return err
	}
	return p.rc.fault(FaultTargeted)
}

// verifyRollback ends a node's rollback on its report: the previous
// release running and healthy → done; the install failed, unhealthy or
// silent past the deadline → failed.
func (p *pass) verifyRollback(ctx context.Context, pr Progress) error {
	if pr.Previous == nil {
		return nil
	}
	nr, err := p.rc.Nodes.GetNode(ctx, pr.PoolID, pr.Resource, pr.Index)
	if err != nil {
		return err
	}
	n := &nr
	runs := n.Running != nil && n.Running.Version == pr.Previous.Version
	to := ""
	switch {
	case runs && n.State == api.Ready:
		to = RollbackDone
	case n.Install != nil && n.Install.Version == pr.Previous.Version && n.Install.State == api.InstallFailed,
		runs && n.State == api.Unhealthy:
		to = RollbackFailed
	case !p.now.Before(pr.Deadline):
		if held, err := p.silenceHeld(ctx, pr.PoolID, *n, pr.Deadline); held || err != nil {
			return err // a mass silence: not the node's failure
		}
		to = RollbackFailed
	case n.Target == nil || n.Target.RolloutID != p.rec.RolloutID:
		// The target was not written yet (a crash after the step): again.
		t := &fleet.Target{Version: pr.Previous.Version, Sequence: pr.Previous.Sequence, RolloutID: p.rec.RolloutID}
		if n, err = p.target(ctx, pr, *n, t, pr.Previous.Sequence); err != nil {
			return err
		}
		_, _, err := p.cordon(ctx, pr, n, true)
		return err
	default:
		return nil
	}
	// Lifted before the step is written, as in conclude.
	next := pr
	next.Rollback, next.UpdatedAt = to, p.now
	if err := p.release(ctx, next, n); err != nil {
		return err
	}
	if err := p.rc.Store.UpdateProgress(ctx, next, api.Updated, RollbackInstalling); err != nil {
		if errors.Is(err, ErrStale) {
			return nil
		}
		return err
	}
	delete(p.inFlight, nodeKey(pr.PoolID, pr.NodeID))
	return p.rc.fault(FaultStepped)
}

// abandon finishes a create that stopped before its claims were made.
// Marked finished first, conditioned on Ver, and only then its claims
// released: a create whose final write (listed) races this either wins,
// and this write fails and leaves its claims alone, or loses and answers
// UNAVAILABLE (Rollouts.claim), so a create never answers a rollout this
// abandoned. A crash between leaves claims of a finished, unlisted
// rollout, which the next create of those pools takes over.
func (p *pass) abandon(ctx context.Context) error {
	rec := p.rec
	rec.Finished, rec.Due, rec.Reason = true, time.Time{}, ReasonAbandoned
	cur, err := p.rc.Store.UpdateRollout(ctx, rec)
	if errors.Is(err, ErrStale) {
		return nil // listed (or retried) meanwhile: the next pass reads it again
	}
	if err != nil {
		return err
	}
	p.rec = cur
	for _, pool := range rec.Pools {
		if err := p.rc.Store.ReleasePool(ctx, pool, rec.RolloutID); err != nil {
			return err
		}
	}
	return p.rc.fault(FaultFinished)
}
