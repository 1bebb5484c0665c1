package fleetproto

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/dynamo/rolloutdb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/reconcile"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
	"github.com/bettercompute/control-plane/shared/rollout"
	"github.com/bettercompute/control-plane/test/teststack"
)

// TestFleetProtocolSimulation runs the fleet protocol simulation (package
// doc, docs/fleet.md) for a few seeds: BC_FLEETPROTO_SEEDS=n runs seeds
// 1..n, BC_FLEETPROTO_SEED=k replays seed k exactly (k,l,… several) (every choice — which
// actor goes on, what a call does, when the clock moves, ids, keys — comes
// from the seed; nothing from real time). A failing seed prints the line
// that replays it and the steps before each check's first violation;
// BC_FLEETPROTO_TRACE=dir writes every seed's whole trace there.
func TestFleetProtocolSimulation(t *testing.T) {
	// make test's seeds (docs/fleet.md's revert table): between them every
	// fix of the table reverted fails one — 3 alone catches F17, 5 F05 and
	// F14, 6 F03 and F09, 7 F04 and F06. make fleetproto runs 1..SEEDS.
	seeds := []uint64{3, 5, 6, 7}
	if v, err := strconv.Atoi(os.Getenv("BC_FLEETPROTO_SEEDS")); err == nil && v > 0 {
		seeds = seeds[:0]
		for i := range v {
			seeds = append(seeds, uint64(i+1))
		}
	}
	if v := os.Getenv("BC_FLEETPROTO_SEED"); v != "" {
		seeds = seeds[:0]
		for _, f := range strings.Split(v, ",") {
			k, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("BC_FLEETPROTO_SEED=%q: %v", v, err)
			}
			seeds = append(seeds, k)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed#%d", seed), func(t *testing.T) {
			began := time.Now()
			w := newWorld(t, seed)
			defer func() { // after a Fatal too
				w.report(time.Since(began))
				if t.Failed() {
					t.Logf("replay: BC_FLEETPROTO_SEED=%d go test ./test/fleetproto -run TestFleetProtocolSimulation -v", seed)
				}
			}()
			w.run()
		})
	}
}

const (
	poolNodes   = 6 // nodes per pool
	nodeSize    = 4 // devices per node
	provision   = 2 // hours provisioned (and flagged, plus fleet.FlagMarginHours) ahead
	interval    = 10 * time.Second
	actorPhase  = 6 * time.Minute
	passEvery   = 5 * time.Second
	roundEvery  = 10 * time.Second // between clean passes at quiescence
	oldVersion  = "1.0.0"
	newVersion  = "2.0.0"
	platform    = "linux/amd64"
	ownerTenant = "acme"
	filler      = "filler" // the tenant that fills a node-hour
	fillPool    = "p3"     // its pool: one unmanaged node
)

var (
	t0      = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	pools   = []string{"p1", "p2"}
	tenants = []string{"acme", "globex", "initech"}
)

// world is one seed's run: the real services on a fresh table, the
// actors, and the checker's ledger.
type world struct {
	t        *testing.T
	releases *registry.Service // the release domain, as releases.register runs it
	seed     uint64
	rng      *rand.Rand
	s        *sched
	clock    *teststack.Clock
	end      time.Time // the actors' phase ends

	table  string
	logKey *release.LogSigner // the release log's checkpoint key
	// the checker's own stores (a client without the scheduler)
	capI   *capacitydb.Store
	fleetI *fleetdb.Store
	rollI  *rolloutdb.Store

	// the services every actor (and the quiescence) goes through
	cap      *capacity.Service
	fleet    *fleet.Service
	rc       *rollout.Reconciler
	rollouts *rollout.Rollouts
	crc      *reconcile.Reconciler

	nodes map[nodeRef]*node
	order []nodeRef
	ids   int

	dirtyMu sync.Mutex
	dirty   map[nodeRef]bool

	ledger
	adv adversaries
}

func newWorld(t *testing.T, seed uint64) *world {
	st := devstack.Shared(t)
	table := devstack.NewTable(t, st)
	clock := teststack.NewClock(t0)
	rng := rand.New(rand.NewPCG(seed, 0xf1ee7))
	w := &world{t: t, seed: seed, rng: rng, s: newSched(rng, clock), clock: clock, end: t0.Add(actorPhase), table: table,
		logKey: devstack.LogSigner(t, st, "bettercompute.sim/releases"),
		nodes:  map[nodeRef]*node{}, dirty: map[nodeRef]bool{}}
	w.ledger.init()
	plain := st.DynamoDB()
	w.capI = &capacitydb.Store{DB: plain, Table: table}
	w.fleetI = &fleetdb.Store{DB: plain, Table: table}
	w.rollI = &rolloutdb.Store{DB: plain, Table: table}
	w.wire(st.DynamoDB(w.option()))
	w.s.onStep = w.afterStep
	return w
}

// wire builds the services as the reconciler function and the API do, on
// the scheduled client.
func (w *world) wire(db *dynamodb.Client) {
	log := slog.New(slog.DiscardHandler)
	capS := &atomicCalendar{Store: &capacitydb.Store{DB: db, Table: w.table}, w: w}
	nodes := &fleetdb.Store{DB: db, Table: w.table}
	releases := &registry.Service{Store: &releasedb.Releases{DB: db, Table: w.table}, Now: w.clock.Now, Log: &registry.Log{Store: &releasedb.Log{DB: db, Table: w.table}, Signer: w.logKey}}
	progress := &watchedProgress{Store: &rolloutdb.Store{DB: db, Table: w.table}, w: w}
	w.cap = &capacity.Service{Store: capS, Now: w.clock.Now, Logger: log, Nodes: &watchedNodes{nodes, w}, ProvisionHours: provision, Serial: true,
		// The backoff's jitter comes from the global source: the seed draws it instead.
		Sleep: func(ctx context.Context, _ time.Duration) error {
			w.pause(ctx, time.Duration(1+w.rng.IntN(64))*time.Millisecond)
			return nil
		},
		NewID: func(time.Time) string { w.ids++; return fmt.Sprintf("SIM%05dX%017d", w.ids, w.seed) }}
	w.fleet = &fleet.Service{Store: &watchedFleet{nodes, w}, Pools: capS, Calendar: capS, Releases: releaseReader{releases},
		Rollouts: rollout.Holds{Store: progress}, // as the app wires it: the sweep lifts a finished rollout's cordon and target
		Now:      w.clock.Now, Logger: log, Interval: interval, ProvisionHours: provision, Serial: true}
	w.releases = releases
	w.rc = &rollout.Reconciler{Store: progress, Releases: releases, Nodes: &watchedTargets{nodes, w}, Cordons: watchedCordons{w.fleet, w}, Calendar: capS,
		Now: w.clock.Now, Logger: log, Serial: true}
	w.rollouts = &rollout.Rollouts{Store: progress, Releases: releases, Pools: capS, Now: w.clock.Now,
		Sleep: func(ctx context.Context, d time.Duration) error { w.pause(ctx, d); return nil }}
	w.crc = &reconcile.Reconciler{Capacity: &capacity.Steps{Service: w.cap, ProvisionHours: provision}, Due: &duedb.Store{DB: db, Table: w.table}, Fleet: w.fleet, Rollouts: w.rc, Serial: true}
	w.adopt()
}

// pause is a backoff or wait inside a flow: the actor sleeps on the
// simulated clock (the test's own calls move the clock).
func (w *world) pause(ctx context.Context, d time.Duration) {
	if actorOf(ctx) == nil {
		w.clock.Advance(d)
		return
	}
	w.s.sleep(ctx, d)
}

// run sets the world up, runs the actors, then the quiescence and its
// checks.
func (w *world) run() {
	ctx := context.Background()
	w.setUp(ctx)
	w.cast(ctx)
	began := time.Now()
	w.s.run()
	w.stats.steps, w.stats.actorsTook = w.s.steps, time.Since(began)
	w.quiesce(ctx)
}

// setUp: two pools of six 4-GPU nodes owned by acme and offered to globex
// and initech; two releases; every node of p1 and four of p2 registered,
// running the old release and healthy (p2's last two stay unmanaged, and
// in most seeds an operator registers them mid-run while they hold
// reservations), the old release the pools' baseline; in half the seeds,
// one node-hour an hour ahead filled to its 64 entries.
func (w *world) setUp(ctx context.Context) {
	t := w.t
	for _, p := range pools {
		if _, err := w.cap.Pools().Create(ctx, ownerTenant, p, map[string]int{"gpu": poolNodes * nodeSize}, map[string]int{"gpu": nodeSize}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.cap.Pools().Offer(ctx, ownerTenant, p, "globex", "gpu", 12); err != nil {
			t.Fatal(err)
		}
		if _, err := w.cap.Pools().Offer(ctx, ownerTenant, p, "initech", "gpu", 8); err != nil {
			t.Fatal(err)
		}
		if _, err := w.cap.Pools().Offer(ctx, ownerTenant, p, filler, "gpu", capacity.MaxEntriesPerNodeHour); err != nil {
			t.Fatal(err)
		}
	}
	w.release(ctx, oldVersion, 1)
	w.release(ctx, newVersion, 2)
	for _, p := range pools {
		for k := range poolNodes {
			ref := nodeRef{p, k}
			n := w.newNode(ref)
			w.nodes[ref], w.order = n, append(w.order, ref)
			if p == "p2" && k >= 4 {
				continue // unmanaged, for now
			}
			if err := w.register(ctx, n); err != nil {
				t.Fatal(err)
			}
			if err := n.beat(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.racePools(ctx)
	for ref := range w.nodes {
		if w.nodes[ref].managed {
			w.registered[ref] = true
		}
	}
	if _, err := w.crc.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	// The pools' baseline is the old release (an earlier rollout's): a
	// node that runs nothing is told it until the rollout completes.
	for _, p := range pools {
		if err := w.fleetI.SetBaseline(ctx, p, fleet.Target{Version: oldVersion, Sequence: 1, RolloutID: "earlier"}); err != nil {
			t.Fatal(err)
		}
		w.baselineStored(p)
	}
	// The fill (the full hour adversary's) follows the seed's bits, as the
	// adversaries do (the draw that chose it once is kept: the rest of each
	// seed's stream as it was).
	w.rng.IntN(2)
	if on(w.seed, fillBit) {
		w.fill(ctx)
	}
}

// release registers version at seq (a manifest the simulated nodes do not
// verify: the agent's verification is tested with the agent).
func (w *world) release(ctx context.Context, version string, seq int64) {
	manifest, _ := json.Marshal(map[string]any{"payloadType": release.PayloadType, "payload": "e30", "signatures": []any{}})
	_, _, err := w.releases.RegisterVerified(ctx, release.Release{Version: version, Sequence: seq,
		Binaries:       []release.Binary{{Platform: platform, URL: "https://dl.example.com/bcd-" + version, SHA256: fmt.Sprintf("%064x", seq), Size: 1}},
		ManifestDigest: fmt.Sprintf("sha256:%064x", seq), Signers: []string{}, RegisteredAt: w.clock.Now(), Manifest: manifest,
		Payload: []byte("{}")})
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) newNode(ref nodeRef) *node {
	var seed [ed25519.SeedSize]byte
	for i := range seed {
		seed[i] = byte(w.rng.IntN(256))
	}
	key := ed25519.NewKeyFromSeed(seed[:])
	pem, _ := dsse.MarshalPublicKeyPEM(key.Public())
	return &node{ref: ref, id: capacity.NodeID("gpu", ref.k), key: key, pem: string(pem), healthy: true,
		running: &api.Version{Version: oldVersion, Sequence: 1}, words: map[string]word{}, accepted: map[string]string{},
		sent: map[int64]map[string]word{}, told: map[string]string{}}
}

func (w *world) register(ctx context.Context, n *node) error {
	_, err := w.fleet.Register(ctx, ownerTenant, n.ref.pool, n.id, n.pem, platform)
	if err == nil {
		n.managed, n.registeredAt = true, w.clock.Now()
		w.wentOut(n.ref, "registered")
	}
	return err
}

// fill books 64 one-device reservations of 100 s, one every 50 s, in the
// hour after next, on the one node of pool p3, whose node-hour then holds
// capacity.MaxEntriesPerNodeHour entries (two devices busy at every
// instant): a create there that fits its devices meets ErrCalendarFull.
func (w *world) fill(ctx context.Context) {
	// A pool of one node of its own: on 4-device nodes shared with the
	// tenants, best fit spreads the fillers (a node whose devices were all
	// touched in the hour leaves the fast path) and no node-hour fills.
	if _, err := w.cap.Pools().Create(ctx, ownerTenant, fillPool, map[string]int{"gpu": nodeSize}, map[string]int{"gpu": nodeSize}); err != nil {
		w.t.Fatal(err)
	}
	for _, tn := range []string{filler, "initech"} {
		if _, err := w.cap.Pools().Offer(ctx, ownerTenant, fillPool, tn, "gpu", capacity.MaxEntriesPerNodeHour); err != nil {
			w.t.Fatal(err)
		}
	}
	h := capacity.HourOf(t0) + 2
	for i := range capacity.MaxEntriesPerNodeHour {
		s := h.Start().Add(time.Duration(i) * 50 * time.Second)
		r, err := w.cap.Admission().Create(ctx, capacity.CreateRequest{TenantID: filler, PoolID: fillPool, Resource: "gpu", Count: 1,
			Start: &s, End: s.Add(100 * time.Second), Principal: "filler", ClientToken: fmt.Sprintf("fill-%d", i)}, allow)
		if err != nil {
			w.t.Fatalf("fill %d: %v", i, err)
		}
		w.filled = append(w.filled, r.ReservationID)
	}
	w.fillHour = h
	// What the fill made: the most entries one node-hour of that hour holds
	// (the full-hour adversary aims at capacity.MaxEntriesPerNodeHour).
	nhs, err := w.capI.Snapshot(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, nh := range nhs.NodeHours {
		if nh.Pool == fillPool && nh.Hour == h && len(nh.Entries) > w.fillMost {
			w.fillMost, w.fillNode = len(nh.Entries), nh.Node
		}
	}
}

func allow(context.Context, map[string]any) error { return nil }

// report logs the run's figures and every check's violations.
func (w *world) report(took time.Duration) {
	t := w.t
	st := w.stats
	t.Logf("seed %d: %d steps, %d actors, %d crashes, %d failed calls, %d stalls; %d heartbeats answered, %d creates (%d placed, %d UNAVAILABLE), %d releases; %d binds told, %d active, %d moves; rollout %s (%s); %s (actors %s, quiescence %d rounds)",
		w.seed, st.steps, w.s.actors, w.s.crashes, w.s.failures, w.s.stalls, st.answers, st.creates, st.placed, st.unavailable, st.releases,
		st.bindsTold, st.active, st.moves, st.rollout, st.rolloutDetail, took.Round(100*time.Millisecond), st.actorsTook.Round(100*time.Millisecond), st.rounds)
	keys := slices.Sorted(maps.Keys(w.violations))
	var judged []string
	for _, k := range slices.Sorted(maps.Keys(w.checked)) {
		judged = append(judged, fmt.Sprintf("%s %d", k, w.checked[k]))
	}
	blank := "none"
	if w.adv.blank != nil {
		blank = w.adv.blank.ref.String()
	}
	rc := w.adv.race
	t.Logf("seed %d: adversaries %s (bind fences %d, cordon races %d, abort race %v, move back %q, fill: at most %d entries in a node-hour (node %d), mass silence %q %s–%s, sickened %d before a read, budget races %d after an intent and %d between starts, blank host %s; every seed: register race move %q (%v) read %q (%v), amend race %q); judged: %s", w.seed,
		w.advNames(), w.adv.fenced, w.adv.cordonRaced, w.adv.abortRaced, w.adv.moveID, w.fillMost, w.fillNode, w.adv.silencePool,
		w.adv.silenceFrom.Format("15:04:05"), w.adv.silenceTo.Format("15:04:05"), w.adv.sickened, w.adv.intentRaced, w.adv.startRaced, blank,
		rc.move, rc.moved, rc.read, rc.readDone, w.adv.amendRaced, strings.Join(judged, ", "))
	var sum []string
	for _, k := range keys {
		sum = append(sum, fmt.Sprintf("%s×%d", k, len(w.violations[k])))
	}
	if len(sum) > 0 {
		t.Logf("seed %d: checks failed: %s", w.seed, strings.Join(sum, " "))
	}
	for _, k := range keys {
		vs := w.violations[k]
		for i, v := range vs[:min(len(vs), 4)] {
			t.Errorf("seed %d: check %s: %s", w.seed, k, v.msg)
			if i == 0 && v.step > 0 {
				t.Logf("seed %d: check %s: the steps up to its first violation (step %d):\n%s", w.seed, k, v.step, w.traceBefore(v.step, 30))
			}
		}
		if len(vs) > 4 {
			t.Errorf("seed %d: check %s: %d more", w.seed, k, len(vs)-4)
		}
	}
	if dir := os.Getenv("BC_FLEETPROTO_TRACE"); dir != "" {
		_ = os.WriteFile(fmt.Sprintf("%s/seed-%d.trace", dir, w.seed), []byte(strings.Join(w.s.trace, "\n")+"\n"), 0o644)
	}
}

// traceBefore is the n trace lines before step (inclusive).
func (w *world) traceBefore(step, n int) string {
	end := len(w.s.trace)
	for i, l := range w.s.trace {
		if strings.HasPrefix(l, "#"+strconv.Itoa(step)+" ") {
			end = i + 1
			break
		}
	}
	return strings.Join(w.s.trace[max(0, end-n):end], "\n")
}
