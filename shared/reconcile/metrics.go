package reconcile

import (
	"context"
	"log/slog"
	"time"

	"github.com/bettercompute/control-plane/shared/metrics"
)

// The metrics of a pass's summary line: the lag (milliseconds between the
// oldest due item's dueAt and the pass), the transitions it made, the
// repairs it did, the sweeps, the reservations moved off failed nodes, and
// the release log's step (a registration settled; the audit failed), with
// the table as dimension. The CDK app alarms on and graphs these names.
const (
	MetricNamespace      = metrics.Namespace
	MetricLag            = "Lag"
	MetricTransitions    = "transitioned"
	MetricRepaired       = "repaired"
	MetricSwept          = "swept"
	MetricNodesMoved     = "NodesMoved"
	MetricLogFinished    = "LogSettled" // the metric's published name, kept from when finishing was called settling
	MetricLogAuditFailed = "LogAuditFailed"
	DimensionTable       = metrics.DimensionTable
)

// PassMetrics is the EMF directive of a pass's summary line.
var PassMetrics = metrics.Directive{
	Dimensions: [][]string{{DimensionTable}},
	Metrics: []metrics.Metric{
		{Name: MetricLag, Unit: metrics.Milliseconds},
		{Name: MetricTransitions, Unit: metrics.Count},
		{Name: MetricRepaired, Unit: metrics.Count},
		{Name: MetricSwept, Unit: metrics.Count},
		{Name: MetricNodesMoved, Unit: metrics.Count},
		{Name: MetricLogFinished, Unit: metrics.Count},
		{Name: MetricLogAuditFailed, Unit: metrics.Count},
	},
}

// Log writes the pass's summary as one line; in JSON (the Lambda's format)
// it is also a CloudWatch embedded-metric-format record of PassMetrics.
func (p PassResult) Log(ctx context.Context, logger *slog.Logger, table string) {
	lagMS := p.Lag.Milliseconds()
	level := slog.LevelInfo
	switch {
	case p.Errors > 0 || p.LogAuditFailed > 0:
		level = slog.LevelWarn
	case p.Found == 0 && p.LogFinished == 0:
		// An idle pass is not news (the local gateway runs one every 5 s);
		// the lag and log audit alarms treat the missing point as not
		// breaching. A failed audit is never idle: its point is published.
		level = slog.LevelDebug
	}
	logger.LogAttrs(ctx, level, "reconcile pass",
		slog.Int("found", p.Found),
		slog.Any("transitions", p.Transitions),
		slog.Int(MetricTransitions, p.TransitionCount()),
		slog.Int(MetricRepaired, p.Repaired),
		slog.Int(MetricSwept, p.Swept),
		slog.Int("settled", p.Settled),
		slog.Int("fleet", p.Fleet),
		slog.Int("told", p.Told),
		slog.Int(MetricNodesMoved, p.NodesMoved),
		slog.Int("provisioned", p.Provisioned),
		slog.Int("provisionCut", p.Cut),
		slog.Int("skipped", p.Skipped),
		slog.Int("errors", p.Errors),
		slog.Int(MetricLogFinished, p.LogFinished),
		slog.Int(MetricLogAuditFailed, p.LogAuditFailed),
		slog.Int64("logSize", p.LogSize),
		slog.Bool("stoppedEarly", p.Stopped),
		slog.Float64("took_ms", float64(p.Took.Microseconds())/1000),
		slog.String(DimensionTable, table),
		slog.Int64(MetricLag, lagMS),
		metrics.Attr(time.Now(), PassMetrics),
	)
}
