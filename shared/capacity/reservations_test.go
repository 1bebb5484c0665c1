package capacity_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/paging"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// Every validation rule of a create, and that a refused request changes nothing.
func TestCreateReservationValidation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	e.pool(t, "globex", "theirs", map[string]int{"gpu": 4})
	now := e.clock.Now()
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	day := 24 * time.Hour
	cases := []struct {
		name  string
		pool  string
		res   string
		count int
		start *time.Time
		end   time.Time
		code  apierr.Code
		field string
	}{
		{"pool missing", "nope", "gpu", 1, nil, now.Add(time.Hour), apierr.NotFound, ""},
		{"pool of another tenant", "theirs", "gpu", 1, nil, now.Add(time.Hour), apierr.NotFound, ""},
		{"resource not in pool", "p1", "tpu", 1, nil, now.Add(time.Hour), apierr.InvalidInput, "resource"},
		{"count 0", "p1", "gpu", 0, nil, now.Add(time.Hour), apierr.InvalidInput, "count"},
		{"count 1025", "p1", "gpu", 1025, nil, now.Add(time.Hour), apierr.InvalidInput, "count"},
		{"start too far in the past", "p1", "gpu", 1, at(-5*time.Minute - time.Second), now.Add(time.Hour), apierr.InvalidInput, "window.start"},
		{"start more than 365 days ahead", "p1", "gpu", 1, at(366 * day), now.Add(367 * day), apierr.InvalidInput, "window.start"},
		{"end equals start", "p1", "gpu", 1, at(time.Hour), now.Add(time.Hour), apierr.InvalidInput, "window.end"},
		{"end before start", "p1", "gpu", 1, at(time.Hour), now.Add(time.Minute), apierr.InvalidInput, "window.end"},
		{"end in the past, start omitted", "p1", "gpu", 1, nil, now.Add(-time.Second), apierr.InvalidInput, "window.end"},
		{"window longer than 90 days", "p1", "gpu", 1, at(0), now.Add(90*day + time.Second), apierr.InvalidInput, "window.end"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.svc.Admission().Create(ctx, capacity.CreateRequest{TenantID: "acme", PoolID: c.pool, Resource: c.res,
				Count: c.count, Start: c.start, End: c.end}, allow)
			if code(err) != c.code {
				t.Fatalf("got %v, want %s", err, c.code)
			}
			if f, _ := detail(err, "field").(string); f != c.field {
				t.Errorf("field %q, want %q", f, c.field)
			}
			afterDraft := c.code == apierr.NotFound || c.field == "resource"
			if id, _ := detail(err, "reservationId").(string); afterDraft != (id != "") {
				t.Errorf("details.reservationId = %q; a refusal after the draft carries it, one before does not", id)
			}
		})
	}
	ok := []struct {
		name  string
		start *time.Time
		end   time.Time
	}{
		{"start 5 minutes in the past", at(-5 * time.Minute), now.Add(time.Hour)},
		{"start omitted", nil, now.Add(time.Hour)},
		{"start 365 days ahead", at(365 * day), now.Add(366 * day)},
		// Last: its replays below move the clock on.
		{"exactly 90 days", at(0), now.Add(90 * day)},
	}
	for i, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			r, err := createAsClient(ctx, e, capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu",
				Count: 1, Start: c.start, End: c.end, ClientToken: fmt.Sprintf("ok-%d", i)})
			if err != nil || r.State != api.Placed {
				t.Fatalf("got %+v %v", r, err)
			}
			if r.Window.End.Sub(r.Window.Start) < 90*day {
				// The 90-day one stays: releasing it frees 2,160 node-hours,
				// which is not what this test is about.
				must(e.svc.Reservations().Release(ctx, "acme", r.ReservationID))
			}
		})
	}
	// What is refused before the draft leaves nothing; a pool or resource
	// refused after an allow leaves the draft rejected (invalid), listed
	// only when rejected ones are asked for.
	rs, _ := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{}, paging.Page{Limit: 100}))
	rejected, _ := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{State: api.Rejected}, paging.Page{Limit: 100}))
	if len(rs) != len(ok) || len(rejected) != 3 {
		t.Errorf("refused requests left %d listed and %d rejected reservations, want %d and 3", len(rs), len(rejected), len(ok))
	}
	rs = append(rs, rejected...)
	for _, r := range rs {
		if r.State == api.Rejected && r.Reason != api.ReasonInvalid {
			t.Errorf("%s rejected for %q, want %q", r.ReservationID, r.Reason, api.ReasonInvalid)
		}
	}
	if q := must(e.svc.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"})); q.Used != 1 {
		t.Errorf("quota used %d, want 1 (the 90-day reservation)", q.Used)
	}
	e.check(t)
}

// createAsClient creates as a client does: an UNAVAILABLE answer is
// replayed with the same clientToken once the flow handed its lease back
// (the clock moved past it). A 90-day window writes 2,160 node-hours,
// which on a busy machine outlasts the flow's deadline; the replay takes
// the draft over and finishes it.
func createAsClient(ctx context.Context, e *env, req capacity.CreateRequest) (capacity.Reservation, error) {
	for attempt := 1; ; attempt++ {
		r, err := e.svc.Admission().Create(ctx, req, allow)
		if code(err) != apierr.Unavailable || attempt == 20 {
			return r, err
		}
		e.clock.Advance(capacity.LeaseHandBack + time.Second)
	}
}

func TestCreateReservationRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
	e.offer(t, "acme", "p1", "globex", "gpu", 1)
	get := func(err error) capacity.Reservation {
		t.Helper()
		id, _ := detail(err, "reservationId").(string)
		if id == "" {
			t.Fatalf("%v carries no reservationId", err)
		}
		return must(e.svc.Reservations().Get(ctx, "globex", id))
	}
	_, err := e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 2, 0, time.Hour), allow)
	if code(err) != apierr.QuotaExceeded {
		t.Fatalf("over quota: %v", err)
	}
	if r := get(err); r.State != api.Rejected || r.Reason != "quota" || len(r.DeviceIDs) != 0 {
		t.Errorf("quota refusal left %+v", r)
	}
	_, err = e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 1, 0, time.Hour), deny)
	if code(err) != apierr.PermissionDenied {
		t.Fatalf("deny: %v", err)
	}
	if r := get(err); r.State != api.Denied {
		t.Errorf("deny left %+v", r)
	}
	// Both devices busy for the owner; globex fits its quota, not the devices.
	must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 2, 0, time.Hour), allow))
	_, err = e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 1, 30*time.Minute, 2*time.Hour), allow)
	if code(err) != apierr.CapacityExhausted {
		t.Fatalf("no devices: %v", err)
	}
	if r := get(err); r.State != api.Rejected || r.Reason != "capacity" {
		t.Errorf("capacity refusal left %+v", r)
	}
	if q := must(e.svc.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "globex", PoolID: "p1", Resource: "gpu"})); q.Used != 0 {
		t.Errorf("a capacity refusal kept quota charged: %+v", q)
	}
	// Half-open windows: [0,1h) and [1h,2h) do not overlap.
	r := must(e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 1, time.Hour, 2*time.Hour), allow))
	if r.State != api.Placed || len(r.DeviceIDs) != 1 {
		t.Errorf("adjacent window got %+v, want one device placed", r)
	}
	// Better IAM unreachable: UNAVAILABLE, the draft left for the reconciler.
	_, err = e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 1, 3*time.Hour, 4*time.Hour), func(context.Context, map[string]any) error {
		return apierr.Dependency("better-iam", errors.New("connection refused"))
	})
	if code(err) != apierr.Unavailable || get(err).State != api.Draft {
		t.Errorf("iam down: %v", err)
	}
}

func TestDecideSeesTheDraft(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
	var seen map[string]any
	var stateAtDecision api.ReservationState
	r := must(e.svc.Admission().Create(ctx, capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 2,
		End: e.clock.Now().Add(time.Hour), ClientToken: "tok"}, func(ctx context.Context, attrs map[string]any) error {
		seen = attrs
		d := must(e.svc.Reservations().Get(ctx, "acme", attrs["reservationId"].(string)))
		stateAtDecision = d.State
		return nil
	}))
	if stateAtDecision != api.Draft {
		t.Errorf("decided on a reservation in state %q, want draft", stateAtDecision)
	}
	if seen["poolId"] != "p1" || seen["resource"] != "gpu" || seen["count"] != 2 || seen["clientToken"] != "tok" || seen["reservationId"] != r.ReservationID {
		t.Errorf("attributes %v", seen)
	}
}

func TestClientToken(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	e.offer(t, "acme", "p1", "globex", "gpu", 1)
	req := capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 2, End: e.clock.Now().Add(time.Hour), ClientToken: "run-1"}
	first := must(e.svc.Admission().Create(ctx, req, allow))
	e.clock.Advance(time.Minute) // an omitted start stays omitted: still the same request
	e.rt.Reset()
	again := must(e.svc.Admission().Create(ctx, req, allow))
	if again.ReservationID != first.ReservationID || !again.Window.Start.Equal(first.Window.Start) || joined(again.DeviceIDs) != joined(first.DeviceIDs) {
		t.Errorf("replay %+v, first %+v", again, first)
	}
	t.Run("mismatch", func(t *testing.T) {
		for name, change := range map[string]func(*capacity.CreateRequest){
			"count":    func(r *capacity.CreateRequest) { r.Count = 1 },
			"end":      func(r *capacity.CreateRequest) { r.End = r.End.Add(time.Second) },
			"start":    func(r *capacity.CreateRequest) { s := e.clock.Now(); r.Start = &s },
			"resource": func(r *capacity.CreateRequest) { r.Resource = "gpu"; r.PoolID = "p1"; r.Count = 3 },
		} {
			other := req
			change(&other)
			if _, err := e.svc.Admission().Create(ctx, other, allow); code(err) != apierr.Conflict || detail(err, "field") != "clientToken" {
				t.Errorf("%s: got %v, want CONFLICT", name, err)
			}
		}
	})
	t.Run("per tenant", func(t *testing.T) {
		g := req
		g.TenantID, g.Count = "globex", 1
		r := must(e.svc.Admission().Create(ctx, g, allow))
		if r.ReservationID == first.ReservationID || r.TenantID != "globex" {
			t.Errorf("globex token run-1 = %+v", r)
		}
	})
	t.Run("refusal replays with the same id", func(t *testing.T) {
		g := req
		g.TenantID, g.Count, g.ClientToken = "globex", 1, "second"
		_, err1 := e.svc.Admission().Create(ctx, g, allow)
		_, err2 := e.svc.Admission().Create(ctx, g, allow)
		if code(err1) != apierr.QuotaExceeded || code(err2) != apierr.QuotaExceeded || detail(err1, "reservationId") != detail(err2, "reservationId") {
			t.Errorf("first %v, replay %v", err1, err2)
		}
	})
	t.Run("late replay with an explicit start", func(t *testing.T) {
		s := e.clock.Now()
		late := capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 1, Start: &s, End: s.Add(time.Hour), ClientToken: "late"}
		r := must(e.svc.Admission().Create(ctx, late, allow))
		e.clock.Advance(10 * time.Minute) // start is now > 5 minutes in the past
		again := must(e.svc.Admission().Create(ctx, late, allow))
		if again.ReservationID != r.ReservationID {
			t.Errorf("late replay %v", again)
		}
		late.ClientToken = "late-new"
		if _, err := e.svc.Admission().Create(ctx, late, allow); code(err) != apierr.InvalidInput {
			t.Errorf("a new request with a stale start: %v", err)
		}
	})
	t.Run("denied replays denied", func(t *testing.T) {
		d := req
		d.ClientToken = "denied"
		_, err1 := e.svc.Admission().Create(ctx, d, deny)
		_, err2 := e.svc.Admission().Create(ctx, d, allow)
		if code(err1) != apierr.PermissionDenied || code(err2) != apierr.PermissionDenied || detail(err1, "reservationId") != detail(err2, "reservationId") {
			t.Errorf("first %v, replay %v", err1, err2)
		}
	})
	e.check(t)
}

// A replay of a draft whose first call died (IAM down) finishes the create.
// A create that failed half way (here: Better IAM down) leaves its draft
// and hands its lease back: a retry with the same token takes the draft over
// two seconds later and finishes it. A retry while a flow holds the lease
// answers UNAVAILABLE.
func TestClientTokenResumesDraft(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	req := capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 1, End: e.clock.Now().Add(time.Hour), ClientToken: "x"}
	down := func(context.Context, map[string]any) error {
		return apierr.Dependency("better-iam", errors.New("down"))
	}
	if _, err := e.svc.Admission().Create(ctx, req, down); code(err) != apierr.Unavailable {
		t.Fatal(err)
	}
	_, err := e.svc.Admission().Create(ctx, req, allow)
	if code(err) != apierr.Unavailable || detail(err, "reservationId") == nil {
		t.Fatalf("retry within the handed-back lease: %v", err)
	}
	e.clock.Advance(capacity.LeaseHandBack)
	r := must(e.svc.Admission().Create(ctx, req, allow))
	if r.State != api.Placed {
		t.Errorf("resumed %+v", r)
	}
	// A flow that crashed (no hand-back) is taken over once its lease ends.
	req.ClientToken = "y"
	e.svc.Faults = crashAt(capacity.FaultCharged)
	_, _ = e.svc.Admission().Create(ctx, req, allow)
	e.svc.Faults = nil
	if _, err := e.svc.Admission().Create(ctx, req, allow); code(err) != apierr.Unavailable {
		t.Fatalf("retry within the crashed flow's lease: %v", err)
	}
	e.clock.Advance(capacity.TakeOverAfter)
	if r := must(e.svc.Admission().Create(ctx, req, allow)); r.State != api.Placed {
		t.Errorf("taken over %+v", r)
	}
	if q := must(e.svc.Quotas().Get(ctx, req.Quota())); q.Used != 2 {
		t.Errorf("used %d, want 2 (each charged once)", q.Used)
	}
	e.check(t)
}

func TestReleaseReservation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
	r := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 2, 0, time.Hour), allow))
	if _, err := e.svc.Reservations().Release(ctx, "globex", r.ReservationID); code(err) != apierr.NotFound {
		t.Errorf("another tenant released: %v", err)
	}
	e.clock.Advance(time.Second)
	rel := must(e.svc.Reservations().Release(ctx, "acme", r.ReservationID))
	if rel.State != api.Released || rel.ReleasedBy != "tenant" || !rel.UpdatedAt.Equal(e.clock.Now()) {
		t.Errorf("released %+v", rel)
	}
	e.clock.Advance(time.Second)
	again := must(e.svc.Reservations().Release(ctx, "acme", r.ReservationID))
	if !again.UpdatedAt.Equal(rel.UpdatedAt) || again.State != api.Released {
		t.Errorf("a second release changed it: %+v", again)
	}
	// The devices are free again.
	must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 2, 0, time.Hour), allow))
	// A rejected reservation is returned unchanged.
	_, err := e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow)
	rej := must(e.svc.Reservations().Release(ctx, "acme", detail(err, "reservationId").(string)))
	if rej.State != api.Rejected || rej.ReleasedBy != "" {
		t.Errorf("release of a rejected one: %+v", rej)
	}
	if _, err := e.svc.Reservations().Release(ctx, "acme", "01NOPE"); code(err) != apierr.NotFound {
		t.Errorf("unknown id: %v", err)
	}
	e.check(t)
}

// Releasing a draft fences the in-flight create: it cleans up after itself.
func TestReleaseFencesInFlightCreate(t *testing.T) {
	for _, at := range []string{capacity.FaultDraft, capacity.FaultCharged, capacity.FaultAllocated} {
		t.Run(at, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
			var id string
			e.svc.Faults = func(point string) error {
				if point == at && id == "" {
					// The tenant releases the draft while the create is here.
					rs, _ := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{}, paging.Page{Limit: 1}))
					id = rs[0].ReservationID
					if r := must(e.svc.Reservations().Release(ctx, "acme", id)); r.State != api.Released {
						t.Errorf("release of the draft: %+v", r)
					}
				}
				return nil
			}
			r, err := e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow)
			if err != nil || r.State != api.Released || r.ReservationID != id {
				t.Errorf("create that lost the fence answered %+v %v", r, err)
			}
			e.svc.Faults = nil
			e.check(t)
		})
	}
}

func TestCrossTenantIsolation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	e.offer(t, "acme", "p1", "globex", "gpu", 4)
	a := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow))
	g := must(e.svc.Admission().Create(ctx, e.req("globex", "p1", "gpu", 1, 0, time.Hour), allow))
	if _, err := e.svc.Reservations().Get(ctx, "globex", a.ReservationID); code(err) != apierr.NotFound {
		t.Errorf("globex reads acme's reservation: %v", err)
	}
	if _, err := e.svc.Reservations().Release(ctx, "globex", a.ReservationID); code(err) != apierr.NotFound {
		t.Errorf("globex releases acme's reservation: %v", err)
	}
	for tenant, want := range map[string]string{"acme": a.ReservationID, "globex": g.ReservationID} {
		rs, _ := must2(e.svc.Reservations().List(ctx, tenant, capacity.ListFilter{}, paging.Page{Limit: 100}))
		if len(rs) != 1 || rs[0].ReservationID != want {
			t.Errorf("%s lists %+v", tenant, rs)
		}
	}
	if q := must(e.svc.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "initech", PoolID: "p1", Resource: "gpu"})); q.Max != 0 {
		t.Errorf("initech quota %+v", q)
	}
	if _, err := e.svc.Admission().Create(ctx, e.req("initech", "p1", "gpu", 1, 0, time.Hour), allow); code(err) != apierr.NotFound {
		t.Errorf("initech creates on a pool not offered to it: %v", err)
	}
	if _, err := e.svc.Pools().Offer(ctx, "globex", "p1", "globex", "gpu", 100); code(err) != apierr.NotFound {
		t.Errorf("globex offers acme's pool: %v", err)
	}
	// A cursor key of another partition cannot be used (the HMAC binding
	// refuses it first at the API; the store refuses it too).
	_, _, err := e.svc.Reservations().List(ctx, "globex", capacity.ListFilter{}, paging.Page{Limit: 1, After: map[string]string{"sk": "QUOTA#p1#gpu", "lsk": "x"}})
	if code(err) != apierr.InvalidInput {
		t.Errorf("foreign cursor key: %v", err)
	}
	e.check(t)
}

func TestListReservations(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 8})
	e.pool(t, "acme", "p2", map[string]int{"gpu": 8})
	var ids []string
	for i := 0; i < 6; i++ {
		pool := []string{"p1", "p2"}[i%2]
		r := must(e.svc.Admission().Create(ctx, e.req("acme", pool, "gpu", 1, 0, time.Hour), allow))
		ids = append(ids, r.ReservationID)
		if i%3 != 2 {
			e.clock.Advance(time.Millisecond) // two pairs share a createdAt: ties by id
		}
	}
	must(e.svc.Reservations().Release(ctx, "acme", ids[0]))
	all := func(f capacity.ListFilter, limit int) []capacity.Reservation {
		var out []capacity.Reservation
		page := paging.Page{Limit: limit}
		for {
			rs, next := must2(e.svc.Reservations().List(ctx, "acme", f, page))
			out = append(out, rs...)
			if next == nil {
				return out
			}
			page.After = next
		}
	}
	if rs, next := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{}, paging.Page{Limit: 6})); len(rs) != 6 || next != nil {
		t.Errorf("exactly full page: %d items, cursor %v", len(rs), next)
	}
	got := all(capacity.ListFilter{}, 4)
	if len(got) != 6 {
		t.Fatalf("listed %d", len(got))
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if a.CreatedAt.Before(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ReservationID < b.ReservationID {
			t.Errorf("not newest first at %d: %s %s / %s %s", i, a.CreatedAt, a.ReservationID, b.CreatedAt, b.ReservationID)
		}
	}
	if rs := all(capacity.ListFilter{PoolID: "p1"}, 1); len(rs) != 3 {
		t.Errorf("pool filter: %d", len(rs))
	}
	if rs := all(capacity.ListFilter{State: api.Released}, 2); len(rs) != 1 || rs[0].ReservationID != ids[0] {
		t.Errorf("state filter: %+v", rs)
	}
	if rs := all(capacity.ListFilter{PoolID: "p2", State: api.Placed}, 10); len(rs) != 3 {
		t.Errorf("both filters: %d", len(rs))
	}
}

// TestListMatchesGet lists reservations in every state and compares each
// listed entry with get of the same id, field by field: a list must never
// show fields (devices, reason, releasedBy) from another row.
func TestListMatchesGet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	var ids []string
	create := func(count int, from, to time.Duration, decide capacity.Decide) {
		r, err := e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", count, from, to), decide)
		id := r.ReservationID
		if id == "" {
			id, _ = detail(err, "reservationId").(string)
		}
		if id == "" {
			t.Fatalf("create: no reservation id (%v)", err)
		}
		ids = append(ids, id)
		e.clock.Advance(time.Millisecond)
	}
	e.offer(t, "acme", "p1", "acme", "gpu", 100)
	create(3, 0, time.Hour, allow) // placed on 3 devices
	create(1, 0, time.Hour, allow) // placed, then released
	must(e.svc.Reservations().Release(ctx, "acme", ids[1]))
	create(2, 0, time.Hour, allow)             // rejected: capacity (1 free)
	create(2, 2*time.Hour, 3*time.Hour, allow) // placed later on
	create(1, 0, time.Hour, allow)             // placed on the last device
	e.offer(t, "acme", "p1", "acme", "gpu", 6)
	create(2, 0, time.Hour, allow) // rejected: quota (used 6 of 6)
	create(1, 0, time.Hour, deny)  // denied
	rc := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: e.svc}, Due: &duedb.Store{DB: e.store.DB, Table: e.store.Table}}
	e.clock.Advance(2*time.Hour + time.Minute)
	if _, err := rc.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	var listed []capacity.Reservation
	for _, f := range []capacity.ListFilter{{}, {State: api.Denied}, {State: api.Rejected}, {State: api.Expired}} {
		page := paging.Page{Limit: 2}
		for {
			rs, next := must2(e.svc.Reservations().List(ctx, "acme", f, page))
			listed = append(listed, rs...)
			if next == nil {
				break
			}
			page.After = next
		}
	}
	if len(listed) != len(ids) {
		t.Fatalf("listed %d reservations, created %d", len(listed), len(ids))
	}
	states := map[api.ReservationState]bool{}
	for _, l := range listed {
		g, err := e.svc.Reservations().Get(ctx, "acme", l.ReservationID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(l, g) {
			t.Errorf("list and get differ for %s:\nlist %+v\nget  %+v", l.ReservationID, l, g)
		}
		states[g.State] = true
	}
	for _, s := range []api.ReservationState{api.Released, api.Rejected, api.Denied, api.Active} {
		if !states[s] {
			t.Errorf("no %s reservation in the mix: %v", s, states)
		}
	}
	e.check(t)
}

// TestTokensCannotBeSquatted: a principal without a grant who guesses a
// tenant's clientTokens (job ids) claims nothing; the tenant's own principal
// then creates with the same token as if nothing had happened.
func TestTokensCannotBeSquatted(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	req := e.req("acme", "p1", "gpu", 1, 0, time.Hour)
	req.ClientToken = "job-42"
	squat := req
	squat.Principal = "mallory"
	if _, err := e.svc.Admission().Create(ctx, squat, deny); code(err) != apierr.PermissionDenied {
		t.Fatalf("mallory: %v", err)
	}
	owner := req
	owner.Principal = "alice"
	r, err := e.svc.Admission().Create(ctx, owner, allow)
	if err != nil || r.State != api.Placed {
		t.Fatalf("alice after mallory: %+v %v", r, err)
	}
	// The same principal retrying gets its reservation back.
	if again := must(e.svc.Admission().Create(ctx, owner, allow)); again.ReservationID != r.ReservationID {
		t.Errorf("alice's retry made %s, first was %s", again.ReservationID, r.ReservationID)
	}
	e.check(t)
}

// TestDeniedLearnsNothing: a denied caller gets the same answer for a pool
// that exists, one that does not and a resource the pool lacks, and its
// refused drafts stay out of the tenant's list (listed only on request, kept
// for a day).
func TestDeniedLearnsNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	var answers []string
	for _, c := range []struct{ pool, res string }{{"p1", "gpu"}, {"nope", "gpu"}, {"p1", "tpu"}} {
		req := e.req("acme", c.pool, c.res, 1, 0, time.Hour)
		req.Principal = "mallory"
		_, err := e.svc.Admission().Create(ctx, req, deny)
		e2 := apierr.As(err)
		if e2 == nil || e2.Code != apierr.PermissionDenied || e2.Details["reservationId"] == nil {
			t.Fatalf("%s/%s: %v", c.pool, c.res, err)
		}
		answers = append(answers, fmt.Sprintf("%s %s %v", e2.Code, e2.Message, e2.Details["reason"]))
	}
	if answers[0] != answers[1] || answers[0] != answers[2] {
		t.Errorf("a denied caller can tell the pools apart: %q", answers)
	}
	if rs, _ := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{}, paging.Page{Limit: 100})); len(rs) != 0 {
		t.Errorf("denied reservations in the plain list: %d", len(rs))
	}
	if rs, _ := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{PoolID: "p1"}, paging.Page{Limit: 100})); len(rs) != 0 {
		t.Errorf("denied reservations in the pool's list: %d", len(rs))
	}
	denied, _ := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{State: api.Denied}, paging.Page{Limit: 100}))
	if len(denied) != 3 {
		t.Fatalf("state=denied lists %d, want 3", len(denied))
	}
	for _, r := range denied {
		if r.State != api.Denied || !r.ExpiresAt().Equal(r.UpdatedAt.Add(24*time.Hour)) {
			t.Errorf("%s: state %s, expires %s", r.ReservationID, r.State, r.ExpiresAt())
		}
	}
	e.check(t)
}
