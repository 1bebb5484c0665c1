package rollout_test

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

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

func TestMain(m *testing.M) { devstack.Main(m) }

var t0 = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

// fleetEnv is the capacity, fleet and rollout services on one fresh table,
// with nodes that behave like agents (they install what they are told,
// or fail to, as each test decides).
type fleetEnv struct {
	t        testing.TB
	clock    *teststack.Clock
	cap      *capacity.Service
	fleet    *fleet.Service
	nodes    *fleetdb.Store
	store    *capacitydb.Store
	releases *registry.Service
	rollouts *rollout.Rollouts
	rstore   *rolloutdb.Store
	rc       *rollout.Reconciler
	crc      *reconcile.Reconciler

	mu    sync.Mutex
	node  map[string]*simNode // pool/node
	order []string
}

// simNode is one node's agent, as far as a rollout sees it.
type simNode struct {
	pool, id string
	key      crypto.Signer
	counter  int64
	running  *api.Version
	install  *api.Install
	healthy  bool
	silent   bool                          // sends nothing
	onTold   func(v string) (bool, string) // install outcome (default: installed)
	bound    map[string]string             // reservation → bound/unbound, as last reported
	told     []toldAt                      // every release the answers named, when
}

type toldAt struct {
	version string
	at      time.Time
}

// envHours is the provisioned horizon of these tests: a node's transition
// flags envHours + fleet.FlagMarginHours node-hours, so the default 72 made
// each cordon, uncordon and failed report 76 writes and the rollout tests
// spend their time there, not on the rollout (flagging at the default
// horizon is the fleet package's and the fleet simulation's to test).
const envHours = 4

func newFleetEnv(t testing.TB) *fleetEnv {
	t.Helper()
	st := devstack.Shared(t)
	table := devstack.NewTable(t, st)
	db := st.DynamoDB()
	clock := teststack.NewClock(t0)
	log := slog.New(slog.DiscardHandler)
	store := &capacitydb.Store{DB: db, Table: table}
	nodes := &fleetdb.Store{DB: db, Table: table}
	releases := &registry.Service{Store: &releasedb.Releases{DB: db, Table: table}, Now: clock.Now, Log: &registry.Log{Store: &releasedb.Log{DB: db, Table: table}, Signer: devstack.LogSigner(t, st, "bettercompute.test/releases")}}
	rstore := &rolloutdb.Store{DB: db, Table: table}
	cs := &capacity.Service{Store: store, Now: clock.Now, Logger: log, Nodes: nodes, ProvisionHours: envHours}
	fs := &fleet.Service{Store: nodes, Pools: store, Calendar: store, Now: clock.Now, Logger: log,
		Releases: releaseReader{releases}, Rollouts: rollout.Holds{Store: rstore}, ProvisionHours: envHours}
	rc := &rollout.Reconciler{Store: rstore, Releases: releases, Nodes: nodes, Cordons: fs, Calendar: store, Now: clock.Now, Logger: log}
	e := &fleetEnv{t: t, clock: clock, cap: cs, fleet: fs, nodes: nodes, store: store, releases: releases, rstore: rstore, rc: rc,
		rollouts: &rollout.Rollouts{Store: rstore, Releases: releases, Pools: store, Now: clock.Now,
			Sleep: func(context.Context, time.Duration) error { clock.Advance(50 * time.Millisecond); return nil }},
		crc:  &reconcile.Reconciler{Capacity: &capacity.Steps{Service: cs, ProvisionHours: envHours}, Due: &duedb.Store{DB: store.DB, Table: store.Table}, Fleet: fs, Rollouts: rc, Serial: true},
		node: map[string]*simNode{}}
	return e
}

type releaseReader struct{ s *registry.Service }

func (r releaseReader) Release(ctx context.Context, v string) (fleet.NodeRelease, error) {
	rel, err := r.s.Get(ctx, v)
	if err != nil {
		return fleet.NodeRelease{}, fleet.ErrNotFound
	}
	return fleet.NodeRelease{Version: rel.Version, Sequence: rel.Sequence, Digest: rel.ManifestDigest, Manifest: rel.Manifest}, nil
}

// release registers version at seq (a manifest the nodes need not verify
// here: the agent's verification is tested with the agent).
func (e *fleetEnv) release(version string, seq int64, platforms ...string) {
	e.t.Helper()
	if len(platforms) == 0 {
		platforms = []string{"linux/amd64"}
	}
	var bins []release.Binary
	for _, p := range platforms {
		bins = append(bins, release.Binary{Platform: p, URL: "https://dl.example.com/bcd-" + version, SHA256: fmt.Sprintf("%064x", seq), Size: 1})
	}
	manifest, _ := json.Marshal(map[string]any{"payloadType": release.PayloadType, "payload": "e30", "signatures": []any{}})
	_, _, err := e.releases.RegisterVerified(context.Background(), release.Release{Version: version, Sequence: seq, Binaries: bins,
		ManifestDigest: fmt.Sprintf("sha256:%064x", seq), Signers: []string{}, RegisteredAt: e.clock.Now(), Manifest: manifest,
		Payload: []byte("{}")})
	if err != nil {
		e.t.Fatal(err)
	}
}

// pool creates pool id of nodes nodes of 8 devices, registers each
// running version v (seq) and reports it ready.
func (e *fleetEnv) pool(id string, nodes int, v string, seq int64) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.cap.Pools().Create(ctx, "acme", id, map[string]int{"gpu": 8 * nodes}, nil); err != nil {
		e.t.Fatal(err)
	}
	for k := range nodes {
		key, _ := dsse.GenerateKey(dsse.AlgEd25519)
		pem, _ := dsse.MarshalPublicKeyPEM(key.Public())
		nodeID := capacity.NodeID("gpu", k)
		if _, err := e.fleet.Register(ctx, "acme", id, nodeID, string(pem), "linux/amd64"); err != nil {
			e.t.Fatal(err)
		}
		n := &simNode{pool: id, id: nodeID, key: key, healthy: true}
		if v != "" {
			n.running = &api.Version{Version: v, Sequence: seq}
		}
		e.node[id+"/"+nodeID] = n
		e.order = append(e.order, id+"/"+nodeID)
	}
	e.beatAll()
}

// beat sends n's report and acts on the answer as an agent would: a
// release it does not run is installed (or fails, as onTold says), and
// reported on the next beat.
func (e *fleetEnv) beat(n *simNode) {
	e.t.Helper()
	if n.silent {
		return
	}
	n.counter++
	visible := 8
	if !n.healthy {
		visible = 6
	}
	rep := api.Report{PoolID: n.pool, NodeID: n.id, Counter: n.counter, At: e.clock.Now(), Running: n.running, Install: n.install,
		Health: api.Health{DevicesExpected: 8, DevicesVisible: visible, Checks: []api.Check{}}, Bindings: []api.ReportedBinding{}}
	for _, id := range slices.Sorted(maps.Keys(n.bound)) {
		rep.Bindings = append(rep.Bindings, api.ReportedBinding{ReservationID: id, State: n.bound[id]})
	}
	payload, _ := json.Marshal(rep)
	env, _ := dsse.Sign(api.ReportPayloadType, payload, n.key)
	res, err := e.fleet.Heartbeat(context.Background(), "acme", n.pool, n.id, env)
	if err != nil {
		e.t.Fatalf("heartbeat %s: %v", n.id, err)
	}
	// Bindings as a driver that never refuses: bound or unbound on the
	// next report; one the answer no longer lists is forgotten.
	listed := map[string]string{}
	for _, b := range res.Desired.Bindings {
		listed[b.ReservationID] = api.BindBound
		if b.Action == api.ActionUnbind {
			listed[b.ReservationID] = api.BindUnbound
		}
	}
	n.bound = listed
	d := res.Desired.Release
	if d != nil && (n.running == nil || n.running.Version != d.Version) {
		n.told = append(n.told, toldAt{d.Version, e.clock.Now()})
	}
	if d == nil || (n.running != nil && n.running.Version == d.Version) {
		return
	}
	if d.Sequence < res.Desired.FloorSequence {
		e.t.Errorf("%s told %s (%d) below its floor %d", n.id, d.Version, d.Sequence, res.Desired.FloorSequence)
		return
	}
	ok, reason := true, ""
	if n.onTold != nil {
		ok, reason = n.onTold(d.Version)
	}
	if ok {
		n.running = &api.Version{Version: d.Version, Sequence: d.Sequence}
		n.install = &api.Install{Version: d.Version, State: api.InstallInstalled}
	} else {
		n.install = &api.Install{Version: d.Version, State: api.InstallFailed, Reason: &reason}
	}
}

func (e *fleetEnv) beatAll() {
	e.t.Helper()
	for _, k := range e.order {
		e.beat(e.node[k])
	}
}

// pass is one reconciler pass (capacity, fleet sweep and rollouts) that
// must not fail.
func (e *fleetEnv) pass() {
	e.t.Helper()
	res, err := e.crc.Pass(context.Background())
	if err != nil || res.Errors > 0 {
		e.t.Fatalf("pass: %+v %v", res, err)
	}
}

// round: the clock moves, every node reports, a pass runs.
func (e *fleetEnv) round(d time.Duration) {
	e.t.Helper()
	e.clock.Advance(d)
	e.beatAll()
	e.pass()
}

func (e *fleetEnv) get(id string) api.Rollout {
	e.t.Helper()
	r, err := e.rollouts.Get(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// until runs rounds until the rollout is in state (at most n).
func (e *fleetEnv) until(id string, state api.RolloutState, n int, each func()) api.Rollout {
	e.t.Helper()
	for range n {
		if r := e.get(id); r.State == state {
			return r
		}
		e.round(time.Second)
		if each != nil {
			each()
		}
	}
	r := e.get(id)
	if r.State != state {
		e.t.Fatalf("rollout %s after %d rounds: %s (%s), counts %+v, history %+v", id, n, r.State, r.Reason, r.Counts, r.History)
	}
	return r
}

// unavailable counts the pools' nodes out of service: not ready, or
// cordoned.
func (e *fleetEnv) unavailable(pools ...string) int {
	e.t.Helper()
	n := 0
	for _, p := range pools {
		err := e.nodes.PoolNodes(context.Background(), p, func(r fleet.Record) error {
			if !r.Eligible() {
				n++
			}
			return nil
		})
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return n
}

func ptr[T any](v T) *T { return &v }

// create creates a rollout that must be accepted.
func (e *fleetEnv) create(req rollout.CreateRequest) api.Rollout {
	e.t.Helper()
	if req.By.Principal == "" {
		req.By = rollout.Audit{TenantID: "platform", Principal: "admin"}
	}
	if req.BakeSeconds == nil {
		req.BakeSeconds = ptr(0)
	}
	r, err := e.rollouts.Create(context.Background(), req)
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
	return r
}
