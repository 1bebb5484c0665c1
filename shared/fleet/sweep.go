package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// SweepFlagBudget bounds the node-hour flag writes of one pool's sweep
// (a node going out flags the hours ahead: ~74 writes); SweepAgainAfter is
// when a sweep cut short by it is due again.
var (
	SweepFlagBudget = 2000
	SweepAgainAfter = time.Second
)

// Mass silence (docs/fleet.md, Silence caused by us): when, in one sweep,
// at least DisruptionMin nodes and DisruptionShare of a pool's managed
// nodes still in contact at the last sweep are found late together (not
// heard from for api.UnreachableAfter-1 intervals), the
// control plane or the network failed, not the hosts — the way the
// Kubernetes node lifecycle controller treats a disrupted zone. The sweep
// then marks none of them unreachable (so no reservation is moved off
// them and no rollout fails them: both act on `unreachable`), records the
// disruption on the pool's sweep item and logs an alarm; once it ends,
// silent nodes are marked at most ResumeShare of the pool's managed nodes
// (at least one) a sweep, until none is left — and so too once a
// disruption has lasted DisruptionHold with the nodes still silent (a
// pool really powered off must not keep its reservations on dead hosts
// for ever).
var (
	DisruptionShare = 0.55
	DisruptionMin   = 3
	ResumeShare     = 0.1
	DisruptionHold  = 15 * time.Minute
)

// Sweep is the fleet's part of a reconciler pass for one managed pool
// (reconcile.FleetSweeper): it takes the pool's sweep (one pass at a time),
// then looks at every node once, level-triggered — whatever any writer
// left, it compares and repairs: a node whose reports stopped for
// api.UnreachableAfter intervals becomes unreachable (unless the pool's
// nodes went silent together, above); a node whose flags or
// out-of-service entry are not what its record wants is brought in sync
// (Record.FlagsInSync: never trusting what a writer said it applied);
// flags are extended as hours pass; a node whose registration was cut
// short is adopted; unbinds the node reported done are forgotten. Its reads grow with the pool's
// nodes, its writes only with what changed, and its node-hour flag writes
// are at most SweepFlagBudget: past it, the nodes left stay out of sync
// until the sweep, due again in a second, goes on.
func (s *Service) Sweep(ctx context.Context, poolID string, due, now time.Time) error {
	next := now.Add(s.SweepEvery)
	st, err := s.Store.ClaimSweep(ctx, poolID, due, next)
	if err != nil {
		if errors.Is(err, ErrStale) {
			return nil // another pass has it
		}
		return unavailable(err)
	}
	p, err := s.Pools.GetPool(ctx, poolID)
	if err != nil {
		return unavailable(err)
	}
	silent := time.Duration(api.UnreachableAfter) * s.interval()
	var errs []error
	budget, more := SweepFlagBudget, false
	sync := func(rec Record) {
		n := s.flagWrites(rec)
		switch {
		case n == 0:
		case n > budget && budget < SweepFlagBudget:
			more = true // this one and the rest: on the next sweep
		default:
			budget -= n
			if _, err := s.syncFlags(ctx, rec, p.Topology(rec.Resource)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	var quiet []Record // silent: marked once the pool is counted
	// late: nodes in contact not heard from for api.UnreachableAfter-1
	// intervals — what decides a mass silence, since a pool's reports are
	// spread over an interval: when the first of them crosses the limit,
	// the others of a silence that began together are late already.
	inContact, late := 0, 0
	lateAfter := time.Duration(api.UnreachableAfter-1) * s.interval()
	// marked: the last reports of the nodes already unreachable. One whose
	// reports stopped less than api.UnreachableAfter intervals before the
	// earliest of the silent ones' is part of their silence: its reports
	// were held up just before the pool's went silent, so the sweep
	// marked it alone before the rest were late, and it must not take
	// them below DisruptionMin (found by the fleet protocol simulation:
	// 3 of 4 nodes silent within 25 s, 2 of them marked). Those that
	// stopped earlier do not count: a pool whose hosts died one by one is
	// not disrupted.
	var marked []time.Time
	var stats PoolStats
	holds := map[string]bool{} // rollout → still running (read once a sweep)
	err = s.Store.PoolNodes(ctx, poolID, func(rec Record) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		stats.Add(rec, now)
		if rec.State == api.Unreachable && rec.LastHeartbeatAt != nil {
			marked = append(marked, *rec.LastHeartbeatAt)
		}
		if rec.State == api.Ready || rec.State == api.Unhealthy {
			inContact++
			if rec.LastHeartbeatAt != nil && now.Sub(*rec.LastHeartbeatAt) > lateAfter {
				late++
			}
		}
		if (rec.State == api.Ready || rec.State == api.Unhealthy) && rec.LastHeartbeatAt != nil && now.Sub(*rec.LastHeartbeatAt) > silent {
			quiet = append(quiet, rec)
		} else {
			sync(rec)
		}
		if _, err := s.adopt(ctx, rec, p.Topology(rec.Resource)); err != nil {
			errs = append(errs, err)
		}
		if err := s.releaseStranded(ctx, rec, holds); err != nil {
			errs = append(errs, err)
		}
		for id, e := range rec.Entries {
			if e.Action == api.ActionUnbind && rec.Reported[id] == api.BindUnbound {
				if err := s.Store.DropEntry(ctx, rec, id); err != nil && !errors.Is(err, ErrStale) {
					errs = append(errs, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if len(quiet) > 0 {
		first := *quiet[0].LastHeartbeatAt
		for _, q := range quiet[1:] {
			if q.LastHeartbeatAt.Before(first) {
				first = *q.LastHeartbeatAt
			}
		}
		for _, at := range marked {
			if first.Sub(at) < silent {
				inContact++
				late++
			}
		}
	}
	mark := len(quiet)
	disrupted := len(quiet) > 0 && late >= DisruptionMin && float64(late) >= DisruptionShare*float64(inContact)
	held := disrupted && (st.DisruptedSince == nil || now.Sub(*st.DisruptedSince) < DisruptionHold)
	switch {
	case held:
		mark = 0
		if st.DisruptedSince == nil {
			s.logger().Error("fleet: mass silence: the pool's nodes went silent together; none is marked unreachable until reports return",
				"pool", poolID, "silent", len(quiet), "inContact", inContact)
			if err := s.Store.SetDisrupted(ctx, poolID, &now); err != nil {
				errs = append(errs, err)
			}
		} else if st.ResumedAt != nil {
			// Silent together again before the grace ran out.
			if err := s.Store.SetResumed(ctx, poolID, nil); err != nil {
				errs = append(errs, err)
			}
		}
	case disrupted || st.DisruptedSince != nil:
		// The hold is over (the silent are fewer than the threshold, or it
		// lasted DisruptionHold). Nodes of a silence come back one by one:
		// those still silent get a fresh api.UnreachableAfter intervals from
		// the hold's end — as Kubernetes' node lifecycle controller resets
		// its nodes' probe times when a zone leaves full disruption — then
		// ResumeShare of the nodes in contact are marked a sweep.
		switch {
		case st.ResumedAt == nil:
			mark = 0
			if len(quiet) > 0 {
				if err := s.Store.SetResumed(ctx, poolID, &now); err != nil {
					errs = append(errs, err)
				}
			}
		case now.Sub(*st.ResumedAt) < silent:
			mark = 0
		default:
			mark = min(mark, max(1, int(ResumeShare*float64(inContact))))
		}
		if len(quiet) == 0 {
			s.logger().Info("fleet: mass silence over", "pool", poolID, "since", st.DisruptedSince.Format(time.RFC3339))
			if err := s.Store.SetDisrupted(ctx, poolID, nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for i, rec := range quiet {
		if i < mark && ctx.Err() == nil {
			switch cur, err := s.Store.MarkUnreachable(ctx, rec); {
			case err == nil:
				rec = cur
			case !errors.Is(err, ErrStale):
				errs = append(errs, err)
				continue
			}
		}
		sync(rec)
	}
	stats.Silent, stats.Held = len(quiet), len(quiet)-min(mark, len(quiet))
	stats.Disrupted = disrupted || (st.DisruptedSince != nil && len(quiet) > 0)
	stats.Emit(s.logger(), s.Table, poolID, now)
	if more && ctx.Err() == nil {
		if _, err := s.Store.ClaimSweep(ctx, poolID, next, now.Add(SweepAgainAfter)); err != nil && !errors.Is(err, ErrStale) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// The sweep is due again at next anyway: what failed is retried.
		return unavailable(errors.Join(errs...))
	}
	return nil
}

// releaseStranded lifts a rollout's cordon and target from a node once
// the rollout is finished (RolloutHolds, asked once a sweep per rollout):
// what a write of the rollout's that landed after the node was concluded
// left behind.
func (s *Service) releaseStranded(ctx context.Context, rec Record, holds map[string]bool) error {
	if s.Rollouts == nil || (rec.Rollout == nil && rec.Target == nil) {
		return nil
	}
	id := ""
	if rec.Rollout != nil {
		id = rec.Rollout.RolloutID
	} else {
		id = rec.Target.RolloutID
	}
	held, ok := holds[id]
	if !ok {
		var err error
		if held, err = s.Rollouts.Holds(ctx, id); err != nil {
			return err
		}
		holds[id] = held
	}
	if held {
		return nil
	}
	s.logger().Warn("fleet: lifting a finished rollout's cordon and target from a node", "pool", rec.PoolID, "node", rec.NodeID, "rollout", id)
	if rec.Target != nil && rec.Target.RolloutID == id {
		if _, err := s.Store.SetTarget(ctx, rec, id, nil, 0); err != nil && !errors.Is(err, ErrStale) {
			return err
		}
	}
	if rec.Rollout != nil && rec.Rollout.RolloutID == id {
		if _, err := s.SetRolloutCordon(ctx, rec, nil); err != nil && !errors.Is(err, ErrStale) {
			return err
		}
	}
	return nil
}
