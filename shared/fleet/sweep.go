package fleet

import (
	"context"
	"errors"
	"time"
)

// SweepFlagBudget bounds the node-hour flag writes of one pool's sweep
// (a node going out flags the hours ahead: ~74 writes); SweepAgainAfter is
// when a sweep cut short by it is due again.
var (
	SweepFlagBudget = 2000
	SweepAgainAfter = time.Second
)

// Sweep is the fleet's part of a reconciler pass for one managed pool
// (capacity.FleetSweeper): it takes the pool's sweep (one pass at a time),
// then looks at every node once — a node whose reports stopped for
// UnreachableAfter intervals becomes unreachable; node-hours are flagged or
// unflagged where a node's eligibility changed, and flagged further ahead
// as hours pass; unbinds the node reported done are forgotten. Its reads
// grow with the pool's nodes, its writes only with what changed, and its
// node-hour flag writes are at most SweepFlagBudget: past it, the nodes
// left keep their flags until the sweep, due again in a second, goes on
// (a pool whose nodes all went silent at once is flagged over a few passes,
// each inside the function's timeout; placement meanwhile may choose such a
// node, and binding moves the reservation off it).
func (s *Service) Sweep(ctx context.Context, poolID string, due, now time.Time) error {
	next := now.Add(s.SweepEvery)
	if err := s.Store.ClaimSweep(ctx, poolID, due, next); err != nil {
		if errors.Is(err, ErrStale) {
			return nil // another pass has it
		}
		return unavailable(err)
	}
	p, err := s.Pools.GetPool(ctx, poolID)
	if err != nil {
		return unavailable(err)
	}
	silent := time.Duration(UnreachableAfter) * s.interval()
	var errs []error
	budget, more := SweepFlagBudget, false
	err = s.Store.PoolNodes(ctx, poolID, func(rec Record) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if (rec.State == Ready || rec.State == Unhealthy) && rec.LastHeartbeatAt != nil && now.Sub(*rec.LastHeartbeatAt) > silent {
			switch err := s.Store.MarkUnreachable(ctx, rec); {
			case err == nil:
				rec.State = Unreachable
			case !errors.Is(err, ErrStale):
				errs = append(errs, err)
				return nil
			}
		}
		if _, from, to, ok := s.flagSpan(rec); ok {
			if n := int(to - from); n > budget && budget < SweepFlagBudget {
				more = true // this one and the rest: on the next sweep
			} else {
				budget -= n
				if _, err := s.syncFlags(ctx, rec, p.Topology(rec.Resource)); err != nil {
					errs = append(errs, err)
				}
			}
		}
		for id, e := range rec.Entries {
			if e.Action == ActionUnbind && rec.Reported[id] == BindUnbound {
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
	if more && ctx.Err() == nil {
		if err := s.Store.ClaimSweep(ctx, poolID, next, now.Add(SweepAgainAfter)); err != nil && !errors.Is(err, ErrStale) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// The sweep is due again at next anyway: what failed is retried.
		return unavailable(errors.Join(errs...))
	}
	return nil
}
