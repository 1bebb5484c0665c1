package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/paging"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// A good release over two pools in waves 1, 50 %, 100 % under
// maxUnavailable 2: completed, every node running it, never more than 2
// out of service, the version its pools' baseline, every cordon lifted.
func TestRolloutCompletes(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 6, "1.0.0", 1)
	e.pool("b", 4, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a", "b"},
		Waves: []api.WaveSpec{{Nodes: ptr(1)}, {Percent: ptr(50)}, {Percent: ptr(100)}}, MaxUnavailable: ptr(2)})
	if r.Counts.Nodes != 10 || len(r.Waves) != 3 || r.Waves[0].Size != 1 || r.Waves[1].Size != 5 || r.Waves[2].Size != 10 {
		t.Fatalf("created: %+v", r)
	}
	peak := 0
	done := e.until(r.RolloutID, api.Completed, 200, func() { peak = max(peak, e.unavailable("a", "b")) })
	if peak > 2 || peak == 0 {
		t.Errorf("%d nodes out of service at once, maxUnavailable 2", peak)
	}
	if done.Counts.Updated != 10 {
		t.Errorf("counts %+v", done.Counts)
	}
	for _, k := range e.order {
		if n := e.node[k]; n.running == nil || n.running.Version != "2.0.0" {
			t.Errorf("%s runs %+v", k, n.running)
		}
	}
	e.pass() // finish: baselines, claims
	for _, p := range []string{"a", "b"} {
		if b, err := e.nodes.Baseline(context.Background(), p); err != nil || b == nil || b.Version != "2.0.0" {
			t.Errorf("baseline of %s: %+v %v", p, b, err)
		}
	}
	if n := e.unavailable("a", "b"); n != 0 {
		t.Errorf("%d nodes out of service after the rollout", n)
	}
	// Outside rollouts no node is moved: a node told what it runs.
	e.beatAll()
	// Another rollout over the pools is possible now (the claims released).
	e.release("3.0.0", 3)
	e.create(rollout.CreateRequest{Version: "3.0.0", Pools: []string{"a"}, Waves: []api.WaveSpec{{Percent: ptr(100)}}})
	_ = api.Ready
	_ = time.Second
}

// 16 creates over one pool at once: exactly one wins, every other is
// CONFLICT naming it.
func TestConcurrentCreates(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.pool("a", 3, "", 0)
	var wg sync.WaitGroup
	ids := make([]string, 16)
	errs := make([]error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.rollouts.Create(context.Background(), rollout.CreateRequest{Version: "1.0.0", Pools: []string{"a"},
				Waves: []api.WaveSpec{{Percent: ptr(100)}}, By: rollout.Audit{TenantID: "platform", Principal: "admin"}})
			ids[i], errs[i] = r.RolloutID, err
		}()
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		if err == nil {
			if winner != "" {
				t.Fatalf("two creates won: %s and %s", winner, ids[i])
			}
			winner = ids[i]
		}
	}
	if winner == "" {
		t.Fatalf("none won: %v", errs)
	}
	for _, err := range errs {
		if err == nil {
			continue
		}
		if e := apierr.As(err); e == nil || e.Code != apierr.Conflict || e.Details["rolloutId"] != winner {
			t.Errorf("a loser: %v, want CONFLICT naming %s", err, winner)
		}
	}
	rs, _, err := e.rollouts.List(context.Background(), "", paging.Page{Limit: 100})
	if err != nil || len(rs) != 1 || rs[0].RolloutID != winner {
		t.Errorf("list: %d rollouts, %v", len(rs), err)
	}
}

// Refusals of create, each leaving nothing listed.
func TestCreateRefusals(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.pool("a", 4, "", 0)
	ctx := context.Background()
	expires := t0.Add(time.Hour)
	if _, _, err := e.releases.RegisterVerified(ctx, release.Release{Version: "1.1.0", Sequence: 5, Expires: &expires,
		Binaries: []release.Binary{{Platform: "linux/amd64"}}, ManifestDigest: "sha256:x", Signers: []string{}, Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	by := rollout.Audit{TenantID: "platform", Principal: "admin"}
	waves := []api.WaveSpec{{Percent: ptr(100)}}
	for _, tc := range []struct {
		name  string
		req   rollout.CreateRequest
		code  apierr.Code
		field string
	}{
		{"unregistered version", rollout.CreateRequest{Version: "9.9.9", Pools: []string{"a"}, Waves: waves}, apierr.NotFound, ""},
		{"expired release", rollout.CreateRequest{Version: "1.1.0", Pools: []string{"a"}, Waves: waves}, apierr.InvalidInput, "version"},
		{"no such pool", rollout.CreateRequest{Version: "1.0.0", Pools: []string{"a", "zz"}, Waves: waves}, apierr.NotFound, ""},
		{"a pool twice", rollout.CreateRequest{Version: "1.0.0", Pools: []string{"a", "a"}, Waves: waves}, apierr.InvalidInput, "pools"},
		{"waves shrink", rollout.CreateRequest{Version: "1.0.0", Pools: []string{"a"}, Waves: []api.WaveSpec{{Nodes: ptr(3)}, {Nodes: ptr(2)}, {Percent: ptr(100)}}}, apierr.InvalidInput, "waves[1]"},
		{"last wave short", rollout.CreateRequest{Version: "1.0.0", Pools: []string{"a"}, Waves: []api.WaveSpec{{Nodes: ptr(1)}, {Percent: ptr(50)}}}, apierr.InvalidInput, "waves[1]"},
		{"nodes and percent", rollout.CreateRequest{Version: "1.0.0", Pools: []string{"a"}, Waves: []api.WaveSpec{{Nodes: ptr(1), Percent: ptr(100)}}}, apierr.InvalidInput, "waves[0]"},
		{"drain onTimeout", rollout.CreateRequest{Version: "1.0.0", Pools: []string{"a"}, Waves: waves, DrainOnTimeout: ptr("later")}, apierr.InvalidInput, "drain.onTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.By = by
			_, err := e.rollouts.Create(ctx, tc.req)
			ae := apierr.As(err)
			if ae == nil || ae.Code != tc.code || (tc.field != "" && ae.Details["field"] != tc.field) {
				t.Errorf("got %v, want %s on %s", err, tc.code, tc.field)
			}
		})
	}
	// v0.7: pools with no managed node; no managed node with a binary for
	// its platform in the release.
	if _, err := e.cap.Pools().Create(ctx, "acme", "bare", map[string]int{"gpu": 8}, nil); err != nil {
		t.Fatal(err)
	}
	e.release("3.0.0", 6, "linux/arm64")
	for _, tc := range []struct {
		name, reason, field string
		req                 rollout.CreateRequest
	}{
		{"no managed node", api.ReasonNoNodes, "pools", rollout.CreateRequest{Version: "1.0.0", Pools: []string{"bare"}, Waves: waves, By: by}},
		{"no binary for any node", api.ReasonNoBinary, "version", rollout.CreateRequest{Version: "3.0.0", Pools: []string{"a", "bare"}, Waves: waves, By: by}},
	} {
		_, err := e.rollouts.Create(ctx, tc.req)
		if ae := apierr.As(err); ae == nil || ae.Code != apierr.InvalidInput || ae.Details["reason"] != tc.reason || ae.Details["field"] != tc.field {
			t.Errorf("%s: got %v, want INVALID_INPUT reason %s", tc.name, err, tc.reason)
		}
	}
	rs, _, _ := e.rollouts.List(ctx, "", paging.Page{Limit: 10})
	if len(rs) != 0 {
		t.Errorf("refused creates listed: %+v", rs)
	}
	// The same clientToken: the same rollout; another request: CONFLICT.
	req := rollout.CreateRequest{Version: "1.0.0", Pools: []string{"a"}, Waves: waves, ClientToken: "t1", By: by}
	a, err := e.rollouts.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := e.rollouts.Create(ctx, req); err != nil || b.RolloutID != a.RolloutID {
		t.Errorf("replay: %v %v", b.RolloutID, err)
	}
	req.MaxUnavailable = ptr(3)
	if _, err := e.rollouts.Create(ctx, req); apierr.CodeOf(err) != apierr.Conflict {
		t.Errorf("another request with the token: %v", err)
	}
}

// maxFailedNodes is exceeded, not reached: with 1, one failure goes on and
// the second aborts.
func TestMaxFailedBoundary(t *testing.T) {
	for _, failing := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d failing", failing), func(t *testing.T) {
			e := newFleetEnv(t)
			e.release("1.0.0", 1)
			e.release("2.0.0", 2)
			e.pool("a", 6, "1.0.0", 1)
			for _, k := range e.order[:6] {
				n := e.node[k]
				// The nodes that fail are the first ones the rollout takes.
				n.onTold = func(string) (bool, string) { return false, "bad binary" }
			}
			e.pass()
			r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
				Waves: []api.WaveSpec{{Percent: ptr(100)}}, MaxUnavailable: ptr(1), MaxFailedNodes: ptr(1)})
			// Only the first `failing` nodes of the order fail.
			ns, _, err := e.rollouts.Nodes(context.Background(), r.RolloutID, "", 100, "")
			for range 5 {
				if len(ns) == 6 || err != nil {
					break
				}
				e.round(time.Second)
				ns, _, err = e.rollouts.Nodes(context.Background(), r.RolloutID, "", 100, "")
			}
			if err != nil || len(ns) != 6 {
				t.Fatalf("nodes: %d %v", len(ns), err)
			}
			for i, n := range ns {
				if i >= failing {
					e.node[n.PoolID+"/"+n.NodeID].onTold = nil
				}
			}
			want := api.Completed
			if failing == 2 {
				want = api.RolledBack
			}
			got := e.until(r.RolloutID, want, 200, nil)
			if got.Counts.Failed != failing {
				t.Errorf("counts %+v", got.Counts)
			}
			if failing == 2 && got.Reason != rollout.ReasonFailures {
				t.Errorf("reason %q", got.Reason)
			}
		})
	}
}

// outsideStarted counts nodes told a target (or out of pending) beyond
// the waves started so far.
func (e *fleetEnv) checkWaves(id string) {
	e.t.Helper()
	ctx := context.Background()
	rec, err := e.rstore.GetRollout(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	started := -1
	for i, w := range rec.Waves {
		if w.StartedAt != nil {
			started = i
		}
	}
	ns, _, err := e.rollouts.Nodes(ctx, id, "", 10000, "")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range ns {
		if n.Step != api.Pending && n.Reason == "" && n.Wave > started {
			e.t.Errorf("%s/%s is %s in wave %d, only waves ≤ %d started", n.PoolID, n.NodeID, n.Step, n.Wave, started)
		}
	}
}

// Two passes at once, round after round: never more than maxUnavailable
// out of service, never a node beyond the started waves, each wave started
// once.
func TestOverlappingPasses(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 12, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
		Waves: []api.WaveSpec{{Nodes: ptr(2)}, {Percent: ptr(50)}, {Percent: ptr(100)}}, MaxUnavailable: ptr(3)})
	for range 300 {
		if e.get(r.RolloutID).State == api.Completed {
			break
		}
		e.clock.Advance(time.Second)
		e.beatAll()
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); _ = e.rc.Advance(context.Background(), r.RolloutID) }()
		}
		wg.Wait()
		if n := e.unavailable("a"); n > 3 {
			t.Fatalf("%d out of service, maxUnavailable 3", n)
		}
		e.checkWaves(r.RolloutID)
		e.pass() // the fleet's sweep
	}
	got := e.get(r.RolloutID)
	if got.State != api.Completed || got.Counts.Updated != 12 {
		t.Fatalf("%s %+v", got.State, got.Counts)
	}
	starts := map[string]int{}
	for _, ev := range got.History {
		starts[ev.Reason]++
	}
	for _, w := range []string{"wave-1", "wave-2", "wave-3"} {
		if starts[w] != 1 {
			t.Errorf("%s recorded %d times: %+v", w, starts[w], got.History)
		}
	}
}

// A pause racing a pass that is starting nodes: the pause answers only
// after the pass finished starting them, and no node starts after it.
func TestPauseRacingPass(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 8, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
		Waves: []api.WaveSpec{{Percent: ptr(100)}}, MaxUnavailable: ptr(4)})
	for range 5 {
		e.round(time.Second) // enumerate, walk
	}
	paused := make(chan int, 1)
	started := func() int {
		ns, _, err := e.rollouts.Nodes(context.Background(), r.RolloutID, api.Pending, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		return 8 - len(ns)
	}
	fired := false
	e.rc.Faults = func(p string) error {
		if p == rollout.FaultIntent && !fired {
			fired = true
			go func() {
				if _, err := e.rollouts.Pause(context.Background(), r.RolloutID, "racing"); err != nil {
					t.Error(err)
				}
				paused <- started()
			}()
		}
		return nil
	}
	e.round(time.Second)
	atPause := <-paused
	if !fired || atPause == 0 {
		t.Fatalf("the pass started nothing (fired %v, %d started)", fired, atPause)
	}
	for range 10 {
		e.round(time.Second)
	}
	if got := started(); got != atPause {
		t.Errorf("%d nodes started when the pause answered, %d after more passes", atPause, got)
	}
	if got := e.get(r.RolloutID); got.State != api.Paused {
		t.Errorf("state %s", got.State)
	}
	if _, err := e.rollouts.Resume(context.Background(), r.RolloutID, ""); err != nil {
		t.Fatal(err)
	}
	e.until(r.RolloutID, api.Completed, 200, nil)
}

// firstWaveBaked is a rollout of 2.0.0 onto 10 nodes running 1.0.0 in two
// waves (3, then the rest; 2 at a time, an hour's bake), run until its
// first wave is done.
func firstWaveBaked(t *testing.T) (*fleetEnv, api.Rollout) {
	t.Helper()
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 10, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
		Waves: []api.WaveSpec{{Nodes: ptr(3)}, {Percent: ptr(100)}}, MaxUnavailable: ptr(2), BakeSeconds: ptr(3600)})
	for range 60 {
		if got := e.get(r.RolloutID); len(got.Waves) > 0 && got.Waves[0].FinishedAt != nil {
			break
		}
		e.round(time.Second)
	}
	return e, r
}

// Abort mid-rollout: nodes not installing go back, updated ones are sent
// back to the release each ran before; rolled_back once all reported it.
func TestAbortRollsBack(t *testing.T) {
	e, r := firstWaveBaked(t)
	if got := e.get(r.RolloutID); got.Counts.Updated != 3 {
		t.Fatalf("after wave 1: %+v", got.Counts)
	}
	if _, err := e.rollouts.Abort(context.Background(), r.RolloutID, "regression"); err != nil {
		t.Fatal(err)
	}
	peak := 0
	done := e.until(r.RolloutID, api.RolledBack, 200, func() { peak = max(peak, e.unavailable("a")) })
	if peak > 2 {
		t.Errorf("%d out of service while rolling back", peak)
	}
	for _, k := range e.order {
		if n := e.node[k]; n.running == nil || n.running.Version != "1.0.0" {
			t.Errorf("%s runs %+v after the rollback", k, n.running)
		}
	}
	ns, _, _ := e.rollouts.Nodes(context.Background(), r.RolloutID, api.Updated, 100, "")
	for _, n := range ns {
		if n.Rollback != rollout.RollbackDone {
			t.Errorf("%s rollback %q", n.NodeID, n.Rollback)
		}
	}
	if done.Reason != rollout.ReasonAbortedBy {
		t.Errorf("reason %q", done.Reason)
	}
	e.pass()
	if n := e.unavailable("a"); n != 0 {
		t.Errorf("%d nodes still out of service", n)
	}
}

// A node silent after it was told to install fails at the deadline.
func TestSilenceIsFailure(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 1, "1.0.0", 1)
	e.pass()
	n := e.node[e.order[0]]
	n.onTold = func(string) (bool, string) { n.silent = true; return false, "" }
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"}, Waves: []api.WaveSpec{{Percent: ptr(100)}},
		ProgressDeadlineSeconds: ptr(60), MaxFailedNodes: ptr(1)})
	got := e.until(r.RolloutID, api.Completed, 200, nil)
	ns, _, _ := e.rollouts.Nodes(context.Background(), r.RolloutID, "", 10, "")
	if got.Counts.Failed != 1 || len(ns) != 1 || ns[0].Reason != rollout.ReasonDeadline {
		t.Errorf("counts %+v, node %+v", got.Counts, ns)
	}
}

// A node of a mass silence past its deadline before the sweep judged the
// silence (the pool's sweep cut short, or not run since the nodes went
// quiet) waits for it: the sweep then holds the pool (three of its four
// nodes silent together), and the node is updated once it reports. The
// rollout used to read only the pool's disruption, which a sweep records
// once it has counted the pool, and failed the node for its deadline (the
// fleet protocol simulation, seed 5: sweeps cut short by crashes).
func TestSilenceWaitsForTheSweep(t *testing.T) {
	e := newFleetEnv(t)
	ctx := context.Background()
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 4, "1.0.0", 1)
	e.pass()
	// The first node told installs, then it and two others go quiet.
	var quiet []*simNode
	for _, k := range e.order {
		n := e.node[k]
		n.onTold = func(string) (bool, string) {
			if len(quiet) == 0 {
				for _, k := range e.order {
					if m := e.node[k]; (m == n || len(quiet) < 3) && !slices.Contains(quiet, m) {
						m.silent, quiet = true, append(quiet, m)
					}
				}
			}
			return true, ""
		}
	}
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"}, Waves: []api.WaveSpec{{Nodes: ptr(1)}, {Percent: ptr(100)}},
		ProgressDeadlineSeconds: ptr(60), MaxFailedNodes: ptr(0)})
	for i := 0; len(quiet) == 0; i++ {
		if i == 60 {
			t.Fatal("no node was told to install")
		}
		e.round(time.Second)
	}
	// Past the deadline, the rollout advances before any sweep ran.
	e.clock.Advance(61 * time.Second)
	e.beatAll()
	if err := e.rc.Advance(ctx, r.RolloutID); err != nil {
		t.Fatal(err)
	}
	if got := e.get(r.RolloutID); got.Counts.Failed != 0 {
		t.Fatalf("failed for its deadline before the sweep judged the silence: %+v", got.Counts)
	}
	// The sweep holds the pool: still no failure; the nodes report again.
	e.pass()
	if got := e.get(r.RolloutID); got.Counts.Failed != 0 {
		t.Fatalf("failed while the pool's silence is held: %+v", got.Counts)
	}
	for _, n := range quiet {
		n.silent = false
	}
	got := e.until(r.RolloutID, api.Completed, 200, nil)
	if got.Counts.Failed != 0 || got.Counts.Updated != 4 {
		t.Errorf("counts %+v, want all 4 updated", got.Counts)
	}
}

// A pass that runs while another is starting nodes (here: after its first
// node left pending, before that node's cordon counts it out of service)
// starts nothing itself: the two never start more than maxUnavailable
// together (deterministic: the second runs inside the first's fault hook).
func TestPassInsideAnotherPassesStart(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 8, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
		Waves: []api.WaveSpec{{Percent: ptr(100)}}, MaxUnavailable: ptr(3)})
	for range 5 {
		if rec, _ := e.rstore.GetRollout(context.Background(), r.RolloutID); rec.Walked {
			break
		}
		e.round(time.Second)
	}
	if e.unavailable("a") > 0 {
		t.Fatal("nodes started before the waves were known")
	}
	inner := false
	e.rc.Faults = func(p string) error {
		if p == rollout.FaultStarted && !inner {
			inner = true
			other := *e.rc
			other.Faults = nil
			if err := other.Advance(context.Background(), r.RolloutID); err != nil {
				t.Error(err)
			}
		}
		return nil
	}
	for range 20 {
		e.round(time.Second)
		if n := e.unavailable("a"); n > 3 {
			t.Fatalf("%d out of service, maxUnavailable 3", n)
		}
		if inner {
			e.pass() // the sweep sees every cordon
			if n := e.unavailable("a"); n > 3 {
				t.Fatalf("%d out of service, maxUnavailable 3", n)
			}
			break
		}
	}
	if !inner {
		t.Fatal("no pass started nodes")
	}
	e.rc.Faults = nil
	e.until(r.RolloutID, api.Completed, 200, func() {
		if n := e.unavailable("a"); n > 3 {
			t.Fatalf("%d out of service, maxUnavailable 3", n)
		}
	})
}

// The crash matrix: a crash after each write of a pass (its first, and
// its third, visit of that point), then passes as usual: the rollout
// converges — aborted at the failure, rolled back — with never more than
// maxUnavailable out of service, no node beyond the started waves, every
// node back on 1.0.0 and no cordon or target left.
func TestRolloutCrashMatrix(t *testing.T) {
	// make test crashes each point at its first visit; make sims also at
	// its third (BC_CRASH_VISITS=1,3): a later wave's.
	visits := []int{1}
	if v := os.Getenv("BC_CRASH_VISITS"); v != "" {
		visits = visits[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("BC_CRASH_VISITS=%q: want visits like 1,3", v)
			}
			visits = append(visits, n)
		}
	}
	for _, point := range rollout.PassFaultPoints {
		for _, visit := range visits {
			t.Run(fmt.Sprintf("%s#%d", point, visit), func(t *testing.T) {
				t.Parallel() // a table and a clock of its own
				e := newFleetEnv(t)
				e.release("1.0.0", 1)
				e.release("2.0.0", 2)
				e.pool("a", 6, "1.0.0", 1)
				e.pass()
				seen, crashed := 0, false
				e.rc.Faults = func(p string) error {
					if p == point {
						seen++
						if seen == visit && !crashed {
							crashed = true
							return errCrash
						}
					}
					return nil
				}
				r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
					Waves: []api.WaveSpec{{Nodes: ptr(2)}, {Percent: ptr(100)}}, MaxUnavailable: ptr(2)})
				// The third node of the order fails its install: abort, roll back.
				ns := e.waitNodes(r.RolloutID, 6)
				bad := e.node[ns[2].PoolID+"/"+ns[2].NodeID]
				bad.onTold = func(string) (bool, string) { return false, "crash-matrix" }
				for i := 0; i < 300; i++ {
					got := e.get(r.RolloutID)
					if got.State.Terminal() {
						if rec, _ := e.rstore.GetRollout(context.Background(), r.RolloutID); rec.Finished {
							break
						}
					}
					e.clock.Advance(3 * time.Second) // a stale intent (a minute) in 20 rounds
					e.beatAll()
					_, _ = e.crc.Pass(context.Background()) // a crash fails one item
					if n := e.unavailable("a"); n > 2 {
						t.Fatalf("%d out of service, maxUnavailable 2", n)
					}
					e.checkWaves(r.RolloutID)
				}
				got := e.get(r.RolloutID)
				if got.State != api.RolledBack {
					t.Fatalf("ended %s (%s), counts %+v", got.State, got.Reason, got.Counts)
				}
				switch {
				case crashed:
				case visit == 1:
					t.Errorf("the pass never reached %s", point)
				default: // fewer visits than that in this run (finish: one pool)
					t.Logf("%s was reached fewer than %d times: no crash", point, visit)
				}
				for _, k := range e.order {
					if n := e.node[k]; n.running == nil || n.running.Version != "1.0.0" {
						t.Errorf("%s runs %+v", k, n.running)
					}
				}
				if n := e.unavailable("a"); n != 0 {
					t.Errorf("%d nodes still out of service", n)
				}
				err := e.nodes.PoolNodes(context.Background(), "a", func(n fleet.Record) error {
					if n.Target != nil || n.Rollout != nil {
						t.Errorf("%s keeps target %+v, cordon %+v", n.NodeID, n.Target, n.Rollout)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

var errCrash = errors.New("injected crash")

// waitNodes runs rounds until the rollout has taken n nodes, and returns
// them in its order.
func (e *fleetEnv) waitNodes(id string, n int) []api.NodeProgress {
	e.t.Helper()
	for range 20 {
		if rec, _ := e.rstore.GetRollout(context.Background(), id); rec.Walked {
			ns, _, err := e.rollouts.Nodes(context.Background(), id, "", 1000, "")
			if err != nil {
				e.t.Fatal(err)
			}
			if len(ns) == n {
				return ns
			}
		}
		e.clock.Advance(time.Second)
		e.beatAll()
		_, _ = e.crc.Pass(context.Background())
	}
	e.t.Fatalf("rollout %s never took %d nodes", id, n)
	return nil
}

// Drain: a node whose devices hold a reservation is never told to
// install while the reservation overlaps [now, now + progressDeadline):
// it installs after the reservation ends (a wait long enough), is skipped
// busy (a wait too short), or, forced, installs at once and the
// reservation's history says disrupted with the rollout's id. The
// tenant's reservation stays active throughout.
func TestDrainAroundReservations(t *testing.T) {
	e := newFleetEnv(t)
	ctx := context.Background()
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.release("3.0.0", 3)
	e.release("4.0.0", 4)
	e.pool("a", 2, "1.0.0", 1)
	e.pass()
	if _, err := e.cap.Pools().Offer(ctx, "acme", "a", "acme", "gpu", 16); err != nil {
		t.Fatal(err)
	}
	book := func(d time.Duration) (capacity.Reservation, *simNode) {
		t.Helper()
		start := e.clock.Now()
		r, err := e.cap.Admission().Create(ctx, capacity.CreateRequest{TenantID: "acme", PoolID: "a", Resource: "gpu",
			Count: 8, Start: &start, End: start.Add(d)}, func(context.Context, map[string]any) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if got, _ := e.cap.Reservations().Get(ctx, "acme", r.ReservationID); got.State == api.Active {
				return got, e.node["a/"+got.NodeIDs[0]]
			}
			e.round(time.Second)
		}
		t.Fatalf("reservation %s never active", r.ReservationID)
		return r, nil
	}
	toldAt := func(n *simNode, v string) (time.Time, bool) {
		for _, x := range n.told {
			if x.version == v {
				return x.at, true
			}
		}
		return time.Time{}, false
	}
	still := func(r capacity.Reservation) capacity.Reservation {
		t.Helper()
		got, err := e.cap.Reservations().Get(ctx, "acme", r.ReservationID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	drained := func(version string, wait int, onTimeout string) api.Rollout {
		t.Helper()
		return e.create(rollout.CreateRequest{Version: version, Pools: []string{"a"}, Waves: []api.WaveSpec{{Percent: ptr(100)}},
			MaxUnavailable: ptr(2), ProgressDeadlineSeconds: ptr(60), DrainWaitSeconds: ptr(wait), DrainOnTimeout: ptr(onTimeout)})
	}

	// A wait longer than the reservation: installed after it ended.
	r, busy := book(5 * time.Minute)
	ro := drained("2.0.0", 1800, api.OnTimeoutSkip)
	for range 400 {
		if e.get(ro.RolloutID).State == api.Completed {
			break
		}
		if at, ok := toldAt(busy, "2.0.0"); ok && at.Before(r.Window.End) {
			t.Fatalf("told to install at %s, inside its reservation's window %v", at, r.Window)
		}
		if e.clock.Now().Before(r.Window.End) {
			if got := still(r); got.State != api.Active {
				t.Fatalf("the reservation is %s during the drain", got.State)
			}
		}
		e.round(5 * time.Second)
	}
	if got := e.get(ro.RolloutID); got.State != api.Completed || got.Counts.Updated != 2 {
		t.Fatalf("rollout %s, counts %+v", got.State, got.Counts)
	}
	if _, ok := toldAt(busy, "2.0.0"); !ok {
		t.Fatal("the busy node was never updated after its reservation")
	}

	// A wait shorter than the reservation: skipped busy, never told.
	r, busy = book(2 * time.Hour)
	ro = drained("3.0.0", 120, api.OnTimeoutSkip)
	got := e.until(ro.RolloutID, api.Completed, 300, nil)
	if _, ok := toldAt(busy, "3.0.0"); ok {
		t.Fatal("the busy node was told to install under its reservation")
	}
	ns, _, err := e.rollouts.Nodes(ctx, ro.RolloutID, "", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		want := api.Updated
		if "a/"+n.NodeID == busy.pool+"/"+busy.id {
			want = api.Skipped
			if n.Reason != rollout.ReasonBusy {
				t.Errorf("skipped for %q", n.Reason)
			}
		}
		if n.Step != want {
			t.Errorf("%s: %s, want %s", n.NodeID, n.Step, want)
		}
	}
	if got.Counts.Skipped != 1 || still(r).State != api.Active {
		t.Fatalf("counts %+v, reservation %s", got.Counts, still(r).State)
	}
	for _, h := range still(r).History {
		if h.Reason == api.ReasonDisrupted {
			t.Fatalf("disrupted without force: %+v", h)
		}
	}

	// Forced: installs at once, the reservation's history says so.
	ro = drained("4.0.0", 0, api.OnTimeoutForce)
	e.until(ro.RolloutID, api.Completed, 100, nil)
	if _, ok := toldAt(busy, "4.0.0"); !ok {
		t.Fatal("forced, the busy node was not told to install")
	}
	var disrupted []api.Event
	for _, h := range still(r).History {
		if h.Reason == api.ReasonDisrupted {
			disrupted = append(disrupted, h)
		}
	}
	if len(disrupted) != 1 || disrupted[0].RolloutID != ro.RolloutID {
		t.Fatalf("history of the forced reservation: %+v", still(r).History)
	}
}

// A node told the target counts as installing for every later decision:
// at the install's target write and at its step write,
// a crash (then the nodes report and the rollout is aborted) or an abort
// racing a pass (the nodes report, the rollout is aborted and another pass
// runs, all inside this pass's write) leaves the node installing — sent
// back by the rollback — never skipped on the new release.
func TestTargetedNodeCountsAsInstalling(t *testing.T) {
	for _, point := range []string{rollout.FaultTargeted, rollout.FaultStepped} {
		for _, mode := range []string{"crash", "abort+pass"} {
			t.Run(point+"/"+mode, func(t *testing.T) {
				t.Parallel()
				e := newFleetEnv(t)
				e.release("1.0.0", 1)
				e.release("2.0.0", 2)
				e.pool("a", 2, "1.0.0", 1)
				e.pass()
				r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
					Waves: []api.WaveSpec{{Percent: ptr(100)}}, MaxUnavailable: ptr(1)})
				ctx := context.Background()
				hit := false
				e.rc.Faults = func(p string) error {
					if p != point || hit {
						return nil
					}
					hit = true // the first step or target write is the first node's install
					if mode == "crash" {
						return errCrash
					}
					e.beatAll()
					if _, err := e.rollouts.Abort(ctx, r.RolloutID, "regression"); err != nil {
						t.Error(err)
					}
					other := *e.rc
					other.Faults = nil
					if err := other.Advance(ctx, r.RolloutID); err != nil {
						t.Error(err)
					}
					return nil
				}
				for i := 0; i < 30 && !hit; i++ {
					e.clock.Advance(time.Second)
					e.beatAll()
					_, _ = e.crc.Pass(ctx)
				}
				if !hit {
					t.Fatalf("no pass reached %s", point)
				}
				e.rc.Faults = nil
				if mode == "crash" {
					e.beatAll() // a node told the target installs it
					if _, err := e.rollouts.Abort(ctx, r.RolloutID, "regression"); err != nil {
						t.Fatal(err)
					}
				}
				got := e.until(r.RolloutID, api.RolledBack, 200, nil)
				e.pass() // finish
				for _, k := range e.order {
					if n := e.node[k]; n.running == nil || n.running.Version != "1.0.0" {
						t.Errorf("%s runs %+v after the rollback", k, n.running)
					}
				}
				ns, _, err := e.rollouts.Nodes(ctx, r.RolloutID, "", 10, "")
				if err != nil {
					t.Fatal(err)
				}
				if ns[0].Step != api.Updated || ns[0].Rollback != rollout.RollbackDone {
					t.Errorf("the first node: %+v, want updated and rolled back", ns[0])
				}
				// Skipped only as never started (the ended rollout's second node).
				for _, n := range ns {
					if n.Step == api.Skipped && n.Reason != rollout.ReasonNotStarted {
						t.Errorf("counts %+v: %s skipped (%s)", got.Counts, n.NodeID, n.Reason)
					}
				}
				err = e.nodes.PoolNodes(ctx, "a", func(n fleet.Record) error {
					if n.Target != nil || n.Rollout != nil {
						t.Errorf("%s keeps target %+v, cordon %+v", n.NodeID, n.Target, n.Rollout)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// racingStore loses its first UpdateRollout to a real competing write of
// the same rollout (another writer bumping its Ver on the server).
type racingStore struct {
	rollout.RolloutStore
	raced bool
}

func (s *racingStore) UpdateRollout(ctx context.Context, r rollout.Record) (rollout.Record, error) {
	if !s.raced {
		s.raced = true
		cur, err := s.RolloutStore.GetRollout(ctx, r.RolloutID)
		if err != nil {
			return rollout.Record{}, err
		}
		if _, err := s.RolloutStore.UpdateRollout(ctx, cur); err != nil {
			return rollout.Record{}, err
		}
	}
	return s.RolloutStore.UpdateRollout(ctx, r)
}

// A pause that waited for a pass's intent through many polls still has
// its retries for a write lost afterwards: the polls are not retries.
func TestPauseAfterLongWaitRetriesALostWrite(t *testing.T) {
	e := newFleetEnv(t)
	ctx := context.Background()
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 2, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"}, Waves: []api.WaveSpec{{Percent: ptr(100)}}})
	rec, err := e.rstore.GetRollout(ctx, r.RolloutID)
	if err != nil {
		t.Fatal(err)
	}
	rec.Intent = &rollout.Intent{Nodes: 1, At: e.clock.Now()}
	if _, err := e.rstore.UpdateRollout(ctx, rec); err != nil {
		t.Fatal(err)
	}
	polls := 0
	rs := &rollout.Rollouts{Store: &racingStore{RolloutStore: e.rstore}, Releases: e.releases, Pools: e.store, Now: e.clock.Now,
		Sleep: func(context.Context, time.Duration) error {
			polls++
			e.clock.Advance(50 * time.Millisecond)
			if polls == 20 { // the pass clears its intent
				cur, err := e.rstore.GetRollout(ctx, r.RolloutID)
				if err != nil {
					return err
				}
				cur.Intent = nil
				_, err = e.rstore.UpdateRollout(ctx, cur)
				return err
			}
			return nil
		}}
	got, err := rs.Pause(ctx, r.RolloutID, "after a long wait")
	if err != nil || got.State != api.Paused {
		t.Fatalf("pause after %d polls: %s, %v", polls, got.State, err)
	}
	if polls != 20 {
		t.Errorf("%d polls, want 20", polls)
	}
}

// A finished rollout leaves no node pending: aborted after its first wave,
// the nodes it never started read as skipped (not_started) in its counts,
// in rollouts.nodes and under the step filters, paged.
func TestEndedRolloutHasNoPendingNode(t *testing.T) {
	e, r := firstWaveBaked(t)
	ctx := context.Background()
	if got := e.get(r.RolloutID); got.Counts.Updated != 3 || got.Counts.Pending != 7 {
		t.Fatalf("after wave 1: %+v", got.Counts)
	}
	if _, err := e.rollouts.Abort(ctx, r.RolloutID, "regression"); err != nil {
		t.Fatal(err)
	}
	e.until(r.RolloutID, api.RolledBack, 200, func() {})
	got := e.get(r.RolloutID)
	if got.Counts.Pending != 0 || got.Counts.Skipped != 7 || got.Counts.Updated != 3 {
		t.Errorf("rolled back: counts %+v, want 0 pending, 7 skipped, 3 updated", got.Counts)
	}
	list, _, err := e.rollouts.List(ctx, "", paging.Page{Limit: 10})
	if err != nil || len(list) != 1 || list[0].Counts != got.Counts {
		t.Errorf("list: %+v %v, want the counts of get", list, err)
	}
	all, _, err := e.rollouts.Nodes(ctx, r.RolloutID, "", 100, "")
	if err != nil || len(all) != 10 {
		t.Fatalf("nodes: %d %v", len(all), err)
	}
	skipped := 0
	for _, n := range all {
		if n.Step == api.Pending {
			t.Errorf("%s is pending in a rolled-back rollout", n.NodeID)
		}
		if n.Step == api.Skipped && n.Reason == rollout.ReasonNotStarted {
			skipped++
		}
	}
	if skipped != 7 {
		t.Errorf("%d nodes skipped (not_started), want 7", skipped)
	}
	if ps, next, err := e.rollouts.Nodes(ctx, r.RolloutID, api.Pending, 100, ""); err != nil || len(ps) != 0 || next != "" {
		t.Errorf("--step pending of a finished rollout: %d nodes, next %q, %v", len(ps), next, err)
	}
	// --step skipped, three at a time, finds the 7 once each.
	seen := map[string]bool{}
	for after, pages := "", 0; ; pages++ {
		ps, next, err := e.rollouts.Nodes(ctx, r.RolloutID, api.Skipped, 3, after)
		if err != nil || pages > 5 {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, n := range ps {
			if n.Step != api.Skipped || seen[n.NodeID] {
				t.Errorf("page %d: %s %s (seen %v)", pages, n.NodeID, n.Step, seen[n.NodeID])
			}
			seen[n.NodeID] = true
		}
		if after = next; next == "" {
			break
		}
	}
	if len(seen) != 7 {
		t.Errorf("--step skipped found %d nodes, want 7", len(seen))
	}
}

// A node is told a rollout's target only while that rollout may start it:
// a target an aborted rollout left on a node (a write of the rollout's
// landing after the node was concluded; or, as an operator found it, a
// quarantined node re-keyed once the rollout had ended) is not told before
// the sweep lifts it — the node is told what it runs.
func TestFinishedRolloutsTargetIsNotTold(t *testing.T) {
	e := newFleetEnv(t)
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 2, "1.0.0", 1)
	e.pass()
	r := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"},
		Waves: []api.WaveSpec{{Percent: ptr(100)}}, BakeSeconds: ptr(0)})
	if _, err := e.rollouts.Abort(context.Background(), r.RolloutID, "regression"); err != nil {
		t.Fatal(err)
	}
	e.until(r.RolloutID, api.RolledBack, 200, func() {})
	ctx := context.Background()
	n := e.node["a/"+capacity.NodeID("gpu", 0)]
	rec, err := e.nodes.GetNode(ctx, "a", "gpu", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.nodes.SetTarget(ctx, rec, r.RolloutID, &fleet.Target{Version: "2.0.0", Sequence: 2, RolloutID: r.RolloutID}, 1); err != nil {
		t.Fatal(err)
	}
	told := len(n.told)
	e.beat(n)
	if len(n.told) > told {
		t.Errorf("%s was told %s, the target of rolled-back rollout %s", n.id, n.told[len(n.told)-1].version, r.RolloutID)
	}
	if n.running == nil || n.running.Version != "1.0.0" {
		t.Errorf("%s runs %+v, want 1.0.0", n.id, n.running)
	}
}
