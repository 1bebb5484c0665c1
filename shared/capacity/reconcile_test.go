package capacity_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/metrics"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

var errCrash = errors.New("injected crash")

func (e *env) reconciler() *reconcile.Reconciler {
	return &reconcile.Reconciler{Capacity: &capacity.Steps{Service: e.svc}, Due: &duedb.Store{DB: e.store.DB, Table: e.store.Table}}
}

func (e *env) pass(tb testing.TB) reconcile.PassResult {
	tb.Helper()
	res, err := e.reconciler().Pass(context.Background())
	if err != nil {
		tb.Fatalf("pass: %v", err)
	}
	return res
}

func (e *env) state(tb testing.TB, tenant, id string) capacity.Reservation {
	tb.Helper()
	r, err := e.svc.Reservations().Get(context.Background(), tenant, id)
	if err != nil {
		tb.Fatalf("get %s: %v", id, err)
	}
	return r
}

// The crash matrix: every fault point of the create, release and reconcile
// flows stops its flow there; one pass with the clock moved past the
// 2-minute staleness repairs it, and the invariant checker passes.
func TestCrashMatrix(t *testing.T) {
	ctx := context.Background()
	type scenario struct {
		// setup prepares state before the crashing flow (no faults).
		setup func(e *env)
		// crash runs the flow that reaches the point.
		crash func(e *env)
		// after checks the repaired end state (optional).
		after func(t *testing.T, e *env)
		// hook runs at every fault point before the crash check (optional).
		hook func(e *env, point string)
	}
	placedIn := func(e *env, from, to time.Duration) capacity.Reservation {
		return must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, from, to), allow))
	}
	create := func(d capacity.Decide) func(e *env) {
		return func(e *env) { _, _ = e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), d) }
	}
	var last capacity.Reservation
	var staleReq capacity.CreateRequest
	releaseLast := func(e *env) { _, _ = e.svc.Reservations().Release(ctx, "acme", last.ReservationID) }
	fits := scenario{crash: create(allow)}
	overQuota := scenario{
		setup: func(e *env) { e.offer(t, "acme", "p1", "acme", "gpu", 0) },
		crash: create(allow),
	}
	noDevices := scenario{
		setup: func(e *env) {
			e.offer(t, "acme", "p1", "acme", "gpu", 100)
			placedIn(e, 0, time.Hour)
			placedIn(e, 0, time.Hour)
		},
		crash: create(allow),
	}
	release := scenario{
		setup: func(e *env) { last = placedIn(e, 0, time.Hour) },
		crash: releaseLast,
		after: func(t *testing.T, e *env) {
			if r := e.state(t, "acme", last.ReservationID); r.State != api.Released || r.ReleasedBy != "tenant" {
				t.Errorf("released: %+v", r)
			}
		},
	}
	windowEnd := scenario{
		setup: func(e *env) { last = placedIn(e, 0, time.Hour); e.clock.Advance(time.Hour) },
		crash: func(e *env) { _, _ = e.reconciler().Pass(ctx) },
		after: func(t *testing.T, e *env) {
			if r := e.state(t, "acme", last.ReservationID); r.State != api.Released || r.ReleasedBy != "window_end" {
				t.Errorf("at window end: %+v", r)
			}
		},
	}
	windowStart := scenario{
		setup: func(e *env) { last = placedIn(e, time.Minute, time.Hour); e.clock.Advance(time.Minute) },
		crash: func(e *env) { _, _ = e.reconciler().Pass(ctx) },
		after: func(t *testing.T, e *env) {
			if r := e.state(t, "acme", last.ReservationID); r.State != api.Active {
				t.Errorf("after start: %+v", r)
			}
		},
	}
	// The tenant releases a draft while its create is in flight (between
	// the charge and the node-hour writes): the create loses its fence and
	// gives back what it charged and wrote.
	var inFlight bool
	releasedInFlight := scenario{
		setup: func(e *env) { inFlight = false },
		crash: create(allow),
		hook: func(e *env, p string) {
			if p != capacity.FaultCharged || inFlight {
				return
			}
			inFlight = true
			snap := must(e.store.Snapshot(ctx))
			for _, r := range snap.Reservations {
				if r.State == api.Draft {
					_, _ = e.svc.Reservations().Release(ctx, r.TenantID, r.ReservationID)
				}
			}
		},
	}
	cases := map[string]scenario{
		capacity.FaultDraft:         fits,
		capacity.FaultCharged:       fits,
		capacity.FaultAllocated:     fits,
		capacity.FaultPlaced:        fits,
		capacity.FaultDenied:        {crash: create(deny)},
		capacity.FaultRejectedQuota: overQuota,
		capacity.FaultRejectedInvalid: {crash: func(e *env) {
			_, _ = e.svc.Admission().Create(ctx, e.req("acme", "nope", "gpu", 1, 0, time.Hour), allow)
		}},
		capacity.FaultRejectedCap: noDevices,
		"create.unplaced":         releasedInFlight,
		"create.credited":         releasedInFlight,
		capacity.FaultExpired: {
			setup: func(e *env) {
				staleReq = e.req("acme", "p1", "gpu", 1, 0, time.Hour)
				staleReq.ClientToken = "stale"
				e.svc.Faults = func(p string) error {
					if p == capacity.FaultCharged {
						return errCrash
					}
					return nil
				}
				_, _ = e.svc.Admission().Create(ctx, staleReq, allow)
				e.svc.Faults = nil
				e.clock.Advance(3 * time.Minute)
			},
			// The client retries after 3 minutes: the replay fences its own stale draft.
			crash: func(e *env) { _, _ = e.svc.Admission().Create(ctx, staleReq, allow) },
		},
		capacity.FaultFenced: release,
		"release.credited":   release,
		"release.unplaced":   release,
		capacity.FaultReconcileExpired: {setup: func(e *env) {
			e.svc.Faults = crashAt(capacity.FaultCharged)
			create(allow)(e)
			e.svc.Faults = nil
			e.clock.Advance(3 * time.Minute)
		}, crash: func(e *env) { _, _ = e.reconciler().Pass(ctx) }},
		capacity.FaultReconcileBinding:  windowStart,
		capacity.FaultReconcileActive:   windowStart,
		capacity.FaultReconcileReleased: windowEnd,
		"reconcile.credited":            windowEnd,
		"reconcile.unplaced":            windowEnd,
		capacity.FaultReconcileSwept:    {setup: func(e *env) { last = placedIn(e, 0, time.Hour); releaseLast(e); e.clock.Advance(3 * time.Minute) }, crash: func(e *env) { _, _ = e.reconciler().Pass(ctx) }},
		capacity.FaultPoolClaimed: {
			crash: func(e *env) { _, _ = e.svc.Pools().Create(ctx, "acme", "p2", map[string]int{"gpu": 2, "cpu": 1}, nil) },
			after: func(t *testing.T, e *env) {
				if _, err := e.svc.Pools().Get(ctx, "acme", "p2"); err != nil {
					t.Errorf("pool not completed: %v", err)
				}
				if q := must(e.svc.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p2", Resource: "cpu"})); q.Max != 1 {
					t.Errorf("owner quota not created: %+v", q)
				}
			},
		},
	}
	all := append(append(append([]string{}, capacity.FaultPoints...), capacity.ReconcileFaultPoints...), capacity.FaultExpired, capacity.FaultPoolClaimed)
	for _, point := range all {
		c, ok := cases[point]
		if !ok {
			t.Errorf("fault point %s has no crash case", point)
			continue
		}
		t.Run(point, func(t *testing.T) {
			e := newEnv(t)
			e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
			if c.setup != nil {
				c.setup(e)
			}
			fired := false
			e.svc.Faults = func(p string) error {
				if c.hook != nil {
					c.hook(e, p)
				}
				if p == point && !fired {
					fired = true
					return errCrash
				}
				return nil
			}
			c.crash(e)
			e.svc.Faults = nil
			if !fired {
				t.Fatalf("the flow never reached %s", point)
			}
			e.clock.Advance(api.StaleAfter + time.Second)
			e.pass(t)
			e.check(t)
			if snap := must(e.store.Snapshot(ctx)); true {
				for _, r := range snap.Reservations {
					if r.State == api.Draft {
						t.Errorf("draft left after the pass: %+v", r)
					}
				}
			}
			if c.after != nil {
				c.after(t, e)
			}
		})
	}
}

// A pass counts what crashes left (a stale draft, a pool whose creation
// stopped) as repairs, apart from the routine sweep every terminal
// reservation gets.
func TestPassCountsRepairsApartFromSweeps(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
	released := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow))
	must(e.svc.Reservations().Release(ctx, "acme", released.ReservationID))
	e.svc.Faults = crashAt(capacity.FaultCharged)
	_, _ = e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow)
	e.svc.Faults = crashAt(capacity.FaultPoolClaimed)
	_, _ = e.svc.Pools().Create(ctx, "acme", "p2", map[string]int{"gpu": 1}, nil)
	e.svc.Faults = nil

	e.clock.Advance(api.StaleAfter + time.Second)
	if res := e.pass(t); res.Repaired != 2 || res.Swept != 1 || res.Transitions["expired"] != 1 {
		t.Errorf("first pass: %+v, want 2 repaired (the draft, the pool) and 1 swept (the release)", res)
	}
	e.clock.Advance(api.StaleAfter + time.Second)
	if res := e.pass(t); res.Repaired != 0 || res.Swept != 1 {
		t.Errorf("second pass: %+v, want the expired draft swept and nothing repaired", res)
	}
	e.check(t)
}

func crashAt(point string) func(string) error {
	return func(p string) error {
		if p == point {
			return errCrash
		}
		return nil
	}
}

// A reservation's whole life with a short window, the clock injected.
func TestReservationLife(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
	r := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 2, time.Minute, 3*time.Minute), allow))
	k := r.Quota()
	if res := e.pass(t); res.TransitionCount() != 0 {
		t.Errorf("nothing is due yet: %+v", res)
	}
	e.clock.Advance(time.Minute)
	res := e.pass(t)
	if res.Transitions["binding"] != 1 || res.Transitions["active"] != 1 {
		t.Errorf("at start: %+v", res)
	}
	if got := e.state(t, "acme", r.ReservationID); got.State != api.Active {
		t.Errorf("state %s", got.State)
	}
	e.check(t)
	e.clock.Advance(2 * time.Minute)
	res = e.pass(t)
	got := e.state(t, "acme", r.ReservationID)
	if res.Transitions["released"] != 1 || got.State != api.Released || got.ReleasedBy != "window_end" {
		t.Errorf("at end: %+v %+v", res, got)
	}
	if q := must(e.svc.Quotas().Get(ctx, k)); q.Used != 0 {
		t.Errorf("quota used %d after the window", q.Used)
	}
	e.check(t)
	e.clock.Advance(api.StaleAfter)
	if res = e.pass(t); res.Swept != 1 || res.Repaired != 0 {
		t.Errorf("sweep: %+v", res)
	}
	if res = e.pass(t); res.Found != 0 {
		t.Errorf("still due after the sweep: %+v", res)
	}
}

// A window that passed entirely while the reconciler was down goes straight
// to released; a failing bind stays binding and is retried.
func TestReconcileCatchUpAndBindRetry(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	missed := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, time.Minute, 2*time.Minute), allow))
	later := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 5*time.Minute, time.Hour), allow))
	e.clock.Advance(6 * time.Minute)
	rc := e.reconciler()
	rc.Capacity.Binder = binderFunc(func(context.Context, capacity.Reservation) error { return errors.New("node unreachable") })
	res := must(rc.Pass(ctx))
	if res.Transitions["released"] != 1 || res.Transitions["binding"] != 1 || res.Transitions["active"] != 0 || res.Errors != 1 {
		t.Errorf("pass: %+v", res)
	}
	if r := e.state(t, "acme", missed.ReservationID); r.State != api.Released || r.ReleasedBy != "window_end" {
		t.Errorf("missed window: %+v", r)
	}
	if r := e.state(t, "acme", later.ReservationID); r.State != api.Binding {
		t.Errorf("bind failed: %+v", r)
	}
	e.check(t)
	if res := e.pass(t); res.Transitions["active"] != 1 {
		t.Errorf("retry: %+v", res)
	}
	e.check(t)
}

type binderFunc func(context.Context, capacity.Reservation) error

func (f binderFunc) Bind(ctx context.Context, r capacity.Reservation) error { return f(ctx, r) }

// Two passes over the same due set at once: every transition happens once.
func TestConcurrentPasses(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 64})
	const n = 60
	for i := 0; i < n; i++ {
		must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, time.Minute, time.Hour), allow))
	}
	// a few stale drafts too
	e.svc.Faults = crashAt(capacity.FaultAllocated)
	for i := 0; i < 4; i++ {
		_, _ = e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, time.Minute, time.Hour), allow)
	}
	e.svc.Faults = nil
	both := func() map[string]int {
		var wg sync.WaitGroup
		results := make([]reconcile.PassResult, 2)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rc := e.reconciler()
				rc.Workers = 8
				results[i] = must(rc.Pass(ctx))
			}()
		}
		wg.Wait()
		sum := map[string]int{}
		for _, r := range results {
			for k, v := range r.Transitions {
				sum[k] += v
			}
		}
		return sum
	}
	e.clock.Advance(3 * time.Minute)
	if got := both(); got["binding"] != n || got["active"] != n || got["expired"] != 4 || len(got) != 3 {
		t.Errorf("start: transitions %v, want %d binding, %d active, 4 expired", got, n, n)
	}
	e.check(t)
	e.clock.Advance(time.Hour)
	if got := both(); got["released"] != n || len(got) != 1 {
		t.Errorf("end: transitions %v, want %d released", got, n)
	}
	e.check(t)
	if q := must(e.svc.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"})); q.Used != 0 {
		t.Errorf("used %d", q.Used)
	}
}

func TestPassStopsBeforeDeadline(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow))
	e.clock.Advance(time.Minute)
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	rc := e.reconciler()
	rc.Margin = time.Hour // the deadline is already inside the margin
	res, err := rc.Pass(dctx)
	if err != nil || !res.Stopped || res.TransitionCount() != 0 {
		t.Errorf("pass near its deadline: %+v %v", res, err)
	}
	res = e.pass(t)
	if res.Transitions["active"] != 1 || res.Lag != time.Minute {
		t.Errorf("next pass: %+v (lag %v)", res, res.Lag)
	}
}

// laggingIndex is the due index with entries that outlived their items, as
// a DynamoDB GSI may for a moment (dynalite updates its indexes at once, so
// the lag is injected here around the real index).
type laggingIndex struct {
	reconcile.DueStore
	ghosts []reconcile.DueItem
}

func (l laggingIndex) Due(ctx context.Context, shard int, now time.Time, fn func(reconcile.DueItem) bool) error {
	if shard == 0 {
		for _, g := range l.ghosts {
			if !fn(g) {
				return nil
			}
		}
	}
	return l.DueStore.Due(ctx, shard, now, fn)
}

// An index entry whose item is gone is skipped, not retried as an error on
// every pass, and does not hold the lag metric up.
func TestReconcileSkipsGhostEntries(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 2})
	r := must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, time.Minute, time.Hour), allow))
	old := e.clock.Now().Add(-time.Hour)
	ghost := func(id string, st api.ReservationState) reconcile.DueItem {
		g := capacity.Reservation{Reservation: api.Reservation{ReservationID: id, TenantID: "acme", PoolID: "p1",
			Resource: "gpu", Count: 1, Window: api.Window{Start: old, End: old.Add(2 * time.Hour)}, State: st, CreatedAt: old,
			UpdatedAt: old}, Due: old}
		return reconcile.DueItem{Due: old, Reservation: &g}
	}
	rc := &reconcile.Reconciler{Capacity: &capacity.Steps{Service: e.svc}, Due: laggingIndex{&duedb.Store{DB: e.store.DB, Table: e.store.Table}, []reconcile.DueItem{
		ghost("GHOSTPLACED0000000000000000", api.Placed),
		ghost("GHOSTRELEASED0000000000000", api.Released),
		ghost("GHOSTDRAFT000000000000000", api.Draft),
	}}}
	e.clock.Advance(2 * time.Minute)
	for pass := 0; pass < 2; pass++ {
		res, err := rc.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.Skipped < 3 {
			t.Errorf("pass %d: %d errors, %d skipped (want the 3 ghosts skipped)", pass, res.Errors, res.Skipped)
		}
		if res.Lag > 2*time.Minute {
			t.Errorf("pass %d: lag %s counts the ghosts (an hour old)", pass, res.Lag)
		}
	}
	if got := e.state(t, "acme", r.ReservationID); got.State != api.Active {
		t.Errorf("the real reservation is %s, want active", got.State)
	}
	e.check(t)
}

// The pass summary is an EMF record that publishes NodesMoved (the
// reservations moved off failed nodes) beside the lag and the counts.
func TestPassLogPublishesNodesMoved(t *testing.T) {
	var buf bytes.Buffer
	reconcile.PassResult{Found: 3, Transitions: map[string]int{}, NodesMoved: 2, Lag: time.Second}.
		Log(context.Background(), slog.New(slog.NewJSONHandler(&buf, nil)), "bc-table")
	points, ok, err := metrics.Parse(bytes.TrimSpace(buf.Bytes()))
	if err != nil || !ok {
		t.Fatalf("not an EMF record (%v): %s", err, buf.Bytes())
	}
	got := map[string]float64{}
	for _, p := range points {
		if p.Dimensions[reconcile.DimensionTable] == "bc-table" && len(p.Values) == 1 {
			got[p.Name] = p.Values[0]
		}
	}
	if got[reconcile.MetricNodesMoved] != 2 || got[reconcile.MetricLag] != 1000 {
		t.Errorf("published %v, want NodesMoved 2 and Lag 1000", got)
	}
}
