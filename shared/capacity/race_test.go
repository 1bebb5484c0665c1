package capacity_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
)

// race runs n creates at once (released together) and counts outcomes.
func race(e *env, n int, req func(i int) capacity.CreateRequest) (map[apierr.Code]int, []capacity.Reservation) {
	var mu sync.Mutex
	outcomes := map[apierr.Code]int{}
	var placed []capacity.Reservation
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := e.svc.Admission().Create(context.Background(), req(i), allow)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				outcomes[apierr.CodeOf(err)]++
				return
			}
			outcomes["placed"]++
			placed = append(placed, r)
		}()
	}
	close(start)
	wg.Wait()
	return outcomes, placed
}

func TestRaceQuota(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "acme", "p1", map[string]int{"gpu": 64})
	e.offer(t, "acme", "p1", "globex", "gpu", 10)
	out, _ := race(e, 40, func(int) capacity.CreateRequest { return e.req("globex", "p1", "gpu", 1, 0, time.Hour) })
	if out["placed"] != 10 || out[apierr.QuotaExceeded] != 30 || len(out) != 2 {
		t.Errorf("outcomes %v, want 10 placed and 30 QUOTA_EXCEEDED", out)
	}
	q := must(e.svc.Quotas().Get(context.Background(), capacity.QuotaKey{TenantID: "globex", PoolID: "p1", Resource: "gpu"}))
	if q.Used != 10 {
		t.Errorf("used %d", q.Used)
	}
	e.check(t)
}

func TestRaceCapacity(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "acme", "p1", map[string]int{"gpu": 8})
	e.offer(t, "acme", "p1", "acme", "gpu", 1000)
	before := e.svc.Admission().PlaceRetries()
	out, placed := race(e, 24, func(int) capacity.CreateRequest { return e.req("acme", "p1", "gpu", 1, 0, time.Hour) })
	if out["placed"] != 8 || out[apierr.CapacityExhausted] != 16 || len(out) != 2 {
		t.Errorf("outcomes %v, want 8 placed and 16 CAPACITY_EXHAUSTED", out)
	}
	seen := map[string]bool{}
	for _, r := range placed {
		for _, d := range r.DeviceIDs {
			if seen[d] {
				t.Errorf("device %s placed twice", d)
			}
			seen[d] = true
		}
	}
	t.Logf("24-way race on 8 devices: %d placement retries", e.svc.Admission().PlaceRetries()-before)
	e.check(t)
}

// Releases race creates on a full pool: whatever interleaving, no device is
// double-booked, quota matches, and every refusal is CAPACITY_EXHAUSTED.
func TestRaceReleaseAndCreate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 4})
	e.offer(t, "acme", "p1", "acme", "gpu", 1000)
	var held []capacity.Reservation
	for i := 0; i < 4; i++ {
		held = append(held, must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow)))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	var mu sync.Mutex
	out := map[apierr.Code]int{}
	for _, r := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if rel, err := e.svc.Reservations().Release(ctx, "acme", r.ReservationID); err != nil || rel.State != api.Released {
				t.Errorf("release: %+v %v", rel, err)
			}
		}()
	}
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", 1, 0, time.Hour), allow)
			mu.Lock()
			out[apierr.CodeOf(err)]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if out[""] > 4 || out[""]+out[apierr.CapacityExhausted] != 12 {
		t.Errorf("outcomes %v", out)
	}
	q := must(e.svc.Quotas().Get(ctx, capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"}))
	if q.Used != int64(out[""]) {
		t.Errorf("used %d, placed %d", q.Used, out[""])
	}
	e.check(t)
}

// Concurrent retries of one clientToken: one flow drives the draft, the
// others answer UNAVAILABLE (retry) or the placed reservation; charged once.
func TestRaceSameClientToken(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "acme", "p1", map[string]int{"gpu": 8})
	req := capacity.CreateRequest{TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 3, End: e.clock.Now().Add(time.Hour), ClientToken: "same"}
	out, placed := race(e, 12, func(int) capacity.CreateRequest { return req })
	if out["placed"] < 1 || out["placed"]+out[apierr.Unavailable] != 12 {
		t.Errorf("outcomes %v", out)
	}
	for _, r := range placed {
		if r.ReservationID != placed[0].ReservationID || joined(r.DeviceIDs) != joined(placed[0].DeviceIDs) {
			t.Errorf("replays differ: %+v vs %+v", r, placed[0])
		}
	}
	// Once the first flow is done, every retry gets its reservation.
	again := must(e.svc.Admission().Create(context.Background(), req, allow))
	if again.ReservationID != placed[0].ReservationID || again.State != api.Placed {
		t.Errorf("retry after the race: %+v", again)
	}
	if q := must(e.svc.Quotas().Get(context.Background(), req.Quota())); q.Used != 3 {
		t.Errorf("used %d, want 3", q.Used)
	}
	e.check(t)
}

// Lost races alone never answer CAPACITY_EXHAUSTED: with a single placement
// attempt, creates that fit but lose a node-hour race are UNAVAILABLE
// (their charged drafts left for the reconciler), never refused.
func TestLostRaceIsNotCapacityExhausted(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "acme", "p1", map[string]int{"gpu": 8})
	e.svc.PlaceAttempts = 1
	out, _ := race(e, 8, func(int) capacity.CreateRequest { return e.req("acme", "p1", "gpu", 1, 0, time.Hour) })
	if out[apierr.CapacityExhausted] != 0 || out["placed"]+out[apierr.Unavailable] != 8 || out["placed"] == 0 {
		t.Errorf("outcomes %v", out)
	}
	t.Logf("8 creates, 1 attempt each: %v", out)
	e.clock.Advance(api.StaleAfter + time.Second)
	e.pass(t)
	e.check(t)
}

// TestRechoiceTooLargeForTheChargeIsRepaired: a create whose placement is
// taken between its charge and its writes chooses again; when the new
// placement spans more nodes than the charge's record holds, the record must
// stop naming the old placement (the draft holds the new one), so a crash
// right after the writes is repaired by freeing what was really written.
func TestRechoiceTooLargeForTheChargeIsRepaired(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p1", map[string]int{"gpu": 16 * api.DefaultNodeSize})
	e.offer(t, "acme", "p1", "acme", "gpu", 1000)
	req := e.req("acme", "p1", "gpu", 18, 0, time.Hour)
	req.Topology = api.AnyDevices // first choice: 3 nodes (8 + 8 + 2)

	var filling, filled, crashed atomic.Bool
	e.svc.Faults = func(point string) error {
		switch {
		case point == capacity.FaultCharged && filling.CompareAndSwap(false, true):
			// After the charge, before the writes: leave every node 2 free
			// devices, so the rechoice needs 9 nodes (more than the record's 8).
			for range 16 {
				must(e.svc.Admission().Create(ctx, e.req("acme", "p1", "gpu", api.DefaultNodeSize-2, 0, time.Hour), allow))
			}
			filled.Store(true)
		case point == capacity.FaultAllocated && filled.Load() && crashed.CompareAndSwap(false, true):
			return errors.New("crash after the writes")
		}
		return nil
	}
	if _, err := e.svc.Admission().Create(ctx, req, allow); err == nil || !crashed.Load() {
		t.Fatalf("create: %v, crashed %v (the fault did not fire)", err, crashed.Load())
	}
	e.svc.Faults = nil
	e.clock.Advance(api.StaleAfter + time.Second)
	e.pass(t)
	e.pass(t)
	e.check(t)
}

// racingStore makes a create's placement writes lose real races: before
// each of the first lose writes of a reservation, another writer takes and
// frees the same devices of the node-hour (moving their versions), so the
// create's conditional write is refused as it would be by a racing create.
type racingStore struct {
	*capacitydb.Store
	victim string
	mu     sync.Mutex
	lose   int
}

func (s *racingStore) Allocate(ctx context.Context, nh capacity.NodeHour, id string, e capacity.Entry) error {
	s.mu.Lock()
	race := id == s.victim && s.lose > 0
	if race {
		s.lose--
	}
	s.mu.Unlock()
	if race {
		if err := s.Store.Allocate(ctx, nh, "RACER", e); err != nil {
			return err
		}
		if err := s.Store.Free(ctx, nh.Topology(), []capacity.NodeHourKey{nh.Key()}, "RACER"); err != nil {
			return err
		}
	}
	return s.Store.Allocate(ctx, nh, id, e)
}

// A create that keeps losing races re-reads and retries until it is placed
// (or nothing fits), not a fixed number of times: 24 lost writes in a row,
// more than the 16 attempts it once gave up after with UNAVAILABLE, and
// the devices still free — it is placed. (24, not more: every lost race
// costs writes inside the create's real 10-s flow deadline, and under
// -race on a loaded machine 40 of them did not fit.)
func TestLostRacesAreRetriedUntilPlaced(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "acme", "p1", map[string]int{"gpu": 8})
	store := &racingStore{Store: e.store, victim: capacity.TokenID("acme", "alice", "unlucky"), lose: 24}
	svc := &capacity.Service{Store: store, Now: e.clock.Now, Logger: e.svc.Logger, Sleep: func(context.Context, time.Duration) error { return nil }}
	req := e.req("acme", "p1", "gpu", 1, 0, time.Hour)
	req.ClientToken, req.Principal = "unlucky", "alice"
	r, err := svc.Admission().Create(context.Background(), req, allow)
	if err != nil || r.State != api.Placed {
		t.Errorf("create after 24 lost races: %+v %v, want placed", r, err)
	}
	if store.lose != 0 || svc.Admission().PlaceRetries() < 24 {
		t.Errorf("%d of 24 races not run, %d placement retries", store.lose, svc.Admission().PlaceRetries())
	}
	e.check(t)
}
