package rollout

// Finishing a rollout: its pools' claims released.

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// finish ends a terminal rollout: (completed) its version becomes the
// baseline of each of its pools in which at least one node was updated;
// its pools' claims are released; it is due no more.
func (p *pass) finish(ctx context.Context) error {
	rec := p.rec
	if rec.State == api.Completed {
		updated, err := p.rc.Store.PoolsUpdated(ctx, rec.RolloutID, rec.Pools)
		if err != nil {
			return err
		}
		for _, pool := range rec.Pools {
			if !updated[pool] {
				continue // every node skipped or failed: the pool's baseline stays
			}
			if err := p.rc.Nodes.SetBaseline(ctx, pool, fleet.Target{Version: rec.Version, Sequence: rec.Sequence, RolloutID: rec.RolloutID}); err != nil {
				return err
			}
		}
	}
	for _, pool := range rec.Pools {
		if err := p.rc.Store.ReleasePool(ctx, pool, rec.RolloutID); err != nil {
			return err
		}
	}
	if err := p.rc.fault(FaultFinished); err != nil {
		return err
	}
	rec.Finished, rec.Due = true, time.Time{}
	_, err := p.rc.Store.UpdateRollout(ctx, rec)
	if errors.Is(err, ErrStale) {
		return nil
	}
	return err
}
