package capacity_test

import (
	"context"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
)

func TestCreateReservationHappyPath(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu.h100": 4})
	// The first create of a day provisions the day's node-days.
	first := must(e.svc.CreateReservation(ctx, e.req("acme", "p1", "gpu.h100", 1, 0, time.Hour), allow))
	must(e.svc.ReleaseReservation(ctx, "acme", first.ReservationID))
	e.rt.Reset()
	r, err := e.svc.CreateReservation(ctx, e.req("acme", "p1", "gpu.h100", 2, 0, time.Hour), allow)
	if err != nil {
		t.Fatal(err)
	}
	// Draft, candidates, charge, node-day, fence, settle.
	t.Logf("reservations.create happy path: %d DynamoDB round trips", e.rt.Count())
	if got := e.rt.Count(); got != 6 {
		t.Errorf("round trips = %d, want 6", got)
	}
	if r.State != capacity.Placed || len(r.DeviceIDs) != 2 || len(r.NodeIDs) != 1 || r.NodeIDs[0] != "gpu.h100-node-0" {
		t.Fatalf("got %+v", r)
	}
	q := must(e.svc.GetQuota(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu.h100"}))
	if q.Max != 4 || q.Used != 2 {
		t.Errorf("quota %+v", q)
	}
	got := must(e.svc.GetReservation(ctx, "acme", r.ReservationID))
	if got.State != capacity.Placed || !got.Window.Start.Equal(r.Window.Start) {
		t.Errorf("get %+v", got)
	}
	e.check(t)
	rel := must(e.svc.ReleaseReservation(ctx, "acme", r.ReservationID))
	if rel.State != capacity.Released || rel.ReleasedBy != "tenant" {
		t.Errorf("release %+v", rel)
	}
	q = must(e.svc.GetQuota(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu.h100"}))
	if q.Used != 0 {
		t.Errorf("quota after release %+v", q)
	}
	e.check(t)
	_, err = e.svc.CreateReservation(ctx, e.req("acme", "p1", "gpu.h100", 2, 0, time.Hour), deny)
	if code(err) != apierr.PermissionDenied || detail(err, "reservationId") == nil {
		t.Errorf("deny: %v", err)
	}
	e.check(t)
}

// TestMultiNodeCreateRoundTrips: once the layout is known, a create of
// several whole nodes reads its candidates in one Query: draft, candidates,
// charge, one write per node-day, fence, settle.
func TestMultiNodeCreateRoundTrips(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 8 * capacity.DefaultNodeSize})
	e.offer(t, "acme", "p1", "acme", "gpu", 1000)
	e.pass(t) // provisions the pool's next days: every node-day is stored
	warm := e.req("acme", "p1", "gpu", 2*capacity.DefaultNodeSize, 0, time.Hour)
	warm.ClientToken, warm.Principal = "warm", "alice"
	must(e.svc.CreateReservation(ctx, warm, allow))
	// The read starts at a point that depends on the reservation id (racing
	// creates spread out); a clientToken fixes the id, so the point — and
	// whether whole nodes follow it — is the same every run. From a point
	// with too few after it, a second Query reads from the start (8 trips).
	req := e.req("acme", "p1", "gpu", 2*capacity.DefaultNodeSize, 0, time.Hour)
	req.ClientToken, req.Principal = "job-2", "alice"
	e.rt.Reset()
	r := must(e.svc.CreateReservation(ctx, req, allow))
	if r.State != capacity.Placed || len(r.NodeIDs) != 2 {
		t.Fatalf("got %+v", r)
	}
	if got := e.rt.Count(); got != 7 {
		t.Errorf("round trips = %d, want 7 (draft, candidates, charge, 2 node-days, fence, settle)", got)
	}
	e.check(t)
}
