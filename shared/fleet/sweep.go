package fleet

import (
	"context"
	"errors"
	"time"
)

// Sweep is the fleet's part of a reconciler pass for one managed pool
// (capacity.FleetSweeper): it takes the pool's sweep (one pass at a time),
// then looks at every node once — a node whose reports stopped for
// UnreachableAfter intervals becomes unreachable; node-hours are flagged or
// unflagged where a node's eligibility changed, and flagged further ahead
// as hours pass; unbinds the node reported done are forgotten. Its reads
// grow with the pool's nodes, its writes only with what changed.
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
		if _, err := s.syncFlags(ctx, rec, p.Topology(rec.Resource)); err != nil {
			errs = append(errs, err)
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
	if len(errs) > 0 {
		// The sweep is due again at next anyway: what failed is retried.
		return unavailable(errors.Join(errs...))
	}
	return nil
}
