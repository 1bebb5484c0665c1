package fleet_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/metrics"
)

// emitted runs Emit into a JSON logger and returns the one line, checked
// against the EMF specification, and its points by key.
func emitted(t *testing.T, ps fleet.PoolStats, now time.Time) map[string]metrics.Point {
	t.Helper()
	var buf bytes.Buffer
	ps.Emit(slog.New(slog.NewJSONHandler(&buf, nil)), "bc-table", "pool-a", now)
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1:\n%s", len(lines), buf.Bytes())
	}
	points, ok, err := metrics.Parse(lines[0])
	if err != nil || !ok {
		t.Fatalf("not an EMF record (ok %v): %v\n%s", ok, err, lines[0])
	}
	out := map[string]metrics.Point{}
	for _, p := range points {
		out[p.Key()] = p
	}
	return out
}

func value(t *testing.T, pts map[string]metrics.Point, name, unit string, dims ...string) float64 {
	t.Helper()
	p, ok := pts[metrics.Key(metrics.Namespace, name, dims...)]
	if !ok {
		t.Errorf("no %s%v in the record", name, dims)
		return -1
	}
	if p.Unit != unit || len(p.Values) != 1 {
		t.Errorf("%s%v: unit %q values %v, want %s and one value", name, dims, p.Unit, p.Values, unit)
		return -1
	}
	return p.Values[0]
}

// 100 nodes built in memory: 90 ready with ages 1..90 s, 5 unhealthy
// (91..95 s), 3 unreachable (1000 s), 2 registered with no heartbeat.
func TestPoolStats(t *testing.T) {
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	var ps fleet.PoolStats
	add := func(st api.NodeState, age time.Duration) {
		rec := fleet.Record{Node: api.Node{NodeID: fmt.Sprintf("n-%d", ps.Nodes()), State: st}}
		if age >= 0 {
			at := now.Add(-age)
			rec.LastHeartbeatAt = &at
		}
		ps.Add(rec, now)
	}
	for i := 1; i <= 90; i++ {
		add(api.Ready, time.Duration(i)*time.Second)
	}
	for i := 91; i <= 95; i++ {
		add(api.Unhealthy, time.Duration(i)*time.Second)
	}
	for range 3 {
		add(api.Unreachable, 1000*time.Second)
	}
	add(api.Registered, -1)
	add(api.Registered, -1)
	ps.Silent, ps.Held, ps.Disrupted = 4, 4, true
	// Two of the ready nodes reported a root the release log never had.
	for range 2 {
		ps.Add(fleet.Record{Node: api.Node{State: api.Ready}, LogSplit: &api.LogSplit{Size: 3, Root: "x"}}, now)
	}

	if ps.Nodes() != 102 {
		t.Fatalf("%d nodes, want 102", ps.Nodes())
	}
	// 98 ages: nearest rank p50 is the 49th (49 s), p99 the 98th (1000 s).
	if p50, _ := ps.AgePercentile(0.5); p50 != 49*time.Second {
		t.Errorf("p50 %v, want 49s", p50)
	}
	if p99, _ := ps.AgePercentile(0.99); p99 != 1000*time.Second {
		t.Errorf("p99 %v, want 1000s", p99)
	}

	pts := emitted(t, ps, now)
	for _, dims := range [][]string{{metrics.DimensionTable, fleet.DimensionPool}, {metrics.DimensionTable}} {
		for name, want := range map[string]float64{
			fleet.MetricNodesRegistered: 2, fleet.MetricNodesReady: 92, fleet.MetricNodesUnhealthy: 5,
			fleet.MetricNodesUnreachable: 3, fleet.MetricNodesSilent: 4, fleet.MetricNodesHeld: 4, fleet.MetricPoolDisrupted: 1,
			fleet.MetricNodesSplitView: 2,
		} {
			if got := value(t, pts, name, metrics.Count, dims...); got != want {
				t.Errorf("%s%v = %v, want %v", name, dims, got, want)
			}
		}
		if got := value(t, pts, fleet.MetricHeartbeatAgeP50, metrics.Milliseconds, dims...); got != 49_000 {
			t.Errorf("%s%v = %v, want 49000", fleet.MetricHeartbeatAgeP50, dims, got)
		}
		if got := value(t, pts, fleet.MetricHeartbeatAgeP99, metrics.Milliseconds, dims...); got != 1_000_000 {
			t.Errorf("%s%v = %v, want 1000000", fleet.MetricHeartbeatAgeP99, dims, got)
		}
	}
	p := pts[metrics.Key(metrics.Namespace, fleet.MetricNodesReady, metrics.DimensionTable, fleet.DimensionPool)]
	if p.Dimensions[fleet.DimensionPool] != "pool-a" || p.Dimensions[metrics.DimensionTable] != "bc-table" {
		t.Errorf("dimensions %v", p.Dimensions)
	}
	if len(pts) != 2*10 {
		t.Errorf("%d points, want 10 metrics × 2 dimension sets", len(pts))
	}
}

// A pool whose nodes never sent a heartbeat publishes its counts and no
// heartbeat age (a made-up 0 would pull the graph down); not disrupted is 0.
func TestPoolStatsWithoutHeartbeats(t *testing.T) {
	now := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	var ps fleet.PoolStats
	for i := range 3 {
		ps.Add(fleet.Record{Node: api.Node{NodeID: fmt.Sprint(i), State: api.Registered}}, now)
	}
	if _, ok := ps.AgePercentile(0.5); ok {
		t.Errorf("an age percentile with no heartbeat")
	}
	pts := emitted(t, ps, now)
	if got := value(t, pts, fleet.MetricNodesRegistered, metrics.Count, metrics.DimensionTable); got != 3 {
		t.Errorf("registered %v, want 3", got)
	}
	if got := value(t, pts, fleet.MetricPoolDisrupted, metrics.Count, metrics.DimensionTable); got != 0 {
		t.Errorf("disrupted %v, want 0", got)
	}
	if _, ok := pts[metrics.Key(metrics.Namespace, fleet.MetricHeartbeatAgeP50, metrics.DimensionTable)]; ok {
		t.Errorf("a heartbeat age without heartbeats")
	}
	// An empty pool still says so (zeros), so a graph shows it empty.
	if got := value(t, emitted(t, fleet.PoolStats{}, now), fleet.MetricNodesReady, metrics.Count, metrics.DimensionTable); got != 0 {
		t.Errorf("empty pool: ready %v", got)
	}
}
