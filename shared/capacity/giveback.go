package capacity

import (
	"context"
	"errors"
	"slices"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// Fence is a reservation's transitions and what ending one gives back.
// Each transition is one conditional write on the state it was read in
// (the fence: whoever writes first wins; a loser reads what won). The
// writer whose fence ends a reservation gives back what it holds — its
// devices (Calendar), its nodes' bindings (Bindings), its quota (a credit,
// or the refund of its charge) — and a create that finds its draft ended
// by another writer gives back what it charged and wrote itself.
type Fence struct {
	hooks
	store    FenceStore
	calendar *Calendar
	bindings *Bindings
}

// FenceStore is what transitions and give-backs write: a reservation's
// state and the quota rows' records of it.
type FenceStore interface {
	// Transition writes to's state, reason, history, due and retention —
	// its devices only when to is placed: a writer never overwrites a
	// placement it did not make — if the stored state is still from, and
	// returns the reservation as that write left it (ErrStale otherwise).
	Transition(ctx context.Context, to Reservation, from api.ReservationState) (Reservation, error)
	// GetReservation reads one of tenant's reservations (ErrNotFound).
	GetReservation(ctx context.Context, tenant, id string) (Reservation, error)
	// MarkCredited records that a terminal reservation's quota was given
	// back (idempotent).
	MarkCredited(ctx context.Context, r Reservation) error
	// Pending returns id's charge record, if any (in flight or voided).
	Pending(ctx context.Context, k QuotaKey, id string) (Charged, bool, error)
	// Refund forgets id's charge record, giving back its count unless it
	// was voided, once (as ChargeStore's).
	Refund(ctx context.Context, k QuotaKey, id string, count int) error
	// Void gives id's charge in flight back at once (used −= count: its
	// draft was released), keeping the record and the placement it names
	// for whoever undoes what the create wrote. Idempotent.
	Void(ctx context.Context, k QuotaKey, id string, count int) error
	// Credit gives back a placed reservation's count, once: it leaves a
	// credit record (apart from the charge records) that CreditDone forgets.
	Credit(ctx context.Context, k QuotaKey, id string, count int) error
	// CreditDone forgets id's credit record.
	CreditDone(ctx context.Context, k QuotaKey, id string) error
	// SetUnscrubbed records on a terminal reservation the nodes whose
	// scrub is not written yet (none: nil), if its state is still r's.
	SetUnscrubbed(ctx context.Context, r Reservation, nodes []int) error
}

// move writes to if the stored state is still from: the fence. It
// returns the reservation as it now is: to, or — when another writer moved
// it first — the stored one. The writer whose fence moved a reservation to a terminal
// state gives back what it holds; a create flow that finds its draft
// already terminal gives back what it wrote itself.
func (f *Fence) move(ctx context.Context, to Reservation, from api.ReservationState, point string) (Reservation, error) {
	cur, _, err := f.moveWon(ctx, to, from, point, nil)
	if errors.Is(err, errGone) {
		return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", to.ReservationID)
	}
	return cur, err
}

// moveWon is move that also says whether this call made the transition.
// own is what the calling create flow wrote into the node-hours: freed if
// it lost the draft to a writer that ended it.
func (f *Fence) moveWon(ctx context.Context, to Reservation, from api.ReservationState, point string, own Placement) (Reservation, bool, error) {
	flow := flowOf(point)
	cur, err := f.store.Transition(ctx, to, from)
	if errors.Is(err, ErrStale) {
		cur, err := f.lost(ctx, to, from, own, flow)
		return cur, false, err
	}
	if err != nil {
		return Reservation{}, false, unavailable(err)
	}
	if ferr := f.fault(point); ferr != nil {
		return Reservation{}, true, ferr
	}
	if cur.State.Terminal() {
		if _, err := f.giveBack(ctx, cur, flow); err != nil {
			return Reservation{}, true, err
		}
	}
	return cur, true, nil
}

// lost reads a reservation whose fence from → to lost to another writer.
// A create (or replay) that finds its draft ended unplaced — released,
// refused, expired — gives back what it charged and wrote itself
// (idempotent; the sweep does it if this crashes).
func (f *Fence) lost(ctx context.Context, to Reservation, from api.ReservationState, own Placement, flow string) (Reservation, error) {
	cur, err := f.store.GetReservation(ctx, to.TenantID, to.ReservationID)
	if errors.Is(err, ErrNotFound) {
		return Reservation{}, errGone
	}
	if err != nil {
		return Reservation{}, unavailable(err)
	}
	if from == api.Draft && cur.State.Terminal() && !cur.WasPlaced() {
		if err := f.refund(ctx, cur, own, flow); err != nil {
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
func (f *Fence) giveBack(ctx context.Context, r Reservation, flow string) (untold []int, err error) {
	if !r.WasPlaced() {
		if flow == flowRelease {
			return nil, f.void(ctx, r, flow)
		}
		return nil, f.refund(ctx, r, nil, flow)
	}
	if untold, err = f.freeHeld(ctx, r); err != nil {
		return nil, err
	}
	if err := f.fault(flow + ".unplaced"); err != nil {
		return nil, err
	}
	if !r.Credited {
		if err := f.store.Credit(ctx, r.Quota(), r.ReservationID, r.Count); err != nil {
			return nil, unavailable(err)
		}
		if err := f.fault(flow + ".credited"); err != nil {
			return nil, err
		}
		if err := f.store.MarkCredited(ctx, r); err != nil && !errors.Is(err, ErrStale) {
			return nil, unavailable(err)
		}
	}
	if err := f.store.CreditDone(ctx, r.Quota(), r.ReservationID); err != nil {
		return nil, unavailable(err)
	}
	return untold, nil
}

// freeHeld frees what a terminal reservation holds — its devices, and a
// move's in flight (the old ones until freed, the new ones) — once every
// node that may hold them was told to unbind it (Bindings.freeTold). On a
// node whose scrub is not written its devices stay its own, so nothing
// else is placed there before the scrub: those nodes are returned and
// recorded on it (Unscrubbed: what Check allows, and what keeps its sweep
// coming back — level-triggered, each sweep tells and frees again).
func (f *Fence) freeHeld(ctx context.Context, r Reservation) ([]int, error) {
	p := union(r.Placement(), PlacementOf(r.Layout(), r.Move), PlacementOf(r.Layout(), r.MovedFrom))
	scrub, told := mayHold(r), r
	if r.Credited && len(r.Unscrubbed) > 0 {
		// A sweep's retry: the give-back that credited it had told every
		// node (Bound) and freed all but these.
		p, scrub = only(p, r.Unscrubbed), only(scrub, r.Unscrubbed)
		told.Bound = nil
	}
	untold, err := f.bindings.freeTold(ctx, told, p, scrub)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(untold, r.Unscrubbed) {
		if err := f.store.SetUnscrubbed(ctx, r, untold); err != nil {
			return nil, unavailable(err)
		}
	}
	return untold, nil
}

// pending is what a draft that never got placed may hold: its charge
// record, if any, and every placement it may have written — the one its
// record names, the one its draft records (too large for the record), and
// own, the one the calling flow wrote.
func (f *Fence) pending(ctx context.Context, r Reservation, own Placement) (Charged, bool, Placement, error) {
	ch, ok, err := f.store.Pending(ctx, r.Quota(), r.ReservationID)
	if err != nil {
		return Charged{}, false, nil, unavailable(err)
	}
	return ch, ok, union(own, ch.Placement, r.PlanPlacement()), nil
}

// refund undoes what a draft that never got placed may hold: its devices,
// then its charge (the count, unless voided, and the record go in one
// conditional write, so it happens once whoever calls it).
func (f *Fence) refund(ctx context.Context, r Reservation, own Placement, flow string) error {
	ch, ok, p, err := f.pending(ctx, r, own)
	if err != nil {
		return err
	}
	if err := f.calendar.free(ctx, r, p); err != nil {
		return err
	}
	if err := f.fault(flow + ".unplaced"); err != nil {
		return err
	}
	if ok {
		if err := f.store.Refund(ctx, r.Quota(), r.ReservationID, ch.Count); err != nil {
			return unavailable(err)
		}
	}
	return f.fault(flow + ".credited")
}

// void is a released draft's give-back: what its charge and draft name is
// freed, and its count given back, at once; the record stays, voided, for
// the create or the sweep to undo what is written after.
func (f *Fence) void(ctx context.Context, r Reservation, flow string) error {
	ch, ok, p, err := f.pending(ctx, r, nil)
	if err != nil {
		return err
	}
	if err := f.calendar.free(ctx, r, p); err != nil {
		return err
	}
	if err := f.fault(flow + ".unplaced"); err != nil {
		return err
	}
	if ok && !ch.Voided {
		if err := f.store.Void(ctx, r.Quota(), r.ReservationID, ch.Count); err != nil {
			return unavailable(err)
		}
	}
	return f.fault(flow + ".credited")
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

// only is p on nodes only; without, p without them.
func only(p Placement, nodes []int) Placement { return pick(p, nodes, true) }

func without(p Placement, nodes []int) Placement { return pick(p, nodes, false) }

func pick(p Placement, nodes []int, in bool) Placement {
	out := make(Placement, 0, len(p))
	for _, nd := range p {
		if slices.Contains(nodes, nd.Node) == in {
			out = append(out, nd)
		}
	}
	return out
}
