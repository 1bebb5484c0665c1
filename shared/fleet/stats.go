package fleet

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/metrics"
)

// The metrics of a pool's sweep line (PoolStats.Emit), one EMF record per
// pool and sweep, under the dimension sets [Table, Pool] and [Table]: the
// pool's nodes by state, the age of their last heartbeat, the nodes silent
// past the unreachable limit, those of them held back by a mass silence,
// and whether the pool is in one. The CDK app graphs and alarms on these
// names (infra/stack/observability.go).
const (
	MetricNodesRegistered  = "NodesRegistered"
	MetricNodesReady       = "NodesReady"
	MetricNodesUnhealthy   = "NodesUnhealthy"
	MetricNodesUnreachable = "NodesUnreachable"
	MetricHeartbeatAgeP50  = "HeartbeatAgeP50"
	MetricHeartbeatAgeP99  = "HeartbeatAgeP99"
	MetricNodesSilent      = "NodesSilent"
	MetricNodesHeld        = "NodesHeld"
	MetricPoolDisrupted    = "PoolDisrupted"
	// MetricNodesSplitView counts the nodes that reported a release log
	// checkpoint the log never had (Record.LogSplit): evidence of a split
	// view, alarmed on.
	MetricNodesSplitView = "NodesSplitView"
	DimensionPool        = "Pool"
)

// StateMetrics names the count metric of each node state.
var StateMetrics = map[api.NodeState]string{
	api.Registered:  MetricNodesRegistered,
	api.Ready:       MetricNodesReady,
	api.Unhealthy:   MetricNodesUnhealthy,
	api.Unreachable: MetricNodesUnreachable,
}

// PoolStats accumulates one pool's nodes during the fleet sweep: Add each
// node record as read, set Silent, Held and Disrupted from the sweep's
// verdict, then Emit once.
type PoolStats struct {
	States map[api.NodeState]int // nodes by state
	Ages   []time.Duration       // now − LastHeartbeatAt of the nodes that sent one
	// Silent: nodes silent past the unreachable limit (api.UnreachableAfter
	// intervals); Held: those of them the sweep did not mark unreachable
	// because of a mass silence; Disrupted: the pool is in one.
	Silent    int
	Held      int
	Disrupted bool
	SplitView int // nodes with a split view's evidence
}

// Add counts one node record as it stands at now.
func (ps *PoolStats) Add(rec Record, now time.Time) {
	if ps.States == nil {
		ps.States = map[api.NodeState]int{}
	}
	ps.States[rec.State]++
	if rec.LogSplit != nil {
		ps.SplitView++
	}
	if rec.LastHeartbeatAt != nil {
		ps.Ages = append(ps.Ages, max(0, now.Sub(*rec.LastHeartbeatAt)))
	}
}

// Nodes is the number of node records added.
func (ps PoolStats) Nodes() int {
	n := 0
	for _, c := range ps.States {
		n += c
	}
	return n
}

// AgePercentile is the q-th quantile (0 < q ≤ 1, nearest rank) of the
// heartbeat ages; ok false when no node has sent a heartbeat.
func (ps PoolStats) AgePercentile(q float64) (time.Duration, bool) {
	if len(ps.Ages) == 0 {
		return 0, false
	}
	ages := slices.Clone(ps.Ages)
	slices.Sort(ages)
	i := int(float64(len(ages))*q+0.999999) - 1 // ceil(n·q) − 1
	return ages[min(max(i, 0), len(ages)-1)], true
}

// Emit writes the pool's stats as one line that is a CloudWatch EMF record:
// the node counts, NodesSilent, NodesHeld and PoolDisrupted (0 or 1)
// always, the heartbeat ages (milliseconds) when some node has sent one.
func (ps PoolStats) Emit(logger *slog.Logger, table, poolID string, now time.Time) {
	ms := []metrics.Metric{
		{Name: MetricNodesRegistered, Unit: metrics.Count},
		{Name: MetricNodesReady, Unit: metrics.Count},
		{Name: MetricNodesUnhealthy, Unit: metrics.Count},
		{Name: MetricNodesUnreachable, Unit: metrics.Count},
		{Name: MetricNodesSilent, Unit: metrics.Count},
		{Name: MetricNodesHeld, Unit: metrics.Count},
		{Name: MetricPoolDisrupted, Unit: metrics.Count},
		{Name: MetricNodesSplitView, Unit: metrics.Count},
	}
	disrupted := 0
	if ps.Disrupted {
		disrupted = 1
	}
	attrs := []slog.Attr{
		slog.String(metrics.DimensionTable, table),
		slog.String(DimensionPool, poolID),
		slog.Int("nodes", ps.Nodes()),
	}
	for _, st := range api.NodeStates {
		attrs = append(attrs, slog.Int(StateMetrics[st], ps.States[st]))
	}
	attrs = append(attrs,
		slog.Int(MetricNodesSilent, ps.Silent),
		slog.Int(MetricNodesHeld, ps.Held),
		slog.Int(MetricPoolDisrupted, disrupted),
		slog.Int(MetricNodesSplitView, ps.SplitView),
	)
	if p50, ok := ps.AgePercentile(0.50); ok {
		p99, _ := ps.AgePercentile(0.99)
		ms = append(ms, metrics.Metric{Name: MetricHeartbeatAgeP50, Unit: metrics.Milliseconds},
			metrics.Metric{Name: MetricHeartbeatAgeP99, Unit: metrics.Milliseconds})
		attrs = append(attrs, slog.Int64(MetricHeartbeatAgeP50, p50.Milliseconds()), slog.Int64(MetricHeartbeatAgeP99, p99.Milliseconds()))
	}
	attrs = append(attrs, metrics.Attr(now, metrics.Directive{
		Dimensions: [][]string{{metrics.DimensionTable, DimensionPool}, {metrics.DimensionTable}},
		Metrics:    ms,
	}))
	logger.LogAttrs(context.Background(), slog.LevelInfo, "fleet pool", attrs...)
}
