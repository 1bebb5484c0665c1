package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// TestRolloutProtocolSimulation explores a rollout's passes seeded: at every write
// point of a pass the seed may crash it there, or run — right there, in
// the middle of it — another pass, a pause, a resume or an abort; between
// passes the clock jumps and nodes report, some failing their install.
// After every pass: never more than maxUnavailable nodes out of service,
// no node beyond the started waves; at the end (resumed, passes to
// quiescence): terminal and finished, every node on the release its
// outcome says (rolled back: the one it ran; completed: the version when
// updated), no target or cordon left. A failing seed names itself:
// BC_ROLLOUT_SEEDS=n runs n seeds (make test runs 2; 48 pass, docs/rollouts.md), BC_ROLLOUT_SEED=k
// one.
func TestRolloutProtocolSimulation(t *testing.T) {
	seeds := []uint64{1, 2}
	if v, err := strconv.Atoi(os.Getenv("BC_ROLLOUT_SEEDS")); err == nil && v > 0 {
		seeds = seeds[:0]
		for i := range v {
			seeds = append(seeds, uint64(i+1))
		}
	}
	if v, err := strconv.ParseUint(os.Getenv("BC_ROLLOUT_SEED"), 10, 64); err == nil {
		seeds = []uint64{v}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed#%d", seed), func(t *testing.T) {
			t.Parallel()
			defer func() { // also after a Fatal
				if t.Failed() {
					t.Logf("replay: BC_ROLLOUT_SEED=%d go test ./shared/rollout -run 'TestRolloutProtocolSimulation'", seed)
				}
			}()
			st := simulateRollout(t, seed)
			t.Logf("seed %d: %d passes, %d crashes, %d pauses, %d passes, %d aborts and %d rounds of heartbeats nested inside a pass's writes, %d resumes; %d failing nodes; ended %s",
				seed, st.passes, st.crashes, st.pauses, st.inner, st.aborts, st.beats, st.resumes, st.failing, st.end)
		})
	}
}

type simStats struct {
	passes, crashes, inner, pauses, resumes, aborts, beats, failing int
	end                                                             api.RolloutState
}

func simulateRollout(t *testing.T, seed uint64) simStats {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	e := newFleetEnv(t)
	ctx := context.Background()
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 4, "1.0.0", 1)
	e.pool("b", 4, "1.0.0", 1)
	e.pass()
	const maxUnavailable = 2
	var st simStats
	maxFailed := rng.IntN(3)
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a", "b"},
		Waves: []api.WaveSpec{{Nodes: ptr(1)}, {Percent: ptr(50)}, {Percent: ptr(100)}}, MaxUnavailable: ptr(maxUnavailable),
		MaxFailedNodes: ptr(maxFailed), BakeSeconds: ptr(rng.IntN(3)), ProgressDeadlineSeconds: ptr(60)})
	for _, i := range rng.Perm(len(e.order))[:rng.IntN(4)] { // 0–3 nodes fail the install
		st.failing++
		e.node[e.order[i]].onTold = func(v string) (bool, string) {
			if v == "2.0.0" {
				return false, "sim: the new release does not start"
			}
			return true, ""
		}
	}
	errCrashSim := errors.New("sim crash")
	nested := false
	e.rc.Faults = func(point string) error {
		if nested {
			return nil
		}
		switch n := rng.IntN(100); {
		case n < 10:
			st.crashes++
			return errCrashSim
		case n < 20:
			nested = true
			defer func() { nested = false }()
			switch rng.IntN(5) {
			case 0:
				st.inner++
				_ = e.rc.Advance(ctx, r.RolloutID)
			case 1:
				st.pauses++
				_, _ = e.rollouts.Pause(ctx, r.RolloutID, "sim")
			case 2:
				st.resumes++
				_, _ = e.rollouts.Resume(ctx, r.RolloutID, "sim")
			case 3:
				if rng.IntN(4) == 0 { // aborts are rarer: most seeds should run to the end
					st.aborts++
					_, _ = e.rollouts.Abort(ctx, r.RolloutID, "sim")
					if rng.IntN(2) == 0 { // an abort racing a pass, the nodes reporting meanwhile
						st.beats++
						e.beatAll()
						st.inner++
						_ = e.rc.Advance(ctx, r.RolloutID)
					}
				}
			case 4: // heartbeats land in the middle of a pass's writes
				st.beats++
				e.beatAll()
			}
		}
		return nil
	}
	check := func() {
		t.Helper()
		if n := e.unavailable("a", "b"); n > maxUnavailable {
			t.Fatalf("seed %d: %d nodes out of service, maxUnavailable %d", seed, n, maxUnavailable)
		}
		e.checkWaves(r.RolloutID)
	}
	done := func() bool {
		rec, err := e.rstore.GetRollout(ctx, r.RolloutID)
		return err == nil && rec.Finished
	}
	const faulty = 80 // passes with faults; then, resumed, it must end
	for i := 0; i < faulty+300 && !done(); i++ {
		if i == faulty {
			e.rc.Faults = nil
		}
		if got := e.get(r.RolloutID); got.State == api.Paused && (i >= faulty || rng.IntN(4) == 0) {
			st.resumes++
			if _, err := e.rollouts.Resume(ctx, r.RolloutID, "sim"); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(time.Duration(1+rng.IntN(4)) * time.Second)
		e.beatAll()
		_, _ = e.crc.Pass(ctx) // a crash fails its item; the next pass repairs
		st.passes++
		check()
	}
	got := e.get(r.RolloutID)
	st.end = got.State
	if !done() || !got.State.Terminal() {
		t.Fatalf("seed %d: not finished after %d passes: %s (%s), counts %+v", seed, st.passes, got.State, got.Reason, got.Counts)
	}
	ns, _, err := e.rollouts.Nodes(ctx, r.RolloutID, "", 100, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		sn := e.node[n.PoolID+"/"+n.NodeID]
		want := "1.0.0"
		if got.State == api.Completed && n.Step == api.Updated {
			want = "2.0.0"
		}
		if sn.running == nil || sn.running.Version != want {
			t.Errorf("seed %d: %s/%s (%s, rollback %q) runs %+v, want %s", seed, n.PoolID, n.NodeID, n.Step, n.Rollback, sn.running, want)
		}
	}
	// Quiescence: a few clean passes more — the fleet sweep compares every
	// node with what holds it and lifts what a finished rollout left.
	for range 3 {
		e.clock.Advance(time.Second)
		e.beatAll()
		if _, err := e.crc.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c := got.Counts; c.Nodes != 8 || c.Pending+c.Draining+c.Installing+c.Verifying+c.Updated+c.Failed+c.Skipped != 8 {
		t.Errorf("seed %d: counts %+v", seed, c)
	}
	if got.State == api.Completed && got.Counts.Failed > maxFailed {
		t.Errorf("seed %d: completed with %d failed, maxFailedNodes %d", seed, got.Counts.Failed, maxFailed)
	}
	for _, p := range []string{"a", "b"} {
		err := e.nodes.PoolNodes(ctx, p, func(n fleet.Record) error {
			if n.Target != nil || n.Rollout != nil {
				t.Errorf("seed %d: %s keeps target %+v, cordon %+v", seed, n.NodeID, n.Target, n.Rollout)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return st
}
