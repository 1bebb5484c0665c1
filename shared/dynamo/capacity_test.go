package dynamo_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
)

func newCapacity(t *testing.T) (*dynamo.Capacity, *dynamo.RoundTrips) {
	t.Helper()
	s := devstack.Shared(t)
	rt := &dynamo.RoundTrips{}
	return &dynamo.Capacity{DB: s.DynamoDB(rt.Option()), Table: devstack.NewTable(t, s)}, rt
}

var capT0 = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

func TestCapacityChargeAndCredit(t *testing.T) {
	s, rt := newCapacity(t)
	ctx := context.Background()
	k := capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"}
	if err := s.Charge(ctx, k, "r0", 1); !errors.Is(err, capacity.ErrQuotaExceeded) {
		t.Fatalf("charge on a missing row: %v (a missing row grants 0)", err)
	}
	if err := s.EnsureQuota(ctx, k, 3, capT0); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureQuota(ctx, k, 99, capT0); err != nil { // exists: unchanged
		t.Fatal(err)
	}
	rt.Reset()
	if err := s.Charge(ctx, k, "r1", 2); err != nil {
		t.Fatal(err)
	}
	if rt.Count() != 1 {
		t.Errorf("charge took %d round trips, want 1", rt.Count())
	}
	if err := s.Charge(ctx, k, "r1", 2); err != nil { // idempotent
		t.Fatalf("repeated charge: %v", err)
	}
	if err := s.Charge(ctx, k, "r2", 2); !errors.Is(err, capacity.ErrQuotaExceeded) {
		t.Fatalf("over max: %v", err)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil || len(snap.Quotas) != 1 {
		t.Fatal(snap, err)
	}
	q := snap.Quotas[0]
	if q.Max != 3 || q.Used != 2 || q.Free != 1 || len(q.Holds) != 1 || q.Holds["r1"] != 2 {
		t.Errorf("row %+v", q)
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := s.Credit(ctx, k, "r1", 2); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.GetQuota(ctx, k); got.Used != 0 || got.Max != 3 {
		t.Errorf("after credit %+v", got)
	}
	// Setting max keeps free = max − used, also below used.
	if err := s.Charge(ctx, k, "r3", 3); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SetQuotaMax(ctx, k, 1, capT0); err != nil || got.Max != 1 || got.Used != 3 {
		t.Errorf("set max %+v %v", got, err)
	}
	snap, _ = s.Snapshot(ctx)
	if q := snap.Quotas[0]; q.Free != -2 {
		t.Errorf("free %d, want -2", q.Free)
	}
}

// Racing charges on one row never over-admit.
func TestCapacityChargeRace(t *testing.T) {
	s, _ := newCapacity(t)
	ctx := context.Background()
	k := capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"}
	if err := s.EnsureQuota(ctx, k, 5, capT0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Charge(ctx, k, string(rune('a'+i)), 1)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won++
			} else if !errors.Is(err, capacity.ErrQuotaExceeded) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, _ := s.GetQuota(ctx, k); won != 5 || got.Used != 5 {
		t.Errorf("won %d, used %d", won, got.Used)
	}
}

func TestCapacityCalendar(t *testing.T) {
	s, _ := newCapacity(t)
	ctx := context.Background()
	w := capacity.Window{Start: capT0, End: capT0.Add(time.Hour)}
	cal, err := s.Calendar(ctx, "p1", "gpu")
	if err != nil || cal.Version != 0 {
		t.Fatalf("missing calendar %+v %v", cal, err)
	}
	// A calendar that does not exist yet is created by the first placement.
	if err := s.Place(ctx, cal, "r1", capacity.Alloc{TenantID: "acme", Devices: []int{0}, Window: w}); err != nil {
		t.Fatal(err)
	}
	if err := s.Place(ctx, cal, "r2", capacity.Alloc{TenantID: "acme", Devices: []int{1}, Window: w}); !errors.Is(err, capacity.ErrStale) {
		t.Fatalf("placement on a stale version: %v", err)
	}
	cal, _ = s.Calendar(ctx, "p1", "gpu")
	if cal.Version != 1 || len(cal.Allocs) != 1 || !cal.Allocs["r1"].Window.End.Equal(w.End) || cal.Allocs["r1"].TenantID != "acme" {
		t.Fatalf("calendar %+v", cal)
	}
	if err := s.Place(ctx, cal, "r2", capacity.Alloc{TenantID: "acme", Devices: []int{1, 2}, Window: w}); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureCalendar(ctx, "p1", "gpu"); err != nil { // exists: unchanged
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.Unplace(ctx, "p1", "gpu", "r1"); err != nil {
			t.Fatal(err)
		}
	}
	cal, _ = s.Calendar(ctx, "p1", "gpu")
	if cal.Version != 2 || len(cal.Allocs) != 1 || len(cal.Allocs["r2"].Devices) != 2 {
		t.Errorf("after unplace %+v", cal)
	}
}

func TestCapacityDueIndex(t *testing.T) {
	s, _ := newCapacity(t)
	ctx := context.Background()
	var want int
	for i := 0; i < 40; i++ {
		r := capacity.Reservation{ReservationID: "r" + string(rune('A'+i)), TenantID: "acme", PoolID: "p1", Resource: "gpu", Count: 1,
			Window: capacity.Window{Start: capT0, End: capT0.Add(time.Hour)}, State: capacity.Draft, CreatedAt: capT0, UpdatedAt: capT0,
			Due: capT0.Add(time.Duration(i) * time.Second)}
		if i%4 == 3 {
			r.Due = time.Time{} // no pending work: not in the index
		} else if i < 30 {
			want++
		}
		if _, err := s.PutDraft(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	shards := map[int]int{}
	for shard := 0; shard < s.Shards(); shard++ {
		var last time.Time
		if err := s.Due(ctx, shard, capT0.Add(29*time.Second), func(d capacity.DueItem) bool {
			if d.Reservation == nil || d.Due.Before(last) || d.Due.After(capT0.Add(29*time.Second)) {
				t.Errorf("shard %d: %+v after %v", shard, d, last)
			}
			last = d.Due
			got++
			shards[shard]++
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got != want || len(shards) < 4 {
		t.Errorf("due %d (want %d) over shards %v", got, want, shards)
	}
}
