package capacity

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/paging"
)

// flowRelease is the release flow's name in fault points ("release.fenced").
const flowRelease = "release"

// ReleaseTimeout bounds a release's writes: well within the mutation
// function's own limit (FlowDeadline), so the release answers before the
// function would be stopped. Its fence makes it the one that gives back;
// the sweep after api.StaleAfter finishes what it could not.
const ReleaseTimeout = FlowDeadline - 2*time.Second

// ReleaseReservation moves a non-terminal reservation to released (by the
// tenant) — the fence — then frees its devices and credits its quota
// before answering. Releasing a draft gives its quota back at once too and
// frees what its create recorded; that create, finding the fence, undoes
// what it writes after. A terminal reservation is returned unchanged, once
// what a give-back cut short left is finished (finishGiveBack): its devices
// are free when the retry answers, and its quota too — unless the writer
// that fenced it is still crediting it (for seconds), or, that writer
// gone, the sweep holds it.
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
		n, err := r.Release(api.ReleasedByTenant, s.now())
		if err != nil {
			return Reservation{}, err
		}
		if err := s.releaseUnbind(ctx, r); err != nil {
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

// fencerLife bounds how long the writer that fenced a reservation terminal
// may still be giving back what it held (a release's timeout, a reconciler
// pass's function timeout, with margin); well before the sweep, api.StaleAfter
// after the fence.
const fencerLife = api.StaleAfter / 2

// finishGiveBack gives back what a terminal reservation may still hold,
// without ever giving anything back twice: a draft's charge is voided
// exactly once by its record; devices are freed by anyone (idempotent); a
// placed reservation's quota is credited by the writer that fenced it — so
// while that writer may still be running, not here — and after that by
// whoever holds its due entry, as the sweep does.
func (s *Service) finishGiveBack(ctx context.Context, r Reservation) error {
	if !r.WasPlaced() {
		return s.void(ctx, r, flowRelease)
	}
	if r.Credited {
		return nil // its devices were freed before the credit
	}
	if err := s.free(ctx, r, r.Placement()); err != nil {
		return err
	}
	if s.now().Sub(r.UpdatedAt) < fencerLife {
		return nil
	}
	cur, err := s.Store.ClaimDue(ctx, r, s.now().Add(api.StaleAfter))
	switch {
	case errors.Is(err, ErrStale), errors.Is(err, ErrNotFound):
		return nil // a sweep has it
	case err != nil:
		return unavailable(err)
	}
	return s.giveBack(ctx, cur, flowRelease)
}

// releaseUnbind tells the nodes a binding or active reservation was bound
// through to unbind it before the fence makes it terminal, so no node is
// ever told to bind a terminal reservation, whatever a crash cuts short:
// cut between the two, the reservation stays what it was (the release is
// retried, or its window ends) while its nodes scrub — never the other way
// round. The give-back after the fence tells them again (idempotent).
func (s *Service) releaseUnbind(ctx context.Context, r Reservation) error {
	if r.State != api.Binding && r.State != api.Active {
		return nil
	}
	return s.unbindHeld(ctx, r)
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
func (s *Service) ListReservations(ctx context.Context, tenant string, f ListFilter, page paging.Page) ([]Reservation, map[string]string, error) {
	rs, next, err := s.Store.ListReservations(ctx, tenant, f, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	return rs, next, nil
}
