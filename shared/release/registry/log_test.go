package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
)

const logOrigin = "bettercompute.test/releases"

// newLog is a release log on a fresh table, signing with a fresh ECDSA
// P-256 key of the shared local-kms.
func newLog(t *testing.T) *registry.Log {
	t.Helper()
	s := devstack.Shared(t)
	return &registry.Log{Store: &releasedb.Log{DB: s.DynamoDB(), Table: devstack.NewTable(t, s)}, Signer: devstack.LogSigner(t, s, logOrigin)}
}

func payload(i int) []byte { return fmt.Appendf(nil, `{"version":"2.%d.0","sequence":%d}`, i, 10+i) }

// mth is RFC 6962's Merkle Tree Hash by its definition (§2.1), the oracle
// the stored tree is held to.
func mth(entries [][]byte) [32]byte {
	h := rfc6962.DefaultHasher
	if len(entries) == 0 {
		return [32]byte(h.EmptyRoot())
	}
	if len(entries) == 1 {
		return [32]byte(h.HashLeaf(entries[0]))
	}
	k := 1
	for k*2 < len(entries) {
		k *= 2
	}
	l, r := mth(entries[:k]), mth(entries[k:])
	return [32]byte(h.HashChildren(l[:], r[:]))
}

func payloads(n int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, payload(i))
	}
	return out
}

func appendAll(t *testing.T, l *registry.Log, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		idx, err := l.Append(context.Background(), fmt.Sprintf("2.%d.0", i), int64(10+i), release.LeafHash(payload(i)))
		if err != nil || idx != int64(i) {
			t.Fatalf("append %d: index %d, %v", i, idx, err)
		}
	}
}

// Appended one by one, the stored tree is RFC 6962's at every size, and its
// proofs verify with transparency-dev/merkle.
func TestReleaseLogTreeIsRFC6962(t *testing.T) {
	ctx, l := context.Background(), newLog(t)
	const n = 21
	appendAll(t, l, 0, n)
	if size, err := l.Size(ctx); err != nil || size != n {
		t.Fatalf("size %d %v", size, err)
	}
	all := payloads(n)
	for size := int64(1); size <= n; size++ {
		root, err := release.TreeHash(ctx, l, size)
		if err != nil {
			t.Fatal(err)
		}
		if root != mth(all[:size]) {
			t.Fatalf("root of size %d differs from RFC 6962's", size)
		}
	}
	root := mth(all)
	for _, i := range []int64{0, 7, 13, 20} {
		p, err := release.ProveInclusion(ctx, l, n, i)
		if err != nil {
			t.Fatal(err)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(i), n, rfc6962.DefaultHasher.HashLeaf(all[i]), hashes(p), root[:]); err != nil {
			t.Errorf("entry %d: %v", i, err)
		}
	}
	p, err := release.ProveConsistency(ctx, l, 6, n)
	if err != nil {
		t.Fatal(err)
	}
	from := mth(all[:6])
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, 6, n, hashes(p), from[:], root[:]); err != nil {
		t.Errorf("consistency 6 → %d: %v", n, err)
	}
}

func hashes(hs []tlog.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// An append of a release already logged returns its index (the last entry
// or, by binary search, an earlier one) and adds nothing; one overtaken by
// a later sequence is refused.
func TestReleaseLogAppendIsIdempotent(t *testing.T) {
	ctx, l := context.Background(), newLog(t)
	appendAll(t, l, 0, 10)
	for _, i := range []int{9, 3, 0} {
		if idx, err := l.Append(ctx, fmt.Sprintf("2.%d.0", i), int64(10+i), release.LeafHash(payload(i))); err != nil || idx != int64(i) {
			t.Errorf("re-append %d: %d %v", i, idx, err)
		}
	}
	if _, err := l.Append(ctx, "2.x.0", 14, release.LeafHash([]byte("x"))); !errors.Is(err, registry.ErrLogOrder) {
		t.Errorf("an append below the last sequence: %v", err)
	}
	if size, _ := l.Size(ctx); size != 10 {
		t.Errorf("size %d after replays, want 10", size)
	}
}

// The crash matrix: an append stopped after each of its writes is finished
// by the next append (of the same release, or of the next one), with no
// gap and no duplicate; a checkpoint signed but its caller crashed is kept.
func TestReleaseLogCrashes(t *testing.T) {
	for _, point := range []string{registry.FaultLogEntry, registry.FaultLogHead, registry.FaultLogCheckpoint} {
		for _, next := range []string{"same", "next"} {
			t.Run(point+"/"+next, func(t *testing.T) {
				ctx, l := context.Background(), newLog(t)
				appendAll(t, l, 0, 3)
				crash := errors.New("crash")
				l.Faults = func(p string) error {
					if p == point {
						return crash
					}
					return nil
				}
				if point == registry.FaultLogCheckpoint {
					if _, _, err := l.Sign(ctx); !errors.Is(err, crash) {
						t.Fatalf("sign: %v", err)
					}
				} else if _, err := l.Append(ctx, "2.3.0", 13, release.LeafHash(payload(3))); !errors.Is(err, crash) {
					t.Fatalf("append: %v", err)
				}
				l.Faults = nil
				// The log holds 0..2, and 3 if the crash came after its put.
				// "same": release 3's registration retries; "next": the next
				// registration logs 3 (its predecessor) and then itself.
				want := 4
				if point == registry.FaultLogCheckpoint && next == "same" {
					want = 3 // nothing to retry but the signature
				} else if idx, err := l.Append(ctx, "2.3.0", 13, release.LeafHash(payload(3))); err != nil || idx != 3 {
					t.Fatalf("release 3 after the crash: %d %v", idx, err)
				}
				if next == "next" {
					if idx, err := l.Append(ctx, "2.4.0", 14, release.LeafHash(payload(4))); err != nil || idx != 4 {
						t.Fatalf("the next release: %d %v", idx, err)
					}
					want = 5
				}
				checkLog(t, l, want)
			})
		}
	}
}

// checkLog holds the stored log to the first n payloads (crash matrix
// payloads: 0..n-1 in order, the crashed one included) and its signed
// checkpoint to the tree.
func checkLog(t *testing.T, l *registry.Log, n int) {
	t.Helper()
	ctx := context.Background()
	if size, err := l.Size(ctx); err != nil || size != int64(n) {
		t.Fatalf("size %d %v, want %d", size, err, n)
	}
	if root, err := release.TreeHash(ctx, l, int64(n)); err != nil || root != mth(payloads(n)) {
		t.Fatalf("root of %d entries: %v (differs from RFC 6962's)", n, err)
	}
	note, size, err := l.Sign(ctx)
	if err != nil || size != int64(n) {
		t.Fatalf("sign: size %d %v", size, err)
	}
	c, err := l.Signer.Key().Open([]byte(note))
	if err != nil || c.Size != int64(n) || c.Root != mth(payloads(n)) {
		t.Fatalf("checkpoint %+v %v", c, err)
	}
}

// Appenders racing through the same releases in order (each registration
// logs its predecessor first) and signers racing them: every release gets
// exactly one index, in order, with no gap, and every checkpoint anyone was
// handed is consistent with every other (same size, same root; larger, a
// consistency proof from the smaller verifies).
func TestReleaseLogRacingAppendsAndSigners(t *testing.T) {
	ctx, l := context.Background(), newLog(t)
	const n, appenders = 12, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var notes []string
	errs := make(chan error, appenders*n*2)
	for a := range appenders {
		wg.Go(func() {
			for i := range n {
				idx, err := l.Append(ctx, fmt.Sprintf("2.%d.0", i), int64(10+i), release.LeafHash(payload(i)))
				if err != nil || idx != int64(i) {
					errs <- fmt.Errorf("appender %d, release %d: index %d, %v", a, i, idx, err)
					return
				}
				note, _, err := l.Sign(ctx)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				notes = append(notes, note)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkLog(t, l, n)
	seen := map[int64]tlog.Hash{}
	for _, note := range notes {
		c, err := l.Signer.Key().Open([]byte(note))
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := seen[c.Size]; ok && r != c.Root {
			t.Fatalf("two roots at size %d", c.Size)
		}
		seen[c.Size] = c.Root
	}
	for a, ra := range seen {
		for b, rb := range seen {
			if a >= b {
				continue
			}
			p, err := release.ProveConsistency(ctx, l, a, b)
			if err != nil {
				t.Fatal(err)
			}
			if err := tlog.CheckTree(p, b, rb, a, ra); err != nil {
				t.Errorf("checkpoints of size %d and %d are inconsistent: %v", a, b, err)
			}
		}
	}
	if len(seen) < 2 {
		t.Errorf("only %d checkpoint sizes handed out: the signers did not race the appends", len(seen))
	}
}

// Appenders racing with different releases for the same index (each its
// own sequences, in order): no two are handed one index, every index handed
// out holds the release it was handed to, the entries run in sequence order
// with no gap, and a release overtaken by a higher sequence is refused, not
// logged out of order.
func TestReleaseLogRacingDistinctReleases(t *testing.T) {
	ctx, l := context.Background(), newLog(t)
	const appenders, each = 4, 8
	type got struct {
		version string
		idx     int64
	}
	results := make(chan got, appenders*each)
	errs := make(chan error, appenders*each)
	var wg sync.WaitGroup
	// A reader polling the head while they race: it never moves back.
	done := make(chan struct{})
	polled := make(chan error, 1)
	go func() {
		prev := int64(0)
		for {
			select {
			case <-done:
				polled <- nil
				return
			default:
			}
			n, err := l.Size(ctx)
			if err == nil && n < prev {
				polled <- fmt.Errorf("the head moved back from %d to %d", prev, n)
				return
			}
			prev = max(prev, n)
		}
	}()
	for a := range appenders {
		wg.Go(func() {
			for k := range each {
				seq := int64(1 + a + k*appenders)
				v := fmt.Sprintf("3.%d.0", seq)
				idx, err := l.Append(ctx, v, seq, release.LeafHash([]byte(v)))
				switch {
				case errors.Is(err, registry.ErrLogOrder):
				case err != nil:
					errs <- err
				default:
					results <- got{v, idx}
				}
			}
		})
	}
	wg.Wait()
	close(done)
	if err := <-polled; err != nil {
		t.Error(err)
	}
	close(results)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	byIndex := map[int64]string{}
	for r := range results {
		if prev, ok := byIndex[r.idx]; ok {
			t.Errorf("index %d handed to %s and %s", r.idx, prev, r.version)
		}
		byIndex[r.idx] = r.version
	}
	size, err := l.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(size) != len(byIndex) {
		t.Errorf("size %d, %d appends succeeded", size, len(byIndex))
	}
	last := int64(0)
	for i := range size {
		v, seq, ok, err := l.Entry(ctx, i)
		if err != nil || !ok {
			t.Fatalf("entry %d: %v %v (a gap)", i, ok, err)
		}
		if v != byIndex[i] {
			t.Errorf("entry %d holds %s, handed to %s", i, v, byIndex[i])
		}
		if seq <= last {
			t.Errorf("entry %d: sequence %d after %d", i, seq, last)
		}
		last = seq
	}
	if size < 2 {
		t.Errorf("only %d appends succeeded: nothing raced", size)
	}
}
