package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/test/teststack"
)

// capacityStack is the full app behind the local gateway with an injected
// clock: the reconciler's passes (what the local gateway runs every
// BC_RECONCILE_INTERVAL) are driven by hand, so time moves without sleeps.
type capacityStack struct {
	*teststack.Stack
	clock *teststack.Clock
}

func newCapacityStack(t *testing.T) *capacityStack {
	t.Helper()
	clock := teststack.NewClock(time.Now().UTC().Truncate(time.Second))
	return &capacityStack{Stack: newStack(t, teststack.WithClock(clock.Now)), clock: clock}
}

func (c *capacityStack) post(t *testing.T, principal, method string, body map[string]any, out any) response {
	t.Helper()
	b, _ := json.Marshal(body)
	r := call(t, c.URL, method, "Bearer dev:"+principal, b)
	if out != nil {
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", method, r.Status, r.Body)
		}
		if err := json.Unmarshal(r.Body, out); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// The full life of a reservation with a short window, over HTTP:
// placed → binding → active → released, quota back to 0.
func TestReservationFullLife(t *testing.T) {
	c := newCapacityStack(t)
	var pool struct{ Pool capacity.Pool }
	c.post(t, "admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "life", "resources": map[string]any{"gpu.h100": 2}}, &pool)
	start := c.clock.Now().Add(30 * time.Second)
	var res struct{ Reservation capacity.Reservation }
	c.post(t, "alice", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "life", "resource": "gpu.h100", "count": 2,
		"window": map[string]any{"start": start.Format(time.RFC3339), "end": start.Add(time.Minute).Format(time.RFC3339)}}, &res)
	id := res.Reservation.ReservationID
	if res.Reservation.State != api.Placed || len(res.Reservation.DeviceIDs) != 2 {
		t.Fatalf("create: %+v", res.Reservation)
	}
	quota := func() api.Quota {
		var q struct{ Quota api.Quota }
		c.post(t, "alice", "quotas.get", map[string]any{"tenantId": "acme", "poolId": "life", "resource": "gpu.h100"}, &q)
		return q.Quota
	}
	if q := quota(); q.Used != 2 {
		t.Fatalf("quota after create: %+v", q)
	}
	get := func() capacity.Reservation {
		var g struct{ Reservation capacity.Reservation }
		c.post(t, "alice", "reservations.get", map[string]any{"tenantId": "acme", "reservationId": id}, &g)
		return g.Reservation
	}
	pass := func() {
		if err := c.App.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var states []api.ReservationState
	// One binder that holds the reservation in binding for one pass shows
	// the binding state over the wire; then the default binds at once.
	rc := c.App.Reconciler()
	failOnce := true
	rc.Capacity.Binder = bindFunc(func(context.Context, capacity.Reservation) error {
		if failOnce {
			failOnce = false
			return errNotYet
		}
		return nil
	})
	c.clock.Advance(30 * time.Second) // window start
	if _, err := rc.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	states = append(states, get().State)
	pass()
	states = append(states, get().State)
	c.clock.Advance(time.Minute) // window end
	pass()
	final := get()
	states = append(states, final.State)
	want := []api.ReservationState{api.Binding, api.Active, api.Released}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("states %v, want %v", states, want)
		}
	}
	if final.ReleasedBy != "window_end" {
		t.Errorf("releasedBy %q", final.ReleasedBy)
	}
	if q := quota(); q.Used != 0 || q.Max != 2 {
		t.Errorf("quota after the window: %+v", q)
	}
	var list struct{ Reservations []capacity.Reservation }
	c.post(t, "alice", "reservations.list", map[string]any{"tenantId": "acme", "state": "released"}, &list)
	if len(list.Reservations) != 1 || list.Reservations[0].ReservationID != id {
		t.Errorf("list: %+v", list.Reservations)
	}
	if vs, err := capacity.Check(context.Background(), c.App.CapacityStore()); err != nil || len(vs) != 0 {
		t.Errorf("check: %v %v", vs, err)
	}
}

type bindFunc func(context.Context, capacity.Reservation) error

func (f bindFunc) Bind(ctx context.Context, r capacity.Reservation) error { return f(ctx, r) }

type notYet struct{}

func (notYet) Error() string { return "devices not bound yet" }

var errNotYet error = notYet{}
