package capacity_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/meter"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// provisioned reports whether hour h of the pool's resource is marked
// provisioned (an ordered read sees the #HOUR marker) and how many of its
// node-hours are stored.
func (e *env) provisioned(tb testing.TB, pr capacity.PoolResource, h capacity.Hour) (bool, int) {
	tb.Helper()
	// Above every node's fit: only the marker is in range.
	_, scan, err := e.store.Candidates(context.Background(), pr, h, api.MaxNodeSize+1, 1, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return scan.Provisioned, len(e.storedNodeHours(tb, pr.PoolID, pr.Resource, pr.Topology, h))
}

// A pool too big to provision in one pass's time: every pass, under a
// short deadline, stops provisioning before it — no error, no lag (the
// pool's only due work is provisioning ahead) — keeps what it put, and the
// passes together finish it, each node-hour put once.
func TestProvisioningStopsBeforeTheDeadline(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const nodes, horizon = 1500, 2
	p := e.pool(t, "acme", "big", map[string]int{"gpu": nodes * api.DefaultNodeSize})
	pr := capacity.PoolResource{PoolID: p.PoolID, Topology: p.Topology("gpu")}
	first := capacity.HourOf(e.clock.Now())
	rc := e.reconciler()
	rc.Capacity.ProvisionHours = horizon
	const deadline = 2 * time.Second
	e.rt.Reset()
	cut, passes, hours := 0, 0, 0
	for passes < 60 {
		// Each pass a minute after the last (still within the hour): an
		// overdue pool would show as a minute's lag.
		e.clock.Advance(time.Minute)
		pctx, cancel := context.WithTimeout(ctx, deadline)
		began := time.Now()
		res, err := rc.Pass(pctx)
		took := time.Since(began)
		cancel()
		if err != nil || res.Errors != 0 {
			t.Fatalf("pass %d: %v, %d errors (%+v)", passes+1, err, res.Errors, res)
		}
		if res.Found == 0 {
			break // done: the pool is due at the next hour
		}
		passes++
		hours += res.Provisioned
		if res.Lag != 0 {
			t.Errorf("pass %d: lag %v while the pool's only due work is provisioning ahead", passes, res.Lag)
		}
		if took >= deadline {
			t.Errorf("pass %d took %v, past its %v deadline", passes, took, deadline)
		}
		if res.Cut > 0 {
			cut++
			// What it put stays: some node-hours of the hour in progress,
			// or whole hours before it.
			stored := 0
			for h := first; h < first+horizon; h++ {
				_, n := e.provisioned(t, pr, h)
				stored += n
			}
			if stored == 0 {
				t.Errorf("pass %d was cut short with nothing stored", passes)
			}
		}
	}
	if cut == 0 {
		t.Fatalf("no pass was cut short by its deadline (%d passes): the pool is too small to test it", passes)
	}
	if hours != horizon {
		t.Errorf("passes counted %d hours provisioned, want %d", hours, horizon)
	}
	for h := first; h < first+horizon; h++ {
		if ok, n := e.provisioned(t, pr, h); !ok || n != nodes {
			t.Errorf("hour +%d: marker %v, %d node-hours, want %d", h-first, ok, n, nodes)
		}
	}
	// Each node-hour is put once: a cut hour goes on where it stopped. The
	// rest is a few calls per pass (the due index, the pool, the marker
	// reads and the stored-node query of each hour).
	calls := e.rt.Count()
	t.Logf("%d node-hours in %d passes (%d cut at the %v deadline), %d DynamoDB calls", nodes*horizon, passes, cut, deadline, calls)
	if limit := int64(nodes*horizon + 40*(passes+1)); calls > limit {
		t.Errorf("%d DynamoDB calls to provision %d node-hours in %d passes, want at most %d (node-hours put again?)", calls, nodes*horizon, passes, limit)
	}
	// And a reservation placed meanwhile was left alone by provisioning.
	e.offer(t, "acme", "big", "acme", "gpu", 1000)
	if r := must(e.svc.Admission().Create(ctx, e.req("acme", "big", "gpu", 8, 0, time.Hour), allow)); r.State != api.Placed {
		t.Fatalf("%+v", r)
	}
	e.check(t)
}

// BenchmarkProvisionBigPool provisions a 100,000-device pool (12,500 nodes
// of 8, ProvisionHours ahead; BC_BENCH_PROVISION_HOURS overrides the
// horizon) against dynalite with a pass every few seconds under make run's
// 30-s deadline, and runs a few one-node creates in the hour in
// progress while it does. One run: b.N is ignored. docs/capacity.md
// ("Provisioning big pools") reads these numbers.
func BenchmarkProvisionBigPool(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	horizon := capacity.ProvisionHours
	if v, err := strconv.Atoi(os.Getenv("BC_BENCH_PROVISION_HOURS")); err == nil && v > 0 {
		horizon = v
	}
	const devices = 100_000
	p := e.pool(b, "acme", "big", map[string]int{"gpu": devices})
	e.offer(b, "acme", "big", "acme", "gpu", devices)
	pr := capacity.PoolResource{PoolID: p.PoolID, Topology: p.Topology("gpu")}
	rc := e.reconciler()
	rc.Capacity.ProvisionHours = horizon
	all := &meter.Meter{}
	rc.Capacity.Service.Store = &capacitydb.Store{DB: devstackClient(b, e, dynamo.MeterAll(all)), Table: e.store.Table}
	rc.Due = rc.Capacity.Service.Store.(reconcile.DueStore)
	// Creates through their own client, metered per request (as the
	// gateway meters each request).
	metered := &capacity.Service{Store: &capacitydb.Store{DB: devstackClient(b, e, dynamo.Metered), Table: e.store.Table},
		Now: e.clock.Now, Logger: e.svc.Logger}
	var creates []time.Duration
	var createCalls, createCuts []float64
	began := time.Now()
	passes, cut, maxLag := 0, 0, time.Duration(0)
	for b.Loop() {
		for passes < 10_000 {
			e.clock.Advance(5 * time.Second) // make run's period
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			res, err := rc.Pass(pctx)
			cancel()
			if err != nil || res.Errors != 0 {
				b.Fatalf("pass %d: %v, %d errors", passes+1, err, res.Errors)
			}
			if res.Found == 0 {
				break
			}
			passes++
			maxLag = max(maxLag, res.Lag)
			if res.Cut > 0 {
				cut++
			}
			if passes%3 == 1 { // a create between passes, in the hour being provisioned
				m := &meter.Meter{}
				t0 := time.Now()
				if _, err := metered.Admission().Create(meter.With(ctx, m), e.req("acme", "big", "gpu", 8, 0, 30*time.Minute), allow); err != nil {
					b.Fatalf("create: %v", err)
				}
				creates = append(creates, time.Since(t0))
				u := m.Usage()
				createCalls = append(createCalls, float64(u.Calls))
				createCuts = append(createCuts, u.RCU+u.WCU)
			}
		}
	}
	took := time.Since(began)
	first := capacity.HourOf(e.clock.Now())
	if ok, n := e.provisioned(b, pr, first+capacity.Hour(horizon)-1); !ok || n != pr.Nodes() {
		b.Fatalf("last hour: marker %v, %d node-hours, want %d", ok, n, pr.Nodes())
	}
	u := all.Usage()
	slices.Sort(creates)
	b.ReportMetric(float64(pr.Nodes()*horizon), "node-hours")
	b.ReportMetric(took.Seconds(), "s")
	b.ReportMetric(float64(passes), "passes")
	b.ReportMetric(float64(cut), "cut")
	b.ReportMetric(float64(u.Calls), "ddb-calls")
	b.ReportMetric(u.WCU, "wcu")
	b.ReportMetric(maxLag.Seconds(), "max-lag-s")
	if len(creates) > 0 {
		b.ReportMetric(float64(len(creates)), "creates")
		b.ReportMetric(float64(creates[len(creates)/2].Microseconds())/1000, "create-p50-ms")
		b.ReportMetric(float64(creates[len(creates)-1].Microseconds())/1000, "create-max-ms")
		b.ReportMetric(mean(createCalls), "calls/create")
		b.ReportMetric(mean(createCuts), "units/create")
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
