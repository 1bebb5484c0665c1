package capacity

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
)

// flowRelease is the release flow's name in fault points ("release.fenced").
const flowRelease = "release"

// ReleaseTimeout bounds a release's writes: well within the mutation
// function's own limit (FlowDeadline), so the release answers before the
// function would be stopped. Its fence makes it the one that gives back;
// the sweep after StaleAfter finishes what it could not.
const ReleaseTimeout = FlowDeadline - 2*time.Second

// ReleaseReservation moves a non-terminal reservation to released (by the
// tenant) — the fence — then frees its devices and credits its quota
// before answering. Releasing a draft gives its quota back at once too and
// frees what its create recorded; that create, finding the fence, undoes
// what it writes after. A terminal reservation is returned unchanged, once
// any give-back a release cut short has been finished (idempotent), so a
// retried release answers only when nothing is held any more.
func (s *Service) ReleaseReservation(ctx context.Context, tenant, id string) (Reservation, error) {
	ctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
	defer cancel()
	for attempt := 0; attempt < 8; attempt++ {
		r, err := s.GetReservation(ctx, tenant, id)
		if err != nil {
			return Reservation{}, err
		}
		if r.State.Terminal() {
			return r, s.finishGiveBack(ctx, r)
		}
		n, err := r.Release(ReleasedByTenant, s.now())
		if err != nil {
			return Reservation{}, err
		}
		cur, won, err := s.fenceWon(ctx, n, r.State, FaultFenced, nil)
		if errors.Is(err, errGone) {
			return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", id)
		}
		if err != nil {
			return Reservation{}, err
		}
		if cur.State.Terminal() {
			if !won {
				// Another writer ended it first (the reconciler at window
				// end): its give-back may still be running; finishing it is
				// idempotent.
				return cur, s.finishGiveBack(ctx, cur)
			}
			return cur, nil
		}
		// The state moved under us (placed → binding, …): again.
	}
	return Reservation{}, apierr.New(apierr.Unavailable, "reservation %q is changing; retry", id)
}

// finishGiveBack gives back what a terminal reservation may still hold.
// A credited one holds nothing: its devices were freed before the credit.
func (s *Service) finishGiveBack(ctx context.Context, r Reservation) error {
	if r.WasPlaced() && r.Credited {
		return nil
	}
	return s.giveBack(ctx, r, flowRelease)
}

// GetReservation returns one of tenant's reservations.
func (s *Service) GetReservation(ctx context.Context, tenant, id string) (Reservation, error) {
	r, err := s.Store.GetReservation(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", id)
	}
	if err != nil {
		return Reservation{}, unavailable(err)
	}
	return r, nil
}

// ListReservations lists tenant's reservations, newest first.
func (s *Service) ListReservations(ctx context.Context, tenant string, f ListFilter, page Page) ([]Reservation, map[string]string, error) {
	rs, next, err := s.Store.ListReservations(ctx, tenant, f, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	return rs, next, nil
}
