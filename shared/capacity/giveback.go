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

// SettleAfter: a quota row with charge records is due this long after its
// first one, for the reconciler to forget the records of reservations
// already placed that no later charge of the same process forgot.
const SettleAfter = 30 * time.Second

// fence writes to if the stored state is still from. It returns the
// reservation as it now is: to, or — when another writer moved it first —
// the stored one. The writer whose fence moved a reservation to a terminal
// state gives back what it holds; a create flow that finds its draft
// already terminal gives back what it wrote itself.
func (s *Service) fence(ctx context.Context, to Reservation, from api.ReservationState, point string) (Reservation, error) {
	cur, _, err := s.fenceWon(ctx, to, from, point, nil)
	if errors.Is(err, errGone) {
		return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", to.ReservationID)
	}
	return cur, err
}

// fenceWon is fence that also says whether this call made the transition.
// own is what the calling create flow wrote into the node-hours: freed if
// it lost the draft to a writer that ended it.
func (s *Service) fenceWon(ctx context.Context, to Reservation, from api.ReservationState, point string, own Placement) (Reservation, bool, error) {
	flow := flowOf(point)
	cur, err := s.Store.Transition(ctx, to, from)
	if errors.Is(err, ErrStale) {
		cur, err := s.lost(ctx, to, from, own, flow)
		return cur, false, err
	}
	if err != nil {
		return Reservation{}, false, unavailable(err)
	}
	if ferr := s.fault(point); ferr != nil {
		return Reservation{}, true, ferr
	}
	if cur.State.Terminal() {
		if err := s.giveBack(ctx, cur, flow); err != nil {
			return Reservation{}, true, err
		}
	}
	return cur, true, nil
}

// lost reads a reservation whose fence from → to lost to another writer.
// A create (or replay) that finds its draft ended unplaced — released,
// refused, expired — gives back what it charged and wrote itself
// (idempotent; the sweep does it if this crashes).
func (s *Service) lost(ctx context.Context, to Reservation, from api.ReservationState, own Placement, flow string) (Reservation, error) {
	cur, err := s.Store.GetReservation(ctx, to.TenantID, to.ReservationID)
	if errors.Is(err, ErrNotFound) {
		return Reservation{}, errGone
	}
	if err != nil {
		return Reservation{}, unavailable(err)
	}
	if from == api.Draft && cur.State.Terminal() && !cur.WasPlaced() {
		if err := s.refund(ctx, cur, own, flow); err != nil {
			return Reservation{}, err
		}
	}
	return cur, nil
}

// giveBack returns what a terminal reservation holds. Only the writer that
// fenced it terminal calls it — or, after api.StaleAfter, the one sweep that
// holds its due entry — so a placed reservation is credited exactly once:
// a credit record on the quota row covers retries of the credit write, and
// the reservation is marked credited before that record is forgotten.
//
// A draft released by its tenant may still have a create writing for it:
// its quota is given back at once and what its charge names is freed, but
// the charge's record stays (voided) until that create, losing its fence,
// or the sweep undoes what it wrote after.
func (s *Service) giveBack(ctx context.Context, r Reservation, flow string) error {
	if !r.WasPlaced() {
		if flow == flowRelease {
			return s.void(ctx, r, flow)
		}
		return s.refund(ctx, r, nil, flow)
	}
	// A move in flight holds its new devices too (and the old ones until
	// freed); nodes told to bind it are told to unbind.
	p := union(r.Placement(), PlacementOf(r.Layout(), r.Move), PlacementOf(r.Layout(), r.MovedFrom))
	if err := s.free(ctx, r, p); err != nil {
		return err
	}
	if err := s.fault(flow + ".unplaced"); err != nil {
		return err
	}
	if err := s.unbindHeld(ctx, r); err != nil {
		return err
	}
	if !r.Credited {
		if err := s.Store.Credit(ctx, r.Quota(), r.ReservationID, r.Count); err != nil {
			return unavailable(err)
		}
		if err := s.fault(flow + ".credited"); err != nil {
			return err
		}
		if err := s.Store.MarkCredited(ctx, r); err != nil && !errors.Is(err, ErrStale) {
			return unavailable(err)
		}
	}
	if err := s.Store.CreditDone(ctx, r.Quota(), r.ReservationID); err != nil {
		return unavailable(err)
	}
	return nil
}

// pending is what a draft that never got placed may hold: its charge
// record, if any, and every placement it may have written — the one its
// record names, the one its draft records (too large for the record), and
// own, the one the calling flow wrote.
func (s *Service) pending(ctx context.Context, r Reservation, own Placement) (Charged, bool, Placement, error) {
	ch, ok, err := s.Store.Pending(ctx, r.Quota(), r.ReservationID)
	if err != nil {
		return Charged{}, false, nil, unavailable(err)
	}
	return ch, ok, union(own, ch.Placement, r.PlanPlacement()), nil
}

// refund undoes what a draft that never got placed may hold: its devices,
// then its charge (the count, unless voided, and the record go in one
// conditional write, so it happens once whoever calls it).
func (s *Service) refund(ctx context.Context, r Reservation, own Placement, flow string) error {
	ch, ok, p, err := s.pending(ctx, r, own)
	if err != nil {
		return err
	}
	if err := s.free(ctx, r, p); err != nil {
		return err
	}
	if err := s.fault(flow + ".unplaced"); err != nil {
		return err
	}
	if ok {
		if err := s.Store.Refund(ctx, r.Quota(), r.ReservationID, ch.Count); err != nil {
			return unavailable(err)
		}
	}
	return s.fault(flow + ".credited")
}

// void is a released draft's give-back: what its charge and draft name is
// freed, and its count given back, at once; the record stays, voided, for
// the create or the sweep to undo what is written after.
func (s *Service) void(ctx context.Context, r Reservation, flow string) error {
	ch, ok, p, err := s.pending(ctx, r, nil)
	if err != nil {
		return err
	}
	if err := s.free(ctx, r, p); err != nil {
		return err
	}
	if err := s.fault(flow + ".unplaced"); err != nil {
		return err
	}
	if ok && !ch.Voided {
		if err := s.Store.Void(ctx, r.Quota(), r.ReservationID, ch.Count); err != nil {
			return unavailable(err)
		}
	}
	return s.fault(flow + ".credited")
}

// union is every node's devices of several placements, by node.
func union(ps ...Placement) Placement {
	by := map[int]Mask{}
	for _, p := range ps {
		for _, nd := range p {
			by[nd.Node] |= nd.Mask
		}
	}
	out := make(Placement, 0, len(by))
	for node, m := range by {
		out = append(out, NodeDevices{Node: node, Mask: m})
	}
	slices.SortFunc(out, func(a, b NodeDevices) int { return a.Node - b.Node })
	return out
}

// free removes r's entries of placement p from every node-hour of its
// window (a node-hour it never wrote to is left alone).
func (s *Service) free(ctx context.Context, r Reservation, p Placement) error {
	if len(p) == 0 {
		return nil
	}
	pr := PoolResource{PoolID: r.PoolID, Topology: Topology{Resource: r.Resource, NodeSize: r.Layout().NodeSize}}
	var keys []NodeHourKey
	for _, nd := range p {
		for _, h := range HoursOf(r.Window) {
			keys = append(keys, NodeHourKey{Node: nd.Node, Hour: h})
		}
	}
	if err := s.Store.Free(ctx, pr, keys, r.ReservationID); err != nil {
		return unavailable(err)
	}
	return nil
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
func (s *Service) settleLater(k QuotaKey, id string) {
	s.settles.mu.Lock()
	defer s.settles.mu.Unlock()
	if s.settles.rows == nil || len(s.settles.rows) >= maxSettleRows {
		s.settles.rows = map[QuotaKey][]string{}
	}
	ids := append(s.settles.rows[k], id)
	if len(ids) > maxSettlesPerRow {
		ids = ids[len(ids)-maxSettlesPerRow:]
	}
	s.settles.rows[k] = ids
}

// pendingSettles is what the next charge on k forgets.
func (s *Service) pendingSettles(k QuotaKey) []string {
	s.settles.mu.Lock()
	defer s.settles.mu.Unlock()
	return slices.Clone(s.settles.rows[k])
}

// settled drops ids a charge forgot.
func (s *Service) settled(k QuotaKey, ids []string) {
	if len(ids) == 0 {
		return
	}
	s.settles.mu.Lock()
	defer s.settles.mu.Unlock()
	left := slices.DeleteFunc(s.settles.rows[k], func(id string) bool { return slices.Contains(ids, id) })
	if len(left) == 0 {
		delete(s.settles.rows, k)
		return
	}
	s.settles.rows[k] = left
}

// settleRow forgets the charge records of a quota row whose reservations
// were placed (the count lives in them), and undoes those of reservations
// that ended unplaced longer than api.StaleAfter ago (no create is writing for
// them any more: a sweep that did not run) or are gone. Records of drafts
// stay: in flight, or expired by the reconciler in time. It returns how many
// records are left. The reconciler runs it on a due row; a charge on a row
// full of records runs it before it answers UNAVAILABLE.
func (s *Service) settleRow(ctx context.Context, k QuotaKey) (int, error) {
	row, ok, err := s.Store.Row(ctx, k)
	if err != nil || !ok {
		return 0, unavailableOrNil(err)
	}
	ids := slices.Sorted(maps.Keys(row.Charging))
	if len(ids) == 0 {
		return 0, nil
	}
	rs, err := s.Store.Reservations(ctx, k.TenantID, ids)
	if err != nil {
		return 0, unavailable(err)
	}
	now := s.now()
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
			if err := s.Store.Refund(ctx, k, id, ch.Count); err != nil {
				return 0, unavailable(err)
			}
		case r.State.Terminal() && now.Sub(r.UpdatedAt) > api.StaleAfter:
			if err := s.refund(ctx, r, nil, "reconcile"); err != nil {
				return 0, err
			}
		default:
			left++
		}
	}
	if len(settle) > 0 {
		if err := s.Store.Settle(ctx, k, settle); err != nil {
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
