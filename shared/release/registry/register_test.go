package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// newReleases returns a store on a fresh table of the shared local stack,
// with a round-trip counter.
func newReleases(t *testing.T) (*registry.Service, *dynamo.RoundTrips) {
	t.Helper()
	s := devstack.Shared(t)
	rt := &dynamo.RoundTrips{}
	db, table := s.DynamoDB(rt.Option()), devstack.NewTable(t, s)
	return &registry.Service{Store: &releasedb.Releases{DB: db, Table: table}, Log: &registry.Log{Store: &releasedb.Log{DB: db, Table: table}, Signer: devstack.LogSigner(t, s, logOrigin)}}, rt
}

func rel(version string, seq int64) release.Release {
	return release.Release{Version: version, Sequence: seq, ManifestDigest: fmt.Sprintf("sha256:%064d", seq),
		Payload:      fmt.Appendf(nil, `{"version":%q,"sequence":%d}`, version, seq),
		Binaries:     []release.Binary{{Platform: "linux/amd64", URL: "https://example.com/bcd", SHA256: fmt.Sprintf("%064d", 0), Size: 1}},
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

	got, replayed, err := s.RegisterVerified(ctx, rel("1.0.0", 5))
	if err != nil || replayed || got.Version != "1.0.0" || got.Sequence != 5 {
		t.Fatalf("first register: %+v replayed=%v err=%v", got, replayed, err)
	}
	// pending put, head claim, claimed mark; the append (log size, entry
	// put, head move); the checkpoint (stored one, tree hash, put; plus one
	// KMS Sign); recorded mark.
	if n := rt.Count(); n != 10 {
		t.Errorf("first registration took %d round trips, want 10", n)
	}

	// Same version, same sequence: the stored release, replayed.
	got, replayed, err = s.RegisterVerified(ctx, rel("1.0.0", 5))
	if err != nil || !replayed || got.ManifestDigest != rel("1.0.0", 5).ManifestDigest {
		t.Fatalf("replay: %+v replayed=%v err=%v", got, replayed, err)
	}
	// Same version, other sequence (above or below the head): CONFLICT.
	for _, seq := range []int64{4, 9} {
		if _, _, err = s.RegisterVerified(ctx, rel("1.0.0", seq)); code(err) != apierr.Conflict {
			t.Fatalf("1.0.0@%d: want CONFLICT, got %v", seq, err)
		}
	}
	// The refused 1.0.0@9 must not have moved the channel head: 2.0.0@6 fits.
	rt.Reset()
	if _, _, err = s.RegisterVerified(ctx, rel("2.0.0", 6)); err != nil {
		t.Fatalf("2.0.0@6 after a refused 1.0.0@9: %v", err)
	}
	// …plus the read that makes sure the replaced head is recorded, the
	// read of the log's last entry, and the stored hashes the entry's own
	// depend on.
	if n := rt.Count(); n != 13 {
		t.Errorf("a later registration took %d round trips, want 13", n)
	}
	// A new version at or below the head: rollback.
	for _, seq := range []int64{6, 3} {
		_, _, err = s.RegisterVerified(ctx, rel("3.0.0", seq))
		if code(err) != apierr.InvalidInput || reason(err) != "rollback" || apierr.As(err).Details["latestSequence"] != int64(6) {
			t.Fatalf("3.0.0@%d: want INVALID_INPUT rollback with latestSequence 6, got %v", seq, err)
		}
	}
	// A refused version may be registered again, above the head.
	if _, _, err = s.RegisterVerified(ctx, rel("3.0.0", 7)); err != nil {
		t.Fatalf("3.0.0@7 after its rollbacks: %v", err)
	}
	rs, next, err := s.List(ctx, 0, nil)
	if err != nil || next != nil || len(rs) != 3 || rs[0].Version != "3.0.0" || rs[1].Version != "2.0.0" || rs[2].Version != "1.0.0" {
		t.Fatalf("list after refusals: %+v next=%v err=%v", rs, next, err)
	}
}

// 16 registrations race for the same next sequence: exactly one wins, the
// others are rollbacks, never a 500.
func TestRegisterRace(t *testing.T) {
	ctx := context.Background()
	s, _ := newReleases(t)
	if _, _, err := s.RegisterVerified(ctx, rel("0.1.0", 1)); err != nil {
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
			_, _, errs[i] = s.RegisterVerified(ctx, rel(fmt.Sprintf("1.0.%d", i), 2))
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
			_, replays[i], errs[i] = s.RegisterVerified(ctx, rel("1.0.0", 1))
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
		if _, _, err := s.RegisterVerified(ctx, rel(fmt.Sprintf("1.%d.0", i), i*i*i)); err != nil {
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

// highest is the highest recorded sequence (0 when none).
func highest(t *testing.T, s *registry.Service) int64 {
	t.Helper()
	rs, _, err := s.List(context.Background(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 {
		return 0
	}
	return rs[0].Sequence
}

// TestRefusedRacersLeaveTheHead: registrations of an already-recorded
// version with new sequences race (all CONFLICT); the head must not stay
// above the highest recorded release, so the next valid sequence is
// accepted. Many rounds, as the interleavings vary.
func TestRefusedRacersLeaveTheHead(t *testing.T) {
	ctx := context.Background()
	s, _ := newReleases(t)
	const rounds, racers = 40, 8
	for round := int64(0); round < rounds; round++ {
		base := round*100 + 1
		recorded := fmt.Sprintf("1.%d.0", round)
		if _, _, err := s.RegisterVerified(ctx, rel(recorded, base)); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, racers)
		start := make(chan struct{})
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, _, errs[i] = s.RegisterVerified(ctx, rel(recorded, base+1+int64(i)))
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if code(err) != apierr.Conflict {
				t.Fatalf("round %d racer %d: %v, want CONFLICT", round, i, err)
			}
		}
		if h := headSeq(t, s); h != base {
			t.Fatalf("round %d: head at %d after refused registrations, highest recorded is %d", round, h, base)
		}
		if _, _, err := s.RegisterVerified(ctx, rel(fmt.Sprintf("2.%d.0", round), base+1)); err != nil {
			t.Fatalf("round %d: the next valid sequence %d was refused: %v", round, base+1, err)
		}
	}
}

// TestMixedRaces: conflicting, valid and rolled-back registrations race.
// Afterwards every accepted release is listed, sequences are unique, and the
// head is exactly the highest recorded release.
func TestMixedRaces(t *testing.T) {
	ctx := context.Background()
	s, _ := newReleases(t)
	if _, _, err := s.RegisterVerified(ctx, rel("0.0.1", 1)); err != nil {
		t.Fatal(err)
	}
	accepted := map[string]int64{"0.0.1": 1}
	for round := 0; round < 20; round++ {
		const racers = 12
		type result struct {
			r   release.Release
			err error
		}
		results := make([]result, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		top := highest(t, s)
		for i := range racers {
			r := rel(fmt.Sprintf("3.%d.%d", round, i%4), top+1+int64(i%5)) // same versions, sequences collide
			if i%6 == 0 {
				r = rel("0.0.1", top+int64(i)) // an old version again
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, _, err := s.RegisterVerified(ctx, r)
				results[i] = result{r, err}
			}()
		}
		close(start)
		wg.Wait()
		for _, res := range results {
			switch code(res.err) {
			case "":
				if seq, ok := accepted[res.r.Version]; ok && seq != res.r.Sequence {
					t.Fatalf("%s accepted at %d and %d", res.r.Version, seq, res.r.Sequence)
				}
				accepted[res.r.Version] = res.r.Sequence
			case apierr.Conflict, apierr.InvalidInput:
			default:
				t.Fatalf("%s@%d: %v", res.r.Version, res.r.Sequence, res.err)
			}
		}
		rs, _, err := s.List(ctx, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]string{}
		for _, r := range rs {
			if other, dup := seen[r.Sequence]; dup {
				t.Fatalf("sequence %d recorded for %s and %s", r.Sequence, other, r.Version)
			}
			seen[r.Sequence] = r.Version
			if accepted[r.Version] != r.Sequence {
				t.Fatalf("%s@%d is listed but was not accepted", r.Version, r.Sequence)
			}
		}
		if len(rs) != len(accepted) {
			t.Fatalf("round %d: %d listed, %d accepted", round, len(rs), len(accepted))
		}
		if h := headSeq(t, s); h != rs[0].Sequence {
			t.Fatalf("round %d: head %d, highest recorded %d", round, h, rs[0].Sequence)
		}
	}
}

// TestRegisterCrashPoints stops a registration after each of its writes and
// checks what the next registrations make of it: the head never stays above
// the highest recorded release once another registration has run.
func TestRegisterCrashPoints(t *testing.T) {
	ctx := context.Background()
	errCrash := errors.New("crash")
	for _, point := range []string{registry.FaultReleasePending, registry.FaultReleaseClaimed, registry.FaultReleaseMarked,
		registry.FaultLogEntry, registry.FaultLogHead, registry.FaultLogCheckpoint, registry.FaultReleaseCommitted} {
		claimed := point != registry.FaultReleasePending
		crashed := func(t *testing.T) (*registry.Service, *fakeClock) {
			s, _ := newReleases(t)
			clock := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
			s.Now = clock.Now
			if _, _, err := s.RegisterVerified(ctx, rel("1.0.0", 1)); err != nil {
				t.Fatal(err)
			}
			s.Faults = func(p string) error {
				if p == point {
					return errCrash
				}
				return nil
			}
			s.Log.Faults = s.Faults
			if _, _, err := s.RegisterVerified(ctx, rel("2.0.0", 2)); !errors.Is(err, errCrash) {
				t.Fatalf("want the crash at %s, got %v", point, err)
			}
			s.Faults, s.Log.Faults = nil, nil
			t.Cleanup(func() { checkReleasesLog(t, s) })
			return s, clock
		}
		t.Run(point+"/the same request again", func(t *testing.T) {
			s, _ := crashed(t)
			got, _, err := s.RegisterVerified(ctx, rel("2.0.0", 2))
			if err != nil || got.Sequence != 2 {
				t.Fatalf("retry: %+v %v", got, err)
			}
			if h, top := headSeq(t, s), highest(t, s); h != 2 || top != 2 {
				t.Fatalf("head %d, highest recorded %d", h, top)
			}
		})
		t.Run(point+"/the reconciler, later", func(t *testing.T) {
			s, clock := crashed(t)
			if _, err := s.Finish(ctx); err != nil {
				t.Fatal(err)
			}
			if rs, _, _ := s.List(ctx, 0, nil); len(rs) != map[bool]int{true: 2, false: 1}[point == registry.FaultReleaseCommitted] {
				t.Fatalf("a registration still in time is left to itself, but %d releases are listed", len(rs))
			}
			clock.Advance(registry.PendingStale)
			if _, err := s.Finish(ctx); err != nil {
				t.Fatal(err)
			}
			// A claim counts as registered: the reconciler finishes it.
			rs, _, _ := s.List(ctx, 0, nil)
			if want := map[bool]int{true: 2, false: 1}[claimed]; len(rs) != want {
				t.Fatalf("%d releases listed, want %d", len(rs), want)
			}
		})
		t.Run(point+"/a higher sequence", func(t *testing.T) {
			s, _ := crashed(t)
			if _, _, err := s.RegisterVerified(ctx, rel("3.0.0", 3)); err != nil {
				t.Fatal(err)
			}
			// A claim counts as registered: it is recorded by the next one.
			rs, _, _ := s.List(ctx, 0, nil)
			if want := map[bool]int{true: 3, false: 2}[claimed]; len(rs) != want {
				t.Fatalf("%d releases listed, want %d", len(rs), want)
			}
			if h, top := headSeq(t, s), highest(t, s); h != 3 || top != 3 {
				t.Fatalf("head %d, highest recorded %d", h, top)
			}
		})
		t.Run(point+"/another version at the same sequence", func(t *testing.T) {
			s, _ := crashed(t)
			_, _, err := s.RegisterVerified(ctx, rel("2.0.1", 2))
			if claimed {
				if reason(err) != "rollback" {
					t.Fatalf("want rollback behind the crashed claim, got %v", err)
				}
			} else if err != nil {
				t.Fatalf("the crashed registration never claimed: %v", err)
			}
			if h, top := headSeq(t, s), highest(t, s); h != 2 || top != 2 {
				t.Fatalf("head %d, highest recorded %d", h, top)
			}
		})
		t.Run(point+"/the same version again, later, at another sequence", func(t *testing.T) {
			s, clock := crashed(t)
			clock.Advance(registry.PendingStale)
			_, _, err := s.RegisterVerified(ctx, rel("2.0.0", 5))
			if claimed {
				if code(err) != apierr.Conflict {
					t.Fatalf("want CONFLICT with the recorded 2.0.0@2, got %v", err)
				}
			} else if err != nil {
				t.Fatalf("a stale pending item must be repaired, got %v", err)
			}
		})
	}
}

// checkReleasesLog holds the log to the releases: after the reconciler's Finish,
// every listed release is the log's entry at its index (the leaf of its
// payload), the entries run in sequence order with no other entry, and the
// signed checkpoint covers them all and is the tree's root.
func checkReleasesLog(t *testing.T, s *registry.Service) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Finish(ctx); err != nil {
		t.Fatalf("finish: %v", err)
	}
	rs, _, err := s.List(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Log.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(rs)) {
		t.Errorf("log size %d, %d releases listed", n, len(rs))
	}
	for _, r := range rs {
		if r.Log == nil {
			t.Errorf("%s listed without a log index", r.Version)
			continue
		}
		ver, seq, ok, err := s.Log.Entry(ctx, r.Log.Index)
		if err != nil || !ok || ver != r.Version || seq != r.Sequence {
			t.Errorf("%s@%d at index %d: the log has %s@%d (ok=%v, err=%v)", r.Version, r.Sequence, r.Log.Index, ver, seq, ok, err)
		}
		if want := int64(len(rs)) - 1 - indexOf(rs, r.Version); r.Log.Index != want {
			t.Errorf("%s at index %d, want %d (sequence order)", r.Version, r.Log.Index, want)
		}
	}
	note, size, err := s.Log.Checkpoint(ctx)
	if err != nil || size != n {
		t.Fatalf("checkpoint of size %d over a log of %d (%v)", size, n, err)
	}
	cp, err := s.Log.Signer.Key().Open([]byte(note))
	if err != nil {
		t.Fatal(err)
	}
	if root, err := release.TreeHash(ctx, s.Log, n); err != nil || root != cp.Root {
		t.Errorf("checkpoint root %x, tree %x (%v)", cp.Root, root, err)
	}
}

func indexOf(rs []release.Release, version string) int64 {
	for i, r := range rs {
		if r.Version == version {
			return int64(i)
		}
	}
	return -1
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }
