package capacity_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/meter"
	"github.com/bettercompute/control-plane/shared/paging"
)

// The leak a release racing a large create left (issue "capacity at real
// utilisation"), step by step: the release reads the draft; the create
// records a placement too large for the charge's record on the draft,
// charges and writes it; the release fences the draft with what it read;
// the create dies. Nothing may stay held once the sweep ran — whatever the
// placement's shape: nine nodes of eight, topology any, nodes of one device.
func TestReleaseRacingLargeCreate(t *testing.T) {
	for _, c := range []struct {
		name     string
		res      string
		count    int
		topology string
	}{
		{"nine nodes", "gpu", 72, api.OnNodes},
		{"any", "gpu", 72, api.AnyDevices},
		{"node size 1", "cpu", 12, api.OnNodes},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			if _, err := e.svc.Pools().Create(ctx, "acme", "p1", map[string]int{"gpu": 96, "cpu": 16}, map[string]int{"cpu": 1}); err != nil {
				t.Fatal(err)
			}
			req := e.req("acme", "p1", c.res, c.count, 0, time.Hour)
			req.Topology, req.ClientToken, req.Principal = c.topology, "big", "alice"
			id := capacity.TokenID("acme", "alice", "big")
			var read capacity.Reservation
			e.svc.Faults = func(point string) error {
				switch point {
				case capacity.FaultDraft: // 2. the release reads the draft
					read = must(e.store.GetReservation(ctx, "acme", id))
				case capacity.FaultAllocated: // 4. it fences what it read; 5. the create dies
					n := must(read.Release(api.ReleasedByTenant, e.clock.Now()))
					stored := must(e.store.Transition(ctx, n, api.Draft))
					if len(stored.Plan) != c.count {
						t.Errorf("the release's fence left a plan of %d devices, want the create's %d", len(stored.Plan), c.count)
					}
					return errCrash
				}
				return nil
			}
			if _, err := e.svc.Admission().Create(ctx, req, allow); err == nil {
				t.Fatal("the create should have died")
			}
			e.svc.Faults = nil
			// The release answers (the give-back its first attempt would do).
			if r := must(e.svc.Reservations().Release(ctx, "acme", id)); r.State != api.Released || len(r.DeviceIDs) != 0 {
				t.Errorf("released draft %+v: it never held devices", r)
			}
			if q := must(e.svc.Quotas().Get(ctx, req.Quota())); q.Used != 0 {
				t.Errorf("quota used %d right after the release, want 0 (given back at once)", q.Used)
			}
			e.clock.Advance(api.StaleAfter + time.Second)
			e.pass(t) // 6. the sweep
			e.check(t)
		})
	}
}

// A release of a draft gives its quota back at once, and the released
// reservation lists no devices (it held none); the create in flight,
// losing its fence, undoes what it wrote.
func TestReleaseOfDraftGivesBackAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 16})
	k := capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"}
	var released capacity.Reservation
	e.svc.Faults = func(point string) error {
		if point == capacity.FaultCharged && released.ReservationID == "" {
			rs, _ := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{State: api.Draft}, paging.Page{Limit: 1}))
			released = must(e.svc.Reservations().Release(ctx, "acme", rs[0].ReservationID))
			if q := must(e.svc.Quotas().Get(ctx, k)); q.Used != 0 {
				t.Errorf("used %d as the release of the draft answers, want 0", q.Used)
			}
		}
		return nil
	}
	r, err := e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 8, 0, time.Hour), allow)
	e.svc.Faults = nil
	if err != nil || r.State != api.Released || len(r.DeviceIDs) != 0 || len(released.DeviceIDs) != 0 {
		t.Errorf("create %+v %v; release %+v: a released draft lists no devices", r, err, released)
	}
	// Nothing is left for the sweep: the create undid its writes, and its
	// voided record went with them.
	if row, _, _ := e.store.Row(ctx, k); len(row.Charging) != 0 || row.Used != 0 {
		t.Errorf("row after the create lost its fence: %+v", row)
	}
	e.check(t)
}

// A clientToken's retry gets the first answer: after the window ended too,
// and CONFLICT for another request while the first is still in flight.
func TestClientTokenAnswers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	req := capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 1, End: e.clock.Now().Add(time.Hour),
		ClientToken: "late", Principal: "alice"}
	first := must(e.svc.Admission().Create(ctx, req, allow))
	e.clock.Advance(2 * time.Hour)
	e.pass(t)
	again, err := e.svc.Admission().Create(ctx, req, allow)
	if err != nil || again.ReservationID != first.ReservationID || again.State != api.Released {
		t.Errorf("replay after the window ended: %+v %v, want the reservation as it is now", again, err)
	}
	// In flight: the first request's flow died after its draft (its lease
	// still held); another request with the token is CONFLICT, the same
	// one UNAVAILABLE (retry).
	e.svc.Faults = crashAt(capacity.FaultDraft)
	inflight := capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 1, End: e.clock.Now().Add(time.Hour),
		ClientToken: "busy", Principal: "alice"}
	_, _ = e.svc.Admission().Create(ctx, inflight, allow)
	e.svc.Faults = nil
	other := inflight
	other.Count = 2
	if _, err := e.svc.Admission().Create(ctx, other, allow); code(err) != apierr.Conflict {
		t.Errorf("another request while the first is in flight: %v, want CONFLICT", err)
	}
	if _, err := e.svc.Admission().Create(ctx, inflight, allow); code(err) != apierr.Unavailable {
		t.Errorf("the same request while the first is in flight: %v, want UNAVAILABLE", err)
	}
	e.clock.Advance(api.StaleAfter + time.Second)
	e.pass(t)
	e.check(t)
}

// A state-filtered list reads that state's reservations only: a tenant's
// history of failed creates costs it nothing.
func TestStateListReadsOnlyThatState(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := &meter.Meter{}
	store := &capacitydb.Store{DB: devstackClient(t, e, dynamo.MeterAll(m)), Table: e.store.Table}
	e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
	e.offer(t, "acme", "p1", "acme", "gpu", 1000)
	placed := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 2, 0, time.Hour), allow))
	for range 60 { // refused: the pool is full
		if _, err := e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow); code(err) != apierr.CapacityExhausted {
			t.Fatal(err)
		}
	}
	for _, f := range []capacity.ListFilter{{State: api.Placed}, {}, {PoolID: "p1"}} {
		before := m.Usage()
		rs, _ := must2(store.ListReservations(ctx, "acme", f, paging.Page{Limit: 10}))
		used := m.Usage()
		// One Query (and, through a keys-only index, one BatchGetItem).
		if len(rs) != 1 || rs[0].ReservationID != placed.ReservationID || used.Calls-before.Calls > 2 || used.RCU-before.RCU > 2 {
			t.Errorf("list %+v: %d reservations, %d calls, %.1f read units (60 rejected ones beside)", f, len(rs), used.Calls-before.Calls, used.RCU-before.RCU)
		}
	}
	if rs, _ := must2(store.ListReservations(ctx, "acme", capacity.ListFilter{State: api.Rejected}, paging.Page{Limit: 100})); len(rs) != 60 {
		t.Errorf("%d rejected listed, want 60", len(rs))
	}
}

// Cancellation churn does not starve admission: 16 clients creating
// nine-node reservations of a 24-node pool while another releases every
// draft it sees. No dependency fails, so every create answers what the
// state says — placed, released (its draft fenced by the canceller: the
// reservation as it now is), or CAPACITY_EXHAUSTED (at most two nine-node
// reservations fit at once) — never UNAVAILABLE for a race it lost:
// UNAVAILABLE only for a flow that ran out of its deadline (a machine too
// loaded to serve its calls within FlowDeadline), which the answer's cause
// says. The churn leaves no charge records behind but those of such
// cut-off flows, and a whole-pool create after it is admitted at once.
func TestChurnKeepsAdmitting(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 24 * 8})
	e.offer(t, "acme", "p1", "acme", "gpu", 100_000)
	k := capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	released := 0
	cutOff := 0 // flows that ran out of their deadline: creates answered UNAVAILABLE, releases
	wg.Add(1)
	go func() { // the canceller
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rs, _, err := e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{State: api.Draft}, paging.Page{Limit: 20})
			if err != nil {
				t.Error(err)
				return
			}
			for _, r := range rs {
				_, err := e.svc.Reservations().Release(ctx, "acme", r.ReservationID)
				mu.Lock()
				switch {
				case err == nil:
					released++
				case errors.Is(err, context.DeadlineExceeded):
					cutOff++ // its give-back is the sweep's
				default:
					t.Errorf("release of draft %s: %v", r.ReservationID, err)
				}
				mu.Unlock()
			}
		}
	}()
	out := map[string]int{}
	var creators sync.WaitGroup
	for range 16 {
		creators.Add(1)
		go func() {
			defer creators.Done()
			for range 3 {
				begun := time.Now()
				r, err := e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 72, 0, time.Hour), allow)
				took := time.Since(begun)
				mu.Lock()
				switch c := apierr.CodeOf(err); {
				case err == nil:
					out[string(r.State)]++
				case c == apierr.CapacityExhausted:
					out[string(c)]++
				case c == apierr.Unavailable && errors.Is(err, context.DeadlineExceeded) && took >= capacity.FlowDeadline/2:
					out["UNAVAILABLE (deadline)"]++
					cutOff++
				default:
					out[string(c)]++
					t.Errorf("create after %v: %v", took, err)
				}
				mu.Unlock()
				if err == nil && r.State.Holding() {
					if _, err := e.svc.Reservations().Release(ctx, "acme", r.ReservationID); err != nil {
						mu.Lock()
						if errors.Is(err, context.DeadlineExceeded) {
							cutOff++ // its give-back is the sweep's
						} else {
							t.Errorf("release of %s: %v", r.ReservationID, err)
						}
						mu.Unlock()
					}
				}
			}
		}()
	}
	creators.Wait()
	close(stop)
	wg.Wait()
	t.Logf("48 creates with a canceller: %v, %d drafts released, %d placement retries", out, released, e.svc.Admission().PlaceRetries())
	for a, n := range out {
		switch a {
		case string(api.Placed), string(api.Released), string(apierr.CapacityExhausted), "UNAVAILABLE (deadline)":
		default:
			t.Errorf("%d creates answered %s", n, a)
		}
	}
	if out[string(api.Placed)] == 0 {
		t.Errorf("no create was placed under churn: %v", out)
	}
	row, _, _ := e.store.Row(ctx, k)
	// At most the charges this process has not forgotten yet, and one per
	// flow cut off at its deadline (the reconciler's).
	if len(row.Charging) > 16+cutOff {
		t.Errorf("%d charge records left on the row after the churn (%d flows cut off)", len(row.Charging), cutOff)
	}
	// A flow cut off may leave its draft's devices for the reconciler to
	// free, or its reservation placed (cut off after the fence: the client
	// saw UNAVAILABLE and would retry or release it); only without one must
	// the whole pool be free at once.
	if cutOff > 0 {
		e.clock.Advance(api.StaleAfter + time.Second)
		e.pass(t)
	}
	for _, st := range []api.ReservationState{api.Placed, api.Binding, api.Active} {
		rs, _ := must2(e.svc.Reservations().List(ctx, "acme", capacity.ListFilter{State: st}, paging.Page{Limit: 100}))
		if len(rs) > 0 && cutOff == 0 {
			t.Errorf("%d reservations %s after the churn, none cut off", len(rs), st)
		}
		for _, r := range rs {
			must(e.svc.Reservations().Release(ctx, "acme", r.ReservationID))
		}
	}
	if r, err := e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 24*8, 0, time.Hour), allow); err != nil || r.State != api.Placed {
		t.Errorf("a whole-pool create after the churn: %+v %v", r, err)
	}
	e.clock.Advance(api.StaleAfter + time.Second)
	e.pass(t)
	e.check(t)
}

// devstackClient is a client of the local DynamoDB with extra options.
func devstackClient(tb testing.TB, _ *env, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return devstack.Shared(tb).DynamoDB(opts...)
}
