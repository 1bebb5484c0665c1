package fleet_test

import (
	"context"
	"crypto"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/paging"
	"github.com/bettercompute/control-plane/shared/reconcile"
	"github.com/bettercompute/control-plane/test/teststack"
)

// TestMain shares one local stack (dynalite) across the package; every test
// gets its own table.
func TestMain(m *testing.M) { devstack.Main(m) }

var start = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

// env is the capacity and fleet services on one fresh table of the local
// DynamoDB, with a clock moved by hand.
type env struct {
	cap   *capacity.Service
	fleet *fleet.Service
	rc    *reconcile.Reconciler
	store *capacitydb.Store
	nodes *fleetdb.Store
	rt    *dynamo.RoundTrips
	clock *teststack.Clock
	keys  map[string]crypto.Signer // node id → its key
	count map[string]int64         // node id → last counter sent
	hours int                      // the provisioned horizon
}

// envHours is the provisioned horizon of most of these tests: a node's
// transition flags hours + fleet.FlagMarginHours node-hours, so at the
// default 72 each cordon, uncordon and failed report is 76 writes and the
// package spent its time there. The tests of flagging the whole default
// horizon take newEnvHours(tb, capacity.ProvisionHours).
const envHours = 4

func newEnv(tb testing.TB) *env { tb.Helper(); return newEnvHours(tb, envHours) }

func newEnvHours(tb testing.TB, hours int) *env {
	tb.Helper()
	st := devstack.Shared(tb)
	table := devstack.NewTable(tb, st)
	rt := &dynamo.RoundTrips{}
	db := st.DynamoDB(rt.Option(), dynamo.Metered)
	store := &capacitydb.Store{DB: db, Table: table}
	nodes := &fleetdb.Store{DB: db, Table: table}
	c := teststack.NewClock(start)
	log := slog.New(slog.DiscardHandler)
	cs := &capacity.Service{Store: store, Now: c.Now, Logger: log, Nodes: nodes, ProvisionHours: hours}
	// The Adopter as the app wires it: a registered node is adopted.
	fs := &fleet.Service{Store: nodes, Pools: store, Calendar: store, Now: c.Now, Logger: log, ProvisionHours: hours, Adopter: cs.Bindings()}
	rc := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: cs, ProvisionHours: hours}, Due: &duedb.Store{DB: store.DB, Table: store.Table}, Fleet: fs}
	return &env{cap: cs, fleet: fs, rc: rc, store: store, nodes: nodes, rt: rt, clock: c,
		keys: map[string]crypto.Signer{}, count: map[string]int64{}, hours: hours}
}

func allow(context.Context, map[string]any) error { return nil }

// pool creates a pool of acme with nodes of 8 devices of gpu.
func (e *env) pool(tb testing.TB, id string, devices int) {
	tb.Helper()
	if _, err := e.cap.Pools().Create(context.Background(), "acme", id, map[string]int{"gpu": devices}, nil); err != nil {
		tb.Fatalf("create pool: %v", err)
	}
}

// managed creates pool with devices gpu devices and nodes of its nodes
// registered and ready, their flags lifted by a pass.
func (e *env) managed(tb testing.TB, pool string, devices, nodes int) {
	tb.Helper()
	e.pool(tb, pool, devices)
	for k := range nodes {
		e.register(tb, pool, nodeName(k))
		e.ready(tb, pool, nodeName(k))
	}
	e.pass(tb)
}

// register registers a node with a new key.
func (e *env) register(tb testing.TB, pool, node string) api.Node {
	tb.Helper()
	n, err := e.fleet.Register(context.Background(), "acme", pool, node, e.newKey(tb, pool, node), "linux/amd64")
	if err != nil {
		tb.Fatalf("register %s: %v", node, err)
	}
	return n
}

// newKey makes the node's key (its reports are signed with it from now)
// and returns its public PEM.
func (e *env) newKey(tb testing.TB, pool, node string) string {
	tb.Helper()
	k, err := dsse.GenerateKey(dsse.AlgEd25519)
	if err != nil {
		tb.Fatal(err)
	}
	pem, err := dsse.MarshalPublicKeyPEM(k.Public())
	if err != nil {
		tb.Fatal(err)
	}
	e.keys[pool+"/"+node] = k
	return string(pem)
}

// report is a healthy report of node at the clock's time, with the next
// counter.
func (e *env) report(pool, node string, bindings ...api.ReportedBinding) api.Report {
	e.count[pool+"/"+node]++
	if bindings == nil {
		bindings = []api.ReportedBinding{}
	}
	return api.Report{PoolID: pool, NodeID: node, Counter: e.count[pool+"/"+node], At: e.clock.Now(),
		Health:   api.Health{DevicesExpected: 8, DevicesVisible: 8, Checks: []api.Check{{Name: "nvidia-smi", OK: true}}},
		Bindings: bindings}
}

// sign makes the envelope of rep, signed by key.
func sign(tb testing.TB, rep any, key crypto.Signer) []byte {
	tb.Helper()
	payload, err := json.Marshal(rep)
	if err != nil {
		tb.Fatal(err)
	}
	env, err := dsse.Sign(api.ReportPayloadType, payload, key)
	if err != nil {
		tb.Fatal(err)
	}
	return env
}

// beat sends rep signed by the node's key.
func (e *env) beat(tb testing.TB, rep api.Report) (api.HeartbeatResult, error) {
	tb.Helper()
	return e.fleet.Heartbeat(context.Background(), "acme", rep.PoolID, rep.NodeID, sign(tb, rep, e.keys[rep.PoolID+"/"+rep.NodeID]))
}

// ready sends a healthy heartbeat that must be accepted.
func (e *env) ready(tb testing.TB, pool, node string, bindings ...api.ReportedBinding) api.HeartbeatResult {
	tb.Helper()
	res, err := e.beat(tb, e.report(pool, node, bindings...))
	if err != nil {
		tb.Fatalf("heartbeat %s: %v", node, err)
	}
	return res
}

// pass runs one reconciler pass that must not fail.
func (e *env) pass(tb testing.TB) reconcile.PassResult {
	tb.Helper()
	res, err := e.rc.Pass(context.Background())
	if err != nil || res.Errors > 0 {
		tb.Fatalf("pass: %+v, %v", res, err)
	}
	return res
}

// check fails the test on any broken invariant.
func (e *env) check(tb testing.TB) {
	tb.Helper()
	vs, err := capacity.Check(context.Background(), e.store)
	if err != nil {
		tb.Fatalf("check: %v", err)
	}
	for _, v := range vs {
		tb.Errorf("invariant: %s", v)
	}
}

// create books count devices of gpu over [now+from, now+to).
func (e *env) create(tb testing.TB, pool string, count int, from, to time.Duration) (capacity.Reservation, error) {
	tb.Helper()
	s, end := e.clock.Now().Add(from), e.clock.Now().Add(to)
	return e.cap.Admission().Create(context.Background(), capacity.CreateRequest{TenantID: "acme", PoolID: pool, Resource: "gpu",
		Count: count, Start: &s, End: end}, allow)
}

func (e *env) get(tb testing.TB, id string) capacity.Reservation {
	tb.Helper()
	r, err := e.cap.Reservations().Get(context.Background(), "acme", id)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func (e *env) node(tb testing.TB, pool, node string) api.Node {
	tb.Helper()
	n, err := e.fleet.Get(context.Background(), "acme", pool, node)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func reason(err error) any {
	if e := apierr.As(err); e != nil {
		return e.Details["reason"]
	}
	return nil
}

func hasReason(r capacity.Reservation, why string) bool {
	for _, ev := range r.History {
		if ev.Reason == why {
			return true
		}
	}
	return false
}

func capacityPage(n int) paging.Page { return paging.Page{Limit: n} }
