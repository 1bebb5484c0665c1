package fleetproto

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// word is what a node says of one reservation.
type word struct {
	state  string // bound, unbound or failed
	honest bool   // bound because the answer before listed a bind of it
	scrub  int    // beats it went on saying bound after it was told to unbind
}

// node is one host and its agent, as far as the control plane sees it.
type node struct {
	ref          nodeRef
	id           string
	key          ed25519.PrivateKey
	pem          string
	managed      bool
	late         bool // registered by an operator while the actors ran
	registeredAt time.Time
	firstTold    time.Time // its first heartbeat answer
	counter      int64
	healthy      bool
	running      *api.Version
	install      *api.Install
	// its ways: a version whose install fails; per mille of beats that
	// flip its health, that start a silence; how many beats it goes on
	// saying bound after an unbind (a slow scrub, a stale report); per
	// mille of binds it reports failed
	failOn                string
	flaky, silent, failed int
	scrub                 int
	silentUntil           time.Time
	sickUntil             time.Time // unhealthy until then (the sicken adversary)
	// bindings: its word on each; the words of its last report whose
	// answer came back; the words of every report it sent, by counter;
	// every reservation an answer listed, with the last action told
	words    map[string]word
	accepted map[string]string
	sent     map[int64]map[string]word
	told     map[string]string
	next     time.Duration
	actor    *actor // its heartbeat loop
	// acceptedOrder: the order of the write that accepted its last report
	// (check i); blank: a re-imaged host that runs nothing and, told a
	// release, goes on installing it (the blank host adversary)
	acceptedOrder int
	blank         bool
	lastAccepted  time.Time // when its last report was accepted
}

// beat sends the node's report and acts on the answer like the reference
// agent: every unbind first (a slow scrubber goes on saying bound for a
// few beats), then a bind once the previous holder's unbound was carried
// by an accepted report; a release it does not run is installed (or
// fails, as the node is made).
func (n *node) beat(ctx context.Context, w *world) error {
	n.counter++
	visible := nodeSize
	if !n.healthy {
		visible = nodeSize - 1
	}
	rep := api.Report{PoolID: n.ref.pool, NodeID: n.id, Counter: n.counter, At: w.clock.Now(), Running: n.running, Install: n.install,
		Health: api.Health{DevicesExpected: nodeSize, DevicesVisible: visible, Checks: []api.Check{}}, Bindings: []api.ReportedBinding{}}
	words := map[string]word{}
	for _, id := range slices.Sorted(maps.Keys(n.words)) {
		wd := n.words[id]
		words[id] = wd
		rep.Bindings = append(rep.Bindings, api.ReportedBinding{ReservationID: id, State: wd.state})
	}
	n.sent[n.counter] = words
	payload, _ := json.Marshal(rep)
	env, err := dsse.Sign(api.ReportPayloadType, payload, n.key)
	if err != nil {
		return err
	}
	res, err := w.fleet.Heartbeat(ctx, ownerTenant, n.ref.pool, n.id, env)
	if err != nil {
		return err
	}
	if at := res.Node.LastHeartbeatAt; at != nil {
		n.lastAccepted = *at
		if q := w.adv.quietFrom[n.ref]; !q.IsZero() && w.adv.backAt[n.ref].IsZero() && at.After(q) {
			w.adv.backAt[n.ref] = *at
		}
	}
	w.answered(n, res)
	n.accepted = map[string]string{}
	for id, wd := range words {
		n.accepted[id] = wd.state
	}
	n.act(w, res)
	return nil
}

func (n *node) act(w *world, res api.HeartbeatResult) {
	n.next = time.Duration(res.NextHeartbeatSeconds) * time.Second
	if n.firstTold.IsZero() {
		n.firstTold = w.clock.Now()
	}
	listed := map[string]bool{}
	unbinds := map[string][]string{}
	for _, b := range res.Desired.Bindings {
		listed[b.ReservationID] = true
		n.told[b.ReservationID+"/"+b.Action] = b.Action
		if b.Action == api.ActionUnbind {
			unbinds[b.ReservationID] = b.DeviceIDs
		}
	}
	for _, b := range res.Desired.Bindings {
		if b.Action != api.ActionUnbind {
			continue
		}
		wd := n.words[b.ReservationID]
		if wd.state == api.BindBound && wd.scrub < n.scrub {
			wd.scrub++
			wd.honest = false
			n.words[b.ReservationID] = wd
			continue
		}
		n.words[b.ReservationID] = word{state: api.BindUnbound}
	}
	for _, b := range res.Desired.Bindings {
		if b.Action != api.ActionBind {
			continue
		}
		id := b.ReservationID
		if _, also := unbinds[id]; also {
			continue
		}
		if wd := n.words[id]; wd.state == api.BindBound {
			wd.honest = true
			n.words[id] = wd
			continue
		}
		blocked := false
		for prev, devices := range unbinds {
			scrubbed := n.accepted[prev] == api.BindUnbound && n.words[prev].state == api.BindUnbound
			if !scrubbed && slices.ContainsFunc(b.DeviceIDs, func(d string) bool { return slices.Contains(devices, d) }) {
				blocked = true
			}
		}
		if blocked {
			continue
		}
		if w.rng.IntN(1000) < n.failed {
			n.words[id] = word{state: api.BindFailed}
			continue
		}
		n.words[id] = word{state: api.BindBound, honest: true}
		w.boundNow(n, id)
	}
	for id, wd := range n.words {
		if listed[id] {
			continue
		}
		if n.accepted[id] == wd.state {
			delete(n.words, id) // its last word was carried: forgotten
		} else {
			wd.honest = false
			n.words[id] = wd
		}
	}
	d := res.Desired.Release
	if d == nil || (n.running != nil && n.running.Version == d.Version) {
		return
	}
	if d.Sequence < res.Desired.FloorSequence {
		w.fail("floor", 0, "%s told %s (%d) below its floor %d", n.ref, d.Version, d.Sequence, res.Desired.FloorSequence)
		return
	}
	if n.blank {
		n.install = &api.Install{Version: d.Version, State: api.InstallInstalling}
		return
	}
	if n.failOn == d.Version {
		reason := "sim: the release does not start"
		n.install = &api.Install{Version: d.Version, State: api.InstallFailed, Reason: &reason}
		return
	}
	n.running = &api.Version{Version: d.Version, Sequence: d.Sequence}
	n.install = &api.Install{Version: d.Version, State: api.InstallInstalled}
}

// invoke runs one API call or pass of a long-lived actor as its own
// function invocation: limit is its timeout; a crash ends that call only
// (the client, the node, goes on). It says whether the call crashed and
// whether any failure was injected into it.
func (w *world) invoke(ctx context.Context, limit time.Duration, fn func(ctx context.Context) error) (err error, crashed, faulted bool) {
	a := actorOf(ctx)
	if a == nil {
		return fn(ctx), false, false
	}
	a.started, a.limit, a.faulted = w.clock.Now(), limit, false
	err = fn(ctx)
	crashed, faulted = a.dead, a.faulted
	a.dead, a.limit = false, 0
	return err, crashed, faulted
}

// agent is node n's heartbeat loop while the actors run: health flaps,
// silences, slow scrubs, failing installs, as the seed made the node.
func (w *world) agent(n *node) func(ctx context.Context) {
	return func(ctx context.Context) {
		for w.clock.Now().Before(w.end) {
			now := w.clock.Now()
			switch {
			case !n.managed:
				w.s.sleep(ctx, interval)
				continue
			case now.Before(n.silentUntil):
				if w.adv.silenced[n.ref] && w.adv.quietFrom[n.ref].IsZero() {
					w.adv.quietFrom[n.ref] = n.lastAccepted
				}
				w.s.sleep(ctx, n.silentUntil.Sub(now))
				continue
			}
			switch {
			case !n.sickUntil.IsZero() && now.Before(n.sickUntil):
				n.healthy = false
			case !n.sickUntil.IsZero():
				n.healthy, n.sickUntil = true, time.Time{}
			case w.rng.IntN(1000) < n.flaky:
				n.healthy = !n.healthy
			}
			n.next = 0
			err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error { return n.beat(ctx, w) })
			w.noInternal("heartbeat "+n.ref.String(), err)
			if w.rng.IntN(1000) < n.silent {
				n.silentUntil = w.clock.Now().Add(time.Duration(15+w.rng.IntN(60)) * time.Second)
			}
			next := n.next
			if next <= 0 {
				next = api.BusyInterval
			}
			w.s.sleep(ctx, next-time.Duration(w.rng.IntN(1000))*time.Millisecond)
		}
	}
}

// operator cordons and uncordons nodes, and registers the unmanaged ones
// (while they hold reservations bound at once).
func (w *world) operator(ctx context.Context) {
	for w.clock.Now().Before(w.end) {
		w.s.sleep(ctx, time.Duration(10+w.rng.IntN(30))*time.Second)
		var unmanaged, managed []*node
		for _, ref := range w.order {
			if racePool(ref.pool) {
				continue // the register race's
			}
			if n := w.nodes[ref]; n.managed {
				managed = append(managed, n)
			} else {
				unmanaged = append(unmanaged, n)
			}
		}
		if len(unmanaged) > 0 && w.registerLate && w.rng.IntN(3) == 0 {
			n := unmanaged[w.rng.IntN(len(unmanaged))]
			err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error { return w.register(ctx, n) })
			n.late = n.late || n.managed
			w.noInternal("register "+n.ref.String(), err)
			continue
		}
		n := managed[w.rng.IntN(len(managed))]
		cordon := w.rng.IntN(2) == 0
		err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error {
			if cordon {
				_, err := w.fleet.Cordon(ctx, ownerTenant, n.ref.pool, n.id, "sim: operator")
				return err
			}
			_, err := w.fleet.Uncordon(ctx, ownerTenant, n.ref.pool, n.id)
			return err
		})
		w.noInternal("cordon "+n.ref.String(), err)
		w.operatorSaid(n.ref, cordon, err == nil)
		if err == nil && cordon {
			w.wentOut(n.ref, "operator cordon")
		}
	}
}

// tenant books near-term windows on either pool, retries a create whose
// answer was lost with the same clientToken, and releases some early —
// some while their create is still running.
func (w *world) tenant(name string) func(ctx context.Context) {
	return func(ctx context.Context) {
		for i := 0; w.clock.Now().Before(w.end); i++ {
			w.s.sleep(ctx, time.Duration(3+w.rng.IntN(25))*time.Second)
			req := w.createRequest(name, i)
			id := capacity.TokenID(req.TenantID, req.Principal, req.ClientToken)
			if w.rng.IntN(5) < 2 {
				wait := time.Duration(w.rng.IntN(int(req.End.Sub(w.clock.Now())/time.Millisecond)+1)) * time.Millisecond
				if w.rng.IntN(4) == 0 {
					wait = time.Duration(w.rng.IntN(300)) * time.Millisecond // racing the create itself
				}
				// Within the actors' phase: a releaser waiting for a window hours
				// ahead would carry the clock there before the quiescence, into
				// the filled hour, where windows start and end every 50 s.
				wait = min(wait, max(0, w.end.Sub(w.clock.Now())))
				w.s.spawn(ctx, fmt.Sprintf("%s release %s", name, id), 0, w.releaser(req.TenantID, id, wait))
			}
			for attempt := 0; attempt < 2; attempt++ {
				if !w.create(ctx, req, attempt > 0) || w.rng.IntN(2) == 0 {
					break
				}
			}
		}
	}
}

// createRequest draws one create: 1, 2, 4 or 8 devices (8: two whole
// nodes), on nodes or any devices, from now or up to 90 s ahead, for one
// to four minutes — or, when a node-hour was filled, one device in that
// hour.
func (w *world) createRequest(tenant string, i int) capacity.CreateRequest {
	r := w.rng
	req := capacity.CreateRequest{TenantID: tenant, PoolID: pools[r.IntN(len(pools))], Resource: "gpu", Principal: "alice",
		Count: []int{1, 2, 4, 4, 8}[r.IntN(5)], ClientToken: fmt.Sprintf("%s-%d", tenant, i)}
	if r.IntN(4) == 0 {
		req.Topology = api.AnyDevices
	}
	start := w.clock.Now().Add(time.Duration(r.IntN(90)) * time.Second)
	if w.fillHour != 0 && r.IntN(3) == 0 {
		req.PoolID, req.Count, req.Topology = "p1", 1, ""
		start = w.fillHour.Start().Add(time.Duration(r.IntN(3000)) * time.Second)
	}
	req.Start = &start
	req.End = start.Add(time.Duration(60+r.IntN(180)) * time.Second)
	return req
}

// create calls reservations.create and checks its answer; it says whether
// the answer was lost (a crash, a failure: the client may retry).
func (w *world) create(ctx context.Context, req capacity.CreateRequest, retry bool) (lost bool) {
	start := w.s.steps
	var r capacity.Reservation
	err, crashed, faulted := w.invoke(ctx, capacity.FlowDeadline, func(ctx context.Context) error {
		var err error
		r, err = w.cap.Admission().Create(ctx, req, allow)
		return err
	})
	w.stats.creates++
	w.noInternal("create", err)
	switch {
	case crashed:
		if a := actorOf(ctx); a != nil && a.clean {
			w.checked["g"]++
			w.fail("g", w.s.steps, "%s/%s×%d (%s, nothing injected) cut off at its deadline without an answer: %v", req.TenantID, req.PoolID, req.Count, req.ClientToken, err)
		}
		return true
	case err == nil:
		if r.State == api.Placed {
			w.stats.placed++
			w.placedOn(r, start)
		}
		return false
	case apierr.CodeOf(err) == apierr.Unavailable:
		w.stats.unavailable++
		w.checked["g"]++
		if !faulted && !retry { // a retry may find its first attempt still holding the token's lease
			w.fail("g", w.s.steps, "%s/%s×%d (%s) answered UNAVAILABLE with no failure injected into its calls: %v", req.TenantID, req.PoolID, req.Count, req.ClientToken, err)
		}
		return true
	}
	return false
}

// probe: now and then, a node that just went out of placement is
// followed at once by a tenant's create of a whole node on its pool — the
// placement that must not land on it (check b).
func (w *world) probe(ref nodeRef) {
	if racePool(ref.pool) || w.s.running() == nil || !w.clock.Now().Before(w.end) || w.rng.IntN(10) >= 3 {
		return
	}
	w.probes++
	i := w.probes
	start := w.clock.Now()
	req := capacity.CreateRequest{TenantID: ownerTenant, PoolID: ref.pool, Resource: "gpu", Count: nodeSize, Principal: "prober",
		ClientToken: fmt.Sprintf("probe-%d", i), Start: &start, End: start.Add(time.Duration(30+w.rng.IntN(90)) * time.Second)}
	w.s.spawn(context.Background(), fmt.Sprintf("probe %d after %s went out", i, ref), 0, func(ctx context.Context) {
		w.create(ctx, req, false)
	})
}

func (w *world) releaser(tenant, id string, wait time.Duration) func(ctx context.Context) {
	return func(ctx context.Context) {
		w.s.sleep(ctx, wait)
		for attempt := 0; attempt < 3; attempt++ {
			var r capacity.Reservation
			err, crashed, _ := w.invoke(ctx, capacity.ReleaseTimeout, func(ctx context.Context) error {
				var err error
				r, err = w.cap.Reservations().Release(ctx, tenant, id)
				return err
			})
			w.noInternal("release", err)
			if err == nil {
				w.stats.releases++
				if !r.State.Terminal() {
					w.fail("release", w.s.steps, "release of %s answered %s", id, r.State)
				}
				return
			}
			if !crashed && apierr.CodeOf(err) != apierr.Unavailable {
				return // not found: its create never wrote it
			}
		}
	}
}

// rolloutActor creates the seed's rollout (retrying a lost answer with
// its clientToken), then pauses, resumes and aborts it now and then.
func (w *world) rolloutActor(ctx context.Context) {
	w.s.sleep(ctx, time.Duration(5+w.rng.IntN(30))*time.Second)
	if w.adv.eager() {
		w.actorOf(ctx).clean = true // its create and pauses: nothing injected
	}
	req := w.rolloutRequest()
	for attempt := 0; attempt < 10; attempt++ {
		var r api.Rollout
		err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error {
			var err error
			r, err = w.rollouts.Create(ctx, req)
			return err
		})
		w.noInternal("rollouts.create", err)
		if err == nil {
			w.rolloutID = r.RolloutID
			break
		}
		if code := apierr.CodeOf(err); code != apierr.Unavailable {
			w.fail("rollout", w.s.steps, "rollouts.create refused: %v", err)
			return
		}
		w.s.sleep(ctx, 15*time.Second)
	}
	if w.rolloutID == "" {
		return
	}
	aborted := false
	for w.clock.Now().Before(w.end) {
		w.s.sleep(ctx, time.Duration(10+w.rng.IntN(50))*time.Second)
		if w.adv.eager() {
			continue // the adversaries' rollout: on until they act
		}
		var what string
		switch n := w.rng.IntN(100); {
		case n < 30:
			what = "pause"
		case n < 60:
			what = "resume"
		case n < 75 && !aborted && w.mayAbort:
			what, aborted = "abort", true
		default:
			continue
		}
		err, _, _ := w.invoke(ctx, 10*time.Second, func(ctx context.Context) error {
			var err error
			switch what {
			case "pause":
				_, err = w.rollouts.Pause(ctx, w.rolloutID, "sim")
			case "resume":
				_, err = w.rollouts.Resume(ctx, w.rolloutID, "sim")
			default:
				_, err = w.rollouts.Abort(ctx, w.rolloutID, "sim")
			}
			return err
		})
		w.noInternal("rollouts."+what, err)
		if err != nil && what == "abort" {
			aborted = false
		}
	}
}

func (w *world) rolloutRequest() rollout.CreateRequest {
	r := w.rng
	ptr := func(v int) *int { return &v }
	onTimeout := []string{"skip", "force"}[r.IntN(2)]
	// The abort race's rollout rolls back: its abort is not terminal while
	// the rollback runs, when a skipped node's late target can be told.
	rollback := r.IntN(4) > 0 || w.adv.abortRace
	w.maxUnavailable = 1 + r.IntN(2)
	bake, drain := r.IntN(20), 30+r.IntN(90)
	if w.adv.eager() {
		// Room to start nodes while the actors run (flapping, silent and
		// cordoned nodes count out of service), where those adversaries act.
		w.maxUnavailable += 3
		bake, drain, onTimeout = 0, 20, "force"
	}
	return rollout.CreateRequest{Version: newVersion, Pools: pools,
		Waves:       []api.WaveSpec{{Nodes: ptr(1)}, {Percent: ptr(50)}, {Percent: ptr(100)}},
		BakeSeconds: ptr(bake), MaxUnavailable: ptr(w.maxUnavailable), MaxFailedNodes: ptr(r.IntN(3)),
		ProgressDeadlineSeconds: ptr(60), DrainWaitSeconds: ptr(drain), DrainOnTimeout: &onTimeout,
		RollbackOnAbort: &rollback, ClientToken: fmt.Sprintf("sim-%d", w.seed), By: rollout.Audit{TenantID: "platform", Principal: "admin"}}
}

// cron is EventBridge: a reconciler pass every passEvery, sometimes two
// at once; each is its own invocation (cut off past its timeout).
func (w *world) cron(ctx context.Context) {
	for i := 0; w.clock.Now().Before(w.end); i++ {
		w.s.sleep(ctx, passEvery)
		for j := range 1 + boolInt(w.rng.IntN(5) == 0) {
			w.s.spawn(ctx, fmt.Sprintf("pass %d.%d", i, j), 50*time.Second, w.pass)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (w *world) pass(ctx context.Context) {
	res, err := w.crc.Pass(ctx)
	if err == nil {
		w.stats.bindsTold += res.Told
	}
}

// cast draws the seed's nodes' ways and actors.
func (w *world) cast(ctx context.Context) {
	r := w.rng
	w.registerLate = r.IntN(4) > 0
	w.mayAbort = r.IntN(2) == 0
	for _, ref := range w.order {
		n := w.nodes[ref]
		if racePool(ref.pool) {
			// The register race's nodes report as they are made to.
			n.actor = w.s.spawn(ctx, "node "+ref.String(), 0, w.agent(n))
			continue
		}
		if r.IntN(3) == 0 {
			n.flaky = 20 + r.IntN(150)
		}
		if r.IntN(4) == 0 {
			n.silent = 10 + r.IntN(40)
		}
		if r.IntN(3) == 0 {
			n.scrub = 1 + r.IntN(3)
		}
		if r.IntN(10) == 0 {
			n.failed = 100
		}
		n.actor = w.s.spawn(ctx, "node "+ref.String(), 0, w.agent(n))
	}
	managed := []*node{}
	for _, ref := range w.order {
		if w.nodes[ref].managed && !racePool(ref.pool) {
			managed = append(managed, w.nodes[ref])
		}
	}
	for range r.IntN(3) {
		managed[r.IntN(len(managed))].failOn = newVersion
	}
	w.s.spawn(ctx, "operator", 0, w.operator)
	for _, tn := range tenants {
		w.s.spawn(ctx, "tenant "+tn, 0, w.tenant(tn))
	}
	w.s.spawn(ctx, "rollouts", 0, w.rolloutActor)
	w.s.spawn(ctx, "cron", 0, w.cron)
	w.drawAdversaries()
	w.s.rates = rates{crashBefore: 6, crashAfter: 6, failBefore: 8, failAfter: 8, stall: 40}
}

// noInternal: whatever was injected, an answer is never INTERNAL.
func (w *world) noInternal(what string, err error) {
	if apierr.CodeOf(err) == apierr.Internal && !errors.Is(err, errCrashed) && !errors.Is(err, errInjected) {
		w.fail("internal", w.s.steps, "%s answered INTERNAL: %v", what, err)
	}
}
