package fleetproto

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
	"github.com/bettercompute/control-plane/shared/rollout"
	"github.com/bettercompute/control-plane/test/teststack"
)

// The registration simulation (issue 24): releases.register's whole
// protocol — pending put, head claim, claimed mark, the log's append, the
// checkpoint, the recorded mark — through the release domain (registry.Service over releasedb) itself, with
// racing registrations of distinct releases, clients retrying the same
// one, a registration of a version already taken with another sequence,
// and the reconciler's Finish, every DynamoDB request a scheduling point
// with crashes, lost answers and stalls (as TestReleaseLogSimulation). After
// the run the clock passes PendingStale and a clean Finish finishes what
// crashes left. Checked:
//
//   - r1: an answered registration is the log's entry at the index it was
//     answered, under the checkpoint it was answered, which covers it;
//   - r2: the listed releases are exactly the log's entries, each at its
//     index, in sequence order, with no gap (checkReleases);
//   - r3: a release answered refused (rollback, CONFLICT) is not listed
//     with the refused sequence;
//   - r4: every checkpoint handed out verifies, no two have different roots
//     at one size, and each smaller one is a prefix of each larger one.
//
// BC_REGSIM_SEEDS=n runs seeds 1..n, BC_REGSIM_SEED=k replays one.
func TestRegisterSimulation(t *testing.T) {
	seeds := simSeeds(t, "BC_REGSIM_SEEDS", "BC_REGSIM_SEED", 6)
	st := devstack.Shared(t)
	signer := devstack.LogSigner(t, st, "bettercompute.sim/releases")
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed#%d", seed), func(t *testing.T) {
			clock := teststack.NewClock(t0)
			s := newSched(rand.New(rand.NewPCG(seed, seed^0x4e6)), clock)
			s.rates = rates{crashBefore: 15, crashAfter: 15, failBefore: 30, failAfter: 30, stall: 60}
			table := devstack.NewTable(t, st)
			db, cleanDB := st.DynamoDB(yieldAtEveryRequest(s)), st.DynamoDB()
			log := &registry.Log{Store: &releasedb.Log{DB: db, Table: table}, Signer: signer}
			rs := &registry.Service{Store: &releasedb.Releases{DB: db, Table: table}, Log: log, Now: clock.Now}
			cleanLog := &registry.Log{Store: &releasedb.Log{DB: cleanDB, Table: table}, Signer: signer}
			clean := &registry.Service{Store: &releasedb.Releases{DB: cleanDB, Table: table}, Log: cleanLog, Now: clock.Now}
			runRegisterSim(t, s, rs, clean, seed)
			if t.Failed() {
				t.Logf("trace (last 40 steps):\n%s", s.tail(40))
				t.Logf("replay: BC_REGSIM_SEED=%d go test ./test/fleetproto -run TestRegisterSimulation -v", seed)
			}
		})
	}
}

func simRelease(version string, seq int64) release.Release {
	return release.Release{Version: version, Sequence: seq, ManifestDigest: fmt.Sprintf("sha256:%064d", seq),
		Payload:      fmt.Appendf(nil, `{"version":%q,"sequence":%d}`, version, seq),
		Binaries:     []release.Binary{{Platform: "linux/amd64", URL: "https://example.com/bcd", SHA256: fmt.Sprintf("%064d", 0), Size: 1}},
		Signers:      []string{"k1"},
		RegisteredAt: t0, RegisteredBy: rollout.Audit{TenantID: "platform", Principal: "admin"}}
}

func runRegisterSim(t *testing.T, s *sched, rs, clean *registry.Service, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 11))
	var (
		rels     []release.Release
		answered = map[string]release.Release{} // version → the answer
		refused  = map[string]int64{}           // version → a sequence refused for it
		why      = map[string]string{}          // version → the refusal
		notes    []string
		errs     []string
	)
	seq := int64(0)
	for i := range 6 {
		seq += 1 + rng.Int64N(3)
		rels = append(rels, simRelease(fmt.Sprintf("6.%d.0", i), seq))
	}
	register := func(ctx context.Context, r release.Release) {
		for try := 0; try < 3 && alive(ctx); try++ {
			got, _, err := rs.RegisterVerified(ctx, r)
			switch {
			case err == nil:
				answered[r.Version+"@"+fmt.Sprint(r.Sequence)] = got
				if got.Log != nil && got.Log.Checkpoint != "" {
					notes = append(notes, got.Log.Checkpoint)
				}
				return
			case errors.Is(err, errCrashed):
				return
			case apierr.CodeOf(err) == apierr.InvalidInput || apierr.CodeOf(err) == apierr.Conflict:
				refused[r.Version], why[r.Version] = r.Sequence, err.Error()
				return
			}
		}
	}
	for i, r := range rels {
		for k := range 1 + rng.IntN(2) { // a client's retry racing the first try
			s.spawn(ctx, fmt.Sprintf("register %s#%d", r.Version, k), 0, func(ctx context.Context) {
				s.sleep(ctx, time.Duration(rng.IntN(4000)+i*300)*time.Millisecond)
				register(ctx, r)
			})
		}
	}
	// The same version as release 2 with another sequence: CONFLICT, or,
	// if it wins the head first, release 2 is the one refused.
	other := simRelease(rels[2].Version, rels[len(rels)-1].Sequence+5)
	s.spawn(ctx, "register "+other.Version+" again", 0, func(ctx context.Context) {
		s.sleep(ctx, time.Duration(rng.IntN(4000))*time.Millisecond)
		register(ctx, other)
	})
	s.spawn(ctx, "reconciler", 0, func(ctx context.Context) {
		for range 4 {
			s.sleep(ctx, time.Duration(20+rng.IntN(60))*time.Second)
			for try := 0; try < 3 && alive(ctx); try++ {
				if _, err := rs.Finish(ctx); err == nil || errors.Is(err, errCrashed) {
					break
				}
			}
		}
	})
	s.run()

	// What crashes left, finished: past PendingStale, a clean Finish (the
	// reconciler's next pass), as many times as it has work.
	s.clock.Advance(registry.PendingStale + time.Minute)
	for range 8 {
		more, err := clean.Finish(ctx)
		if err != nil {
			t.Fatalf("clean finish: %v", err)
		}
		if !more {
			break
		}
	}
	listed, _, err := clean.List(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	final, size, err := clean.Log.Sign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	notes = append(notes, final)
	key := clean.Log.Signer.Key()

	// r1: answers.
	for k, r := range answered {
		if r.Log == nil {
			errs = append(errs, fmt.Sprintf("r1: %s answered without a log entry", k))
			continue
		}
		v, sq, ok, err := clean.Log.Entry(ctx, r.Log.Index)
		if err != nil || !ok || v != r.Version || sq != r.Sequence {
			errs = append(errs, fmt.Sprintf("r1: %s answered index %d, which holds %s@%d (%v %v)", k, r.Log.Index, v, sq, ok, err))
		}
		if c, err := key.Open([]byte(r.Log.Checkpoint)); err != nil || c.Size <= r.Log.Index {
			errs = append(errs, fmt.Sprintf("r1: %s answered a checkpoint that does not cover index %d (%+v, %v)", k, r.Log.Index, c, err))
		}
	}
	// r2: the list is the log.
	if size != int64(len(listed)) {
		errs = append(errs, fmt.Sprintf("r2: log size %d, %d releases listed", size, len(listed)))
	}
	slices.Reverse(listed) // lowest sequence first: the log's order
	for i, r := range listed {
		v, sq, ok, err := clean.Log.Entry(ctx, int64(i))
		if r.Log == nil || r.Log.Index != int64(i) || err != nil || !ok || v != r.Version || sq != r.Sequence {
			errs = append(errs, fmt.Sprintf("r2: listed %s@%d (log %+v) is not entry %d (%s@%d %v %v)", r.Version, r.Sequence, r.Log, i, v, sq, ok, err))
		}
	}
	for k, r := range answered {
		if !slices.ContainsFunc(listed, func(l release.Release) bool { return l.Version == r.Version && l.Sequence == r.Sequence }) {
			errs = append(errs, fmt.Sprintf("r2: %s was answered but is not listed", k))
		}
	}
	// r3: refusals.
	for v, sq := range refused {
		if slices.ContainsFunc(listed, func(l release.Release) bool { return l.Version == v && l.Sequence == sq }) {
			errs = append(errs, fmt.Sprintf("r3: %s@%d was refused (%s) but is listed", v, sq, why[v]))
		}
	}
	// r4: checkpoints.
	checkCheckpoints(ctx, "r4", key, notes, clean.Log, &errs)
	t.Logf("seed %d: %d actors, %d steps, %d crashes, %d failures, %d stalls; %d answered, %d refused, %d listed, log size %d, %d checkpoints",
		seed, s.actors, s.steps, s.crashes, s.failures, s.stalls, len(answered), len(refused), len(listed), size, len(notes))
	for _, e := range errs {
		t.Error(e)
	}
}
