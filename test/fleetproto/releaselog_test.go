package fleetproto

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
	"github.com/bettercompute/control-plane/test/teststack"
)

// The release log simulation (issue 24; docs/releases.md, "The release
// log"): registrations, each logging its predecessors and then its own
// release (the order the registration protocol hands them on), racing
// checkpoint signers (the reconciler's audit pass, a registration's answer),
// every DynamoDB request of theirs a scheduling point of the deterministic
// scheduler (sched_test.go), with crashes, lost answers and stalls injected
// there. After the run a clean registration finishes what the crashed ones
// left. The checker holds:
//
//   - a: every index an append was handed holds that release;
//   - b: the log is the releases in sequence order, with no gap and no
//     duplicate;
//   - c: no append is refused as out of order (each logs its predecessors);
//   - d: the head never moves back (read after every step);
//   - e: every checkpoint anyone was handed verifies under the log key, no
//     two have different roots at one size, and each smaller one is a
//     prefix of each larger one (a consistency proof from the store checks);
//   - f, g: with registrations that do not hand on racing for the same
//     indexes (runLogSimDistinct), no index goes to two releases and the
//     entries stay in strictly increasing sequence, each once.
//
// BC_LOGSIM_SEEDS=n runs seeds 1..n, BC_LOGSIM_SEED=k replays one.
func TestReleaseLogSimulation(t *testing.T) {
	seeds := simSeeds(t, "BC_LOGSIM_SEEDS", "BC_LOGSIM_SEED", 6)
	st := devstack.Shared(t)
	ctx := context.Background()
	key, err := st.KMS().CreateKey(ctx, &kms.CreateKeyInput{KeySpec: kmstypes.KeySpecEccNistP256, KeyUsage: kmstypes.KeyUsageTypeSignVerify})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := kmssign.NewSigner(ctx, st.KMS(), aws.ToString(key.KeyMetadata.KeyId))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := release.NewLogSigner("bettercompute.sim/releases", ks)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed#%d", seed), func(t *testing.T) {
			s := newSched(rand.New(rand.NewPCG(seed, seed^0x5eed)), teststack.NewClock(t0))
			s.rates = rates{crashBefore: 20, crashAfter: 20, failBefore: 30, failAfter: 30, stall: 60}
			table := devstack.NewTable(t, st)
			l := &registry.Log{Store: &releasedb.Log{DB: st.DynamoDB(yieldAtEveryRequest(s)), Table: table}, Signer: signer}
			clean := &registry.Log{Store: &releasedb.Log{DB: st.DynamoDB(), Table: table}, Signer: signer}
			runLogSim(t, s, l, clean, seed)
			// Then registrations that do not hand on (each its own
			// releases, in order) racing for the same indexes.
			s2 := newSched(rand.New(rand.NewPCG(seed, seed^0xd15)), teststack.NewClock(t0))
			s2.rates = rates{crashBefore: 5, crashAfter: 5, failBefore: 20, failAfter: 20, stall: 60}
			table2 := devstack.NewTable(t, st)
			runLogSimDistinct(t, s2, &registry.Log{Store: &releasedb.Log{DB: st.DynamoDB(yieldAtEveryRequest(s2)), Table: table2}, Signer: signer},
				&registry.Log{Store: &releasedb.Log{DB: st.DynamoDB(), Table: table2}, Signer: signer}, seed)
			s.trace = append(s.trace, s2.trace...)
			if t.Failed() {
				t.Logf("trace (last 40 steps):\n%s", s.tail(40))
				t.Logf("replay: BC_LOGSIM_SEED=%d go test ./test/fleetproto -run TestReleaseLogSimulation -v", seed)
			}
		})
	}
}

// simSeeds reads a simulation's seeds: def by default, 1..n from many, or
// the list in one.
func simSeeds(t *testing.T, many, one string, def int) []uint64 {
	n := def
	if v, err := strconv.Atoi(os.Getenv(many)); err == nil && v > 0 {
		n = v
	}
	var seeds []uint64
	for i := range n {
		seeds = append(seeds, uint64(i+1))
	}
	if v := os.Getenv(one); v != "" {
		seeds = seeds[:0]
		for _, f := range strings.Split(v, ",") {
			k, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("%s=%q: %v", one, v, err)
			}
			seeds = append(seeds, k)
		}
	}
	return seeds
}

// yieldAtEveryRequest makes every request of a DynamoDB client a scheduling
// point, doing what the scheduler decides (the release log's store calls
// the client directly, so the hook sits in the client).
func yieldAtEveryRequest(s *sched) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Initialize.Add(middleware.InitializeMiddlewareFunc("simYield",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					switch d := s.yield(ctx, awsmiddleware.GetOperationName(ctx)); d {
					case crashBefore:
						return middleware.InitializeOutput{}, middleware.Metadata{}, errCrashed
					case failBefore:
						return middleware.InitializeOutput{}, middleware.Metadata{}, errInjected
					case crashAfter, failAfter:
						_, _, _ = next.HandleInitialize(ctx, in)
						if d == crashAfter {
							return middleware.InitializeOutput{}, middleware.Metadata{}, errCrashed
						}
						return middleware.InitializeOutput{}, middleware.Metadata{}, errInjected
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
}

type logRelease struct {
	version string
	seq     int64
	payload []byte
}

func runLogSim(t *testing.T, s *sched, l, clean *registry.Log, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	var rels []logRelease
	seq := int64(0)
	for i := range 6 {
		seq += 1 + rng.Int64N(3) // sequences with gaps, as operators number them
		v := fmt.Sprintf("4.%d.0", i)
		rels = append(rels, logRelease{v, seq, fmt.Appendf(nil, `{"version":%q,"sequence":%d}`, v, seq)})
	}
	var (
		handed []string // "index version" an append returned
		notes  []string // checkpoints handed out
		errs   []string
	)
	// appendAs logs r, retrying injected failures a few times as the SDK
	// would; it stops at a crash.
	appendAs := func(ctx context.Context, who string, i int) bool {
		r := rels[i]
		for try := 0; try < 3 && alive(ctx); try++ {
			idx, err := l.Append(ctx, r.version, r.seq, release.LeafHash(r.payload))
			switch {
			case err == nil:
				handed = append(handed, fmt.Sprintf("%d %s", idx, r.version))
				if idx != int64(i) {
					errs = append(errs, fmt.Sprintf("a: %s was handed index %d for %s, the %dth release", who, idx, r.version, i))
				}
				return true
			case errors.Is(err, registry.ErrLogOrder):
				errs = append(errs, fmt.Sprintf("c: %s: %v", who, err))
				return false
			case errors.Is(err, errCrashed):
				return false
			}
		}
		return false
	}
	sign := func(ctx context.Context) {
		for try := 0; try < 3 && alive(ctx); try++ {
			note, _, err := l.Sign(ctx)
			if err == nil {
				notes = append(notes, note)
				return
			}
			if errors.Is(err, errCrashed) {
				return
			}
		}
	}
	for i := range rels {
		// A registration, and for some a client's retry racing it.
		for k := range 1 + rng.IntN(2) {
			s.spawn(ctx, fmt.Sprintf("register %s#%d", rels[i].version, k), 0, func(ctx context.Context) {
				s.sleep(ctx, time.Duration(rng.IntN(3000))*time.Millisecond)
				for j := 0; j <= i; j++ {
					if !appendAs(ctx, "register "+rels[i].version, j) {
						return
					}
				}
				sign(ctx)
			})
		}
	}
	for k := range 2 {
		s.spawn(ctx, fmt.Sprintf("audit#%d", k), 0, func(ctx context.Context) {
			for range 4 {
				s.sleep(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
				sign(ctx)
			}
		})
	}
	s.onStep = headMonotonic(ctx, clean, &errs)
	s.run()

	// A clean registration of the last release finishes the rest.
	for i, r := range rels {
		idx, err := clean.Append(ctx, r.version, r.seq, release.LeafHash(r.payload))
		if err != nil || idx != int64(i) {
			errs = append(errs, fmt.Sprintf("b: the clean append of %s: index %d, %v", r.version, idx, err))
		}
	}
	final, _, err := clean.Sign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	notes = append(notes, final)
	if n, err := clean.Size(ctx); err != nil || n != int64(len(rels)) {
		errs = append(errs, fmt.Sprintf("b: size %d (%v), %d releases", n, err, len(rels)))
	}
	for i, r := range rels {
		v, sq, ok, err := clean.Entry(ctx, int64(i))
		if err != nil || !ok || v != r.version || sq != r.seq {
			errs = append(errs, fmt.Sprintf("b: entry %d is %q/%d (%v %v), want %s/%d", i, v, sq, ok, err, r.version, r.seq))
		}
	}
	if _, _, ok, _ := clean.Entry(ctx, int64(len(rels))); ok {
		errs = append(errs, fmt.Sprintf("b: an entry beyond the %d releases", len(rels)))
	}
	roots := checkCheckpoints(ctx, "e", signerKey(l), notes, clean, &errs)
	t.Logf("seed %d: %d actors, %d steps, %d crashes, %d failures, %d stalls; %d appends handed an index, %d checkpoints of %d sizes",
		seed, s.actors, s.steps, s.crashes, s.failures, s.stalls, len(handed), len(notes), len(roots))
	for _, e := range errs {
		t.Error(e)
	}
}

// runLogSimDistinct races appenders of different releases for the same
// indexes: each appends its own releases in sequence order, and one
// overtaken by a higher sequence is refused (ErrLogOrder). Checked: f, no
// index is handed to two releases and every index handed out holds its
// release; g, the entries run in strictly increasing sequence with no gap,
// each a release some appender sent, none twice; d, as above.
func runLogSimDistinct(t *testing.T, s *sched, l, clean *registry.Log, seed uint64) {
	ctx := context.Background()
	const appenders, each = 4, 4
	sent := map[string]int64{}
	handed := map[int64]string{}
	var errs []string
	for a := range appenders {
		s.spawn(ctx, fmt.Sprintf("appender %d", a), 0, func(ctx context.Context) {
			for k := range each {
				seq := int64(1 + a + k*appenders)
				v := fmt.Sprintf("5.%d.0", seq)
				sent[v] = seq
				for try := 0; try < 3 && alive(ctx); try++ {
					idx, err := l.Append(ctx, v, seq, release.LeafHash([]byte(v)))
					if err == nil {
						if prev, ok := handed[idx]; ok && prev != v {
							errs = append(errs, fmt.Sprintf("f: index %d handed to %s and %s", idx, prev, v))
						}
						handed[idx] = v
						break
					}
					if errors.Is(err, registry.ErrLogOrder) || errors.Is(err, errCrashed) {
						break
					}
				}
			}
		})
	}
	s.onStep = headMonotonic(ctx, clean, &errs)
	s.run()
	size, err := clean.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An entry put by a crashed append may wait for the next append to
	// move the head over it: one clean append of a fresh, highest release.
	if _, err := clean.Append(ctx, "5.99.0", 99, release.LeafHash([]byte("5.99.0"))); err != nil {
		t.Fatal(err)
	}
	sent["5.99.0"] = 99
	size, _ = clean.Size(ctx)
	seen := map[string]bool{}
	last := int64(0)
	for i := range size {
		v, seq, ok, err := clean.Entry(ctx, i)
		switch {
		case err != nil || !ok:
			errs = append(errs, fmt.Sprintf("g: no entry %d below the head %d (%v)", i, size, err))
			continue
		case sent[v] != seq:
			errs = append(errs, fmt.Sprintf("g: entry %d is %s/%d, which nobody sent", i, v, seq))
		case seen[v]:
			errs = append(errs, fmt.Sprintf("g: %s logged twice", v))
		case seq <= last:
			errs = append(errs, fmt.Sprintf("g: entry %d has sequence %d after %d", i, seq, last))
		}
		seen[v], last = true, seq
		if h, ok := handed[i]; ok && h != v {
			errs = append(errs, fmt.Sprintf("f: index %d was handed to %s but holds %s", i, h, v))
		}
	}
	t.Logf("seed %d (distinct): %d actors, %d steps, %d crashes, %d failures, %d stalls; %d indexes handed out, %d entries",
		seed, s.actors, s.steps, s.crashes, s.failures, s.stalls, len(handed), size)
	for _, e := range errs {
		t.Error(e)
	}
}

func signerKey(l *registry.Log) release.LogKey { return l.Signer.Key() }

// headMonotonic is a scheduler step hook: the log's head, read cleanly
// after every step, never moves back (check d).
func headMonotonic(ctx context.Context, clean *registry.Log, errs *[]string) func() {
	head := int64(0)
	return func() {
		n, err := clean.Size(ctx)
		if err == nil && n < head {
			*errs = append(*errs, fmt.Sprintf("d: the head moved back from %d to %d", head, n))
		}
		head = max(head, n)
	}
}

// checkCheckpoints: every checkpoint handed out (notes) verifies under key,
// no two have different roots at one size, and each smaller one is a prefix
// of each larger one by the store's consistency proof (failures as check
// name). It returns the roots by size.
func checkCheckpoints(ctx context.Context, name string, key release.LogKey, notes []string, clean *registry.Log, errs *[]string) map[int64]tlog.Hash {
	roots := map[int64]tlog.Hash{}
	for _, note := range notes {
		c, err := key.Open([]byte(note))
		if err != nil {
			*errs = append(*errs, fmt.Sprintf("%s: a checkpoint handed out does not verify: %v", name, err))
			continue
		}
		if r, ok := roots[c.Size]; ok && r != c.Root {
			*errs = append(*errs, fmt.Sprintf("%s: two roots at size %d", name, c.Size))
		}
		roots[c.Size] = c.Root
	}
	for a, ra := range roots {
		for b, rb := range roots {
			if a == 0 || a >= b {
				continue
			}
			p, err := release.ProveConsistency(ctx, clean, a, b)
			if err == nil {
				err = tlog.CheckTree(p, b, rb, a, ra)
			}
			if err != nil {
				*errs = append(*errs, fmt.Sprintf("%s: checkpoints of size %d and %d: %v", name, a, b, err))
			}
		}
	}
	return roots
}
