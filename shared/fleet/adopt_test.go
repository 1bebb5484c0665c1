package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// failingAdopter cuts a registration short after its node was written.
type failingAdopter struct{}

func (failingAdopter) Adopt(context.Context, capacity.PoolResource, int, time.Time) error {
	return errors.New("cut short")
}

// passingAdopter adopts nothing: the adoption that read the node's
// reservation while it was still binding, and left it to the binding step.
type passingAdopter struct{}

func (passingAdopter) Adopt(context.Context, capacity.PoolResource, int, time.Time) error { return nil }

// A binding pass that read the placement's nodes just before one of them
// registered (so: unmanaged, bound at once) makes the reservation active
// after the adoption had left it, still binding, to that pass: the node
// is adopted and was never told of the reservation. Its release tells it
// to unbind — the node may hold the tenant's devices (found by the fleet
// protocol simulation, seed 16 of the F05 revert's schedule).
func TestAdoptedButNeverToldIsScrubbed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r := e.boundAtOnce(t)
	e.fleet.Adopter = passingAdopter{}
	if _, err := e.fleet.Register(ctx, "acme", "p1", nodeName(0), e.newKey(t, "p1", nodeName(0)), "linux/amd64"); err != nil {
		t.Fatal(err)
	}
	e.fleet.Adopter = e.cap.Bindings()
	if _, err := e.cap.Reservations().Release(ctx, "acme", r.ReservationID); err != nil {
		t.Fatal(err)
	}
	ans := e.ready(t, "p1", nodeName(0))
	if len(ans.Desired.Bindings) != 1 || ans.Desired.Bindings[0].Action != api.ActionUnbind || ans.Desired.Bindings[0].ReservationID != r.ReservationID {
		t.Fatalf("first answer after the release: %+v, want unbind %s", ans.Desired.Bindings, r.ReservationID)
	}
	e.ready(t, "p1", nodeName(0), unbound(r.ReservationID))
	e.pass(t)
	if ans = e.ready(t, "p1", nodeName(0)); len(ans.Desired.Bindings) != 0 {
		t.Errorf("after the node reported it unbound: %+v", ans.Desired.Bindings)
	}
	e.check(t)
}

// A register cut short before it adopted what the node held, and the
// reservation released before the sweep finishes the adoption: the node
// may still hold the tenant's devices, so its first answer tells it to
// unbind them (found by the fleet protocol simulation, seed 6).
func TestLateAdoptionScrubsWhatEnded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r := e.registeredCutShort(t)
	if _, err := e.cap.Reservations().Release(ctx, "acme", r.ReservationID); err != nil {
		t.Fatal(err)
	}
	e.fleet.Adopter = e.cap.Bindings()
	e.clock.Advance(time.Minute)
	e.pass(t) // the sweep finishes the adoption
	ans := e.ready(t, "p1", nodeName(0))
	if len(ans.Desired.Bindings) != 1 || ans.Desired.Bindings[0].Action != api.ActionUnbind || ans.Desired.Bindings[0].ReservationID != r.ReservationID {
		t.Fatalf("first answer after a late adoption: %+v, want unbind %s", ans.Desired.Bindings, r.ReservationID)
	}
	e.ready(t, "p1", nodeName(0), unbound(r.ReservationID))
	e.pass(t)
	if ans = e.ready(t, "p1", nodeName(0)); len(ans.Desired.Bindings) != 0 {
		t.Errorf("after the node reported it unbound: %+v", ans.Desired.Bindings)
	}
	e.check(t)
}

// The same, after a pass recorded the node on the reservation (Bound) and
// crashed before its Bind: the release's Unbind finds no entry to
// turn, and the node, never told anything of it, is still told to unbind
// it (found by the fleet protocol simulation, seed 15).
func TestBoundButNeverToldIsScrubbed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r := e.registeredCutShort(t)
	// What the pass left: the node recorded on r (binding's Amend), no
	// entry on the node.
	cur := e.get(t, r.ReservationID)
	to := cur
	to.Bound = []int{0}
	if _, err := e.store.Amend(ctx, cur, to); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cap.Reservations().Release(ctx, "acme", r.ReservationID); err != nil {
		t.Fatal(err)
	}
	e.fleet.Adopter = e.cap.Bindings()
	e.clock.Advance(time.Minute)
	e.pass(t)
	ans := e.ready(t, "p1", nodeName(0))
	if len(ans.Desired.Bindings) != 1 || ans.Desired.Bindings[0].Action != api.ActionUnbind || ans.Desired.Bindings[0].ReservationID != r.ReservationID {
		t.Fatalf("first answer: %+v, want unbind %s", ans.Desired.Bindings, r.ReservationID)
	}
	e.check(t)
}

// registeredCutShort: an active reservation of the whole of p1's node 0,
// bound at once while the node was unmanaged; then the node's register,
// cut short before its adoption (the adopter fails).
func (e *env) registeredCutShort(t *testing.T) capacity.Reservation {
	t.Helper()
	r := e.boundAtOnce(t)
	e.fleet.Adopter = failingAdopter{}
	if _, err := e.fleet.Register(context.Background(), "acme", "p1", nodeName(0), e.newKey(t, "p1", nodeName(0)), "linux/amd64"); err == nil {
		t.Fatal("register with a failing adopter succeeded")
	}
	return r
}

// boundAtOnce: an active reservation of the whole of p1's node 0, bound
// at once while the node was unmanaged.
func (e *env) boundAtOnce(t *testing.T) capacity.Reservation {
	t.Helper()
	e.pool(t, "p1", 8)
	r, err := e.create(t, "p1", 8, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active {
		t.Fatalf("unmanaged: %s", got.State)
	}
	return r
}
