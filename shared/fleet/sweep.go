package fleet

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
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
// short is adopted; unbinds the node reported done are forgotten. Its reads
// grow with the pool's nodes, its writes only with what changed, and its
// node-hour flag writes are at most SweepFlagBudget: past it, the nodes
// left stay out of sync until the sweep, due again in a second, goes on.
//
// The steps, in order: claim (the pool's sweep item and the pool), visit
// (each node once: count it, sync or hold it as silent, adopt, lift a
// finished rollout's marks, forget finished unbinds), markable (how many of
// the silent may be marked: the mass-silence rule), markSilent, then
// finish (the pool's counts, and the sweep due again if the budget cut it
// short). A failed step's error is kept and the others go on: the sweep is
// due again at next anyway, so what failed is retried.
func (s *Service) Sweep(ctx context.Context, poolID string, due, now time.Time) error {
	w := &sweep{s: s, poolID: poolID, now: now, next: now.Add(s.SweepEvery), budget: SweepFlagBudget,
		silent: time.Duration(api.UnreachableAfter) * s.interval(), lateAfter: time.Duration(api.UnreachableAfter-1) * s.interval(),
		holds: map[string]bool{}}
	ok, err := w.claim(ctx, due)
	if !ok || err != nil {
		return err
	}
	if err := s.Store.PoolNodes(ctx, poolID, func(rec Record) error { return w.visit(ctx, rec) }); err != nil {
		w.fail(err)
	}
	w.markSilent(ctx, w.markable(ctx))
	w.finish(ctx)
	if len(w.errs) > 0 {
		return unavailable(errors.Join(w.errs...))
	}
	return nil
}

// sweep is one pool's sweep in progress: what it read once and what it
// counted while it visited the nodes.
type sweep struct {
	s              *Service
	poolID         string
	now, next      time.Time
	state          SweepState
	pool           capacity.Pool
	silent         time.Duration // no report for this long: unreachable
	lateAfter      time.Duration // no report for this long: late (UnreachableAfter-1 intervals)
	budget         int           // node-hour flag writes left
	more           bool          // the budget cut the sweep short
	holds          map[string]bool
	stats          PoolStats
	errs           []error
	quiet          []Record // silent: marked (or held) once the pool is counted
	inContact      int      // ready or unhealthy at the last sweep
	late           int      // of those, not heard from for lateAfter
	markedLastSeen []time.Time
}

func (w *sweep) fail(err error) { w.errs = append(w.errs, err) }

// claim takes the pool's sweep from due to next (false: another pass has
// it) and reads the pool.
func (w *sweep) claim(ctx context.Context, due time.Time) (bool, error) {
	st, err := w.s.Store.ClaimSweep(ctx, w.poolID, due, w.next)
	if errors.Is(err, ErrStale) {
		return false, nil // another pass has it
	}
	if err != nil {
		return false, unavailable(err)
	}
	if w.pool, err = w.s.Pools.GetPool(ctx, w.poolID); err != nil {
		return false, unavailable(err)
	}
	w.state = st
	return true, nil
}

// visit looks at one node: counts it, holds it as silent or brings its
// flags in sync, adopts it, lifts a finished rollout's marks and forgets
// the unbinds it reported done.
func (w *sweep) visit(ctx context.Context, rec Record) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	w.stats.Add(rec, w.now)
	// markedLastSeen: the last reports of the nodes already unreachable
	// (see markable). late: nodes in contact not heard from for
	// UnreachableAfter-1 intervals — what decides a mass silence, since a
	// pool's reports are spread over an interval: when the first of them
	// crosses the limit, the others of a silence that began together are
	// late already.
	if rec.State == api.Unreachable && rec.LastHeartbeatAt != nil {
		w.markedLastSeen = append(w.markedLastSeen, *rec.LastHeartbeatAt)
	}
	inContact := rec.State == api.Ready || rec.State == api.Unhealthy
	if inContact {
		w.inContact++
		if rec.LastHeartbeatAt != nil && w.now.Sub(*rec.LastHeartbeatAt) > w.lateAfter {
			w.late++
		}
	}
	if inContact && rec.LastHeartbeatAt != nil && w.now.Sub(*rec.LastHeartbeatAt) > w.silent {
		w.quiet = append(w.quiet, rec)
	} else {
		w.sync(ctx, rec)
	}
	if _, err := w.s.adopt(ctx, rec, w.pool.Topology(rec.Resource)); err != nil {
		w.fail(err)
	}
	if err := w.s.releaseStranded(ctx, rec, w.holds); err != nil {
		w.fail(err)
	}
	// In id order, not the map's: the same sweep makes the same writes in
	// the same order (the fleet protocol simulation replays a seed).
	for _, id := range slices.Sorted(maps.Keys(rec.Entries)) {
		if e := rec.Entries[id]; e.Action == api.ActionUnbind && rec.Reported[id] == api.BindUnbound {
			if err := w.s.Store.DropEntry(ctx, rec, id); err != nil && !errors.Is(err, ErrStale) {
				w.fail(err)
			}
		}
	}
	return nil
}

// sync brings a node's flags in sync within the sweep's flag budget: a
// node whose writes no longer fit waits, with the rest, for the next sweep.
func (w *sweep) sync(ctx context.Context, rec Record) {
	n := w.s.flagWrites(rec)
	switch {
	case n == 0:
	case n > w.budget && w.budget < SweepFlagBudget:
		w.more = true // this one and the rest: on the next sweep
	default:
		w.budget -= n
		if _, err := w.s.syncFlags(ctx, rec, w.pool.Topology(rec.Resource)); err != nil {
			w.fail(err)
		}
	}
}

// markable is how many of the silent nodes this sweep marks unreachable:
// all of them, unless the pool's nodes went silent together (a mass
// silence: none while it holds, then ResumeShare a sweep). It records the
// disruption's start, resumption and end on the pool's sweep item.
func (w *sweep) markable(ctx context.Context) int {
	w.countMarkedIntoSilence()
	st, now := w.state, w.now
	mark := len(w.quiet)
	disrupted := len(w.quiet) > 0 && w.late >= DisruptionMin && float64(w.late) >= DisruptionShare*float64(w.inContact)
	w.stats.Disrupted = disrupted || (st.DisruptedSince != nil && len(w.quiet) > 0)
	held := disrupted && (st.DisruptedSince == nil || now.Sub(*st.DisruptedSince) < DisruptionHold)
	switch {
	case held:
		mark = 0
		if st.DisruptedSince == nil {
			w.s.logger().Error("fleet: mass silence: the pool's nodes went silent together; none is marked unreachable until reports return",
				"pool", w.poolID, "silent", len(w.quiet), "inContact", w.inContact)
			if err := w.s.Store.SetDisrupted(ctx, w.poolID, &now); err != nil {
				w.fail(err)
			}
		} else if st.ResumedAt != nil {
			// Silent together again before the grace ran out.
			if err := w.s.Store.SetResumed(ctx, w.poolID, nil); err != nil {
				w.fail(err)
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
			if len(w.quiet) > 0 {
				if err := w.s.Store.SetResumed(ctx, w.poolID, &now); err != nil {
					w.fail(err)
				}
			}
		case now.Sub(*st.ResumedAt) < w.silent:
			mark = 0
		default:
			mark = min(mark, max(1, int(ResumeShare*float64(w.inContact))))
		}
		if len(w.quiet) == 0 {
			w.s.logger().Info("fleet: mass silence over", "pool", w.poolID, "since", st.DisruptedSince.Format(time.RFC3339))
			if err := w.s.Store.SetDisrupted(ctx, w.poolID, nil); err != nil {
				w.fail(err)
			}
		}
	}
	return mark
}

// countMarkedIntoSilence counts back into contact (and late) the nodes
// already unreachable whose reports stopped less than UnreachableAfter
// intervals before the earliest of the silent ones': they are part of the
// same silence — their reports were held up just before the pool's went
// silent, so a sweep marked them alone before the rest were late — and
// must not take the silence below DisruptionMin (found by the fleet
// protocol simulation: 3 of 4 nodes silent within 25 s, 2 of them marked).
// Those that stopped earlier do not count: a pool whose hosts died one by
// one is not disrupted.
func (w *sweep) countMarkedIntoSilence() {
	if len(w.quiet) == 0 {
		return
	}
	first := *w.quiet[0].LastHeartbeatAt
	for _, q := range w.quiet[1:] {
		if q.LastHeartbeatAt.Before(first) {
			first = *q.LastHeartbeatAt
		}
	}
	for _, at := range w.markedLastSeen {
		if first.Sub(at) < w.silent {
			w.inContact++
			w.late++
		}
	}
}

// markSilent marks the first mark silent nodes unreachable, then brings
// every silent node's flags in sync (a marked one's now say out).
func (w *sweep) markSilent(ctx context.Context, mark int) {
	for i, rec := range w.quiet {
		if i < mark && ctx.Err() == nil {
			switch cur, err := w.s.Store.MarkUnreachable(ctx, rec); {
			case err == nil:
				rec = cur
			case !errors.Is(err, ErrStale):
				w.fail(err)
				continue
			}
		}
		w.sync(ctx, rec)
	}
	w.stats.Silent, w.stats.Held = len(w.quiet), len(w.quiet)-min(mark, len(w.quiet))
}

// finish emits the pool's counts and, when the flag budget cut the sweep
// short, makes it due again in SweepAgainAfter rather than at next.
func (w *sweep) finish(ctx context.Context) {
	w.stats.Emit(w.s.logger(), w.s.Table, w.poolID, w.now)
	if w.more && ctx.Err() == nil {
		if _, err := w.s.Store.ClaimSweep(ctx, w.poolID, w.next, w.now.Add(SweepAgainAfter)); err != nil && !errors.Is(err, ErrStale) {
			w.fail(err)
		}
	}
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
