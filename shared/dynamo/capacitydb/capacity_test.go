package capacitydb_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

func newCapacity(t *testing.T) (*capacitydb.Store, *dynamo.RoundTrips) {
	t.Helper()
	s := devstack.Shared(t)
	rt := &dynamo.RoundTrips{}
	return &capacitydb.Store{DB: s.DynamoDB(rt.Option()), Table: devstack.NewTable(t, s)}, rt
}

var capT0 = time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)

func charge(t *testing.T, s *capacitydb.Store, k capacity.QuotaKey, id string, n int) (capacity.Charged, error) {
	t.Helper()
	return s.Charge(context.Background(), k, id, n, capacity.Placement{{Node: 1, Mask: 0b11}}, nil, capT0)
}

// A charge records its placement; it is settled, voided, refunded or
// (once placed) credited exactly once, whatever is retried.
func TestCapacityQuotaRecords(t *testing.T) {
	s, rt := newCapacity(t)
	ctx := context.Background()
	k := capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"}
	var qe capacity.QuotaExceeded
	if _, err := charge(t, s, k, "r0", 1); !errors.As(err, &qe) || qe.Quota.Max != 0 {
		t.Fatalf("charge on a missing row: %v (a missing row grants 0)", err)
	}
	if err := s.EnsureQuota(ctx, k, 3, capT0); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureQuota(ctx, k, 99, capT0); err != nil { // exists: unchanged
		t.Fatal(err)
	}
	rt.Reset()
	if ch, err := charge(t, s, k, "r1", 2); err != nil || !ch.Fresh {
		t.Fatal(ch, err)
	}
	if rt.Count() != 1 {
		t.Errorf("charge took %d round trips, want 1", rt.Count())
	}
	// Repeated: not charged again, the recorded placement comes back.
	if ch, err := charge(t, s, k, "r1", 2); err != nil || ch.Fresh || len(ch.Placement) != 1 || ch.Placement[0].Mask != 0b11 {
		t.Fatalf("repeated charge: %+v %v", ch, err)
	}
	if _, err := charge(t, s, k, "r2", 2); !errors.As(err, &qe) || qe.Quota.Used != 2 || qe.Quota.Max != 3 {
		t.Fatalf("over max: %v %+v", err, qe)
	}
	row := func() capacity.QuotaRow {
		snap, err := s.Snapshot(ctx)
		if err != nil || len(snap.Quotas) != 1 {
			t.Fatal(snap, err)
		}
		return snap.Quotas[0]
	}
	if q := row(); q.Max != 3 || q.Used != 2 || q.Free != 1 || len(q.Charging) != 1 || q.Charging["r1"].Count != 2 || !q.Due.Equal(capT0) {
		t.Errorf("row %+v (due at the charge's settle time)", q)
	}
	if err := s.Replace(ctx, k, "r1", capacity.Placement{{Node: 4, Mask: 0b1}}); err != nil {
		t.Fatal(err)
	}
	if ch, ok, err := s.Pending(ctx, k, "r1"); err != nil || !ok || ch.Placement[0].Node != 4 {
		t.Errorf("pending after replace: %+v %v %v", ch, ok, err)
	}
	// Refund: count back and record gone, once.
	for range 2 {
		if err := s.Refund(ctx, k, "r1", 2); err != nil {
			t.Fatal(err)
		}
	}
	if q := row(); q.Used != 0 || len(q.Charging) != 0 {
		t.Errorf("after refund %+v", q)
	}
	// Settle keeps the count; credit gives it back once, whatever is retried.
	if _, err := charge(t, s, k, "r3", 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, k, []string{"r3", "never-charged"}); err != nil {
		t.Fatal(err)
	}
	if q := row(); q.Used != 3 || len(q.Charging) != 0 {
		t.Errorf("after settle %+v", q)
	}
	for range 2 {
		if err := s.Credit(ctx, k, "r3", 3); err != nil {
			t.Fatal(err)
		}
	}
	if q := row(); q.Used != 0 || q.Crediting["r3"] != 3 {
		t.Errorf("after credit %+v", q)
	}
	if err := s.Refund(ctx, k, "r3", 3); err != nil { // a credit record is not a charge
		t.Fatal(err)
	}
	if err := s.CreditDone(ctx, k, "r3"); err != nil {
		t.Fatal(err)
	}
	if q := row(); q.Used != 0 || len(q.Crediting) != 0 || q.Free != 3 {
		t.Errorf("after credit done %+v", q)
	}
	// A charge its create could not settle is consumed by the credit.
	if _, err := charge(t, s, k, "r4", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Credit(ctx, k, "r4", 1); err != nil {
		t.Fatal(err)
	}
	if q := row(); q.Used != 0 || len(q.Charging) != 0 || q.Crediting["r4"] != 1 {
		t.Errorf("credit of an unsettled charge %+v", q)
	}
	// Setting max keeps free = max − used, also below used.
	if _, err := charge(t, s, k, "r5", 3); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SetQuotaMax(ctx, k, 1, capT0); err != nil || got.Max != 1 || got.Used != 3 {
		t.Errorf("set max %+v %v", got, err)
	}
	if q := row(); q.Free != -2 {
		t.Errorf("free %d, want -2", q.Free)
	}
	// A charge forgets the records it is told are settled, in its own write.
	if _, err := s.SetQuotaMax(ctx, k, 10, capT0); err != nil {
		t.Fatal(err)
	}
	rt.Reset()
	if _, err := s.Charge(ctx, k, "r6", 1, nil, []string{"r5", "gone"}, capT0); err != nil {
		t.Fatal(err)
	}
	if rt.Count() != 1 {
		t.Errorf("charge settling r5: %d round trips, want 1", rt.Count())
	}
	if q := row(); len(q.Charging) != 1 || q.Charging["r6"].Count != 1 || q.Used != 4 {
		t.Errorf("charge settling r5: row %+v", q)
	}
	// Void: the count back at once, the record kept (and the placement it
	// names) until a refund forgets it without giving back twice.
	for range 2 {
		if err := s.Void(ctx, k, "r6", 1); err != nil {
			t.Fatal(err)
		}
	}
	if q := row(); q.Used != 3 || !q.Charging["r6"].Voided {
		t.Errorf("after void %+v", q)
	}
	if err := s.Replace(ctx, k, "r6", nil); !errors.Is(err, capacity.ErrStale) {
		t.Errorf("replace of a voided charge: %v, want stale", err)
	}
	if ch, err := charge(t, s, k, "r6", 1); err != nil || ch.Fresh || !ch.Voided {
		t.Errorf("charge again of a voided one: %+v %v", ch, err)
	}
	for range 2 {
		if err := s.Refund(ctx, k, "r6", 1); err != nil {
			t.Fatal(err)
		}
	}
	if q := row(); q.Used != 3 || len(q.Charging) != 0 {
		t.Errorf("after refund of a voided charge %+v", q)
	}
	// Due: cleared only when no record is left.
	if err := s.QuotaDue(ctx, k, capT0.Add(time.Minute), true); err != nil {
		t.Fatal(err)
	}
	if q := row(); !q.Due.IsZero() {
		t.Errorf("due %v with no records", q.Due)
	}
	if _, err := charge(t, s, k, "r7", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.QuotaDue(ctx, k, capT0.Add(time.Minute), true); err != nil {
		t.Fatal(err)
	}
	if q := row(); !q.Due.Equal(capT0.Add(time.Minute)) {
		t.Errorf("clearing the due mark with a record left: due %v, want the next time given", q.Due)
	}
}

// Racing charges on one row never over-admit; past capacity.MaxInFlight records in
// flight a charge is refused as busy, not as over quota.
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
			_, err := charge(t, s, k, string(rune('a'+i)), 1)
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
	big := capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "cpu"}
	if err := s.EnsureQuota(ctx, big, 1000, capT0); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		_, err := charge(t, s, big, "x"+strconv.Itoa(i), 1)
		if err == nil {
			continue
		}
		if !errors.Is(err, capacity.ErrBusy) || i != 64 {
			t.Fatalf("charge %d: %v, want busy at 64", i, err)
		}
		break
	}
}

func TestCapacityNodeHours(t *testing.T) {
	s, rt := newCapacity(t)
	ctx := context.Background()
	pr := capacity.PoolResource{PoolID: "p1", Topology: capacity.Topology{Resource: "gpu", Devices: 20, NodeSize: 8}}
	hour := capacity.HourOf(capT0)
	w := api.Window{Start: capT0, End: capT0.Add(time.Hour)}
	if nds, scan, err := s.Candidates(ctx, pr, hour, 1, 16, 0); err != nil || scan.Provisioned || len(nds) != 0 {
		t.Fatalf("before anything is stored: %v %v %v", nds, scan, err)
	}
	// The first placement on a node-hour read as missing stores it; a
	// racing one that also read it missing loses.
	empty := capacity.EmptyNodeHour(pr, capacity.NodeHourKey{Node: 0, Hour: hour})
	if err := s.Allocate(ctx, empty, "r0", capacity.Entry{Mask: 0b1, Window: w}); err != nil {
		t.Fatal(err)
	}
	// The same write again (an SDK retry whose first answer was lost): done.
	if err := s.Allocate(ctx, empty, "r0", capacity.Entry{Mask: 0b1, Window: w}); err != nil {
		t.Fatalf("the same creation again: %v", err)
	}
	if err := s.Allocate(ctx, empty, "rx", capacity.Entry{Mask: 0b10, Window: w}); !errors.Is(err, capacity.ErrStale) {
		t.Fatalf("second create of a node-hour: %v, want stale", err)
	}
	if len(empty.Entries) != 0 {
		t.Fatalf("Allocate changed the node-hour it was given: %+v", empty)
	}
	nds, scan, err := s.Candidates(ctx, pr, hour, 1, 16, 0)
	// A candidate carries the touched mask and the versions, not the entries.
	if err != nil || scan != (capacity.Scan{}) || len(nds) != 1 || !nds[0].Stored || !nds[0].Partial || nds[0].Untouched != 7 ||
		nds[0].Devices != 20 || nds[0].TouchedMask != 1 || nds[0].Versions[0] != 1 || len(nds[0].Entries) != 0 {
		t.Fatalf("one node-hour stored by a placement: %+v %v %v", nds, scan, err)
	}
	for i, want := range []bool{true, false} { // idempotent
		if made, err := s.Provision(ctx, pr, hour); err != nil || made != want {
			t.Fatalf("provision %d: made %v, %v", i, made, err)
		}
	}
	nds, scan, err = s.Candidates(ctx, pr, hour, 1, 16, 0)
	if err != nil || !scan.Provisioned || len(nds) != 3 || nds[0].Node != 2 || nds[0].Size != 4 || nds[0].Untouched != 4 ||
		nds[1].Node != 0 || nds[1].Untouched != 7 || nds[2].Size != 8 {
		t.Fatalf("provisioned (node 0 kept as placed): %+v %v %v", nds, scan, err)
	}
	n1 := nds[2]
	if err := s.Allocate(ctx, n1, "r1", capacity.Entry{Mask: 0b0011, Window: w}); err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(ctx, n1, "r1", capacity.Entry{Mask: 0b0011, Window: w}); err != nil { // retried: done already
		t.Fatal(err)
	}
	// Another device of the node, on the state read before r1: no conflict.
	if err := s.Allocate(ctx, n1, "r2", capacity.Entry{Mask: 0b0100, Window: w}); err != nil {
		t.Fatal(err)
	}
	// A device r1 took since that read: stale.
	if err := s.Allocate(ctx, n1, "r3", capacity.Entry{Mask: 0b0001, Window: w}); !errors.Is(err, capacity.ErrStale) {
		t.Fatalf("allocation on a moved device: %v", err)
	}
	rt.Reset()
	nds, _, _ = s.Candidates(ctx, pr, hour, 1, 16, 0)
	if rt.Count() != 1 || nds[0].Node != 2 || nds[1].Node != n1.Node || nds[1].Untouched != 5 || nds[1].TouchedMask != 0b0111 || nds[1].Versions[0] != 1 {
		t.Fatalf("after allocations (%d round trips): %+v", rt.Count(), nds)
	}
	// Fullest first, and only those that may fit.
	if nds, _, _ := s.Candidates(ctx, pr, hour, 6, 16, 0); len(nds) != 1 || nds[0].Untouched != 7 {
		t.Errorf("untouched ≥ 6: %+v", nds)
	}
	got, err := s.NodeHours(ctx, pr, []capacity.NodeHourKey{{Node: n1.Node, Hour: hour}, {Node: 0, Hour: hour + 1}})
	if err != nil || len(got) != 1 || got[capacity.NodeHourKey{Node: n1.Node, Hour: hour}].Entries["r2"].Mask != 0b0100 {
		t.Fatalf("NodeDays %+v %v", got, err)
	}
	for range 2 { // idempotent
		if err := s.Free(ctx, pr, []capacity.NodeHourKey{{Node: n1.Node, Hour: hour}}, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	var days []capacity.NodeHour
	if err := s.Hour(ctx, pr, hour, func(nd capacity.NodeHour) error { days = append(days, nd); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(days) != 3 || days[n1.Node].Untouched != 7 || len(days[n1.Node].Entries) != 1 {
		t.Errorf("after free: %+v", days)
	}
}

// Equally untouched node-hours come in an order unrelated to their index,
// and a read can start part-way through it.
func TestCapacityCandidatesSpread(t *testing.T) {
	s, _ := newCapacity(t)
	ctx := context.Background()
	pr := capacity.PoolResource{PoolID: "p1", Topology: capacity.Topology{Resource: "gpu", Devices: 64 * 8, NodeSize: 8}}
	hour := capacity.HourOf(capT0)
	if _, err := s.Provision(ctx, pr, hour); err != nil {
		t.Fatal(err)
	}
	all, _, err := s.Candidates(ctx, pr, hour, 8, 64, 0)
	if err != nil || len(all) != 64 {
		t.Fatalf("%d candidates, %v", len(all), err)
	}
	inOrder := 0
	for i := 1; i < len(all); i++ {
		if all[i].Node == all[i-1].Node+1 {
			inOrder++
		}
	}
	if inOrder > 8 {
		t.Errorf("%d of 63 neighbours in index order: not scrambled", inOrder)
	}
	// From the 40th node's place on, the read starts there.
	from := capacity.Spread(all[40].Node)
	part, scan, err := s.Candidates(ctx, pr, hour, 8, 8, from)
	if err != nil || !scan.More || len(part) != 8 || part[0].Node != all[40].Node || part[7].Node != all[47].Node {
		t.Fatalf("from the 40th: %v %v %v", part, scan, err)
	}
}

// A node-hour holds at most MaxEntriesPerNodeHour entries.
func TestCapacityNodeHourFull(t *testing.T) {
	s, _ := newCapacity(t)
	ctx := context.Background()
	pr := capacity.PoolResource{PoolID: "p1", Topology: capacity.Topology{Resource: "gpu", Devices: 1, NodeSize: 1}}
	hour := capacity.HourOf(capT0)
	if _, err := s.Provision(ctx, pr, hour); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		nds, _, err := s.Candidates(ctx, pr, hour, 0, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := api.Window{Start: capT0.Add(time.Duration(i) * time.Second), End: capT0.Add(time.Duration(i+1) * time.Second)}
		err = s.Allocate(ctx, nds[0], "r"+strconv.Itoa(i), capacity.Entry{Mask: 1, Window: w})
		if err == nil {
			continue
		}
		if !errors.Is(err, capacity.ErrCalendarFull) || i != capacity.MaxEntriesPerNodeHour {
			t.Fatalf("allocation %d: %v", i, err)
		}
		break
	}
}

func TestCapacityDueIndex(t *testing.T) {
	s, _ := newCapacity(t)
	ctx := context.Background()
	var want int
	for i := 0; i < 40; i++ {
		r := capacity.Reservation{Reservation: api.Reservation{ReservationID: "r" + string(rune('A'+i)), TenantID: "acme",
			PoolID: "p1", Resource: "gpu", Count: 1, Window: api.Window{Start: capT0, End: capT0.Add(time.Hour)}, State: api.Draft,
			CreatedAt: capT0, UpdatedAt: capT0}, Due: capT0.Add(time.Duration(i) * time.Second)}
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
	due := &duedb.Store{DB: s.DB, Table: s.Table}
	for shard := 0; shard < due.Shards(); shard++ {
		var last time.Time
		if err := due.Due(ctx, shard, capT0.Add(29*time.Second), func(d reconcile.DueItem) bool {
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

// The `cap` order counts the devices no entry holds for the whole hour,
// most first, read from the keys alone; it moves with allocations and
// frees, and the marker says the hour is provisioned.
func TestCapacityCoverable(t *testing.T) {
	s, rt := newCapacity(t)
	ctx := context.Background()
	pr := capacity.PoolResource{PoolID: "p1", Topology: capacity.Topology{Resource: "gpu", Devices: 20, NodeSize: 8}}
	hour := capacity.HourOf(capT0)
	whole := capacity.Entry{Mask: 0b1111, Window: hour.Window()}
	half := capacity.Entry{Mask: 0xff, Window: api.Window{Start: capT0, End: capT0.Add(30 * time.Minute)}}
	if nodes, scan, err := s.Coverable(ctx, pr, hour, 1, 8); err != nil || len(nodes) != 0 || scan.Provisioned {
		t.Fatalf("nothing stored: %v %+v %v", nodes, scan, err)
	}
	if _, err := s.Provision(ctx, pr, hour); err != nil {
		t.Fatal(err)
	}
	nhs, err := s.NodeHours(ctx, pr, []capacity.NodeHourKey{{Node: 0, Hour: hour}, {Node: 1, Hour: hour}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(ctx, nhs[capacity.NodeHourKey{Node: 0, Hour: hour}], "w", whole); err != nil {
		t.Fatal(err)
	}
	if err := s.Allocate(ctx, nhs[capacity.NodeHourKey{Node: 1, Hour: hour}], "h", half); err != nil {
		t.Fatal(err)
	}
	rt.Reset()
	nodes, scan, err := s.Coverable(ctx, pr, hour, 1, 8)
	if err != nil || !scan.Provisioned || scan.More || rt.Count() != 1 || len(nodes) != 3 {
		t.Fatalf("coverable: %v %+v %v (%d round trips)", nodes, scan, err, rt.Count())
	}
	if nodes[0] != (capacity.NodeCount{Node: 1, Count: 8}) || nodes[1].Count != 4 || nodes[2].Count != 4 {
		t.Errorf("coverable %v: node 1 (held half the hour) has all 8, nodes 0 and 2 four", nodes)
	}
	if nodes, scan, _ := s.Coverable(ctx, pr, hour, 5, 8); len(nodes) != 1 || nodes[0].Node != 1 || !scan.Provisioned {
		t.Errorf("coverable ≥ 5: %v %+v", nodes, scan)
	}
	if nodes, scan, _ := s.Coverable(ctx, pr, hour, 1, 2); len(nodes) != 2 || !scan.More {
		t.Errorf("a limit of 2: %v %+v", nodes, scan)
	}
	if err := s.Free(ctx, pr, []capacity.NodeHourKey{{Node: 0, Hour: hour}}, "w"); err != nil {
		t.Fatal(err)
	}
	if nodes, _, _ := s.Coverable(ctx, pr, hour, 8, 8); len(nodes) != 2 {
		t.Errorf("after the free, nodes with 8: %v", nodes)
	}
}

// An Amend made from a copy another Amend has overtaken is refused: a pass
// holding an old copy cannot write back the nodes told to bind the
// reservation (bn) without the one another pass told meanwhile.
func TestAmendRefusesAStaleCopy(t *testing.T) {
	s, _ := newCapacity(t)
	ctx := context.Background()
	r := capacity.Reservation{Reservation: api.Reservation{ReservationID: "R1", TenantID: "acme", PoolID: "p1",
		Resource: "gpu", Count: 1, Window: api.Window{Start: capT0, End: capT0.Add(time.Hour)}, State: api.Draft,
		CreatedAt: capT0, UpdatedAt: capT0}}
	if _, err := s.PutDraft(ctx, r); err != nil {
		t.Fatal(err)
	}
	read, err := s.GetReservation(ctx, "acme", "R1")
	if err != nil {
		t.Fatal(err)
	}
	told := read
	told.Bound = []int{1} // one pass tells node 1 to bind it
	cur, err := s.Amend(ctx, read, told)
	if err != nil {
		t.Fatal(err)
	}
	stale := read
	stale.Move = []int{9} // another, from the copy read before, starts a move
	if _, err := s.Amend(ctx, read, stale); !errors.Is(err, capacity.ErrStale) {
		t.Fatalf("the stale copy's amend: %v", err)
	}
	if got, _ := s.GetReservation(ctx, "acme", "R1"); !slices.Equal(got.Bound, []int{1}) || got.Move != nil {
		t.Fatalf("stored bn %v, mv %v", got.Bound, got.Move)
	}
	next := cur
	next.Move = []int{9}
	if _, err := s.Amend(ctx, cur, next); err != nil {
		t.Fatalf("an amend from the fresh copy: %v", err)
	}
}

// A history entry is a fact no write replaces: a disruption appended
// between an Amend's read and its write makes that Amend's copy stale
// (it would write the history back without the entry), so the amend is
// refused, and one made from a fresh read keeps the entry.
func TestDisruptedEntrySurvivesAnAmendFromAnOlderRead(t *testing.T) {
	s, _ := newCapacity(t)
	ctx := context.Background()
	r := capacity.Reservation{Reservation: api.Reservation{ReservationID: "R1", TenantID: "acme", PoolID: "p1",
		Resource: "gpu", Count: 1, Window: api.Window{Start: capT0, End: capT0.Add(time.Hour)}, State: api.Draft,
		CreatedAt: capT0, UpdatedAt: capT0, History: []api.Event{{State: api.Draft, At: capT0}}}}
	if _, err := s.PutDraft(ctx, r); err != nil {
		t.Fatal(err)
	}
	for round, amended := range []bool{false, true} {
		read, err := s.GetReservation(ctx, "acme", "R1")
		if err != nil {
			t.Fatal(err)
		}
		if amended != (read.Amended > 0) {
			t.Fatalf("round %d: amended %d", round, read.Amended)
		}
		rollout := fmt.Sprintf("RO%d", round)
		if err := s.Disrupt(ctx, "acme", "R1", rollout, capT0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		moved := read
		moved.Bound = []int{round + 1}
		moved.History = append(slices.Clone(read.History), api.Event{State: api.Draft, At: capT0.Add(2 * time.Minute), Reason: api.ReasonNodeUnreachable})
		if _, err := s.Amend(ctx, read, moved); !errors.Is(err, capacity.ErrStale) {
			t.Fatalf("round %d: the amend from before the disruption: %v", round, err)
		}
		fresh, err := s.GetReservation(ctx, "acme", "R1")
		if err != nil {
			t.Fatal(err)
		}
		moved = fresh
		moved.Bound = []int{round + 1}
		moved.History = append(slices.Clone(fresh.History), api.Event{State: api.Draft, At: capT0.Add(2 * time.Minute), Reason: api.ReasonNodeUnreachable})
		if _, err := s.Amend(ctx, fresh, moved); err != nil {
			t.Fatalf("round %d: the amend from a fresh read: %v", round, err)
		}
		got, err := s.GetReservation(ctx, "acme", "R1")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(got.History, func(e api.Event) bool { return e.Reason == api.ReasonDisrupted && e.RolloutID == rollout }) {
			t.Fatalf("round %d: the disrupted entry was lost: %+v", round, got.History)
		}
	}
}
