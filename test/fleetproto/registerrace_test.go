package fleetproto

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// The register race adversary (every seed): a node registering while it
// holds a reservation bound at once (unmanaged), at the precise points of
// the binding step and the adoption where the control plane has told it
// nothing of that reservation yet — each of which once left such a node
// never told to unbind it (checks h and j). Its pools are its own, booked
// by no tenant, swept by the same passes:
//
//   - move (pool p4: node 0 unmanaged, nodes 1–3 managed): a reservation
//     of two whole nodes, node 0 and a managed one; at the binding pass's
//     bind of the managed node (node 0 read unmanaged: bound at once),
//     node 0 registers, its pending entries are filled to MaxBindings and
//     it stays silent for a while — the next pass moves the reservation
//     off it (registered, not ready), and the move's scrub of node 0
//     cannot be written until node 0 reports again (F20, F21);
//   - read (pool p5, three unmanaged nodes): a whole-node reservation; its
//     node registers right after the binding pass read it unmanaged — the
//     adoption leaves it to that pass, which makes it active: the node is
//     adopted and never told (F15);
//   - cut (p5): an active whole-node reservation; its node registers and
//     the adoption is cut short after it recorded the node on the
//     reservation, before it told the node to bind; the reservation is
//     released at once, before the sweep adopts (F12);
//   - adopt (p5): an active whole-node reservation; its node registers and
//     is adopted (F08).
const (
	movePool  = "p4"
	adoptPool = "p5"
)

// racePools creates the register race's pools and registers p4's nodes
// 1–3.
func (w *world) racePools(ctx context.Context) {
	for _, p := range []struct {
		id    string
		nodes int
	}{{movePool, 4}, {adoptPool, 3}} {
		if _, err := w.cap.Pools().Create(ctx, ownerTenant, p.id, map[string]int{"gpu": p.nodes * nodeSize}, map[string]int{"gpu": nodeSize}); err != nil {
			w.t.Fatal(err)
		}
		for k := range p.nodes {
			ref := nodeRef{p.id, k}
			n := w.newNode(ref)
			w.nodes[ref], w.order = n, append(w.order, ref)
			if p.id != movePool || k == 0 {
				continue // unmanaged, until the adversary registers it
			}
			if err := w.register(ctx, n); err != nil {
				w.t.Fatal(err)
			}
			if err := n.beat(ctx, w); err != nil {
				w.t.Fatal(err)
			}
		}
	}
}

// racePool: ref is one of the register race's nodes.
func racePool(pool string) bool { return pool == movePool || pool == adoptPool }

// registerRace starts the adversary's actors.
func (w *world) registerRace() {
	w.s.spawnClean(context.Background(), "adversary register race: move", 0, w.raceMove)
	w.s.spawnClean(context.Background(), "adversary register race: adopt", 0, w.raceAdopt)
}

// raceCreate books count devices of pool for the window, as the
// adversary's owner (nothing injected: its actor is clean).
func (w *world) raceCreate(ctx context.Context, pool string, count int, token string, start time.Time, d time.Duration) (capacity.Reservation, error) {
	req := capacity.CreateRequest{TenantID: ownerTenant, PoolID: pool, Resource: "gpu", Count: count, Principal: "race", ClientToken: token,
		Start: &start, End: start.Add(d)}
	var r capacity.Reservation
	err, _, _ := w.invoke(ctx, capacity.FlowDeadline, func(ctx context.Context) error {
		var err error
		r, err = w.cap.Admission().Create(ctx, req, allow)
		return err
	})
	w.noInternal("create "+token, err)
	if err == nil && r.State == api.Placed {
		w.placedOn(r, w.s.steps)
	}
	return r, err
}

// raceRelease releases r (as its tenant).
func (w *world) raceRelease(ctx context.Context, r capacity.Reservation) {
	err, _, _ := w.invoke(ctx, capacity.ReleaseTimeout, func(ctx context.Context) error {
		_, err := w.cap.Reservations().Release(ctx, r.TenantID, r.ReservationID)
		return err
	})
	w.noInternal("release "+r.ReservationID, err)
}

// raceMove books a reservation of two whole nodes of p4, node 0 and a
// managed one: the other two managed nodes are held for its window
// first (a hold that lands on node 0 is released and tried again), then
// released once it is placed — the room its move goes to.
func (w *world) raceMove(ctx context.Context) {
	w.s.sleep(ctx, time.Duration(15+w.rng.IntN(30))*time.Second)
	start := w.clock.Now().Add(10 * time.Second)
	var holds []capacity.Reservation
	defer func() {
		for _, h := range holds {
			w.raceRelease(ctx, h)
		}
	}()
	for i := 0; len(holds) < 2 && i < 12; i++ {
		h, err := w.raceCreate(ctx, movePool, nodeSize, fmt.Sprintf("race-hold-%d", i), start, 150*time.Second)
		if err != nil || h.State != api.Placed {
			w.note("adversary register race (move): hold %d: %v %s", i, err, h.State)
			return
		}
		if slices.Contains(nodesOf(h), 0) {
			w.raceRelease(ctx, h)
			continue
		}
		holds = append(holds, h)
	}
	r, err := w.raceCreate(ctx, movePool, 2*nodeSize, "race-move", start, 150*time.Second)
	if err != nil || r.State != api.Placed || !slices.Contains(nodesOf(r), 0) {
		w.note("adversary register race (move): create: %v %s on %v", err, r.State, nodesOf(r))
		return
	}
	w.adv.race.move = r.ReservationID
	w.note("adversary register race (move): %s on p4 %v", r.ReservationID, nodesOf(r))
}

// nodesOf lists the node indexes of r's placement.
func nodesOf(r capacity.Reservation) []int {
	var out []int
	for _, nd := range r.Placement() {
		out = append(out, nd.Node)
	}
	return out
}

// raceBound: the binding pass just told a managed node of the move race's
// reservation to bind it (node 0, unmanaged, counts as bound at once):
// node 0 registers now — the adoption leaves the binding reservation to
// the binding step — is filled to MaxBindings pending entries and goes
// silent, so the next pass moves the reservation off it with its scrub
// not writable until node 0 reports again.
func (w *world) raceBound(ctx context.Context, t capacity.PoolResource, id string) {
	a := &w.adv.race
	if a.move == "" || id != a.move || a.moved || !inPass(ctx) {
		return
	}
	a.moved = true
	n := w.nodes[nodeRef{movePool, 0}]
	if !w.raceRegister(ctx, n, false) {
		return
	}
	w.fillEntries(n, t)
	n.silentUntil = w.clock.Now().Add(45 * time.Second)
	w.note("adversary register race (move): %s registered while %s binds, filled to %d entries, silent until %s", n.ref, id,
		api.MaxBindings, n.silentUntil.Format("15:04:05"))
}

// fillEntries writes pending unbinds of reservations that do not exist to
// n's item until it holds api.MaxBindings entries (the node is told them
// and reports them done once it speaks again; the sweep forgets them).
func (w *world) fillEntries(n *node, t capacity.PoolResource) {
	rec, ok := w.node(n.ref)
	if !ok {
		return
	}
	win := api.Window{Start: w.clock.Now(), End: w.clock.Now().Add(time.Minute)}
	for i := len(rec.Entries); i < api.MaxBindings; i++ {
		id := fmt.Sprintf("FILL%05dX%016d", i, w.seed)
		err := w.fleetI.Scrub(context.Background(), t, n.ref.k, id, capacity.NodeBinding{TenantID: filler, Mask: 1, Window: win}, capacity.NodeState{})
		if err != nil {
			w.t.Fatalf("filling %s: %v", n.ref, err)
		}
	}
}

// raceRegister registers n from an actor of its own (nothing injected)
// while the calling actor waits; cut: its adoption is cut short at its
// bind (after it recorded the node on the reservation). It says whether
// the node is registered.
func (w *world) raceRegister(ctx context.Context, n *node, cut bool) bool {
	done := false
	w.s.spawnClean(ctx, "adversary register race: register "+n.ref.String(), 10*time.Second, func(ctx context.Context) {
		actorOf(ctx).cutAdoption = cut
		err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error { return w.register(ctx, n) })
		if cut && err != nil {
			if _, ok := w.node(n.ref); ok { // written, its adoption cut short
				n.managed, n.registeredAt = true, w.clock.Now()
				w.wentOut(n.ref, "registered")
			}
		} else {
			w.noInternal("register "+n.ref.String(), err)
		}
		n.late = n.late || n.managed
		done = true
	})
	for i := 0; !done && i < 200; i++ {
		w.s.sleep(ctx, 50*time.Millisecond)
	}
	return n.managed
}

// raceAdopt books three whole-node reservations of p5 for one window (one
// on each of its unmanaged nodes) and races each node's registration in
// its own way: read, cut, adopt.
func (w *world) raceAdopt(ctx context.Context) {
	w.s.sleep(ctx, time.Duration(15+w.rng.IntN(30))*time.Second)
	start := w.clock.Now().Add(10 * time.Second)
	var rs []capacity.Reservation
	for i := range 3 {
		r, err := w.raceCreate(ctx, adoptPool, nodeSize, fmt.Sprintf("race-adopt-%d", i), start, 100*time.Second)
		if err != nil || r.State != api.Placed {
			w.note("adversary register race (adopt): create %d: %v %s", i, err, r.State)
			return
		}
		rs = append(rs, r)
	}
	a := &w.adv.race
	a.read = rs[0].ReservationID
	w.note("adversary register race (read): %s on %s", rs[0].ReservationID, w.refOf(rs[0]))
	for _, c := range []struct {
		r   capacity.Reservation
		cut bool
	}{{rs[1], true}, {rs[2], false}} {
		w.s.spawnClean(ctx, "adversary register race: "+map[bool]string{true: "cut", false: "adopt"}[c.cut], 0, func(ctx context.Context) {
			n := w.nodes[w.refOf(c.r)]
			for {
				w.s.sleep(ctx, time.Second)
				cur, err := w.capI.GetReservation(context.Background(), c.r.TenantID, c.r.ReservationID)
				if err != nil || cur.State.Terminal() || !w.clock.Now().Before(w.end) {
					return
				}
				if cur.State == api.Active {
					break
				}
			}
			ok := w.raceRegister(ctx, n, c.cut)
			w.note("adversary register race (%s): %s registered (%v) while %s is active", map[bool]string{true: "cut", false: "adopt"}[c.cut], n.ref,
				ok, c.r.ReservationID)
			if c.cut && ok {
				w.raceRelease(ctx, c.r) // before the sweep finishes the adoption
			}
		})
	}
}

// refOf is the node of a whole-node reservation.
func (w *world) refOf(r capacity.Reservation) nodeRef {
	return nodeRef{r.PoolID, r.Placement()[0].Node}
}

// raceRead: the binding pass just read the read race's node, unmanaged:
// it registers before the pass goes on (the adoption finds the
// reservation binding and leaves it to this pass, which binds it at once).
func (w *world) raceRead(ctx context.Context, id string, got map[int]capacity.NodeState) {
	a := &w.adv.race
	if a.read == "" || id != a.read || a.readDone || !inPass(ctx) || len(got) > 0 {
		return
	}
	r, err := w.capI.GetReservation(context.Background(), ownerTenant, id)
	if err != nil || r.State != api.Binding {
		return
	}
	a.readDone = true
	n := w.nodes[w.refOf(r)]
	ok := w.raceRegister(ctx, n, false)
	w.note("adversary register race (read): %s registered (%v) right after a pass read it unmanaged for %s", n.ref, ok, id)
}

// raceState is the register race's progress.
type raceState struct {
	move, read      string // the reservations of the move and read races
	moved, readDone bool
}
