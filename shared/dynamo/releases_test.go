package dynamo_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// newReleases returns a store on a fresh table of the shared local stack,
// with a round-trip counter.
func newReleases(t *testing.T) (*dynamo.Releases, *dynamo.RoundTrips) {
	t.Helper()
	s := devstack.Shared(t)
	rt := &dynamo.RoundTrips{}
	return &dynamo.Releases{DB: s.DynamoDB(rt.Option()), Table: devstack.NewTable(t, s)}, rt
}

func release(version string, seq int64) rollout.Release {
	return rollout.Release{Version: version, Sequence: seq, ManifestDigest: fmt.Sprintf("sha256:%064d", seq),
		Binaries:     []rollout.Binary{{Platform: "linux/amd64", URL: "https://example.com/bcd", SHA256: fmt.Sprintf("%064d", 0), Size: 1}},
		Signers:      []string{"k1"},
		RegisteredAt: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC),
		RegisteredBy: rollout.Audit{TenantID: "platform", Principal: "admin"}}
}

func code(err error) apierr.Code { return apierr.CodeOf(err) }

func reason(err error) any {
	if e := apierr.As(err); e != nil {
		return e.Details["reason"]
	}
	return nil
}

func TestRegisterProtocol(t *testing.T) {
	ctx := context.Background()
	s, rt := newReleases(t)

	got, replayed, err := s.Register(ctx, release("1.0.0", 5))
	if err != nil || replayed || got.Version != "1.0.0" || got.Sequence != 5 {
		t.Fatalf("first register: %+v replayed=%v err=%v", got, replayed, err)
	}
	if n := rt.Count(); n != 2 {
		t.Errorf("happy path took %d round trips, want 2", n)
	}

	// Same version, same sequence: the stored release, replayed.
	got, replayed, err = s.Register(ctx, release("1.0.0", 5))
	if err != nil || !replayed || got.ManifestDigest != release("1.0.0", 5).ManifestDigest {
		t.Fatalf("replay: %+v replayed=%v err=%v", got, replayed, err)
	}
	// Same version, other sequence (above or below the head): CONFLICT.
	for _, seq := range []int64{4, 9} {
		if _, _, err = s.Register(ctx, release("1.0.0", seq)); code(err) != apierr.Conflict {
			t.Fatalf("1.0.0@%d: want CONFLICT, got %v", seq, err)
		}
	}
	// The refused 1.0.0@9 must not have moved the channel head: 2.0.0@6 fits.
	if _, _, err = s.Register(ctx, release("2.0.0", 6)); err != nil {
		t.Fatalf("2.0.0@6 after a refused 1.0.0@9: %v", err)
	}
	// A new version at or below the head: rollback.
	for _, seq := range []int64{6, 3} {
		if _, _, err = s.Register(ctx, release("3.0.0", seq)); code(err) != apierr.InvalidInput || reason(err) != "rollback" {
			t.Fatalf("3.0.0@%d: want INVALID_INPUT rollback, got %v", seq, err)
		}
	}
	rs, next, err := s.List(ctx, 0, nil)
	if err != nil || next != nil || len(rs) != 2 || rs[0].Version != "2.0.0" || rs[1].Version != "1.0.0" {
		t.Fatalf("list after refusals: %+v next=%v err=%v", rs, next, err)
	}
}

// A crash between the head claim and the release item: the same manifest
// again continues; another one with the same sequence is a rollback.
func TestRegisterContinuesAfterCrash(t *testing.T) {
	ctx := context.Background()
	s, _ := newReleases(t)
	r := release("1.0.0", 1)
	if _, _, err := s.Register(ctx, r); err != nil {
		t.Fatal(err)
	}
	// Simulate the crash: claim the head for 2.0.0@2 by registering and then
	// deleting its release item (the head keeps the claim).
	r2 := release("2.0.0", 2)
	if _, _, err := s.Register(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if err := deleteItem(ctx, s, "RELEASE", "V#2.0.0"); err != nil {
		t.Fatal(err)
	}
	if _, replayed, err := s.Register(ctx, r2); err != nil || replayed {
		t.Fatalf("retry after crash: replayed=%v err=%v", replayed, err)
	}
	other := release("2.0.1", 2)
	if _, _, err := s.Register(ctx, other); reason(err) != "rollback" {
		t.Fatalf("another version at the claimed sequence: want rollback, got %v", err)
	}
}

// 16 registrations race for the same next sequence: exactly one wins, the
// others are rollbacks, never a 500.
func TestRegisterRace(t *testing.T) {
	ctx := context.Background()
	s, _ := newReleases(t)
	if _, _, err := s.Register(ctx, release("0.1.0", 1)); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, _, errs[i] = s.Register(ctx, release(fmt.Sprintf("1.0.%d", i), 2))
		}()
	}
	close(start)
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case reason(err) == "rollback":
		default:
			t.Errorf("racer %d: unexpected %v", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d registrations won sequence 2, want exactly 1", wins)
	}
	rs, _, err := s.List(ctx, 0, nil)
	if err != nil || len(rs) != 2 {
		t.Fatalf("list: %d releases, err %v", len(rs), err)
	}
}

// Identical registrations racing: one records, the rest replay.
func TestRegisterIdenticalRace(t *testing.T) {
	ctx := context.Background()
	s, _ := newReleases(t)
	const n = 8
	var wg sync.WaitGroup
	replays := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, replays[i], errs[i] = s.Register(ctx, release("1.0.0", 1))
		}()
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if !replays[i] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d racers saw a fresh registration, want 1", fresh)
	}
}

func TestListOrderAndPages(t *testing.T) {
	ctx := context.Background()
	s, rt := newReleases(t)
	for i := int64(1); i <= 7; i++ {
		// Sequences with gaps and more digits than the previous one sort right.
		if _, _, err := s.Register(ctx, release(fmt.Sprintf("1.%d.0", i), i*i*i)); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []int64
	var after map[string]string
	pages := 0
	for {
		rt.Reset()
		rs, next, err := s.List(ctx, 3, after)
		if err != nil {
			t.Fatal(err)
		}
		if n := rt.Count(); n != 1 {
			t.Errorf("page %d took %d round trips, want 1", pages, n)
		}
		pages++
		for _, r := range rs {
			seqs = append(seqs, r.Sequence)
		}
		if next == nil {
			break
		}
		after = next
	}
	want := []int64{343, 216, 125, 64, 27, 8, 1}
	if fmt.Sprint(seqs) != fmt.Sprint(want) || pages != 3 {
		t.Fatalf("got %v in %d pages, want %v in 3", seqs, pages, want)
	}
	// A start key outside the release partition is refused.
	if _, _, err := s.List(ctx, 3, map[string]string{"pk": "T#other", "sk": "x", "lsk": "y"}); code(err) != apierr.InvalidInput {
		t.Fatalf("foreign start key: want INVALID_INPUT, got %v", err)
	}
}
