package fleetproto

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// Targeted adversaries (docs/fleet.md, The fleet protocol simulation):
// each seed draws some of them; each acts at one precise point of a real
// flow (a store call of a pass, a flag write), still seeded and on the
// simulated clock. The actors an adversary starts are "clean" — no
// failure, crash or stall is injected into their calls — so what they
// answer is the service's own answer (check g judges them strictly).
//
//   - bind fence: a pass about to tell a node to bind (capacity.NodeStore
//     Bind, after it read the node and recorded Bound) is held while the
//     reservation is released, another tenant creates the same shape on
//     the pool at once, and an overlapping pass runs (check a);
//   - move back: a reservation is moved off its node the moment that node
//     bound it, then off the next one, until it lands back on a node that
//     scrubs slowly and goes on reporting bound (check e);
//   - abort race: a pass about to write a node's rollout target, once a
//     node is updated, is held while the node reports, the rollout is
//     aborted (it rolls back) and another pass runs (check f);
//   - cordon race: just before a rollout cordons a node, an operator
//     cordons it and an uncordon starts whose flag writes are slow; once
//     that uncordon answered, creates probe the pool (check b);
//   - full hour: creates aimed at the filled node-hour, at a time when a
//     filler's device is busy there, so best fit prefers that node (check g);
//   - mass silence: three of a pool's managed nodes go silent for 10–16
//     intervals, one of them 28 s before the other two, and come back one
//     by one (check silence; massSilence says why so);
//   - sicken: just before a rollout pass first reads its pools' nodes out
//     of service for a step, ready nodes of those pools report unhealthy —
//     as many as bring the count to maxUnavailable — and their reports are
//     answered before the read (check d); and, the budget race (from the
//     rollout's second wave), the same between two starts of one step
//     (once a start's cordon is set), and an operator's cordons once a
//     pass recorded its intent to start nodes, before its first start
//     (check d: a budget read once a step misses them);
//   - blank host: around a completed rollout's baseline write, an updated
//     node of that pool is re-imaged — it runs nothing, and goes on
//     installing what it is told — and reports just before the write and
//     just after it (check i: told the baseline the write replaced).
//
// Which adversaries a seed has comes from the seed's bits (on), not from
// draws: each is on in half of any eight consecutive seeds, so the revert
// table's seeds 1–8 meet every one of them four times. The blank host
// goes with the cordon race: it needs a rollout that completes, and the
// cordon race's rollout runs on, never paused or aborted by the actors;
// the full hour with the bind fence (its fill, fillBit). Two act in every
// seed: the register race (registerrace_test.go) and the amend race.
type adversaries struct {
	bindFence, moveBack, abortRace, cordonRace, fullHour, massSilence, sicken, blankHost bool

	// every seed: the register race (registerrace_test.go) and the amend
	// race (a disrupted entry written between a pass's read and its amend)
	race       raceState
	amendRaced string

	fenced, cordonRaced, sickened, intentRaced, startRaced int
	abortRaced                                             bool

	// budget race: the nodes whose start's cordon is the next one set
	starting map[nodeRef]bool
	// blank host: the node re-imaged (nil: not yet), and once it was told
	// after the baseline write
	blank     *node
	blankDone bool

	// move back
	moveID   string
	sickOnce map[string]nodeRef // reservation → node that sickens when it binds it

	// mass silence: the pool, its silent nodes, the window judged
	silencePool string
	silenced    map[nodeRef]bool
	// alone: nodes of the silence the sweep marked while fewer than
	// DisruptionMin were late (their own silence began first): not the
	// pool's silence, so a move off them is not judged either
	alone                  map[nodeRef]bool
	silenceFrom, silenceTo time.Time
	// each silent node's last accepted report before its silence, and
	// its first one after
	quietFrom, backAt map[nodeRef]time.Time
	silenceMoves      int
}

func (w *world) drawAdversaries() {
	r := w.rng
	a := &w.adv
	for range 5 {
		r.IntN(3) // the draws that chose them once: the rest of each seed's stream as it was
	}
	on := func(i int) bool { return on(w.seed, i) }
	a.bindFence, a.moveBack, a.abortRace = on(0), on(1), on(2)
	a.cordonRace, a.massSilence, a.sicken = on(3), on(4), on(5)
	a.blankHost = a.cordonRace
	a.fullHour = w.fillHour != 0
	a.starting = map[nodeRef]bool{}
	a.sickOnce = map[string]nodeRef{}
	a.silenced = map[nodeRef]bool{}
	a.alone = map[nodeRef]bool{}
	a.quietFrom, a.backAt = map[nodeRef]time.Time{}, map[nodeRef]time.Time{}
	if a.moveBack {
		w.s.spawn(context.Background(), "adversary move back", 0, w.mover)
	}
	if a.fullHour {
		w.s.spawn(context.Background(), "adversary full hour", 0, w.fullHourProbe)
	}
	if a.massSilence {
		w.s.spawn(context.Background(), "adversary mass silence", 0, w.massSilence)
	}
	w.registerRace()
}

func (w *world) advNames() string {
	a := w.adv
	var out []string
	for _, c := range []struct {
		on   bool
		name string
	}{{a.bindFence, "bind-fence"}, {a.moveBack, "move-back"}, {a.abortRace, "abort-race"}, {a.cordonRace, "cordon-race"},
		{a.fullHour, "full-hour"}, {a.massSilence, "mass-silence"}, {a.sicken, "sicken"}, {a.blankHost, "blank-host"}} {
		if c.on {
			out = append(out, c.name)
		}
	}
	return fmt.Sprint(out)
}

// on says whether seed has adversary i (0–5): the first three follow
// the bits of seed-1, the last three their complement, so each is on in
// four of any eight consecutive seeds (1–8: every pairing of a first
// with a last but the same bit's).
func on(seed uint64, i int) bool {
	bit := (seed-1)>>(i%3)&1 == 1
	return bit != (i >= 3)
}

// fillBit: the seeds whose adversary bit fillBit is on (on) fill a
// node-hour (the full hour adversary).
const fillBit = 0

// inPass: the actor of ctx is a reconciler pass.
func inPass(ctx context.Context) bool {
	a := actorOf(ctx)
	return a != nil && len(a.name) > 5 && a.name[:5] == "pass "
}

// watchedNodes is the node store binding uses: Bind is where the bind
// fence adversary holds a pass.
type watchedNodes struct {
	*fleetdb.Store
	w *world
}

func (n *watchedNodes) Bind(ctx context.Context, t capacity.PoolResource, node int, id string, b capacity.NodeBinding, previous []string, seen capacity.NodeState) error {
	w := n.w
	held := false
	if w.adv.bindFence && w.adv.fenced < 3 && inPass(ctx) && w.clock.Now().Before(w.end) && w.rng.IntN(3) == 0 {
		if r, err := w.capI.GetReservation(context.Background(), b.TenantID, id); err == nil && !r.State.Terminal() {
			w.adv.fenced++
			held = true
			k := w.adv.fenced
			other := tenants[(slices.Index(tenants, b.TenantID)+1+w.rng.IntN(len(tenants)-1))%len(tenants)]
			start := w.clock.Now()
			req := capacity.CreateRequest{TenantID: other, PoolID: r.PoolID, Resource: "gpu", Count: r.Count, Topology: r.Topology,
				Principal: "rival", ClientToken: fmt.Sprintf("rival-%d", k), Start: &start, End: r.Window.End}
			if !req.End.After(start.Add(30 * time.Second)) {
				req.End = start.Add(60 * time.Second)
			}
			w.s.spawnClean(ctx, fmt.Sprintf("adversary bind fence %d (%s)", k, id), 0, func(ctx context.Context) {
				w.releaser(r.TenantID, id, 0)(ctx)
				w.create(ctx, req, false)
				w.s.spawn(ctx, fmt.Sprintf("pass bind fence %d", k), 50*time.Second, w.pass)
				w.wakeNode(nodeRef{t.PoolID, node})
			})
			w.s.sleep(ctx, time.Duration(3+w.rng.IntN(4))*time.Second)
			// And on until the release's unbind there (the scrub of a node
			// recorded in Bound with no entry) was reported done and
			// forgotten: only the node's entries' version, which every
			// one of those writes moved, still fences the bind (F03).
			ref := nodeRef{t.PoolID, node}
			for i := 0; i < 150 && (!w.released(r) || w.holds(ref, id)); i++ {
				w.s.sleep(ctx, 200*time.Millisecond)
			}
		}
	}
	if a := actorOf(ctx); a != nil && a.cutAdoption {
		a.cutAdoption = false
		return errInjected // the adoption cut short after it recorded the node
	}
	err := n.Store.Bind(ctx, t, node, id, b, previous, seen)
	if err == nil && held {
		// The node hears what the held pass wrote at once, before the
		// release's give-back or a sweep could turn it into an unbind (F03).
		w.wakeNode(nodeRef{t.PoolID, node})
	}
	if err == nil && node != 0 {
		w.raceBound(ctx, t, id)
	}
	return err
}

// NodeStates: where the register race's read race registers a node.
func (n *watchedNodes) NodeStates(ctx context.Context, t capacity.PoolResource, nodes []int, id string) (map[int]capacity.NodeState, error) {
	got, err := n.Store.NodeStates(ctx, t, nodes, id)
	if err == nil {
		n.w.raceRead(ctx, id, got)
	}
	return got, err
}

// released: r is terminal now.
func (w *world) released(r capacity.Reservation) bool {
	cur, err := w.capI.GetReservation(context.Background(), r.TenantID, r.ReservationID)
	return err == nil && cur.State.Terminal()
}

// holds: ref's record has an entry of reservation id.
func (w *world) holds(ref nodeRef, id string) bool {
	rec, ok := w.node(ref)
	_, has := rec.Entries[id]
	return ok && has
}

// watchedTargets is the node store rollouts use: SetTarget is where the
// abort race adversary holds a pass.
type watchedTargets struct {
	*fleetdb.Store
	w *world
}

func (n *watchedTargets) SetTarget(ctx context.Context, r fleet.Record, rolloutID string, t *fleet.Target, floor int64) (fleet.Record, error) {
	w := n.w
	race := t != nil && t.Version == newVersion && w.adv.abortRace && !w.adv.abortRaced && inPass(ctx) && w.clock.Now().Before(w.end)
	if race {
		// Only install's own tell: the node pending or draining (told
		// first: a node with nothing to drain goes from pending), or
		// installing since this very pass (recorded first) — not a later
		// pass's re-tell of a node whose target a lift took.
		pr, err := w.rollI.GetProgress(context.Background(), rolloutID, r.PoolID, r.NodeID)
		now := w.clock.Now()
		race = err == nil && (pr.Step == api.Pending || pr.Step == api.Draining || pr.Step == api.Installing && now.Sub(pr.UpdatedAt) < time.Second)
		// Once a node is updated: the abort's rollback then has one to
		// roll back, so the rollout is not over at once — an aborted
		// rollout's target is never told (fleet's targetHeld), and with
		// nothing to roll back the abort made it terminal before the node
		// heard the target F05's order writes after the skip.
		if race {
			up, err := w.rollI.ProgressByStep(context.Background(), rolloutID, api.Updated, 1, "")
			race = err == nil && len(up) > 0
		}
	}
	// Held before the write, at its first chance (a coin once missed it in
	// the revert table's seeds): a pass that told the node before it
	// recorded installing would lose the step to the abort's skip and tell
	// it anyway (F05).
	if race {
		w.abortRace(ctx, r, rolloutID, "before the target")
	}
	out, err := n.Store.SetTarget(ctx, r, rolloutID, t, floor)
	if race && err == nil {
		// The node hears the target at once, before a later pass's repair
		// (a skipped node's target lifted) could take it back.
		w.wakeNode(nodeRef{r.PoolID, r.Index})
		w.s.sleep(ctx, time.Second)
	}
	return out, err
}

// abortRace holds the pass (the caller) while its node reports, the
// rollout is aborted and another pass runs.
func (w *world) abortRace(ctx context.Context, r fleet.Record, rolloutID, when string) {
	w.adv.abortRaced = true
	ref := nodeRef{r.PoolID, r.Index}
	w.note("adversary abort race on %s, %s", ref, when)
	w.wakeNode(ref)
	w.s.spawnClean(ctx, "adversary abort race "+ref.String(), 0, func(ctx context.Context) {
		w.s.sleep(ctx, time.Duration(500+w.rng.IntN(2500))*time.Millisecond)
		err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error {
			_, err := w.rollouts.Abort(ctx, rolloutID, "sim: abort race")
			return err
		})
		w.noInternal("rollouts.abort", err)
		w.wakeNode(ref)
		w.pass(ctx)
		w.wakeNode(ref)
	})
	w.s.sleep(ctx, time.Duration(5+w.rng.IntN(5))*time.Second)
}

// OutOfService: the sicken adversary acts just before a rollout pass
// reads a pool's nodes out of service.
func (n *watchedTargets) OutOfService(ctx context.Context, pool string, limit int) ([]string, error) {
	n.w.sickenBefore(ctx, pool)
	return n.Store.OutOfService(ctx, pool, limit)
}

// sickenBefore: before a pass's first read of a step (before its intent,
// of its first pool), ready managed nodes of the rollout's pools report
// unhealthy (for 30 s) — as many as bring the out-of-service count the
// node records make to maxUnavailable — and the pass reads once their
// reports were answered. A count that misses them (one the sweep alone
// moves) lets the pass start a node over maxUnavailable (check d).
func (w *world) sickenBefore(ctx context.Context, pool string) {
	a := &w.adv
	if !a.sicken || a.sickened >= 3 || !inPass(ctx) || !w.clock.Now().Before(w.end) {
		return
	}
	rec, err := w.rollI.GetRollout(context.Background(), w.rolloutID)
	if err != nil || rec.Intent != nil || w.rng.IntN(2) != 0 {
		return // a start's read: the budget race's
	}
	if rec.State != api.Progressing || len(rec.Pools) == 0 || pool != rec.Pools[0] {
		return // before the first pool's read only: a node sickened in a pool read already is a race no read can see
	}
	if w.sicken(ctx, rec, "before the pass reads", 30*time.Second) {
		a.sickened++
	}
}

// sickenBetweenStarts (the budget race): once a pass past the first wave
// set the cordon of a node it started, before its next start, ready nodes
// report unhealthy as sickenBefore's do (once: healthy again at their next
// report). A pass that read the budget once a step starts its next node
// over maxUnavailable (check d).
func (w *world) sickenBetweenStarts(ctx context.Context) {
	a := &w.adv
	if !a.sicken || a.startRaced >= 2 || !inPass(ctx) || !w.clock.Now().Before(w.end) {
		return
	}
	rec, err := w.rollI.GetRollout(context.Background(), w.rolloutID)
	if err != nil || rec.State.Terminal() || !pastFirstWave(rec) {
		return
	}
	if w.sicken(ctx, rec, "between two starts", time.Second) {
		a.startRaced++
	}
}

// pastFirstWave: the rollout started its second wave (the first is one
// node: a step of several starts comes after).
func pastFirstWave(rec rollout.Record) bool {
	return len(rec.Waves) > 1 && rec.Waves[1].StartedAt != nil
}

// sicken makes ready nodes of rec's pools report unhealthy for d — as
// many as bring the count of out-of-service node records to
// maxUnavailable, at most 3 — and waits (the caller's actor sleeping)
// until their reports were answered. It says whether it did.
func (w *world) sicken(ctx context.Context, rec rollout.Record, when string, d time.Duration) bool {
	out, ready := w.outAndReady(rec)
	need := rec.Settings.MaxUnavailable - out
	if need <= 0 || need > len(ready) || need > 3 {
		return false
	}
	w.rng.Shuffle(len(ready), func(i, j int) { ready[i], ready[j] = ready[j], ready[i] })
	sick := ready[:need]
	now := w.clock.Now()
	for _, n := range sick {
		n.healthy, n.sickUntil = false, now.Add(d)
		w.note("adversary sicken: %s reports unhealthy %s (%d out, maxUnavailable %d)", n.ref, when, out, rec.Settings.MaxUnavailable)
	}
	for i := 0; i < 100; i++ {
		answered := true
		for _, n := range sick {
			if r, ok := w.node(n.ref); !ok || r.State == api.Ready {
				answered = false
				w.wakeNode(n.ref)
			}
		}
		if answered {
			break
		}
		w.s.sleep(ctx, 50*time.Millisecond)
	}
	return true
}

// outAndReady reads the node records of rec's pools: how many are out of
// service, and the managed nodes in service that report as they should
// (healthy, not silent, not sickened already).
func (w *world) outAndReady(rec rollout.Record) (int, []*node) {
	now := w.clock.Now()
	out := 0
	var ready []*node
	for _, pool := range rec.Pools {
		_ = w.fleetI.PoolNodes(context.Background(), pool, func(r fleet.Record) error {
			n := w.nodes[nodeRef{r.PoolID, r.Index}]
			switch {
			case !r.Eligible():
				out++
			case n != nil && n.managed && n.healthy && !now.Before(n.silentUntil) && now.After(n.sickUntil):
				ready = append(ready, n)
			}
			return nil
		})
	}
	return out, ready
}

// cordonAfterIntent (the budget race): once a pass recorded its intent
// to start nodes of a wave after the first, an operator cordons ready
// nodes of the rollout's pools — as many as bring the count to
// maxUnavailable, at most 3 — before the pass's first start, and lifts
// the cordons once that pass cleared its intent. A pass that read the
// budget before its intent starts nodes over maxUnavailable (check d).
func (w *world) cordonAfterIntent(ctx context.Context, rec rollout.Record) {
	a := &w.adv
	if !a.sicken || a.intentRaced >= 1 || !inPass(ctx) || !w.clock.Now().Before(w.end) || rec.State.Terminal() || !pastFirstWave(rec) {
		return
	}
	out, ready := w.outAndReady(rec)
	need := rec.Settings.MaxUnavailable - out
	if need <= 0 || need > len(ready) || need > 3 {
		return
	}
	a.intentRaced++
	w.rng.Shuffle(len(ready), func(i, j int) { ready[i], ready[j] = ready[j], ready[i] })
	var cordoned []*node
	for _, n := range ready[:need] {
		if _, err := w.fleet.Cordon(context.Background(), ownerTenant, n.ref.pool, n.id, "sim: operator (budget race)"); err != nil {
			continue
		}
		cordoned = append(cordoned, n)
		w.operatorSaid(n.ref, true, true)
		w.wentOut(n.ref, "operator cordon (budget race)")
		w.note("adversary budget race: an operator cordons %s after the pass's intent (%d out, maxUnavailable %d)", n.ref, out,
			rec.Settings.MaxUnavailable)
	}
	at := rec.Intent.At
	w.s.spawnClean(ctx, "adversary budget race uncordon", 0, func(ctx context.Context) {
		for i := 0; i < 60; i++ {
			w.s.sleep(ctx, time.Second)
			if cur, err := w.rollI.GetRollout(context.Background(), w.rolloutID); err != nil || cur.Intent == nil || !cur.Intent.At.Equal(at) {
				break
			}
		}
		for _, n := range cordoned {
			err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error {
				_, err := w.fleet.Uncordon(ctx, ownerTenant, n.ref.pool, n.id)
				return err
			})
			w.noInternal("uncordon "+n.ref.String(), err)
			w.operatorSaid(n.ref, false, err == nil)
		}
	})
}

// SetBaseline: the blank host adversary acts around the write of a
// completed rollout's baseline; the checker records what each write left
// (check i).
func (n *watchedTargets) SetBaseline(ctx context.Context, pool string, t fleet.Target) error {
	w := n.w
	host := w.blankBefore(ctx, pool)
	a := actorOf(ctx)
	if host != nil && a != nil {
		a.clean = true // the write lands: the node is told after it
		defer func() { a.clean = false }()
	}
	err := n.Store.SetBaseline(ctx, pool, t)
	w.baselineStored(pool)
	if host != nil {
		w.blankAfter(ctx, host)
	}
	return err
}

// blankBefore: the first time a completed rollout writes a pool's baseline,
// one of its updated nodes there is re-imaged (it runs nothing, and goes on
// installing whatever it is told) and reports — told the baseline the write
// is about to replace. Then (blankAfter), once the write landed, it reports
// again and is released: a node that runs nothing must now be told the new
// baseline (check i), and it installs what it is told next (check f: an
// updated node runs the new release).
func (w *world) blankBefore(ctx context.Context, pool string) *node {
	a := &w.adv
	if !a.blankHost || a.blankDone {
		return nil
	}
	if a.blank != nil {
		if a.blank.ref.pool == pool {
			return a.blank // its pool's write did not land last time
		}
		return nil
	}
	ps, err := w.rollI.ProgressByStep(context.Background(), w.rolloutID, api.Updated, 100, "")
	if err != nil {
		w.t.Fatalf("checker: %v", err)
	}
	now := w.clock.Now()
	for _, p := range ps {
		n := w.nodes[nodeRef{p.PoolID, capacityIndex(p.NodeID)}]
		if p.PoolID != pool || n == nil || !n.managed || now.Before(n.silentUntil) || version(n.running) != newVersion {
			continue
		}
		a.blank = n
		n.blank, n.running, n.install = true, nil, nil
		w.note("adversary blank host: %s re-imaged (runs nothing) before %s's baseline is written", n.ref, pool)
		w.reportNow(ctx, n)
		return n
	}
	return nil
}

// blankAfter: the blank host reports again once the write landed, and is
// released.
func (w *world) blankAfter(ctx context.Context, n *node) {
	bs := w.baselines[n.ref.pool]
	if len(bs) == 0 || bs[len(bs)-1].version != newVersion {
		return // not written: the next pass's finish writes it again
	}
	w.reportNow(ctx, n)
	n.blank = false
	w.adv.blankDone = true
}

// reportNow has n report now and returns once its report was accepted: at
// once outside the actors (the quiescence), else the node's heartbeat loop
// woken while the caller's actor sleeps.
func (w *world) reportNow(ctx context.Context, n *node) {
	if actorOf(ctx) == nil {
		if err := n.beat(context.Background(), w); err != nil {
			w.t.Fatalf("heartbeat of %s: %v", n.ref, err)
		}
		return
	}
	was := n.acceptedOrder
	for i := 0; i < 100 && n.acceptedOrder == was; i++ {
		w.wakeNode(n.ref)
		w.s.sleep(ctx, 50*time.Millisecond)
	}
}

// cordonRace runs before a rollout cordons ref: an operator's cordon (the
// test's own call), then an uncordon whose flag writes are slow; the pass
// waits until the uncordon reached its flags.
func (w *world) cordonRace(ctx context.Context, rec fleet.Record) {
	if !w.adv.cordonRace || w.adv.cordonRaced >= 2 || !inPass(ctx) || !w.clock.Now().Before(w.end) || w.rng.IntN(2) != 0 {
		return
	}
	ref := nodeRef{rec.PoolID, rec.Index}
	n := w.nodes[ref]
	if _, err := w.fleet.Cordon(context.Background(), ownerTenant, ref.pool, n.id, "sim: operator (cordon race)"); err != nil {
		return
	}
	w.adv.cordonRaced++
	w.operatorSaid(ref, true, true)
	w.wentOut(ref, "operator cordon (cordon race)")
	reached := false
	w.s.spawnClean(ctx, "adversary operator uncordon "+ref.String(), 0, func(ctx context.Context) {
		a := actorOf(ctx)
		a.slowFlags = time.Duration(2+w.rng.IntN(4)) * time.Second
		a.reached = &reached
		err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error {
			_, err := w.fleet.Uncordon(ctx, ownerTenant, ref.pool, n.id)
			return err
		})
		w.noInternal("uncordon "+ref.String(), err)
		w.operatorSaid(ref, false, err == nil)
		for i, count := range []int{1, 2, nodeSize} {
			start := w.clock.Now()
			req := capacity.CreateRequest{TenantID: ownerTenant, PoolID: ref.pool, Resource: "gpu", Count: count, Principal: "prober",
				ClientToken: fmt.Sprintf("cordon-race-%d-%d", w.adv.cordonRaced, i), Start: &start, End: start.Add(90 * time.Second)}
			w.s.spawnClean(ctx, fmt.Sprintf("probe %d after the cordon race on %s", i, ref), 0, func(ctx context.Context) { w.create(ctx, req, false) })
		}
	})
	for i := 0; !reached && i < 100; i++ {
		w.s.sleep(ctx, 50*time.Millisecond)
	}
}

// slowFlag delays the first flag write of an actor made slow.
func (w *world) slowFlag(ctx context.Context) {
	a := actorOf(ctx)
	if a == nil || a.slowFlags == 0 {
		return
	}
	d := a.slowFlags
	a.slowFlags = 0
	if a.reached != nil {
		*a.reached = true
	}
	w.s.sleep(ctx, d)
}

// mover: a reservation of a whole node is made to move off each node the
// moment it binds it (the node reports bound and unhealthy together),
// its first node scrubbing slowly (saying bound after the unbind), until
// it lands back on that node or runs out of moves.
func (w *world) mover(ctx context.Context) {
	w.s.sleep(ctx, time.Duration(20+w.rng.IntN(120))*time.Second)
	a := actorOf(ctx)
	a.clean = true
	var r capacity.Reservation
	for i := 0; i < 5 && r.State != api.Placed; i++ {
		start := w.clock.Now().Add(5 * time.Second)
		req := capacity.CreateRequest{TenantID: ownerTenant, PoolID: "p1", Resource: "gpu", Count: nodeSize, Principal: "mover",
			ClientToken: fmt.Sprintf("move-back-%d", i), Start: &start, End: start.Add(150 * time.Second)}
		err, _, _ := w.invoke(ctx, capacity.FlowDeadline, func(ctx context.Context) error {
			var err error
			r, err = w.cap.Admission().Create(ctx, req, allow)
			return err
		})
		w.note("adversary move back: create %s: %v %s", req.ClientToken, err, r.State)
		if r.State != api.Placed {
			w.s.sleep(ctx, 10*time.Second)
		}
	}
	if r.State != api.Placed || len(r.Placement()) != 1 {
		return
	}
	w.placedOn(r, w.s.steps)
	first := nodeRef{r.PoolID, r.Placement()[0].Node}
	fn := w.nodes[first]
	if !fn.managed {
		return
	}
	w.adv.moveID = r.ReservationID
	fn.scrub, fn.flaky = 8, 0
	w.adv.sickOnce[r.ReservationID] = first
	sick := map[nodeRef]bool{}
	at := first
	for end := r.Window.End; w.clock.Now().Before(end) && w.clock.Now().Before(w.end); {
		w.s.sleep(ctx, time.Second)
		cur, err := w.capI.GetReservation(context.Background(), r.TenantID, r.ReservationID)
		if err != nil || cur.State.Terminal() || len(cur.Placement()) != 1 {
			break
		}
		now := nodeRef{cur.PoolID, cur.Placement()[0].Node}
		if now == at {
			continue
		}
		at = now
		if now == first {
			break // back: the binding step judges it (check e)
		}
		// Moved away: the first node heals, the new one sickens when it
		// binds it.
		fn.healthy = true
		if n := w.nodes[now]; n.managed {
			n.flaky = 0
			sick[now] = true
			w.adv.sickOnce[r.ReservationID] = now
		}
	}
	delete(w.adv.sickOnce, r.ReservationID)
	for ref := range sick {
		w.nodes[ref].healthy = true
	}
	fn.healthy = true
}

// boundNow is called when node n binds reservation id: a node the move
// back adversary marked sickens in the same report.
func (w *world) boundNow(n *node, id string) {
	if ref, ok := w.adv.sickOnce[id]; ok && ref == n.ref {
		n.healthy = false
		delete(w.adv.sickOnce, id)
	}
}

// fullHourProbe: now and then a create of one device for a few seconds
// inside two fillers' windows on the full node-hour's pool: its devices
// fit, the node-hour does not (CAPACITY_EXHAUSTED, the pool's only node
// excluded; never UNAVAILABLE).
func (w *world) fullHourProbe(ctx context.Context) {
	for i := 0; i < 3 && w.clock.Now().Before(w.end); i++ {
		// The first before the tenants' creates in that hour pile up on
		// another node.
		w.s.sleep(ctx, time.Duration(1+w.rng.IntN(10)+i*w.rng.IntN(120))*time.Second)
		f := 1 + w.rng.IntN(capacity.MaxEntriesPerNodeHour-1)
		start := w.fillHour.Start().Add(time.Duration(f)*50*time.Second + time.Duration(5+w.rng.IntN(40))*time.Second)
		req := capacity.CreateRequest{TenantID: "initech", PoolID: fillPool, Resource: "gpu", Count: 1, Principal: "fullhour",
			ClientToken: fmt.Sprintf("full-hour-%d", i), Start: &start, End: start.Add(10 * time.Second)}
		w.s.spawnClean(ctx, fmt.Sprintf("adversary full hour create %d", i), 0, func(ctx context.Context) { w.create(ctx, req, false) })
	}
}

// massSilence: three of pool p1's managed nodes go silent together for
// 10–16 intervals and come back one by one, about an interval apart — but
// one of them (its heartbeat held up) stops 28 s before the other two, so
// the sweep marks it alone first; and so that the silence is a mass
// silence only counting that one (three of the five nodes in contact, not
// two of four), a sixth node went silent a minute earlier on its own and
// is marked before. Long enough that a sweep without the hold would mark
// them (F13: the grace after a hold alone keeps the first UnreachableAfter
// intervals unmarked, so a silence of 4–5 intervals never got past it);
// not counting the one marked first, the two others are no mass silence
// (F16); coming back one by one, the hold ends with one of them still
// silent, which the grace keeps unmarked (F14).
func (w *world) massSilence(ctx context.Context) {
	w.s.sleep(ctx, time.Duration(60+w.rng.IntN(120))*time.Second)
	const pool = "p1"
	// No silence of their own meanwhile: the pool's count is the one the
	// adversary makes (a node silent on its own, late or not yet marked,
	// moves it either way).
	back := w.clock.Now()
	for _, ref := range w.order {
		if n := w.nodes[ref]; ref.pool == pool {
			n.silent = 0
			back = maxTime(back, n.silentUntil)
		}
	}
	w.s.sleep(ctx, back.Sub(w.clock.Now())+2*interval)
	in := w.inContact(pool)
	if len(in) < fleet.DisruptionMin+1 {
		return
	}
	w.rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
	k := len(in) - min(len(in), 5)
	d := time.Duration(100+w.rng.IntN(61)) * time.Second
	stagger := time.Duration(8+w.rng.IntN(5)) * time.Second
	// Three silent of at most five in contact: a lone silence first for
	// each node past five.
	lone, first, rest := in[:k], in[k], in[k+1:][:2]
	end := w.clock.Now().Add(60*time.Second + 28*time.Second + d + 3*stagger)
	for _, n := range lone {
		n.silentUntil = end
		w.note("adversary mass silence: %s silent alone until %s", n.ref, end.Format("15:04:05"))
	}
	if len(lone) > 0 {
		w.s.sleep(ctx, 60*time.Second)
	}
	// Nothing is injected into the three's calls until they are back: a
	// report of one of the last two failed or stalled made it silent with
	// the first, and a silence of two and then one is not the pool's by
	// the sweep's count (a node marked before counts only if its reports
	// stopped within UnreachableAfter intervals of the others').
	three := append([]*node{first}, rest...)
	for _, n := range three {
		n.actor.clean = true
	}
	// The first: right after its next report is accepted.
	was := first.acceptedOrder
	for i := 0; i < 400 && first.acceptedOrder == was; i++ {
		w.s.sleep(ctx, 50*time.Millisecond)
	}
	now := w.clock.Now()
	w.adv.silencePool, w.adv.silenceFrom = pool, now
	first.silentUntil = now.Add(28*time.Second + d)
	w.adv.silenced[first.ref] = true
	w.s.sleep(ctx, 28*time.Second)
	now = w.clock.Now()
	for i, n := range rest {
		n.silentUntil = now.Add(d + time.Duration(i+1)*stagger)
		w.adv.silenced[n.ref] = true
	}
	w.adv.silenceTo = rest[len(rest)-1].silentUntil.Add(2 * interval)
	w.note("adversary mass silence: %s silent from %s, %s and %s 28 s later, back from %s every %s", first.ref, w.adv.silenceFrom.Format("15:04:05"),
		rest[0].ref, rest[1].ref, first.silentUntil.Format("15:04:05"), stagger)
	w.s.sleep(ctx, w.adv.silenceTo.Sub(w.clock.Now()))
	for _, n := range three {
		n.actor.clean = false
	}
}

// inContact lists pool's managed nodes in contact (ready or unhealthy, as
// the sweep counts them) and reporting now.
func (w *world) inContact(pool string) []*node {
	now := w.clock.Now()
	var in []*node
	for _, ref := range w.order {
		n := w.nodes[ref]
		if ref.pool != pool || !n.managed || now.Before(n.silentUntil) {
			continue
		}
		if rec, ok := w.node(ref); ok && (rec.State == api.Ready || rec.State == api.Unhealthy) {
			in = append(in, n)
		}
	}
	return in
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// inSilence: ref is one of the mass silence's nodes and now is within it.
func (w *world) inSilence(ref nodeRef) bool {
	now := w.clock.Now()
	return w.adv.silenced[ref] && !now.Before(w.adv.silenceFrom) && now.Before(w.adv.silenceTo)
}

// wakeNode makes a sleeping node's heartbeat loop beat now.
func (w *world) wakeNode(ref nodeRef) {
	if n := w.nodes[ref]; n != nil && n.actor != nil && n.actor.op == "sleep" && n.actor.wake.After(w.clock.Now()) {
		n.actor.wake = w.clock.Now()
	}
}

// Flag: the cordon race's slow uncordon is held before its first write.
func (c *atomicCalendar) Flag(ctx context.Context, t capacity.PoolResource, node int, h capacity.Hour, off bool, gen int64) error {
	c.w.slowFlag(ctx)
	return c.Store.Flag(ctx, t, node, h, off, gen)
}

// Amend: a reservation moved off a node of a mass silence while it lasts
// because of that node (check silence): binding moves a reservation off
// its nodes when one of them is not ready, so a node of the silence still
// ready (cordoned, say, by a rollout installing it) moved along with
// another is not judged, nor one merely unhealthy (its own report).
func (c *atomicCalendar) Amend(ctx context.Context, r, to capacity.Reservation) (capacity.Reservation, error) {
	w := c.w
	w.amendRace(ctx, r)
	cur, err := c.Store.Amend(ctx, r, to)
	if err == nil {
		w.checkFacts(cur, "after an amend")
		w.recordFacts(cur)
	}
	if err == nil && to.Moves > r.Moves && w.adv.silencePool == r.PoolID {
		for _, nd := range r.Placement() {
			ref := nodeRef{r.PoolID, nd.Node}
			if rec, ok := w.node(ref); ok && w.inSilence(ref) && rec.State != api.Unhealthy && rec.State != api.Ready && !w.adv.alone[ref] {
				w.fail("silence", w.s.steps, "%s moved off %s during the mass silence of %s (since %s)", r.ReservationID, ref, r.PoolID,
					w.adv.silenceFrom.Format("15:04:05"))
			}
		}
	}
	return cur, err
}

// Disrupt: a rollout's disrupted entry, once written, is a fact (hist).
func (c *atomicCalendar) Disrupt(ctx context.Context, tenant, id, rolloutID string, at time.Time) error {
	err := c.Store.Disrupt(ctx, tenant, id, rolloutID, at)
	if r, gerr := c.w.capI.GetReservation(context.Background(), tenant, id); gerr == nil {
		c.w.recordFacts(r)
	}
	return err
}

// amendRace (every seed, once): a rollout's disrupted entry lands on a
// reservation between a pass's read of it and that pass's amend — the
// amend of the older copy must not write the history back without it
// (check hist).
func (w *world) amendRace(ctx context.Context, r capacity.Reservation) {
	if w.adv.amendRaced != "" || w.rolloutID == "" || !inPass(ctx) || !w.clock.Now().Before(w.end) || r.State.Terminal() {
		return
	}
	w.adv.amendRaced = r.ReservationID
	if err := w.capI.Disrupt(context.Background(), r.TenantID, r.ReservationID, w.rolloutID, w.clock.Now()); err != nil {
		w.t.Fatalf("amend race: %v", err)
	}
	if cur, err := w.capI.GetReservation(context.Background(), r.TenantID, r.ReservationID); err == nil {
		w.recordFacts(cur)
	}
	w.note("adversary amend race: %s disrupted by rollout %s between a pass's read and its amend", r.ReservationID, w.rolloutID)
}

// silentFailed: a rollout failing a node of a mass silence for its
// deadline while the silence lasts (check silence).
func (w *world) silentFailed(p rollout.Progress) {
	ref := nodeRef{p.PoolID, capacityIndex(p.NodeID)}
	if !w.adv.silenced[ref] {
		return
	}
	w.checked["silence"]++
	if w.inSilence(ref) && !w.adv.alone[ref] && (p.Step == api.Failed || p.Rollback == rollout.RollbackFailed) && p.Reason == rollout.ReasonDeadline {
		w.fail("silence", w.s.steps, "rollout failed %s (%s) during the mass silence of %s (since %s)", ref, p.Reason, ref.pool,
			w.adv.silenceFrom.Format("15:04:05"))
	}
}

// note adds a line to the trace.
func (w *world) note(format string, args ...any) {
	w.s.trace = append(w.s.trace, "-  "+fmt.Sprintf(format, args...))
}

// eager: an adversary acts on the rollout's own steps, so the rollout
// runs on while the actors do (no pause, no bake, a short forced drain).
func (a *adversaries) eager() bool { return a.abortRace || a.cordonRace }

func (w *world) actorOf(ctx context.Context) *actor { return actorOf(ctx) }
