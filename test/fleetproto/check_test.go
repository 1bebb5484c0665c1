package fleetproto

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/reconcile"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// The checker. What it can judge at the moment something happens it
// judges then, against the table read right after (no actor runs in
// between): every heartbeat answer (a, and i for a node that runs
// nothing), every create's placement (b),
// every node a rollout starts (d), every reservation becoming active (e).
// The rest at quiescence: flags and the out-of-service count (c), active
// reservations again (e), the rollout's outcome (f), the capacity
// invariants (capacity.Check), and, once every window ended, that nodes
// are told nothing and were told about what they held when registered (h).
//
// Checks: a (no answer binds two overlapping reservations on one device),
// a-terminal (nor a reservation terminal when it answered), b (no placement on a node out of placement all along
// since before the create), c (flags and CountOut match eligibility), d
// (no node started at or above maxUnavailable), e (active only from
// honest bound reports answering a bind entry), f (each node on what its
// rollout's outcome says, no rollout target or cordon left, operators'
// cordons kept), g (no create answers UNAVAILABLE unless a failure was
// injected into its own calls), h (a node registered while holding a
// reservation is told to bind and unbind it), i (a node that runs nothing
// is told no release older than its pool's baseline when its report was
// accepted), invariant (capacity.Check), quiescence, internal, floor,
// release, rollout.

type violation struct {
	step int
	msg  string
}

type ledger struct {
	violations map[string][]violation
	checked    map[string]int // how often each check judged something
	// eligibility: per node, the steps it went out of placement (an
	// answer that left it not ready or cordoned returned, or it was
	// marked unreachable) and came back (a write left its record eligible)
	out, back map[nodeRef][]int
	outWhy    map[nodeRef][]string
	lastRec   map[nodeRef]fleet.Record
	// operators' last word on each node's cordon: true cordoned, false
	// uncordoned; absent when the last call's answer was lost
	opCordon map[nodeRef]bool
	// the baselines each pool was given, in order (check i), and the
	// order of stored writes they and the heartbeats' are compared in
	baselines map[string][]storedBaseline
	writes    int

	// j: the nodes seen registered; for each node, what it may hold bound
	// at once — the reservations binding or active on it, unmanaged, when
	// its registration was written, and their devices there — and the
	// reservations it was told to unbind
	registered map[nodeRef]bool
	// when the checker first saw a node's record (registered mid-run)
	registeredSeen map[nodeRef]time.Time
	mayHold        map[nodeRef]map[string][]string
	activeAt       map[nodeRef]map[string]bool // of those, the ones active then
	toldUnbind     map[nodeRef]map[string]bool
	// hist: the history entries each reservation's writes said it has
	facts map[string][]api.Event

	rolloutID      string
	maxUnavailable int
	mayAbort       bool
	registerLate   bool
	probes         int
	fillHour       capacity.Hour
	fillMost       int // the most entries the fill left in one node-hour
	fillNode       int
	filled         []string

	stats struct {
		steps, answers, creates, placed, unavailable, releases, bindsTold, active, moves int
		rollout, rolloutDetail                                                           string
		actorsTook                                                                       time.Duration
		rounds                                                                           int
	}
}

func (l *ledger) init() {
	l.violations, l.checked = map[string][]violation{}, map[string]int{}
	l.out, l.back, l.outWhy = map[nodeRef][]int{}, map[nodeRef][]int{}, map[nodeRef][]string{}
	l.lastRec = map[nodeRef]fleet.Record{}
	l.opCordon = map[nodeRef]bool{}
	l.baselines = map[string][]storedBaseline{}
	l.registered, l.mayHold, l.toldUnbind = map[nodeRef]bool{}, map[nodeRef]map[string][]string{}, map[nodeRef]map[string]bool{}
	l.activeAt = map[nodeRef]map[string]bool{}
	l.registeredSeen = map[nodeRef]time.Time{}
	l.facts = map[string][]api.Event{}
}

// storedBaseline is a pool's baseline as stored, and the order of the
// write that stored it.
type storedBaseline struct {
	version  string
	sequence int64
	order    int
}

// baselineStored records the pool's baseline after a write of it (one
// that raised it gets the next order).
func (w *world) baselineStored(pool string) {
	b, err := w.fleetI.Baseline(context.Background(), pool)
	if err != nil {
		w.t.Fatalf("checker: %v", err)
	}
	bs := w.baselines[pool]
	if b == nil || (len(bs) > 0 && bs[len(bs)-1].sequence >= b.Sequence) {
		return
	}
	w.writes++
	w.baselines[pool] = append(bs, storedBaseline{b.Version, b.Sequence, w.writes})
}

// checkBaselineTold (i): a node that runs nothing is never told a release
// older than the baseline its pool had when its report was accepted
// (what it is told it installs, and keeps: nodes move only in rollouts).
func (w *world) checkBaselineTold(n *node, res api.HeartbeatResult) {
	w.checked["i"]++
	var want storedBaseline
	for _, b := range w.baselines[n.ref.pool] {
		if b.order < n.acceptedOrder {
			want = b
		}
	}
	if d := res.Desired.Release; d != nil && d.Sequence < want.sequence {
		w.fail("i", w.s.steps, "%s runs nothing and was told %s, but its pool's baseline was %s before its report was accepted", n.ref, d.Version,
			want.version)
	}
}

func (w *world) fail(check string, step int, format string, args ...any) {
	w.violations[check] = append(w.violations[check], violation{step: step, msg: fmt.Sprintf(format, args...)})
}

func (w *world) node(ref nodeRef) (fleet.Record, bool) {
	rec, err := w.fleetI.GetNode(context.Background(), ref.pool, "gpu", ref.k)
	if errors.Is(err, fleet.ErrNotFound) {
		return rec, false
	}
	if err != nil {
		w.t.Fatalf("checker: reading %s: %v", ref, err)
	}
	return rec, true
}

// wentOut records that an answer leaving the node out of placement
// returned (if its record is still out now).
func (w *world) wentOut(ref nodeRef, why string) {
	if rec, ok := w.node(ref); ok && !rec.Eligible() {
		w.out[ref] = append(w.out[ref], w.s.steps)
		w.outWhy[ref] = append(w.outWhy[ref], why)
		w.probe(ref)
	}
}

// afterStep reads the nodes the step wrote: a record that became eligible
// is when the node came back; one marked unreachable went out.
func (w *world) afterStep() {
	w.dirtyMu.Lock()
	refs := make([]nodeRef, 0, len(w.dirty))
	for ref := range w.dirty {
		refs = append(refs, ref)
	}
	clear(w.dirty)
	w.dirtyMu.Unlock()
	for _, ref := range refs {
		rec, ok := w.node(ref)
		if !ok {
			continue
		}
		if !w.registered[ref] {
			w.registered[ref] = true
			w.registeredSeen[ref] = w.clock.Now()
			w.heldWhenRegistered(ref)
		}
		prev := w.lastRec[ref]
		w.lastRec[ref] = rec
		if rec.Eligible() && !prev.Eligible() {
			w.back[ref] = append(w.back[ref], w.s.steps)
		}
		if w.adv.silenced[ref] && w.inSilence(ref) {
			w.checked["silence"]++
			// One that went silent alone first (a heartbeat held in
			// flight before the silence began) may be marked before the
			// pool's silence shows: when its own silence first reached
			// UnreachableAfter intervals, fewer than DisruptionMin of the
			// pool's nodes were late — what the sweep counts.
			alone := rec.LastHeartbeatAt != nil &&
				w.lateAt(ref.pool, rec.LastHeartbeatAt.Add(time.Duration(api.UnreachableAfter)*interval)) < fleet.DisruptionMin
			switch {
			case rec.State != api.Unreachable || prev.State == api.Unreachable:
			case alone:
				w.adv.alone[ref] = true // a move off it is not judged either
			default:
				w.fail("silence", w.s.steps, "%s marked unreachable during the mass silence of %s (since %s)", ref, ref.pool, w.adv.silenceFrom.Format("15:04:05"))
			}
		}
		if rec.State == api.Unreachable && prev.State != api.Unreachable {
			w.out[ref] = append(w.out[ref], w.s.steps)
			w.outWhy[ref] = append(w.outWhy[ref], "marked unreachable")
		}
	}
}

// lateAt counts the mass silence's nodes of pool whose last accepted
// report was UnreachableAfter-1 intervals old at t (the sweep's "late"):
// silent since their last report before it (quietFrom) and not back yet
// at t — not what their records say now, when some came back.
func (w *world) lateAt(pool string, t time.Time) int {
	n := 0
	for ref := range w.adv.silenced {
		q, back := w.adv.quietFrom[ref], w.adv.backAt[ref]
		if ref.pool == pool && !q.IsZero() && !t.Before(q) && (back.IsZero() || t.Before(back)) &&
			t.Sub(q) > time.Duration(api.UnreachableAfter-1)*interval {
			n++
		}
	}
	return n
}

// outAllAlong says whether the node went out at or before from and did not
// come back until to, and why it went out.
func (w *world) outAllAlong(ref nodeRef, from, to int) (string, int, bool) {
	last := -1
	for i, s := range w.out[ref] {
		if s <= from {
			last = i
		}
	}
	if last < 0 {
		return "", 0, false
	}
	went := w.out[ref][last]
	for _, s := range w.back[ref] {
		if s > went && s <= to {
			return "", 0, false
		}
	}
	return w.outWhy[ref][last], went, true
}

// answered checks one heartbeat answer (a): no two binds of overlapping
// windows on one device, no bind of a reservation terminal now.
func (w *world) answered(n *node, res api.HeartbeatResult) {
	w.stats.answers++
	if n.running == nil { // what its report said: the answer is not acted on yet
		w.checkBaselineTold(n, res)
	}
	if res.Node.State != api.Ready || res.Desired.Cordoned {
		w.wentOut(n.ref, "heartbeat answered "+string(res.Node.State)+cordonNote(res.Desired.Cordoned))
	}
	w.checked["a"]++
	var binds []api.DesiredBinding
	for _, b := range res.Desired.Bindings {
		if b.Action == api.ActionBind {
			binds = append(binds, b)
		} else {
			if w.toldUnbind[n.ref] == nil {
				w.toldUnbind[n.ref] = map[string]bool{}
			}
			w.toldUnbind[n.ref][b.ReservationID] = true
		}
	}
	w.checkHeldFirst(n, binds)
	for i, a := range binds {
		for _, b := range binds[i+1:] {
			if a.Window.Start.Before(b.Window.End) && b.Window.Start.Before(a.Window.End) {
				if d := shared(a.DeviceIDs, b.DeviceIDs); d != "" {
					w.fail("a", w.s.steps, "%s told to bind %s (%s) and %s (%s), windows overlapping, both on %s", n.ref,
						a.ReservationID, a.TenantID, b.ReservationID, b.TenantID, d)
				}
			}
		}
		r, err := w.capI.GetReservation(context.Background(), a.TenantID, a.ReservationID)
		if err == nil && r.State.Terminal() {
			w.fail("a-terminal", w.s.steps, "%s told to bind %s, %s", n.ref, a.ReservationID, r.State)
		}
	}
}

// cordonBy says whose cordons a node carries: the operator's, a rollout's.
func cordonBy(rec fleet.Record) string {
	var by []string
	if rec.Operator != nil {
		by = append(by, "operator")
	}
	if rec.Rollout != nil {
		by = append(by, "rollout "+rec.Rollout.RolloutID)
	}
	if len(by) == 0 {
		return "none"
	}
	return fmt.Sprint(by)
}

func cordonNote(c bool) string {
	if c {
		return ", cordoned"
	}
	return ""
}

func shared(a, b []string) string {
	for _, d := range a {
		if slices.Contains(b, d) {
			return d
		}
	}
	return ""
}

// placedOn checks a create's placement (b): none of its nodes was out of
// placement from before the create started to its answer.
func (w *world) placedOn(r capacity.Reservation, start int) {
	for _, nd := range r.Placement() {
		ref := nodeRef{r.PoolID, nd.Node}
		w.checked["b"]++
		if why, went, ok := w.outAllAlong(ref, start, w.s.steps); ok {
			rec, _ := w.node(ref)
			w.fail("b", w.s.steps, "%s (%s, created from step %d) placed on %s, out of placement since step %d (%s) and not back (now %s, cordon: %s)",
				r.ReservationID, r.TenantID, start, ref, went, why, rec.State, cordonBy(rec))
		}
	}
}

// checkActive checks a reservation that is active (e): each managed node
// of its placement holds a bind entry for it and its last accepted report
// said bound, honestly — answering a bind it was told, not a stale word.
//
// since is when the flow that made it active started (zero: a check at
// quiescence): a node an operator registered after that was unmanaged
// when the flow read it — bound at once — and is the sweep's to adopt
// (check h), not a stale activation. Registered after it is the node's
// record written after it: its registration may still be answering (seed
// 27: written between the binding pass's read and its transition).
func (w *world) checkActive(r capacity.Reservation, when string, since time.Time) {
	w.stats.active++
	for _, nd := range r.Placement() {
		ref := nodeRef{r.PoolID, nd.Node}
		rec, ok := w.node(ref)
		if !ok {
			continue // unmanaged: bound at once
		}
		w.checked["e"]++
		e, has := rec.Entries[r.ReservationID]
		word := w.nodes[ref].sent[rec.Counter][r.ReservationID]
		switch n := w.nodes[ref]; {
		case !has && !since.IsZero() && (n.late && n.registeredAt.After(since) || w.registeredSeen[ref].After(since)):
			w.checked["e-adopted"]++
		case !has:
			w.fail("e", w.s.steps, "%s active (%s), %s holds no entry for it", r.ReservationID, when, ref)
		case e.Action != api.ActionBind:
			w.fail("e", w.s.steps, "%s active (%s), %s is told to %s it (its last report: %q)", r.ReservationID, when, ref, e.Action, rec.Reported[r.ReservationID])
		case rec.Reported[r.ReservationID] != api.BindBound:
			w.fail("e", w.s.steps, "%s active (%s), %s last reported %q", r.ReservationID, when, ref, rec.Reported[r.ReservationID])
		case !word.honest:
			w.fail("e", w.s.steps, "%s active (%s) from a stale bound report of %s (report %d: the answer before did not list a bind of it)",
				r.ReservationID, when, ref, rec.Counter)
		}
	}
}

// checkStart checks a node a rollout just started (d): the pools'
// out-of-service count from the node records was below maxUnavailable.
func (w *world) checkStart(p rollout.Progress) {
	ctx := context.Background()
	rec, err := w.rollI.GetRollout(ctx, p.RolloutID)
	if err != nil {
		w.t.Fatalf("checker: %v", err)
	}
	out, outs := 0, []string{}
	for _, pool := range rec.Pools {
		if err := w.fleetI.PoolNodes(ctx, pool, func(n fleet.Record) error {
			if !n.Eligible() && !(n.PoolID == p.PoolID && n.NodeID == p.NodeID) {
				out++
				outs = append(outs, fmt.Sprintf("%s/%s %s%s", n.PoolID, n.NodeID, n.State, cordonNote(n.Operator != nil || n.Rollout != nil)))
			}
			return nil
		}); err != nil {
			w.t.Fatalf("checker: %v", err)
		}
	}
	w.checked["d"]++
	if out >= rec.Settings.MaxUnavailable {
		what := "started"
		if p.Rollback != "" {
			what = "started rolling back"
		}
		w.fail("d", w.s.steps, "%s/%s %s with %d other nodes out of service (maxUnavailable %d): %v", p.PoolID, p.NodeID, what, out,
			rec.Settings.MaxUnavailable, outs)
	}
}

// checkCordons (f), when the actors ended: each operator's cordon is as
// the last answered call on its node left it.
func (w *world) checkCordons() {
	for _, ref := range slices.SortedFunc(maps.Keys(w.opCordon), func(a, b nodeRef) int {
		return cmp.Or(cmp.Compare(a.pool, b.pool), cmp.Compare(a.k, b.k))
	}) {
		cordoned := w.opCordon[ref]
		w.checked["f"]++
		rec, _ := w.node(ref)
		if (rec.Operator != nil) != cordoned {
			w.fail("f", w.s.steps, "when the actors ended: the operator's last answered call on %s %s it, its operator cordon is %+v", ref,
				map[bool]string{true: "cordoned", false: "uncordoned"}[cordoned], rec.Operator)
		}
	}
}

func (w *world) operatorSaid(ref nodeRef, cordon, ok bool) {
	if ok {
		w.opCordon[ref] = cordon
	} else {
		delete(w.opCordon, ref)
	}
}

// quiesce: every node heals and reports honestly (failing installs still
// fail), the rollout is resumed, and clean passes run until nothing moves;
// the checks at quiescence run; then every window ends, passes run again,
// and the final checks run.
func (w *world) quiesce(ctx context.Context) {
	w.checkCordons()
	for _, ref := range w.order {
		n := w.nodes[ref]
		// A register that crashed or timed out after it landed left the
		// node unmanaged in the simulation's eyes: the operator lists the
		// pool and starts its agent (a registered node that never reports
		// is out of service, and would hold the rollout at maxUnavailable).
		if rec, ok := w.node(ref); ok && !n.managed {
			n.managed, n.late, n.registeredAt = true, true, rec.CreatedAt
		}
		n.healthy, n.flaky, n.silent, n.scrub, n.failed, n.silentUntil = true, 0, 0, 0, 0, time.Time{}
	}
	// A few clean rounds, the operators' cordons still on: every sweep
	// since saw what the actors left, so the flags say what the records do.
	for range 3 {
		w.round(ctx, "after the actors")
	}
	snap, err := w.capI.Snapshot(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	w.checkFlags(ctx, "after the actors and 3 clean passes", snap)
	for _, ref := range w.order {
		n := w.nodes[ref]
		if rec, ok := w.node(ref); ok && rec.Operator != nil {
			// Operators lift their cordons: the rollout may need the room.
			if _, err := w.fleet.Uncordon(ctx, ownerTenant, ref.pool, n.id); err != nil {
				w.t.Fatalf("uncordon %s: %v", ref, err)
			}
		}
	}
	w.settle(ctx, "after the actors", false)
	// What a crash cut short is the reconciler's once it is StaleAfter old
	// (a draft whose create was cut off, a release cut off after its fence):
	// passes that move nothing before then do not make it quiet.
	w.clock.Advance(api.StaleAfter + roundEvery)
	w.settle(ctx, "after the actors and StaleAfter", false)
	w.checkQuiet(ctx, "after the actors")
	for _, id := range w.filled {
		if _, err := w.cap.Reservations().Release(ctx, filler, id); err != nil {
			w.t.Fatalf("releasing %s: %v", id, err)
		}
	}
	snap, err = w.capI.Snapshot(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	last := w.clock.Now()
	for _, r := range snap.Reservations {
		if r.Window.End.After(last) {
			last = r.Window.End
		}
	}
	w.clock.Advance(last.Sub(w.clock.Now()) + time.Minute)
	w.settle(ctx, "after every window", true)
	w.checkQuiet(ctx, "after every window")
	w.checkEnded(ctx)
}

// settle runs rounds — every managed node reports, a clean pass — until
// the rollout (if any) finished and three passes in a row moved nothing:
// no transition, repair or bind told — and, once every window ended
// (entries), no node's entries changed: a terminal reservation's sweep
// may scrub a node again, which the node hears at the next round and
// whose report of it done is forgotten at the one after (seeds 23 and 45
// stopped with such a scrub not yet heard).
func (w *world) settle(ctx context.Context, when string, entries bool) {
	calm := 0
	var res reconcile.PassResult
	var recent []string // the last rounds, for the message
	for i := 0; calm < 3; i++ {
		if i == 60 {
			r, _ := w.rollI.GetRollout(ctx, w.rolloutID)
			w.fail("quiescence", 0, "%s: no quiescence after %d rounds: last pass %+v; rollout %s finished=%v counts %+v; the last rounds: %s", when, i, res,
				r.State, r.Finished, r.Counts, strings.Join(recent, " | "))
			return
		}
		if w.rolloutID != "" {
			if r, err := w.rollouts.Get(ctx, w.rolloutID); err == nil && r.State == api.Paused {
				if _, err := w.rollouts.Resume(ctx, w.rolloutID, "sim: quiescence"); err != nil {
					w.t.Fatalf("resume: %v", err)
				}
			}
		}
		var before map[nodeRef]int64
		if entries {
			before = w.entryVersions()
		}
		res = w.round(ctx, when)
		same := !entries || maps.Equal(before, w.entryVersions())
		done := true
		if w.rolloutID != "" {
			rec, err := w.rollI.GetRollout(ctx, w.rolloutID)
			done = err == nil && rec.Finished
		}
		recent = append(recent, fmt.Sprintf("%s done=%v transitions %v repaired %d told %d errors %d entries same %v", w.clock.Now().Format("15:04:05"), done,
			res.Transitions, res.Repaired, res.Told, res.Errors, same))
		if len(recent) > 5 {
			recent = recent[1:]
		}
		if done && same && res.Errors == 0 && res.TransitionCount() == 0 && res.Repaired == 0 && res.Told == 0 {
			calm++
		} else {
			calm = 0
		}
	}
}

// entryVersions is each managed node's entries' version.
func (w *world) entryVersions() map[nodeRef]int64 {
	out := map[nodeRef]int64{}
	for _, ref := range w.order {
		if rec, ok := w.node(ref); ok {
			out[ref] = rec.BindVersion
		}
	}
	return out
}

// round: the clock moves, every managed node reports, a clean pass runs.
func (w *world) round(ctx context.Context, when string) reconcile.PassResult {
	w.stats.rounds++
	w.clock.Advance(roundEvery)
	for _, ref := range w.order {
		if n := w.nodes[ref]; n.managed {
			if err := n.beat(ctx, w); err != nil {
				w.t.Fatalf("%s: heartbeat of %s: %v", when, ref, err)
			}
		}
	}
	res, err := w.crc.Pass(ctx)
	if err != nil {
		w.t.Fatalf("%s: pass: %v", when, err)
	}
	w.afterStep()
	return res
}

// checkQuiet: the capacity invariants; every active reservation (e); every
// node-hour's flag and the out-of-service counts (c); the rollout's
// outcome (f).
func (w *world) checkQuiet(ctx context.Context, when string) {
	vs, err := capacity.Check(ctx, w.capI)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, v := range vs {
		w.fail("invariant", 0, "%s: %s", when, v)
	}
	snap, err := w.capI.Snapshot(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, r := range snap.Reservations {
		w.checkFacts(r, when)
		if r.State == api.Active {
			w.checkActive(r, when, time.Time{})
			w.stats.active--
		}
		if when == "after the actors" {
			for _, ev := range r.History {
				if ev.Reason == api.ReasonReplaced {
					w.stats.moves++
				}
			}
		}
	}
	w.checkFlags(ctx, when, snap)
	if when == "after the actors" {
		w.checkRollout(ctx)
	}
}

// checkFlags (c): every stored node-hour from now through the flagged
// horizon is off exactly when its node is not eligible (an unmanaged node
// always is), and each pool's CountOut is its nodes not eligible.
func (w *world) checkFlags(ctx context.Context, when string, snap capacity.Snapshot) {
	from := capacity.HourOf(w.clock.Now())
	to := from + provision + fleet.FlagMarginHours - 1 // the sweep extends the last hour as hours pass
	recs := map[nodeRef]fleet.Record{}
	for _, p := range pools {
		if err := w.fleetI.PoolNodes(ctx, p, func(n fleet.Record) error { recs[nodeRef{p, n.Index}] = n; return nil }); err != nil {
			w.t.Fatal(err)
		}
	}
	seen := map[nodeRef]map[capacity.Hour]bool{}
	for _, nh := range snap.NodeHours {
		if nh.Hour < from || nh.Hour >= to {
			continue
		}
		ref := nodeRef{nh.Pool, nh.Node}
		w.checked["c"]++
		rec, managed := recs[ref]
		want := managed && !rec.Eligible()
		if nh.Off != want {
			w.fail("c", 0, "%s: %s hour %s is off=%v, the node is %s%s", when, ref, nh.Hour, nh.Off, rec.State, cordonNote(rec.Operator != nil || rec.Rollout != nil))
		}
		if seen[ref] == nil {
			seen[ref] = map[capacity.Hour]bool{}
		}
		seen[ref][nh.Hour] = true
	}
	for ref, rec := range recs {
		if rec.Eligible() {
			continue
		}
		for h := from; h < to; h++ {
			if !seen[ref][h] {
				w.fail("c", 0, "%s: %s is %s%s but its hour %s is not stored (so not flagged)", when, ref, rec.State,
					cordonNote(rec.Operator != nil || rec.Rollout != nil), h)
			}
		}
	}
	for _, p := range pools {
		want := 0
		for ref, rec := range recs {
			if ref.pool == p && !rec.Eligible() {
				want++
			}
		}
		got, err := w.fleetI.CountOut(ctx, p)
		if err != nil {
			w.t.Fatal(err)
		}
		if got != want {
			w.fail("c", 0, "%s: pool %s CountOut %d, %d of its nodes are not eligible", when, p, got, want)
		}
	}
}

// checkRollout (f): the rollout ended, each node runs what its outcome
// says (updated on the target unless rolled back to its previous; failed
// either; skipped and never started on what they ran), no node keeps a
// rollout target or cordon, and each operator's cordon is as the last
// answered call left it.
func (w *world) checkRollout(ctx context.Context) {
	for _, ref := range w.order {
		if rec, ok := w.node(ref); ok && (rec.Target != nil || rec.Rollout != nil) {
			note := ""
			if w.rolloutID != "" {
				if rr, err := w.rollI.GetRollout(ctx, w.rolloutID); err == nil {
					note = fmt.Sprintf(" (the rollout: %s, finished %v, due %v)", rr.State, rr.Finished, rr.Due)
				}
			}
			w.fail("f", 0, "%s keeps rollout target %+v, rollout cordon %+v%s", ref, rec.Target, rec.Rollout, note)
		}
	}
	if w.rolloutID == "" {
		w.stats.rollout = "none"
		return
	}
	r, err := w.rollouts.Get(ctx, w.rolloutID)
	if err != nil {
		w.t.Fatal(err)
	}
	w.stats.rollout = string(r.State)
	w.stats.rolloutDetail = fmt.Sprintf("%d updated, %d failed, %d skipped of %d", r.Counts.Updated, r.Counts.Failed, r.Counts.Skipped, r.Counts.Nodes)
	if !r.State.Terminal() {
		w.fail("f", 0, "rollout %s did not end: %s, counts %+v", r.RolloutID, r.State, r.Counts)
		return
	}
	ns, _, err := w.rollouts.Nodes(ctx, w.rolloutID, "", 100, "")
	if err != nil {
		w.t.Fatal(err)
	}
	in := map[nodeRef]bool{}
	for _, np := range ns {
		ref := nodeRef{np.PoolID, capacityIndex(np.NodeID)}
		in[ref] = true
		n := w.nodes[ref]
		w.checked["f"]++
		prev := oldVersion
		if np.Previous != nil {
			prev = np.Previous.Version
		}
		want := []string{prev}
		switch {
		case np.Step == api.Failed || np.Rollback == rollout.RollbackFailed:
			want = []string{prev, newVersion}
		case np.Step == api.Updated && np.Rollback != rollout.RollbackDone && r.State != api.RolledBack:
			want = []string{newVersion}
		}
		if got := version(n.running); !slices.Contains(want, got) {
			w.fail("f", 0, "rollout %s: %s (%s%s) runs %s, want %v", r.State, ref, np.Step, rollbackNote(np.Rollback), got, want)
		}
	}
	for _, ref := range w.order {
		if n := w.nodes[ref]; !in[ref] && version(n.running) != oldVersion {
			w.fail("f", 0, "%s, not in the rollout, runs %s", ref, version(n.running))
		}
	}
}

func rollbackNote(rb string) string {
	if rb == "" {
		return ""
	}
	return ", rollback " + rb
}

func version(v *api.Version) string {
	if v == nil {
		return "none"
	}
	return v.Version
}

func capacityIndex(nodeID string) int {
	_, k, _ := fleet.ParseNodeID(nodeID)
	return k
}

// checkEnded, once every window ended: no ready node is told anything; no
// quota is held; a node registered while it held a reservation was told
// to bind it and to unbind it (h); every node was told to unbind what it
// may have held bound at once when it registered (j).
func (w *world) checkEnded(ctx context.Context) {
	for _, ref := range w.order {
		for _, id := range slices.Sorted(maps.Keys(w.mayHold[ref])) {
			w.checked["j"]++
			if !w.toldUnbind[ref][id] {
				w.fail("j", 0, "%s registered while it held %s (bound at once, on %v): never told to unbind it", ref, id, w.mayHold[ref][id])
			}
		}
	}
	for _, ref := range w.order {
		if rec, ok := w.node(ref); ok && rec.State == api.Ready && len(rec.Entries) > 0 {
			w.fail("quiescence", 0, "every window ended, %s still told %v", ref, rec.Entries)
		}
	}
	snap, err := w.capI.Snapshot(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, q := range snap.Quotas {
		if q.Used != 0 || len(q.Charging) != 0 || len(q.Crediting) != 0 {
			w.fail("invariant", 0, "every window ended, quota row %s still holds %+v", q.Key(), q)
		}
	}
	for _, r := range snap.Reservations {
		if !r.WasPlaced() {
			continue
		}
		started, ended := time.Time{}, time.Time{}
		for _, ev := range r.History {
			switch {
			case (ev.State == api.Binding || ev.State == api.Active) && started.IsZero():
				started = ev.At
			case ev.State.Terminal():
				ended = ev.At
			}
			if ev.Reason == api.ReasonReplaced {
				started = time.Time{} // moved: where it was at registration is not known here
				break
			}
		}
		if started.IsZero() {
			continue
		}
		for _, nd := range r.Placement() {
			n := w.nodes[nodeRef{r.PoolID, nd.Node}]
			if n == nil || !n.late || !started.Before(n.registeredAt) || !ended.After(n.registeredAt) {
				continue
			}
			w.checked["h"]++
			for _, action := range []string{api.ActionBind, api.ActionUnbind} {
				if action == api.ActionBind && (n.firstTold.IsZero() || !n.firstTold.Add(interval).Before(ended) ||
					!w.activeAt[n.ref][r.ReservationID]) {
					// Over before the node heard anything, or within an
					// interval of it (before a pass could bind it and the
					// node hear it), or not active when its registration
					// was written (the adoption leaves a binding one to the
					// binding step, whose pass may have read the node
					// unmanaged and bound it at once): only its unbind is
					// owed.
					continue
				}
				if n.told[r.ReservationID+"/"+action] == "" {
					w.fail("h", 0, "%s registered at %s while holding %s (%s from %s to %s): never told to %s it", n.ref,
						n.registeredAt.Format("15:04:05"), r.ReservationID, r.State, started.Format("15:04:05"), ended.Format("15:04:05"), action)
				}
			}
		}
	}
}

// heldWhenRegistered: ref's registration was just written (the first step
// its record is seen). What it may hold bound at once are the
// reservations binding or active on it now — a binding pass read it
// unmanaged while they were binding, or they are active there — on the
// devices they hold or are moving off (j).
func (w *world) heldWhenRegistered(ref nodeRef) {
	snap, err := w.capI.Snapshot(context.Background())
	if err != nil {
		w.t.Fatalf("checker: %v", err)
	}
	w.mayHold[ref], w.activeAt[ref] = map[string][]string{}, map[string]bool{}
	for _, r := range snap.Reservations {
		if r.PoolID != ref.pool || (r.State != api.Binding && r.State != api.Active) {
			continue
		}
		var devs []string
		for _, d := range append(slices.Clone(r.Devices), r.MovedFrom...) {
			if d/nodeSize == ref.k {
				devs = append(devs, capacity.DeviceID(r.Resource, d))
			}
		}
		if len(devs) > 0 {
			w.mayHold[ref][r.ReservationID] = devs
			w.activeAt[ref][r.ReservationID] = r.State == api.Active
		}
	}
}

// checkHeldFirst (j): a node told to bind a reservation on devices it may
// hold for another, bound at once before it registered, was told to unbind
// that one first (in this answer or an earlier one).
func (w *world) checkHeldFirst(n *node, binds []api.DesiredBinding) {
	for _, b := range binds {
		for _, id := range slices.Sorted(maps.Keys(w.mayHold[n.ref])) {
			if id == b.ReservationID {
				continue
			}
			w.checked["j"]++
			if d := shared(w.mayHold[n.ref][id], b.DeviceIDs); d != "" && !w.toldUnbind[n.ref][id] {
				w.fail("j", w.s.steps, "%s told to bind %s (%s) on %s, which it may hold for %s (bound at once before it registered), never told to unbind it",
					n.ref, b.ReservationID, b.TenantID, d, id)
			}
		}
	}
}

// recordFacts keeps r's history entries as facts: no later write may lose
// one (hist).
func (w *world) recordFacts(r capacity.Reservation) {
	for _, ev := range r.History {
		if !slices.ContainsFunc(w.facts[r.ReservationID], sameEvent(ev)) {
			w.facts[r.ReservationID] = append(w.facts[r.ReservationID], ev)
		}
	}
}

// checkFacts (hist): every history entry a write of r reported is still
// in r's history.
func (w *world) checkFacts(r capacity.Reservation, when string) {
	for _, f := range w.facts[r.ReservationID] {
		w.checked["hist"]++
		if !slices.ContainsFunc(r.History, sameEvent(f)) {
			w.fail("hist", w.s.steps, "%s (%s): its history entry %s at %s (%s%s) is gone, %s: %+v", r.ReservationID, r.State, f.State,
				f.At.Format("15:04:05.000"), f.Reason, rolloutNote(f.RolloutID), when, r.History)
		}
	}
}

func sameEvent(a api.Event) func(api.Event) bool {
	return func(b api.Event) bool {
		return a.State == b.State && a.At.Equal(b.At) && a.Reason == b.Reason && a.RolloutID == b.RolloutID
	}
}

func rolloutNote(id string) string {
	if id == "" {
		return ""
	}
	return ", rollout " + id
}
