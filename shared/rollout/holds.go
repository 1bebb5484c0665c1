package rollout

import (
	"context"
	"errors"
)

// Holds answers the fleet sweep's question of a node it finds cordoned
// or targeted by a rollout: does that rollout still hold it? Not once the
// rollout is finished — a cordon or target a finished rollout left behind
// (a start's cordon landing after an abort concluded the node, the
// rollout ending meanwhile) is lifted by the sweep. While the rollout
// runs its own passes own the node (verify re-tells what is lost). One
// read per rollout and sweep: the sweep keeps the answer.
type Holds struct{ Store RolloutStore }

// Holds reports whether rollout id is still running (holding its nodes).
func (h Holds) Holds(ctx context.Context, id string) (bool, error) {
	r, ok, err := h.get(ctx, id)
	return ok && !r.Finished, err
}

// Running reports whether rollout id may still tell a node a target (its
// own or, rolling back, the node's previous release): not once it is
// terminal, though a pass has yet to finish it.
func (h Holds) Running(ctx context.Context, id string) (bool, error) {
	r, ok, err := h.get(ctx, id)
	return ok && !r.Finished && !r.State.Terminal(), err
}

// get reads rollout id (ok false: there is none).
func (h Holds) get(ctx context.Context, id string) (Record, bool, error) {
	r, err := h.Store.GetRollout(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, err
	}
	return r, true, nil
}
