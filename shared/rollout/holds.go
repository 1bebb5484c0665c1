package rollout

import (
	"context"
	"errors"
)

// Holds answers the fleet sweep's question of a node it finds cordoned
// or targeted by a rollout: does that rollout still hold it — its progress
// in draining, installing or verifying, or rolling back? A cordon or
// target a rollout left on a node it no longer holds (a start's cordon
// landing after an abort concluded the node) is lifted by the sweep;
// one lifted wrongly, racing a start, the rollout's own pass re-tells
// (verify, verifyRollback). Both sides compare and repair every pass.
type Holds struct{ Store RolloutStore }

// Holds reports whether rollout id holds node nodeID of poolID: never
// once the rollout is finished, whatever its progress items say.
func (h Holds) Holds(ctx context.Context, id, poolID, nodeID string) (bool, error) {
	r, err := h.Store.GetRollout(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case r.Finished:
		return false, nil
	}
	p, err := h.Store.GetProgress(ctx, id, poolID, nodeID)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return p.Step.Active() || p.Rollback == RollbackInstalling, nil
}
