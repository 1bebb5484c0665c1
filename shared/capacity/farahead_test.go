package capacity_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
)

// scanCounter counts the exact search's reads of whole hours, and can lose
// the occupancy map's writes (a create that crashed between its node-hour
// put and the map's write).
type scanCounter struct {
	*capacitydb.Store
	hours    atomic.Int32
	loseMaps atomic.Bool
}

func (s *scanCounter) Hour(ctx context.Context, t capacity.PoolResource, h capacity.Hour, fn func(capacity.NodeHour) error) error {
	s.hours.Add(1)
	return s.Store.Hour(ctx, t, h, fn)
}

func (s *scanCounter) Occupy(ctx context.Context, t capacity.PoolResource, h capacity.Hour, nodes []int) error {
	if s.loseMaps.Load() {
		return errors.New("injected: the map's write is lost")
	}
	return s.Store.Occupy(ctx, t, h, nodes)
}

// farHour is an hour three days ahead: nothing provisions it (no
// reconciler runs here, and it lies beyond the default 72-hour horizon).
func (e *env) farHour() api.Window {
	return capacity.HourOf(e.clock.Now().Add(72 * time.Hour)).Window()
}

func (e *env) createIn(t *testing.T, w api.Window, count int) (capacity.Reservation, int64, error) {
	t.Helper()
	req := capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: count, Start: &w.Start, End: w.End}
	before := e.rt.Count()
	r, err := e.svc.Admission().Create(context.Background(), req, allow)
	return r, e.rt.Count() - before, err
}

// Beyond the provisioned horizon only what was placed is stored, so the
// `fit` index cannot see a node nothing was placed on. The hour's
// occupancy map (one item) can: a whole-node create into an hour 94 %
// booked by whole nodes costs what one into the empty hour does (one read
// of the map, one more write to it), and once every node is booked the map
// is complete and the refusal is proved like a provisioned hour's — never
// by reading the hour's every node-hour.
func TestFarAheadFindsAVacantNode(t *testing.T) {
	e := newEnv(t)
	scans := &scanCounter{Store: e.store}
	e.svc.Store = scans
	e.pool(t, "acme", "p1", map[string]int{"gpu": 64 * 8})
	e.offer(t, "acme", "p1", "acme", "gpu", 10_000)
	w := e.farHour()
	_, first, err := e.createIn(t, w, 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 60; i++ {
		if _, _, err := e.createIn(t, w, 8); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	r, busy, err := e.createIn(t, w, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a whole-node create: %d calls into the empty hour, %d into the hour 60 of 64 nodes booked", first, busy)
	if busy > first+1 {
		t.Errorf("into the busy hour %d calls, into the empty one %d", busy, first)
	}
	if n := scans.hours.Load(); n != 0 {
		t.Errorf("%d exact reads of the hour", n)
	}
	occ := must(e.store.Occupancy(context.Background(), capacity.PoolResource{PoolID: "p1", Topology: capacity.Topology{Resource: "gpu"}}, capacity.HoursOf(w)))
	if node := r.Devices[0]; !occ[capacity.HoursOf(w)[0]].Stored(nodeIndex(t, r.NodeIDs[0])) {
		t.Errorf("the map does not name %s (device %d)", r.NodeIDs[0], node)
	}
	for i := 61; i < 64; i++ {
		if _, _, err := e.createIn(t, w, 8); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	_, refused, err := e.createIn(t, w, 8)
	if code(err) != apierr.CapacityExhausted {
		t.Fatalf("into the full hour: %v", err)
	}
	t.Logf("a refusal of the full hour: %d calls", refused)
	if n := scans.hours.Load(); n != 0 {
		t.Errorf("the refusal read the hour exactly (%d reads): the complete map should prove it", n)
	}
	e.check(t)
}

// The map is a hint a create repairs: a node-hour stored without its bit
// (the map's write lost) is offered as vacant, its put is refused, the
// bit is set, and the create chooses again — placed on the other node, or
// refused once the map is complete.
func TestFarAheadMapRepairsItself(t *testing.T) {
	e := newEnv(t)
	scans := &scanCounter{Store: e.store}
	e.svc.Store = scans
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4 * 8})
	e.offer(t, "acme", "p1", "acme", "gpu", 10_000)
	w := e.farHour()
	pr := capacity.PoolResource{PoolID: "p1", Topology: capacity.Topology{Resource: "gpu"}}
	scans.loseMaps.Store(true)
	if _, _, err := e.createIn(t, w, 8); err != nil {
		t.Fatal(err)
	}
	scans.loseMaps.Store(false)
	if occ := must(e.store.Occupancy(context.Background(), pr, capacity.HoursOf(w))); len(occ[capacity.HoursOf(w)[0]].Words) != 0 {
		t.Fatalf("the lost write left %v", occ)
	}
	for i := 1; i < 4; i++ {
		if _, _, err := e.createIn(t, w, 8); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if _, _, err := e.createIn(t, w, 8); code(err) != apierr.CapacityExhausted {
		t.Fatalf("the fifth whole-node create: %v", err)
	}
	occ := must(e.store.Occupancy(context.Background(), pr, capacity.HoursOf(w)))
	if !occ[capacity.HoursOf(w)[0]].Complete(4) {
		t.Errorf("the map is not complete: %v", occ[capacity.HoursOf(w)[0]].Words)
	}
	e.check(t)
}

// Provisioning an hour that has a map (an #HOUR item without fit) still
// provisions it: the map is not the marker.
func TestProvisionOverAMap(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4 * 8})
	e.offer(t, "acme", "p1", "acme", "gpu", 10_000)
	w := e.farHour()
	if _, _, err := e.createIn(t, w, 8); err != nil {
		t.Fatal(err)
	}
	pr := capacity.PoolResource{PoolID: "p1", Topology: capacity.Topology{Resource: "gpu", Devices: 32, NodeSize: 8}}
	h := capacity.HoursOf(w)[0]
	if made, err := e.store.Provision(context.Background(), pr, h); err != nil || !made {
		t.Fatalf("provision: made %v, %v", made, err)
	}
	_, scan, err := e.store.Candidates(context.Background(), pr, h, 1, 16, 0)
	if err != nil || !scan.Provisioned {
		t.Fatalf("after provisioning: %+v, %v", scan, err)
	}
	if occ := must(e.store.Occupancy(context.Background(), pr, capacity.HoursOf(w))); !occ[h].Provisioned || !occ[h].Complete(4) {
		t.Errorf("the hour item reads %+v", occ[h])
	}
	e.check(t)
}

// nodeIndex is k of a node id "<resource>-node-<k>".
func nodeIndex(t *testing.T, id string) int {
	t.Helper()
	for k := range 1 << 17 {
		if capacity.NodeID("gpu", k) == id {
			return k
		}
	}
	t.Fatalf("node id %q", id)
	return -1
}
