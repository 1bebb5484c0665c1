package capacity

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Reservations is a reservation's life after its create, as its tenant
// sees it: reservations.get, reservations.list and reservations.release
// (the fence to released, then the give-back). Its reconciler steps —
// binding, active, the window's end, the sweep — are Steps.Reservation's.
type Reservations struct {
	hooks
	store    ReservationStore
	fence    *Fence
	bindings *Bindings
}

// ReservationStore is what the reservations' reads and release read and
// claim: reservations under their tenant's partition.
type ReservationStore interface {
	// GetReservation reads one of tenant's reservations (ErrNotFound).
	GetReservation(ctx context.Context, tenant, id string) (Reservation, error)
	// ListReservations lists tenant's reservations, newest first.
	ListReservations(ctx context.Context, tenant string, f ListFilter, page paging.Page) ([]Reservation, map[string]string, error)
	// ClaimDue moves a reservation's due marker from r.Due to until if the
	// stored state and due are still r's, and returns the stored item as
	// that write left it (ErrStale otherwise, ErrNotFound if it is gone):
	// how one writer at a time takes a due reservation.
	ClaimDue(ctx context.Context, r Reservation, until time.Time) (Reservation, error)
}

// flowRelease is the release flow's name in fault points ("release.fenced").
const flowRelease = "release"

// ReleaseTimeout bounds a release's writes: well within the mutation
// function's own limit (FlowDeadline), so the release answers before the
// function would be stopped. Its fence makes it the one that gives back;
// the sweep after api.StaleAfter finishes what it could not.
const ReleaseTimeout = FlowDeadline - 2*time.Second

// Release is reservations.release: it moves a non-terminal reservation
// to released (by the tenant) — the fence — then frees its devices and
// credits its quota before answering. Releasing a draft gives its quota back at once too and
// frees what its create recorded; that create, finding the fence, undoes
// what it writes after. A terminal reservation is returned unchanged, once
// what a give-back cut short left is finished (finishGiveBack): its devices
// are free when the retry answers, and its quota too — unless the writer
// that fenced it is still crediting it (for seconds), or, that writer
// gone, the sweep holds it.
func (rs *Reservations) Release(ctx context.Context, tenant, id string) (Reservation, error) {
	ctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
	defer cancel()
	for attempt := 0; attempt < 8; attempt++ {
		r, err := rs.Get(ctx, tenant, id)
		if err != nil {
			return Reservation{}, err
		}
		if r.State.Terminal() {
			return r, rs.finishGiveBack(ctx, r)
		}
		n, err := r.Release(api.ReleasedByTenant, rs.now())
		if err != nil {
			return Reservation{}, err
		}
		if err := rs.bindings.releaseUnbind(ctx, r); err != nil {
			return Reservation{}, err
		}
		cur, won, err := rs.fence.moveWon(ctx, n, r.State, FaultFenced, nil)
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
				return cur, rs.finishGiveBack(ctx, cur)
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
func (rs *Reservations) finishGiveBack(ctx context.Context, r Reservation) error {
	if !r.WasPlaced() {
		return rs.fence.void(ctx, r, flowRelease)
	}
	if r.Credited {
		return nil // its devices were freed before the credit
	}
	if _, err := rs.fence.freeHeld(ctx, r); err != nil {
		return err
	}
	if rs.now().Sub(r.UpdatedAt) < fencerLife {
		return nil
	}
	cur, err := rs.store.ClaimDue(ctx, r, rs.now().Add(api.StaleAfter))
	switch {
	case errors.Is(err, ErrStale), errors.Is(err, ErrNotFound):
		return nil // a sweep has it
	case err != nil:
		return unavailable(err)
	}
	_, err = rs.fence.giveBack(ctx, cur, flowRelease)
	return err
}

// Get is reservations.get: one of tenant's reservations.
func (rs *Reservations) Get(ctx context.Context, tenant, id string) (Reservation, error) {
	r, err := rs.store.GetReservation(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", id)
	}
	if err != nil {
		return Reservation{}, unavailable(err)
	}
	return r, nil
}

// List is reservations.list: tenant's reservations, newest first.
func (rs *Reservations) List(ctx context.Context, tenant string, f ListFilter, page paging.Page) ([]Reservation, map[string]string, error) {
	list, next, err := rs.store.ListReservations(ctx, tenant, f, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	return list, next, nil
}
