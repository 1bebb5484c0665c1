package capacity

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// Charges is the admissions in flight on the quota rows: a create's charge
// (the count taken and a record naming the placement it is for), and the
// settling of those records — forgotten once their reservations are placed
// (the count lives in them then), undone for reservations that ended
// unplaced. The reconciler settles a due row (Steps.Quota).
type Charges struct {
	hooks
	store   ChargeStore
	fence   *Fence // undoes what a draft that ended unplaced holds
	settles *settles
}

// ChargeStore is what charging and settling do on the quota rows: max,
// used, free = max − used, and the admissions in flight on the row (a
// bounded map: a record lives from a charge until the count lives in the
// placed reservation, or until what a create wrote for a draft that ended
// unplaced is undone).
type ChargeStore interface {
	// Charge adds count for reservation id if free ≥ count, recording the
	// placement it is for (nil when the draft records it), and forgets the
	// charge records of settle (reservations seen placed since: their
	// counts live in them now) — one write, no read first. The row becomes
	// due at due (unless it already is), for the reconciler to settle what
	// no later charge does. A charge already recorded for id is not
	// repeated: its record is returned (Fresh false). QuotaExceeded (with
	// the row) when it does not fit or the row is missing; ErrBusy when
	// api.MaxInFlight records are on the row.
	Charge(ctx context.Context, k QuotaKey, id string, count int, p Placement, settle []string, due time.Time) (Charged, error)
	// Settle forgets the charge records of ids, whose reservations are
	// placed (the count stays in used).
	Settle(ctx context.Context, k QuotaKey, ids []string) error
	// Row reads a stored row with its records (false when missing).
	Row(ctx context.Context, k QuotaKey) (QuotaRow, bool, error)
	// Refund forgets id's charge record, giving back its count unless it
	// was voided, once.
	Refund(ctx context.Context, k QuotaKey, id string, count int) error
	// Reservations reads several of tenant's reservations, consistently;
	// missing ones are absent from the map.
	Reservations(ctx context.Context, tenant string, ids []string) (map[string]Reservation, error)
}

// SettleAfter: a quota row with charge records is due this long after its
// first one, for the reconciler to forget the records of reservations
// already placed that no later charge of the same process forgot.
const SettleAfter = 30 * time.Second

// charge is ChargeStore.Charge, settling what this process saw placed on the
// row. A row full of records in flight is cleaned up once (what it holds
// for reservations already placed is settled) before the charge answers
// UNAVAILABLE.
func (c *Charges) charge(ctx context.Context, k QuotaKey, r Reservation, p Placement) (Charged, error) {
	for attempt := 0; ; attempt++ {
		settle := c.pendingSettles(k)
		ch, err := c.store.Charge(ctx, k, r.ReservationID, r.Count, p, settle, c.now().Add(SettleAfter))
		switch {
		case err == nil:
			c.settled(k, settle)
			return ch, nil
		case errors.Is(err, ErrBusy) && attempt == 0:
			if _, cerr := c.settleRow(ctx, k); cerr != nil {
				return Charged{}, cerr
			}
		case errors.Is(err, ErrBusy):
			return Charged{}, apierr.New(apierr.Unavailable, "too many reservations of this quota are being admitted at once; retry")
		case apierr.As(err) != nil, errors.As(err, new(QuotaExceeded)):
			return Charged{}, err
		default:
			return Charged{}, unavailable(err)
		}
	}
}

// settles are the charge records this process saw become placed and has
// not forgotten yet, by quota row: its next charge on the row forgets them
// in the same write (a create makes no write of its own for it).
type settles struct {
	mu   sync.Mutex
	rows map[QuotaKey][]string
}

// Bounds of settles: records left over are the reconciler's (the row is
// due), so the process's memory stays small whatever it serves.
const (
	maxSettlesPerRow = 16
	maxSettleRows    = 1024
)

// settleLater remembers that id's charge on k can be forgotten.
func (c *Charges) settleLater(k QuotaKey, id string) {
	c.settles.mu.Lock()
	defer c.settles.mu.Unlock()
	if c.settles.rows == nil || len(c.settles.rows) >= maxSettleRows {
		c.settles.rows = map[QuotaKey][]string{}
	}
	ids := append(c.settles.rows[k], id)
	if len(ids) > maxSettlesPerRow {
		ids = ids[len(ids)-maxSettlesPerRow:]
	}
	c.settles.rows[k] = ids
}

// pendingSettles is what the next charge on k forgets.
func (c *Charges) pendingSettles(k QuotaKey) []string {
	c.settles.mu.Lock()
	defer c.settles.mu.Unlock()
	return slices.Clone(c.settles.rows[k])
}

// settled drops ids a charge forgot.
func (c *Charges) settled(k QuotaKey, ids []string) {
	if len(ids) == 0 {
		return
	}
	c.settles.mu.Lock()
	defer c.settles.mu.Unlock()
	left := slices.DeleteFunc(c.settles.rows[k], func(id string) bool { return slices.Contains(ids, id) })
	if len(left) == 0 {
		delete(c.settles.rows, k)
		return
	}
	c.settles.rows[k] = left
}

// settleRow forgets the charge records of a quota row whose reservations
// were placed (the count lives in them), and undoes those of reservations
// that ended unplaced longer than api.StaleAfter ago (no create is writing for
// them any more: a sweep that did not run) or are gone. Records of drafts
// stay: in flight, or expired by the reconciler in time. It returns how many
// records are left. The reconciler runs it on a due row; a charge on a row
// full of records runs it before it answers UNAVAILABLE.
func (c *Charges) settleRow(ctx context.Context, k QuotaKey) (int, error) {
	row, ok, err := c.store.Row(ctx, k)
	if err != nil || !ok {
		return 0, unavailableOrNil(err)
	}
	ids := slices.Sorted(maps.Keys(row.Charging))
	if len(ids) == 0 {
		return 0, nil
	}
	rs, err := c.store.Reservations(ctx, k.TenantID, ids)
	if err != nil {
		return 0, unavailable(err)
	}
	now := c.now()
	var settle []string
	left := 0
	for _, id := range ids {
		ch := row.Charging[id]
		r, found := rs[id]
		switch {
		case found && r.WasPlaced():
			settle = append(settle, id)
		case !found:
			// The draft is written before its charge: a record whose
			// reservation is gone (retention) is an orphan.
			if err := c.store.Refund(ctx, k, id, ch.Count); err != nil {
				return 0, unavailable(err)
			}
		case r.State.Terminal() && now.Sub(r.UpdatedAt) > api.StaleAfter:
			if err := c.fence.refund(ctx, r, nil, "reconcile"); err != nil {
				return 0, err
			}
		default:
			left++
		}
	}
	if len(settle) > 0 {
		if err := c.store.Settle(ctx, k, settle); err != nil {
			return 0, unavailable(err)
		}
	}
	return left, nil
}

func unavailableOrNil(err error) error {
	if err == nil {
		return nil
	}
	return unavailable(err)
}
