package capacity_test

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/paging"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// The simulation's fleet (in about half the seeds): the pool's GPU nodes
// registered and managed — two cordoned and one unhealthy from the start,
// never to be placed on — node agents that heartbeat the bindings they are
// told as done, and a node that fails while the actors run. Every node call
// of binding, moves and unbinds is a scheduling point that may fail or
// crash, like the store's.
type simFleet struct {
	sim      *simulation
	inner    *fleetdb.Store
	svc      *fleet.Service // the actors' (through simNodeStore)
	quiet    *fleet.Service // the test's own, no faults
	keys     map[int]crypto.Signer
	counters map[int]int64
	off      map[int]bool // ineligible before any actor ran
	// seen once windows started: reservations active through their
	// nodes, moved off a failed node, waiting for one
	active, moved, waiting int
	late                   int // a node that goes silent holding a reservation about to start (-1: none)
}

const simNodes = 20 // gpu nodes of the simulation's pool

func (sim *simulation) startFleet(ctx context.Context) {
	e := sim.e
	inner := &fleetdb.Store{DB: e.store.DB, Table: e.store.Table}
	f := &simFleet{sim: sim, inner: inner, keys: map[int]crypto.Signer{}, counters: map[int]int64{},
		off: map[int]bool{3: true, 7: true, 11: true}, late: -1}
	f.quiet = &fleet.Service{Store: inner, Pools: e.store, Calendar: e.store, Now: e.clock.Now, Logger: e.svc.Logger, ProvisionHours: 6, Serial: true}
	f.svc = &fleet.Service{Store: &simFleetStore{inner: inner, sim: sim}, Pools: sim.store, Calendar: sim.store, Now: e.clock.Now,
		Logger: e.svc.Logger, ProvisionHours: 6, Serial: true}
	sim.fleet = f
	sim.svc.Nodes = &simNodeStore{inner: inner, sim: sim}
	sim.svc.ProvisionHours = 6
	e.svc.Nodes, e.svc.ProvisionHours = inner, 6
	for k := range simNodes {
		key, _ := dsse.GenerateKey(dsse.AlgEd25519)
		pem, _ := dsse.MarshalPublicKeyPEM(key.Public())
		f.keys[k] = key
		if _, err := f.quiet.Register(ctx, "acme", "sim", capacity.NodeID("gpu", k), string(pem), "linux/amd64"); err != nil {
			sim.t.Fatal(err)
		}
		if err := f.beat(ctx, f.quiet, k, k != 7); err != nil {
			sim.t.Fatal(err)
		}
	}
	for _, k := range []int{3, 11} {
		if _, err := f.quiet.Cordon(ctx, "acme", "sim", capacity.NodeID("gpu", k), "sim"); err != nil {
			sim.t.Fatal(err)
		}
	}
	// The sweep lifts the flags of the nodes that reported healthy.
	rc := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: e.svc, ProvisionHours: 6}, Due: &duedb.Store{DB: e.store.DB, Table: e.store.Table}, Serial: true, Fleet: f.quiet}
	if _, err := rc.Pass(ctx); err != nil {
		sim.t.Fatal(err)
	}
}

// beat sends node k's report: every binding it is told reported done
// (bound or unbound), healthy or not.
func (f *simFleet) beat(ctx context.Context, svc *fleet.Service, k int, healthy bool) error {
	id := capacity.NodeID("gpu", k)
	rec, err := f.inner.GetNode(ctx, "sim", "gpu", k)
	if err != nil {
		return err
	}
	f.counters[k]++
	rep := api.Report{PoolID: "sim", NodeID: id, Counter: f.counters[k], At: f.sim.e.clock.Now(),
		Health:   api.Health{DevicesExpected: 8, DevicesVisible: 8, Checks: []api.Check{}},
		Bindings: []api.ReportedBinding{}}
	if !healthy {
		rep.Health.DevicesVisible = 6
	}
	for rid, en := range rec.Entries {
		st := api.BindBound
		if en.Action == api.ActionUnbind {
			st = api.BindUnbound
		}
		rep.Bindings = append(rep.Bindings, api.ReportedBinding{ReservationID: rid, State: st})
	}
	payload, _ := json.Marshal(rep)
	envelope, err := dsse.Sign(api.ReportPayloadType, payload, f.keys[k])
	if err != nil {
		return err
	}
	_, err = svc.Heartbeat(ctx, "acme", "sim", id, envelope)
	return err
}

// agent is an actor: node k heartbeats (healthy or not), twice.
func (f *simFleet) agent(k int, healthy bool) func(ctx context.Context) {
	return func(ctx context.Context) {
		for range 2 {
			f.sim.yield(ctx, "wait")
			_ = f.beat(ctx, f.svc, k, healthy)
		}
	}
}

// everyNodeReports is the fleet between passes at quiescence: every node
// but the ineligible ones and the failed one reports, without faults.
func (f *simFleet) everyNodeReports(ctx context.Context, failed ...int) {
	for k := range simNodes {
		if slices.Contains(failed, k) {
			continue
		}
		if err := f.beat(ctx, f.quiet, k, k != 7); err != nil {
			f.sim.t.Fatalf("seed %d: node %d heartbeat: %v", f.sim.seed, k, err)
		}
	}
}

// check: no reservation holds devices of a node that was ineligible before
// it was created; none is active unless each of its managed nodes reports
// it bound; when every window ended and every node reported, no node is
// told anything.
func (f *simFleet) check(ctx context.Context, when string, allDone bool) {
	sim := f.sim
	snap, err := sim.e.store.Snapshot(ctx)
	if err != nil {
		sim.t.Fatal(err)
	}
	nodes := map[int]fleet.Record{}
	if err := f.inner.PoolNodes(ctx, "sim", func(r fleet.Record) error { nodes[r.Index] = r; return nil }); err != nil {
		sim.t.Fatal(err)
	}
	for _, r := range snap.Reservations {
		if r.Resource != "gpu" || !r.WasPlaced() {
			continue
		}
		if when == "once windows started" {
			switch {
			case r.State == api.Active:
				f.active++
			case r.State == api.Binding:
				f.waiting++
			}
			for _, ev := range r.History {
				if ev.Reason == api.ReasonReplaced {
					f.moved++
				}
			}
		}
		for _, nd := range r.Placement() {
			if f.off[nd.Node] {
				sim.t.Errorf("seed %d: %s: %s was placed on node %d, ineligible all along", sim.seed, when, r.ReservationID, nd.Node)
			}
			if r.State == api.Active && nodes[nd.Node].Reported[r.ReservationID] != api.BindBound {
				sim.t.Errorf("seed %d: %s: %s is active, node %d reports %q", sim.seed, when, r.ReservationID, nd.Node, nodes[nd.Node].Reported[r.ReservationID])
			}
		}
	}
	if allDone {
		for k, n := range nodes {
			if len(n.Entries) > 0 && n.State == api.Ready {
				sim.t.Errorf("seed %d: %s: node %d still told %v", sim.seed, when, k, n.Entries)
			}
		}
	}
}

// simNodeStore makes every node call of the capacity flows a scheduling
// point.
type simNodeStore struct {
	inner *fleetdb.Store
	sim   *simulation
}

func (w *simNodeStore) store() *simStore { return w.sim.store }

func (w *simNodeStore) NodeStates(ctx context.Context, t capacity.PoolResource, nodes []int, id string) (map[int]capacity.NodeState, error) {
	return simCall(w.store(), ctx, "NodeStates "+id, func() (map[int]capacity.NodeState, error) { return w.inner.NodeStates(ctx, t, nodes, id) })
}
func (w *simNodeStore) Bind(ctx context.Context, t capacity.PoolResource, node int, id string, b capacity.NodeBinding, prev []string, seen capacity.NodeState) error {
	return simDo(w.store(), ctx, fmt.Sprintf("Bind %s node %d", id, node), func() error { return w.inner.Bind(ctx, t, node, id, b, prev, seen) })
}
func (w *simNodeStore) Scrub(ctx context.Context, t capacity.PoolResource, node int, id string, b capacity.NodeBinding, seen capacity.NodeState) error {
	return simDo(w.store(), ctx, fmt.Sprintf("Scrub %s node %d", id, node), func() error { return w.inner.Scrub(ctx, t, node, id, b, seen) })
}
func (w *simNodeStore) Unbind(ctx context.Context, t capacity.PoolResource, node int, id string) error {
	return simDo(w.store(), ctx, fmt.Sprintf("Unbind %s node %d", id, node), func() error { return w.inner.Unbind(ctx, t, node, id) })
}
func (w *simNodeStore) Ineligible(ctx context.Context, t capacity.PoolResource) (map[int]bool, error) {
	return simCall(w.store(), ctx, "Ineligible", func() (map[int]bool, error) { return w.inner.Ineligible(ctx, t) })
}

// simFleetStore makes every call of the fleet's heartbeat and sweep a
// scheduling point.
type simFleetStore struct {
	inner *fleetdb.Store
	sim   *simulation
}

var _ fleet.Store = (*simFleetStore)(nil)

func (w *simFleetStore) s() *simStore { return w.sim.store }

func (w *simFleetStore) PutNode(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	return simCall(w.s(), ctx, "PutNode", func() (fleet.Record, error) { return w.inner.PutNode(ctx, r) })
}
func (w *simFleetStore) GetNode(ctx context.Context, pool, res string, k int) (fleet.Record, error) {
	return simCall(w.s(), ctx, "GetNode", func() (fleet.Record, error) { return w.inner.GetNode(ctx, pool, res, k) })
}
func (w *simFleetStore) ListNodes(ctx context.Context, pool string, st api.NodeState, page paging.Page) ([]fleet.Record, map[string]string, error) {
	return w.inner.ListNodes(ctx, pool, st, page)
}
func (w *simFleetStore) PoolNodes(ctx context.Context, pool string, fn func(fleet.Record) error) error {
	return simDo(w.s(), ctx, "PoolNodes", func() error { return w.inner.PoolNodes(ctx, pool, fn) })
}
func (w *simFleetStore) Heartbeat(ctx context.Context, r fleet.Record, keyID string, rep api.Report, st api.NodeState, split *api.LogSplit, now time.Time) (fleet.Record, error) {
	return simCall(w.s(), ctx, "Heartbeat "+r.NodeID, func() (fleet.Record, error) { return w.inner.Heartbeat(ctx, r, keyID, rep, st, split, now) })
}
func (w *simFleetStore) SetCordon(ctx context.Context, r fleet.Record, by string, c *api.Cordon) (fleet.Record, error) {
	return simCall(w.s(), ctx, "SetCordon", func() (fleet.Record, error) { return w.inner.SetCordon(ctx, r, by, c) })
}
func (w *simFleetStore) ClaimFlags(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	return simCall(w.s(), ctx, "ClaimFlags "+r.NodeID, func() (fleet.Record, error) { return w.inner.ClaimFlags(ctx, r) })
}
func (w *simFleetStore) SetFlagged(ctx context.Context, r fleet.Record, gen int64, flagged bool, to capacity.Hour) (fleet.Record, error) {
	return simCall(w.s(), ctx, "SetFlagged "+r.NodeID, func() (fleet.Record, error) { return w.inner.SetFlagged(ctx, r, gen, flagged, to) })
}
func (w *simFleetStore) MarkUnreachable(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	return simCall(w.s(), ctx, "MarkUnreachable "+r.NodeID, func() (fleet.Record, error) { return w.inner.MarkUnreachable(ctx, r) })
}
func (w *simFleetStore) DropEntry(ctx context.Context, r fleet.Record, id string) error {
	return simDo(w.s(), ctx, "DropEntry "+id, func() error { return w.inner.DropEntry(ctx, r, id) })
}
func (w *simFleetStore) SetAdopted(ctx context.Context, r fleet.Record) error {
	return simDo(w.s(), ctx, "SetAdopted "+r.NodeID, func() error { return w.inner.SetAdopted(ctx, r) })
}
func (w *simFleetStore) SetDisrupted(ctx context.Context, pool string, since *time.Time) error {
	return w.inner.SetDisrupted(ctx, pool, since)
}
func (w *simFleetStore) SetResumed(ctx context.Context, pool string, at *time.Time) error {
	return w.inner.SetResumed(ctx, pool, at)
}
func (w *simFleetStore) Disrupted(ctx context.Context, pool string) (*time.Time, error) {
	return w.inner.Disrupted(ctx, pool)
}
func (w *simFleetStore) EnsureSweep(ctx context.Context, pool string, due time.Time) error {
	return simDo(w.s(), ctx, "EnsureSweep", func() error { return w.inner.EnsureSweep(ctx, pool, due) })
}
func (w *simFleetStore) ClaimSweep(ctx context.Context, pool string, due, next time.Time) (fleet.SweepState, error) {
	return simCall(w.s(), ctx, "ClaimSweep", func() (fleet.SweepState, error) { return w.inner.ClaimSweep(ctx, pool, due, next) })
}
func (w *simFleetStore) SetTarget(ctx context.Context, r fleet.Record, rid string, t *fleet.Target, floor int64) (fleet.Record, error) {
	return w.inner.SetTarget(ctx, r, rid, t, floor)
}
func (w *simFleetStore) CountOut(ctx context.Context, pool string) (int, error) {
	return w.inner.CountOut(ctx, pool)
}
func (w *simFleetStore) Baseline(ctx context.Context, pool string) (*fleet.Target, error) {
	return w.inner.Baseline(ctx, pool)
}
func (w *simFleetStore) SetBaseline(ctx context.Context, pool string, t fleet.Target) error {
	return w.inner.SetBaseline(ctx, pool, t)
}
