package capacity

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// MaxMoves bounds how often one reservation is moved off nodes that failed
// it (and so its history): after that it waits for its nodes.
const MaxMoves = 4

// Binding fault points (see Service.Faults): after the nodes told to bind
// are recorded, after each bind, and after each step of a move.
const (
	FaultBindRecorded  = "bind.recorded"
	FaultBindTold      = "bind.told"
	FaultMoveNoted     = "move.noted"
	FaultMovePlanned   = "move.planned"
	FaultMoveWritten   = "move.written"
	FaultMoveCompleted = "move.completed"
	FaultMoveFreed     = "move.freed"
	FaultUnbound       = "unbind.told"
)

// BindFaultPoints lists the binding flow's points, in flow order.
var BindFaultPoints = []string{FaultBindRecorded, FaultBindTold, FaultMoveNoted, FaultMovePlanned,
	FaultMoveWritten, FaultMoveCompleted, FaultMoveFreed, FaultUnbound}

// Bindings is binding a reservation through the fleet's nodes: the
// reconciler's binding step (bind: record the nodes on the reservation,
// then tell each to bind), the move of a binding reservation off nodes
// that failed it (replace, finishMove), telling nodes to unbind it when it
// ends (unbindHeld), and a registering node's adoption of what it held
// unmanaged (Adopt).
type Bindings struct {
	hooks
	store    BindingStore
	nodes    NodeStore // nil: every node unmanaged
	binder   Binder    // unmanaged nodes' binding (nil: BindAtOnce)
	placer   *Placer
	calendar *Calendar
}

// BindingStore is what binding reads and writes of a reservation besides
// its nodes: its binding-time fields, and the node-hours a node adopts.
type BindingStore interface {
	// Amend writes to's binding-time fields — Bound, Move, MovedFrom,
	// Moves, NodeNoted, its devices and its history — if the stored
	// reservation is still in r's state with r's move in flight (ErrStale
	// otherwise), and returns it as written.
	Amend(ctx context.Context, r, to Reservation) (Reservation, error)
	// GetReservation reads one of tenant's reservations (ErrNotFound).
	GetReservation(ctx context.Context, tenant, id string) (Reservation, error)
	// NodeHours reads node-hours by key, consistently; missing ones are
	// absent from the map (as CalendarStore's).
	NodeHours(ctx context.Context, t PoolResource, keys []NodeHourKey) (map[NodeHourKey]NodeHour, error)
}

// NodeStore is the fleet as binding and placement see it (package fleet
// keeps the nodes; shared/dynamo/fleetdb implements both on the same node
// items; placement reads only its Eligibility). A node that never
// registered is absent: unmanaged, it binds at once and is always
// eligible, as in v0.5.
type NodeStore interface {
	// NodeStates reads the managed nodes among nodes of t, with what each
	// holds and reported for reservation id ("" for none).
	NodeStates(ctx context.Context, t PoolResource, nodes []int, id string) (map[int]NodeState, error)
	// Bind tells node to bind id's devices, written only against the node
	// as seen (its entries' Version): a new entry, or — seen.Entry an
	// unbind the node reported done — that unbind turned back into a bind,
	// for a newer placement only (b.Moves above the entry's). The same
	// write turns its binds of previous (other reservations on those
	// devices, whose windows have ended) into unbinds, so no answer lists
	// two binds on one device, and the unbind comes first. Idempotent;
	// ErrStale when the node changed since seen, ErrCalendarFull when it
	// holds its maximum of pending bindings.
	Bind(ctx context.Context, t PoolResource, node int, id string, b NodeBinding, previous []string, seen NodeState) error
	// Scrub tells node to unbind id's devices, which it held before it was
	// managed and has no entry for (seen.Entry ""): an unbind entry, never
	// a bind. Idempotent; ErrCalendarFull when the node holds its maximum
	// of pending bindings.
	Scrub(ctx context.Context, t PoolResource, node int, id string, b NodeBinding, seen NodeState) error
	// Unbind tells node to unbind id: its entry becomes an unbind; with
	// none, the node's entries' version still moves, so a bind written
	// against what was read before fails. Idempotent.
	Unbind(ctx context.Context, t PoolResource, node int, id string) error
	// Ineligible lists the managed nodes of t new reservations may not be
	// placed on (a read of every managed node of the resource).
	Ineligible(ctx context.Context, t PoolResource) (map[int]bool, error)
}

// NodeState is a managed node as binding sees it.
type NodeState struct {
	Ready    bool   // its last report was healthy and recent
	Cordoned bool   // by an operator or a rollout
	Entry    string // its entry for the reservation asked about: "", "bind" or "unbind"
	Reported string // what its last report said of it: "", "bound", "unbound" or "failed"
	// EntryMoves is the move count the entry was written for; Version, the
	// node's entries' version (what Bind is conditioned on).
	EntryMoves int
	Version    int64
	// Holders are its other reservations' bind entries: their devices.
	Holders map[string]Mask
	// Adopted: what it held when it registered was told to it (until
	// then a reservation it holds may have no entry on it).
	Adopted bool
	// Registered is when it registered: a reservation whose window
	// started before may have been bound at once on it, unmanaged.
	Registered time.Time
}

// Eligible reports whether new reservations may be placed on the node.
func (n NodeState) Eligible() bool { return n.Ready && !n.Cordoned }

// NodeBinding is what a node is told to bind.
type NodeBinding struct {
	TenantID string
	Mask     Mask
	Window   api.Window
	Moves    int // the reservation's move count when it was bound there
}

// nodesOf lists a placement's nodes, ascending.
func nodesOf(p Placement) []int {
	out := make([]int, len(p))
	for i, nd := range p {
		out[i] = nd.Node
	}
	slices.Sort(out)
	return out
}

// prOf is the pool resource of a reservation as far as it knows it.
func prOf(r Reservation) PoolResource {
	return PoolResource{PoolID: r.PoolID, Topology: r.Layout()}
}

// bind is the binding step of a reservation (docs/fleet.md, Binding): it
// reports true once every node holding its devices bound them. Unmanaged
// nodes bind at once (Binder). A managed node that is not ready, or
// reported the bind failed, makes it move onto free ready devices when
// they exist (replace), else wait. Every step is a conditional write on
// the reservation or one node, repeated harmlessly by the next pass.
func (b *Bindings) bind(ctx context.Context, r *Reservation, now time.Time, st *Step) (bool, error) {
	if b.nodes == nil {
		return true, b.bindAtOnce(ctx, *r)
	}
	if r.Move != nil || r.MovedFrom != nil {
		// A move a crash (or an overlapping pass) left half done: finish it;
		// the next pass binds where it landed.
		st.Told++
		return false, b.finishMove(ctx, r, now)
	}
	pr := prOf(*r)
	p := r.Placement()
	states, err := b.nodes.NodeStates(ctx, pr, nodesOf(p), r.ReservationID)
	if err != nil {
		return false, unavailable(err)
	}
	if len(states) == 0 {
		return true, b.bindAtOnce(ctx, *r)
	}
	var bad []int
	for n, ns := range states {
		if !ns.Ready || ns.Reported == "failed" {
			bad = append(bad, n)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		moves := r.Moves
		err := b.replace(ctx, r, bad, now)
		if r.Moves > moves {
			st.Told++
			st.NodesMoved++
		}
		return false, err
	}
	managed := make([]int, 0, len(states))
	tell := false
	for n, ns := range states {
		managed = append(managed, n)
		tell = tell || ns.Entry == "" || rebind(ns, r.Moves)
	}
	slices.Sort(managed)
	if !slices.Equal(r.Bound, managed) || tell {
		// Recorded before any node is told, so a release always knows
		// which nodes to tell to unbind — and written even when recorded
		// already, after the nodes were read: a fence. A release or move
		// before it fails it; one after it moves the nodes' entries'
		// version (Unbind), so the binds below, conditioned on the version
		// read, fail. No node is ever told to bind a terminal reservation.
		to := *r
		to.Bound = managed
		cur, err := b.store.Amend(ctx, *r, to)
		if err != nil {
			return false, amendErr(err)
		}
		*r = cur
		if err := b.fault(FaultBindRecorded); err != nil {
			return false, err
		}
	}
	all := true
	for _, nd := range p {
		ns, ok := states[nd.Node]
		if !ok {
			continue
		}
		if ns.Entry == "" || rebind(ns, r.Moves) {
			err := b.nodes.Bind(ctx, pr, nd.Node, r.ReservationID, NodeBinding{TenantID: r.TenantID, Mask: nd.Mask, Window: r.Window,
				Moves: r.Moves}, previousHolders(ns, nd.Mask), ns)
			switch {
			case errors.Is(err, ErrStale), errors.Is(err, ErrCalendarFull):
				// Moved under us, or full of bindings it has not reported:
				// the next pass reads it again.
			case err != nil:
				return false, unavailable(err)
			default:
				st.Told++
			}
			if err := b.fault(FaultBindTold); err != nil {
				return false, err
			}
		}
		// Active only from a bound that answers a bind it was told.
		all = all && ns.Entry == "bind" && ns.Reported == "bound"
	}
	return all, nil
}

// rebind: the node holds an unbind of the reservation left from an
// earlier placement there (moved off and back), reported scrubbed: it is
// bound again — until then its "bound" answers the old bind, not this one.
func rebind(ns NodeState, moves int) bool {
	return ns.Entry == "unbind" && ns.Reported == "unbound" && ns.EntryMoves < moves
}

// previousHolders lists the node's other binds on devices of mask.
func previousHolders(ns NodeState, mask Mask) []string {
	var out []string
	for id, m := range ns.Holders {
		if m&mask != 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// bindAtOnce binds on unmanaged nodes (the Binder; default at once).
func (b *Bindings) bindAtOnce(ctx context.Context, r Reservation) error {
	binder := b.binder
	if binder == nil {
		binder = BindAtOnce{}
	}
	return binder.Bind(ctx, r)
}

// amendErr maps a refused Amend: another writer moved the reservation
// (release, an overlapping pass) — the next pass reads it again.
func amendErr(err error) error {
	if errors.Is(err, ErrStale) {
		return errMoved
	}
	return unavailable(err)
}

// errMoved: the reservation changed under the binding step.
var errMoved = errors.New("capacity: the reservation changed under the binding step")

// replace moves a binding reservation off nodes that failed it: a history
// entry node_unreachable (once), then, when free eligible devices of the
// same shape fit its window, the move — its new devices recorded on it
// (Move), written into their node-hours, made its devices (history
// replaced, quota unchanged), the old ones freed and their nodes told to
// unbind. Without a fit it waits (the next pass tries again) for its nodes
// or its window's end.
func (b *Bindings) replace(ctx context.Context, r *Reservation, bad []int, now time.Time) error {
	if !r.NodeNoted {
		to := *r
		to.NodeNoted = true
		to.History = append(slices.Clone(r.History), api.Event{State: api.Binding, At: now.UTC(), Reason: api.ReasonNodeUnreachable})
		cur, err := b.store.Amend(ctx, *r, to)
		if err != nil {
			return amendErr(err)
		}
		*r = cur
		if err := b.fault(FaultMoveNoted); err != nil {
			return err
		}
	}
	if r.Moves >= MaxMoves || !now.Before(r.Window.End) {
		return nil
	}
	req := requestOf(*r)
	req.Attempt = r.Moves + 1
	req.Exclude = map[int]bool{}
	for _, n := range nodesOf(r.Placement()) {
		req.Exclude[n] = true
	}
	pr, p, state, err := b.placer.choose(ctx, *r, req)
	switch {
	case isNoFit(err):
		return nil // nothing fits: wait
	case err != nil:
		return err
	}
	if p, state, err = b.placer.eligible(ctx, *r, req, pr, p, state); isNoFit(err) {
		return nil
	} else if err != nil {
		return err
	}
	to := *r
	to.Move = p.Devices(pr.NodeSize)
	cur, err := b.store.Amend(ctx, *r, to)
	if err != nil {
		return amendErr(err)
	}
	*r = cur
	if err := b.fault(FaultMovePlanned); err != nil {
		return err
	}
	hours := HoursOf(r.Window)
	if !covers(state, p, hours) || !fits(state, p, req, hours) {
		if state, err = b.calendar.placementHours(ctx, pr, p, hours); err != nil {
			return err
		}
	}
	if fits(state, p, req, hours) {
		lost, err := b.calendar.write(ctx, state, p, req, hours)
		if err != nil {
			return err
		}
		if !lost {
			if err := b.fault(FaultMoveWritten); err != nil {
				return err
			}
			return b.finishMove(ctx, r, now)
		}
	}
	return b.abandonMove(ctx, r)
}

// finishMove completes a move recorded on r: its new devices' entries
// are made sure of (a crash may have cut their write short; a racing
// create may have taken one, and then the move is abandoned), made the
// reservation's devices, then the old ones are freed and the nodes that
// were told to bind them told to unbind.
func (b *Bindings) finishMove(ctx context.Context, r *Reservation, now time.Time) error {
	if r.Move != nil {
		pr := prOf(*r)
		p := PlacementOf(pr.Topology, r.Move)
		req := requestOf(*r)
		hours := HoursOf(r.Window)
		state, err := b.calendar.placementHours(ctx, pr, p, hours)
		if err != nil {
			return err
		}
		if !fits(state, p, req, hours) {
			return b.abandonMove(ctx, r)
		}
		if lost, err := b.calendar.write(ctx, state, p, req, hours); err != nil {
			return err
		} else if lost {
			return b.abandonMove(ctx, r)
		}
		to := *r
		to.MovedFrom, to.Devices, to.Move = r.Devices, r.Move, nil
		to.Moves, to.NodeNoted = r.Moves+1, false
		to.History = append(slices.Clone(r.History), api.Event{State: api.Binding, At: now.UTC(), Reason: api.ReasonReplaced})
		cur, err := b.store.Amend(ctx, *r, to.WithIDs())
		if err != nil {
			return amendErr(err)
		}
		*r = cur
		if err := b.fault(FaultMoveCompleted); err != nil {
			return err
		}
	}
	if r.MovedFrom != nil {
		// The old nodes are told to unbind (or scrubbed) before their
		// devices are freed: freed first, another reservation could be
		// placed there and its bind told before the unbind.
		old := PlacementOf(r.Layout(), r.MovedFrom)
		untold, err := b.freeTold(ctx, *r, old, old)
		if err != nil {
			return err
		}
		to := *r
		to.MovedFrom, to.Bound = nil, nil
		if len(untold) > 0 {
			// A scrub not written (the node holds its maximum of pending
			// entries): the move stays unfinished, due, holding only the
			// old devices of the nodes the scrub is owed on; the next
			// pass tries again.
			to.MovedFrom = only(old, untold).Devices(r.Layout().NodeSize)
			if slices.Equal(to.MovedFrom, r.MovedFrom) && len(r.Bound) == 0 {
				return nil
			}
		}
		cur, err := b.store.Amend(ctx, *r, to)
		if err != nil {
			return amendErr(err)
		}
		*r = cur
		if len(untold) > 0 {
			return nil
		}
		if err := b.fault(FaultMoveFreed); err != nil {
			return err
		}
	}
	return nil
}

// abandonMove undoes a move that lost its devices to a racing create: what
// it wrote is freed and the record dropped; the next pass tries again.
func (b *Bindings) abandonMove(ctx context.Context, r *Reservation) error {
	if err := b.calendar.free(ctx, *r, PlacementOf(r.Layout(), r.Move)); err != nil {
		return err
	}
	to := *r
	to.Move = nil
	cur, err := b.store.Amend(ctx, *r, to)
	if err != nil {
		return amendErr(err)
	}
	*r = cur
	return nil
}

// unbind tells nodes to unbind r (those it recorded telling to bind).
func (b *Bindings) unbind(ctx context.Context, r Reservation, nodes []int) error {
	if b.nodes == nil || len(nodes) == 0 {
		return nil
	}
	pr := prOf(r)
	err := b.each(ctx, len(nodes), func(i int) error {
		if err := b.nodes.Unbind(ctx, pr, nodes[i], r.ReservationID); err != nil {
			return unavailable(err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return b.fault(FaultUnbound)
}

// freeTold frees r's entries of placement p once every node that may
// hold them was told to unbind r (docs/fleet.md, Binding): the nodes told
// to bind it (Bound) are told to unbind, and each managed node of scrub (the
// part of p r may have been bound on) that may hold r's devices without an
// entry of it is scrubbed (unbindHeld) — before the free, so no other
// reservation can be placed on those devices and told to bind ahead of the
// unbind. A node whose scrub is not written keeps r's entries: it is
// returned (untold), and its caller keeps r due until it is. A node that
// registered between that read and the free is looked at once more after
// the free (its adoption, reading the node-hours after the free, would not
// find r): its scrub, when needed, comes right after the free, and when
// it cannot be written it is returned too, for the caller's retries.
func (b *Bindings) freeTold(ctx context.Context, r Reservation, p, scrub Placement) (untold []int, err error) {
	untold, unmanaged, err := b.unbindHeld(ctx, r, scrub)
	if err != nil {
		return nil, err
	}
	if err := b.calendar.free(ctx, r, without(p, untold)); err != nil {
		return nil, err
	}
	if len(unmanaged) == 0 {
		slices.Sort(untold)
		return untold, nil
	}
	late, _, err := b.scrub(ctx, r, only(scrub, unmanaged))
	if err != nil {
		return nil, err
	}
	return nodesOf(union(only(scrub, untold), only(scrub, late))), nil
}

// unbindHeld tells every node r was bound through (Bound) to unbind it,
// then scrubs the nodes of p that may hold r's devices with no entry of it
// (scrub). It returns the nodes whose scrub is not written, and those it
// found unmanaged.
func (b *Bindings) unbindHeld(ctx context.Context, r Reservation, p Placement) (untold, unmanaged []int, err error) {
	if err := b.unbind(ctx, r, r.Bound); err != nil {
		return nil, nil, err
	}
	return b.scrub(ctx, r, p)
}

// scrub tells r's unbind, as a scrub (an unbind entry where the node has
// none), to each managed node of p that holds no entry of r and may hold
// its devices: adoption not done (a register cut short: the sweep finishes
// it after r's entries were freed, so Adopt would never see r), or
// registered after r's window started — bound at once while unmanaged, and
// maybe never told: the adoption read r while it was binding and left it
// to the binding step, whose pass had read the node before it registered
// and made r active (the fleet protocol simulation, seed 16 of the F05
// revert's schedule), or moved r off it (issue 39). A node registered
// before the window was managed when r was first bound: it holds r only
// through an entry. Also a node recorded on r (Bound) by a pass fenced
// before its Bind: it has no entry (seed 15: the Unbind only moved the
// version). It returns the nodes whose scrub could not be written — the
// node holds its maximum of pending entries, or changed under the write —
// and the nodes of p that are not managed.
func (b *Bindings) scrub(ctx context.Context, r Reservation, p Placement) (untold, unmanaged []int, err error) {
	if b.nodes == nil || len(p) == 0 {
		return nil, nil, nil
	}
	pr := prOf(r)
	states, err := b.nodes.NodeStates(ctx, pr, nodesOf(p), r.ReservationID)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	for _, nd := range p {
		ns, ok := states[nd.Node]
		if !ok {
			unmanaged = append(unmanaged, nd.Node)
			continue
		}
		// api.StaleAfter: a register's write may land that long after its clock.
		late := ns.Registered.After(r.Window.Start.Add(-api.StaleAfter))
		if ns.Entry != "" || ns.Adopted && !late {
			continue // its entry is unbound (Bound), or managed when r was bound
		}
		nb := NodeBinding{TenantID: r.TenantID, Mask: nd.Mask, Window: r.Window, Moves: r.Moves}
		switch err := b.nodes.Scrub(ctx, pr, nd.Node, r.ReservationID, nb, ns); {
		case errors.Is(err, ErrCalendarFull), errors.Is(err, ErrStale):
			// Owed, not dropped: the caller keeps r's devices there and r
			// due until a later pass writes it.
			b.logger().Warn("scrub not written: the reservation keeps its devices there until it is", "reservation", r.ReservationID,
				"node", nd.Node, "error", err.Error())
			untold = append(untold, nd.Node)
		case err != nil:
			return nil, nil, unavailable(err)
		}
	}
	return untold, unmanaged, nil
}

// releaseUnbind tells the nodes a binding or active reservation was bound
// through to unbind it before the fence makes it terminal, so no node is
// ever told to bind a terminal reservation, whatever a crash cuts short:
// cut between the two, the reservation stays what it was (the release is
// retried, or its window ends) while its nodes scrub — never the other way
// round. The give-back after the fence tells them again (idempotent), and
// keeps the devices of a node whose scrub is still not written.
func (b *Bindings) releaseUnbind(ctx context.Context, r Reservation) error {
	if r.State != api.Binding && r.State != api.Active {
		return nil
	}
	_, _, err := b.unbindHeld(ctx, r, mayHold(r))
	return err
}

// mayHold is where r may have been bound: its devices, and those of a
// move it has not finished leaving (MovedFrom). The devices of a move in
// flight (Move) are not bound before the move completes.
func mayHold(r Reservation) Placement {
	return union(r.Placement(), PlacementOf(r.Layout(), r.MovedFrom))
}

// Adopt tells a node that registered at `at` while it held reservations
// — bound at once while it was unmanaged — to bind those active now, and
// records it on each (Bound) first, so its release or end tells the node
// to unbind it (docs/fleet.md, Binding); those that ended since (an
// adoption the sweep finishes after a register cut short) it tells to
// unbind at once: the node may hold their devices still. Reservations
// still binding are the binding step's. Idempotent: the fleet calls it
// until it succeeds.
func (b *Bindings) Adopt(ctx context.Context, t PoolResource, node int, at time.Time) error {
	if b.nodes == nil {
		return nil
	}
	k := NodeHourKey{Node: node, Hour: HourOf(at)}
	got, err := b.store.NodeHours(ctx, t, []NodeHourKey{k})
	if err != nil {
		return unavailable(err)
	}
	ids := make([]string, 0, len(got[k].Entries))
	for id, e := range got[k].Entries {
		if !at.Before(e.Window.Start) && at.Before(e.Window.End) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		e := got[k].Entries[id]
		r, err := b.store.GetReservation(ctx, e.Tenant, id)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return unavailable(err)
		case r.State != api.Active && !r.State.Terminal():
			continue
		}
		states, err := b.nodes.NodeStates(ctx, t, []int{node}, id)
		if err != nil {
			return unavailable(err)
		}
		ns, ok := states[node]
		if !ok || ns.Entry != "" {
			continue
		}
		if r.State.Terminal() {
			nb := NodeBinding{TenantID: r.TenantID, Mask: e.Mask, Window: r.Window, Moves: r.Moves}
			if err := b.nodes.Scrub(ctx, t, node, id, nb, ns); errors.Is(err, ErrStale) {
				return errMoved
			} else if err != nil {
				return unavailable(err)
			}
			continue
		}
		// Recorded (and fenced, as in bind) after the node was read.
		to := r
		if !slices.Contains(r.Bound, node) {
			to.Bound = append(slices.Clone(r.Bound), node)
			slices.Sort(to.Bound)
		}
		if r, err = b.store.Amend(ctx, r, to); err != nil {
			return amendErr(err)
		}
		nb := NodeBinding{TenantID: r.TenantID, Mask: e.Mask, Window: r.Window, Moves: r.Moves}
		if err := b.nodes.Bind(ctx, t, node, id, nb, previousHolders(ns, e.Mask), ns); err != nil {
			if errors.Is(err, ErrStale) {
				return errMoved
			}
			return unavailable(err)
		}
	}
	return nil
}

// MoveToken names a move in flight: what Amend conditions on.
func MoveToken(devices []int) string {
	if devices == nil {
		return ""
	}
	var b strings.Builder
	for i, d := range devices {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(d))
	}
	return b.String()
}
