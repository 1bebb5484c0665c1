package rollout

import (
	"context"
	"log/slog"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/metrics"
)

// MetricRolloutTransitions counts rollouts entering aborting, aborted,
// rolled_back or completed (one record per transition, value 1), published
// under DimensionState: the alarm on aborts and the dashboard read it.
const MetricRolloutTransitions = "RolloutTransitions"

// DimensionState names the state a rollout entered.
const DimensionState = "State"

// TransitionMetrics is the EMF directive of a transition's line.
var TransitionMetrics = metrics.Directive{
	Dimensions: [][]string{{metrics.DimensionTable, DimensionState}},
	Metrics:    []metrics.Metric{{Name: MetricRolloutTransitions, Unit: metrics.Count}},
}

// reported: the states whose entry is a metric.
func reported(s api.RolloutState) bool {
	return s == api.Aborting || s == api.Aborted || s == api.RolledBack || s == api.Completed
}

// logTransition writes one line when a rollout entered a reported state:
// in JSON (the Lambda's format) a CloudWatch EMF record of
// TransitionMetrics. Called after the write that made the change won, so
// a transition is counted once whatever races it.
func logTransition(ctx context.Context, logger *slog.Logger, table string, from api.RolloutState, r api.Rollout, at time.Time) {
	if logger == nil || from == r.State || !reported(r.State) {
		return
	}
	attrs := []slog.Attr{slog.String("rolloutId", r.RolloutID), slog.String("version", r.Version),
		slog.String("from", string(from)), slog.String("reason", r.Reason), slog.String(DimensionState, string(r.State))}
	if table != "" { // a dimension must be a non-empty string: without the table's name, a plain line
		attrs = append(attrs, slog.String(metrics.DimensionTable, table), slog.Int(MetricRolloutTransitions, 1),
			metrics.Attr(at, TransitionMetrics))
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "rollout transition", attrs...)
}
