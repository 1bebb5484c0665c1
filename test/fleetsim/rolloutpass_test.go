package fleetsim

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/meter"
	"github.com/bettercompute/control-plane/shared/rollout"
	"github.com/bettercompute/control-plane/test/teststack"
)

// BenchmarkRolloutPass10k times the reconciler's pass over a rollout of
// 10,000 nodes (20 pools of 500), seeded through the fleet service (no
// agents, no gateway): each node registered, then a signed heartbeat
// reporting 1.0.0 ready. A rollout of 2.0.0 in waves 1, 1 %, 10 %, 50 %,
// 100 % under maxUnavailable 5 % (500), bake 0; after each pass every node
// the rollout told to install reports 2.0.0 running (a heartbeat through
// the service), so the waves move as fast as passes allow. Each pass (the
// whole scheduled pass: capacity, the fleet's sweeps and fleet.rollouts)
// is metered, through enumeration (2,000 progress items a pass), the walk
// and the first three waves, against the reconciler function's timeout
// (50 s, infra/stack/access.go reconcilerSizing; the period is 60 s).
func BenchmarkRolloutPass10k(b *testing.B) {
	var passes []benchPass
	var summary string
	for range b.N {
		passes, summary = runPass10k(b)
		break
	}
	b.Log(summary)
	var worst benchPass
	var rolloutPasses int
	var sumMS, sumCalls, sumUnits float64
	for i, p := range passes {
		b.Logf("pass %2d %-12s %7.0f ms, %5d calls, %7.1f RCU, %7.1f WCU, %d errors", i, p.label, float64(p.took.Microseconds())/1000,
			p.use.Calls, p.use.RCU, p.use.WCU, p.errs)
		if p.label == "setup" || p.label == "idle" {
			continue
		}
		rolloutPasses++
		sumMS += float64(p.took.Microseconds()) / 1000
		sumCalls += float64(p.use.Calls)
		sumUnits += p.use.Units()
		if p.took > worst.took {
			worst = p
		}
		if p.errs > 0 {
			b.Errorf("pass %d (%s): %d errors", i, p.label, p.errs)
		}
		if p.took > 50*time.Second {
			b.Errorf("pass %d (%s) took %s: over the reconciler function's 50 s timeout", i, p.label, p.took)
		}
	}
	n := float64(max(rolloutPasses, 1))
	b.ReportMetric(float64(rolloutPasses), "passes")
	b.ReportMetric(float64(worst.took.Milliseconds()), "max-pass-ms")
	b.ReportMetric(sumMS/n, "mean-pass-ms")
	b.ReportMetric(float64(worst.use.Calls), "calls-slowest-pass")
	b.ReportMetric(sumCalls/n, "calls/pass")
	b.ReportMetric(sumUnits/n, "units/pass")
}

// benchPass is one metered pass.
type benchPass struct {
	label string
	took  time.Duration
	use   meter.Usage
	errs  int
}

func runPass10k(b *testing.B) ([]benchPass, string) {
	const pools, perPool = 20, 500
	// One hour provisioned ahead: the first pass writes every node's
	// node-hours of it (setup, not measured as the rollout's). The idle
	// heartbeat interval is 10 minutes, so the seeded nodes (one heartbeat
	// each) stay reachable through the run (unreachable after 3
	// intervals): with 30 s, the sweep found all 10,000 unreachable 90 s
	// after seeding and the rollout could start none.
	h := newRig(b, 10*time.Minute, teststack.WithConfig(func(c *app.Config) { c.ProvisionHours = 1 }))
	ctx := context.Background()
	h.register(b, h.sign(b, h.statement("1.0.0", 1)))
	h.register(b, h.sign(b, h.statement("2.0.0", 2)))
	fs := h.st.App.FleetService()
	type seeded struct {
		pool, id string
		key      *dsseKey
		counter  atomic.Int64
	}
	var nodes []*seeded
	byRef := map[string]*seeded{}
	for p := range pools {
		pool := fmt.Sprintf("big-%02d", p)
		h.must(b, "pools.create", map[string]any{"tenantId": "acme", "poolId": pool, "resources": map[string]any{"gpu": perPool * 8}}, nil)
		for k := range perPool {
			n := &seeded{pool: pool, id: capacity.NodeID("gpu", k), key: newDSSEKey()}
			nodes = append(nodes, n)
			byRef[pool+"/"+n.id] = n
		}
	}
	v1 := &api.Version{Version: "1.0.0", Sequence: 1}
	beat := func(n *seeded, running *api.Version) error {
		rep := api.Report{PoolID: n.pool, NodeID: n.id, Counter: n.counter.Add(1), At: time.Now().UTC(), Running: running,
			Health: api.Health{DevicesExpected: 8, DevicesVisible: 8, Checks: []api.Check{}}, Bindings: []api.ReportedBinding{}}
		payload, _ := json.Marshal(rep)
		env, err := dsse.Sign(api.ReportPayloadType, payload, n.key.signer)
		if err != nil {
			return err
		}
		_, err = fs.Heartbeat(ctx, "acme", n.pool, n.id, env)
		return err
	}
	parallel := func(ns []*seeded, fn func(*seeded) error) error {
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(ns); i += 8 {
					if err := fn(ns[i]); err != nil && errs[w] == nil {
						errs[w] = err
					}
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	seedStart := time.Now()
	if err := parallel(nodes, func(n *seeded) error {
		_, err := fs.Register(ctx, "acme", n.pool, n.id, n.key.pem, "linux/amd64")
		return err
	}); err != nil {
		b.Fatal(err)
	}
	if err := parallel(nodes, func(n *seeded) error { return beat(n, v1) }); err != nil {
		b.Fatal(err)
	}
	var passes []benchPass
	pass := func(label string) {
		m := &meter.Meter{}
		t := time.Now()
		res, err := h.st.App.Reconciler().Pass(meter.With(ctx, m))
		bp := benchPass{label: label, took: time.Since(t), use: m.Usage(), errs: res.Errors}
		if err != nil {
			bp.errs++
		}
		passes = append(passes, bp)
	}
	// Passes until the fleet takes placements (the first provisions the
	// pools' hours; a later one lifts the flags of nodes now ready).
	for range 3 {
		pass("setup")
	}
	pass("idle")
	pass("idle")
	seedTook := time.Since(seedStart)
	var out struct{ Rollout api.Rollout }
	poolIDs := make([]string, pools)
	for p := range pools {
		poolIDs[p] = fmt.Sprintf("big-%02d", p)
	}
	// Created through the service (the gateway's request timeout aside:
	// create counts each pool's nodes).
	created, err := h.st.App.Rollouts().Create(ctx, rollout.CreateRequest{Version: "2.0.0", Pools: poolIDs,
		Waves:          []api.WaveSpec{{Nodes: ptr(1)}, {Percent: ptr(1)}, {Percent: ptr(10)}, {Percent: ptr(50)}, {Percent: ptr(100)}},
		MaxUnavailable: ptr(pools * perPool * 5 / 100), MaxFailedNodes: ptr(2), BakeSeconds: ptr(0), DrainWaitSeconds: ptr(60),
		By: rollout.Audit{TenantID: platformTenant, Principal: "admin"}})
	if err != nil {
		b.Fatalf("create: %v (%#v)", err, errors.Unwrap(err))
	}
	out.Rollout = created
	id := out.Rollout.RolloutID
	rstore := h.st.App.RolloutStore()
	v2 := &api.Version{Version: "2.0.0", Sequence: 2}
	for i := 0; i < 60; i++ {
		rec, err := rstore.GetRollout(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		label, _ := phase(rec)
		if len(rec.Waves) > 2 && rec.Waves[2].FinishedAt != nil {
			break // through the first three waves
		}
		pass(label)
		// The nodes told to install report it done.
		var told []*seeded
		for _, st := range []api.RolloutStep{api.Installing, api.Verifying} {
			ps, err := rstore.ProgressByStep(ctx, id, st, 5000, "")
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range ps {
				told = append(told, byRef[p.PoolID+"/"+p.NodeID])
			}
		}
		if err := parallel(told, func(n *seeded) error { return beat(n, v2) }); err != nil {
			b.Fatal(err)
		}
	}
	r, _ := h.getRollout(ctx, id)
	return passes, fmt.Sprintf("10,000 nodes seeded (registered, heartbeat, passes) in %s; rollout %s: %s, waves %v, counts %+v",
		seedTook.Round(time.Second), id, r.State, r.Waves, r.Counts)
}

type dsseKey struct {
	signer crypto.Signer
	pem    string
}

func newDSSEKey() *dsseKey {
	k, _ := dsse.GenerateKey(dsse.AlgEd25519)
	pem, _ := dsse.MarshalPublicKeyPEM(k.Public())
	return &dsseKey{k, string(pem)}
}

func ptr[T any](v T) *T { return &v }
