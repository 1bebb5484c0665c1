package stack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/metrics"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// The metrics the functions write as CloudWatch embedded metric format (EMF)
// records in their logs: each request line (api.RequestMetrics) and each
// reconciler pass line (reconcile.PassMetrics), with dimension Table =
// BC_TABLE. CloudWatch Logs extracts them; no function calls PutMetricData.
const (
	MetricNamespace   = metrics.Namespace
	MetricLag         = reconcile.MetricLag
	MetricTransitions = reconcile.MetricTransitions
	MetricRepaired    = reconcile.MetricRepaired
	MetricSwept       = reconcile.MetricSwept
	MetricNodesMoved  = reconcile.MetricNodesMoved
	DimensionTable    = metrics.DimensionTable

	MetricLogAuditFailed = reconcile.MetricLogAuditFailed
)

// The fleet's metrics: each managed pool's sweep writes one record
// (fleet.PoolStats.Emit) under [Table, Pool] and [Table].
const (
	MetricNodesRegistered  = fleet.MetricNodesRegistered
	MetricNodesReady       = fleet.MetricNodesReady
	MetricNodesUnhealthy   = fleet.MetricNodesUnhealthy
	MetricNodesUnreachable = fleet.MetricNodesUnreachable
	MetricHeartbeatAgeP50  = fleet.MetricHeartbeatAgeP50
	MetricHeartbeatAgeP99  = fleet.MetricHeartbeatAgeP99
	MetricNodesSilent      = fleet.MetricNodesSilent
	MetricNodesHeld        = fleet.MetricNodesHeld
	MetricPoolDisrupted    = fleet.MetricPoolDisrupted
	MetricNodesSplitView   = fleet.MetricNodesSplitView
	DimensionPool          = fleet.DimensionPool
)

// Rollouts: one record per state transition, RolloutTransitions (Count 1)
// under [Table, State], written by shared/rollout (metrics.go). Literal
// names here, not imported: they must equal that file's constants.
const (
	MetricRolloutTransitions = "RolloutTransitions"
	DimensionState           = "State"
)

// RolloutStates are the State values of RolloutTransitions.
var RolloutStates = []string{"aborting", "aborted", "rolled_back", "completed"}

// nodeStateMetrics are the node counts by state, in fleet.States' order.
var nodeStateMetrics = []string{MetricNodesRegistered, MetricNodesReady, MetricNodesUnhealthy, MetricNodesUnreachable}

// Alarm thresholds (documented in docs/infrastructure.md).
const (
	api5xxPercent               = 5             // % of answers that are 5xx in 5 minutes …
	api5xxMinRequests           = 20            // … once there were this many requests,
	api5xxLowTraffic            = 5             // or this many 5xx when there were fewer
	reconcilerErrorsFiveMinutes = 3             // failed passes in 5 minutes (of ~5)
	reconcilerLagMillis         = 5 * 60 * 1000 // due work overdue by 5 minutes
	unreachablePercent          = 10            // % of the deployment's nodes unreachable over 10 minutes
)

// Alarm ids (construct ids; CloudFormation names them <stack>-<id>-<suffix>).
const (
	AlarmAPI5xxRate        = "Api5xxRateAlarm"
	AlarmLambdaThrottles   = "LambdaThrottlesAlarm"
	AlarmTableThrottles    = "TableThrottledRequestsAlarm"
	AlarmTableSystemErrors = "TableSystemErrorsAlarm"
	AlarmReconcilerErrors  = "ReconcilerErrorsAlarm"
	AlarmReconcilerStopped = "ReconcilerNotRunningAlarm"
	AlarmReconcilerLag     = "ReconcilerLagAlarm"
	AlarmReconcilerDLQ     = "ReconcilerDLQAlarm"
	AlarmReleaseLogAudit   = "ReleaseLogAuditAlarm"
	AlarmReleaseLogSplit   = "ReleaseLogSplitViewAlarm"
	AlarmEmailDLQ          = "AlarmEmailDLQAlarm"
	AlarmFleetMassSilence  = "FleetMassSilenceAlarm"
	AlarmFleetUnreachable  = "FleetUnreachableShareAlarm"
	AlarmRolloutAborting   = "RolloutAbortingAlarm"
)

// alarmEmailDLQ is the construct id of the alarm e-mail subscription's
// dead-letter queue.
const alarmEmailDLQ = "AlarmEmailDLQ"

// addObservability creates the alarms, their SNS topic and the dashboard.
func (s *Stack) addObservability(cfg Config, fns []Function) {
	topic := awssns.NewTopic(s.Stack, jsii.String("Alarms"), &awssns.TopicProps{
		DisplayName: jsii.String("Better Compute alarms"),
		EnforceSSL:  jsii.Bool(true),
	})
	if cfg.AlarmEmail != "" {
		// What SNS cannot deliver to the address (past its retries, or
		// refused) lands in the queue instead of being dropped, and
		// AlarmEmailDLQAlarm fires on its first message.
		s.AlarmDLQ = newDLQ(s.Stack, alarmEmailDLQ)
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.AlarmEmail),
			&awssnssubscriptions.EmailSubscriptionProps{DeadLetterQueue: s.AlarmDLQ}))
	} else {
		awscdk.Annotations_Of(topic).AddWarningV2(jsii.String("bettercompute:alarms-notify-nobody"),
			jsii.String("context "+CtxAlarmEmail+" is empty: the alarms notify an SNS topic nobody subscribes to "+
				"(set -c "+CtxAlarmEmail+"=… or subscribe to the topic yourself: docs/infrastructure.md, Alarms)"), nil)
	}
	notify := awscloudwatchactions.NewSnsAction(topic)
	five := awscdk.Duration_Minutes(jsii.Number(5))
	var alarms []awscloudwatch.IAlarm
	alarm := func(id, desc string, m awscloudwatch.IMetric, threshold float64, cmp awscloudwatch.ComparisonOperator, missing awscloudwatch.TreatMissingData) {
		a := awscloudwatch.NewAlarm(s.Stack, jsii.String(id), &awscloudwatch.AlarmProps{
			Metric:             m,
			AlarmDescription:   jsii.String(desc),
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: cmp,
			TreatMissingData:   missing,
		})
		a.AddAlarmAction(notify)
		a.AddOkAction(notify)
		alarms = append(alarms, a)
	}
	gte := awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD
	quiet := awscloudwatch.TreatMissingData_NOT_BREACHING
	sum := &awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: five}

	// A rate, so a busy hour's handful of UNAVAILABLE does not page while a
	// quiet API that fails every call still does.
	rate := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String(fmt.Sprintf("IF(requests >= %d, 100 * errors / requests, IF(errors >= %d, 100, 0))",
			api5xxMinRequests, api5xxLowTraffic)),
		UsingMetrics: &map[string]awscloudwatch.IMetric{
			"errors": s.API.MetricServerError(sum), "requests": s.API.MetricCount(sum),
		},
		Label:  jsii.String("5xx % of requests"),
		Period: five,
	})
	alarm(AlarmAPI5xxRate, fmt.Sprintf("At least %d%% of the API's answers were 5xx (UNAVAILABLE or INTERNAL) in 5 minutes (or %d 5xx under %d requests): check the functions' logs by requestId",
		api5xxPercent, api5xxLowTraffic, api5xxMinRequests), rate, api5xxPercent, gte, quiet)

	// One alarm for every function: Lambda's own total across the account's
	// functions in the region (the per-function lines are on the dashboard).
	// A math expression cannot sum 27 functions (alarms take at most 10
	// metrics).
	throttles := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String("AWS/Lambda"), MetricName: jsii.String("Throttles"),
		Statistic: jsii.String("Sum"), Period: five,
	})
	alarm(AlarmLambdaThrottles, "Lambda throttled invocations in this account and region (concurrency limit, or the reconciler's reserved 1 while a pass runs): see the dashboard's per-function throttles",
		throttles, 1, gte, quiet)

	ops := tableOperations(fns)
	alarm(AlarmTableThrottles, "DynamoDB throttled requests on the table (on-demand throttles past twice the previous peak, or a hot partition): requests answer UNAVAILABLE after the SDK's retries",
		s.Table.MetricThrottledRequestsForOperations(&awsdynamodb.OperationsMetricOptions{Operations: &ops, Period: five}), 1, gte, quiet)
	alarm(AlarmTableSystemErrors, "DynamoDB answered the table's requests with server errors (HTTP 500): requests answer UNAVAILABLE after the SDK's retries",
		s.Table.MetricSystemErrorsForOperations(&awsdynamodb.SystemErrorsForOperationsMetricOptions{Operations: &ops, Period: five}), 1, gte, quiet)

	reconciler := s.Lambdas[api.ReconcilerFunction]
	alarm(AlarmReconcilerErrors, "Reconciler passes are failing: reservations stop moving and crashed creates stay unrepaired",
		reconciler.MetricErrors(sum), reconcilerErrorsFiveMinutes, gte, quiet)
	alarm(AlarmReconcilerStopped, "The reconciler has not been invoked for 5 minutes (schedule disabled or delivery failing)",
		reconciler.MetricInvocations(sum), 1, awscloudwatch.ComparisonOperator_LESS_THAN_THRESHOLD,
		awscloudwatch.TreatMissingData_BREACHING)
	lag := s.passMetric(MetricLag, "Maximum", five, awscloudwatch.Unit_MILLISECONDS)
	alarm(AlarmReconcilerLag, "Due reservation work is more than 5 minutes overdue (metric BetterCompute/Lag from the reconciler's EMF logs)",
		lag, reconcilerLagMillis, gte, quiet)
	// The release log audits itself each pass; a pass whose
	// audit failed always publishes its point (it is never an idle one).
	alarm(AlarmReleaseLogAudit, "The reconciler's audit of the release log failed: the stored tree's root at the last signed size is not the signed checkpoint's root, or the stored checkpoint does not open under the log key. The table was changed outside the control plane (or a bug): see the reconciler's 'release log audit failed' line (size, checkpointRoot, treeRoot) and stop registering releases until it is explained",
		s.passMetric(MetricLogAuditFailed, "Maximum", five, awscloudwatch.Unit_COUNT), 1, gte, quiet)
	dlqDepth := s.DLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
		Statistic: jsii.String("Maximum"), Period: five,
	})
	alarm(AlarmReconcilerDLQ, "EventBridge could not deliver reconciler ticks: see the messages in the dead-letter queue",
		dlqDepth, 1, gte, quiet)
	if s.AlarmDLQ != nil {
		// It notifies the same topic: its own mail may not arrive either,
		// but the console, the dashboard and any other subscriber see it.
		alarm(AlarmEmailDLQ, "SNS could not deliver alarm notifications to the alarmEmail address: they are in the AlarmEmailDLQ queue (this alarm's own mail may not arrive either; check the subscription in the SNS console)",
			s.AlarmDLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
				Statistic: jsii.String("Maximum"), Period: five,
			}), 1, gte, quiet)
	}

	// The fleet. A mass silence: a pool's nodes went silent together and
	// the sweep holds their marking (docs/fleet.md) — the control plane or
	// the network failed, not the hosts.
	fleetMax := func(name string) awscloudwatch.IMetric {
		return s.emfMetric(name, nil, awscloudwatch.MetricProps{Statistic: jsii.String("Maximum"), Period: five, Unit: awscloudwatch.Unit_COUNT})
	}
	silence := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String("MAX([FILL(disrupted, 0), FILL(held, 0)])"),
		UsingMetrics: &map[string]awscloudwatch.IMetric{"disrupted": fleetMax(MetricPoolDisrupted), "held": fleetMax(MetricNodesHeld)},
		Label:        jsii.String("pools disrupted / nodes held"), Period: five,
	})
	alarm(AlarmFleetMassSilence, "Mass silence: a pool's nodes went silent together (PoolDisrupted, or NodesHeld ≥ 1) and the sweep holds them back from unreachable: check the API, the heartbeat route's throttles and the network, not the hosts (docs/fleet.md)",
		silence, 1, gte, quiet)
	// Unreachable share of the deployment's nodes: the [Table] sums of the
	// pools' sweep records over 10 minutes (every sweep counts every node).
	ten := awscdk.Duration_Minutes(jsii.Number(10))
	states := map[string]awscloudwatch.IMetric{}
	var total []string
	for i, name := range nodeStateMetrics {
		id := fmt.Sprintf("s%d", i)
		states[id] = s.emfMetric(name, nil, awscloudwatch.MetricProps{Statistic: jsii.String("Sum"), Period: ten, Unit: awscloudwatch.Unit_COUNT})
		total = append(total, "FILL("+id+", 0)")
	}
	share := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(fmt.Sprintf("IF((%[1]s) > 0, 100 * FILL(s3, 0) / (%[1]s), 0)", strings.Join(total, " + "))),
		UsingMetrics: &states, Label: jsii.String("unreachable % of nodes"), Period: ten,
	})
	alarm(AlarmFleetUnreachable, fmt.Sprintf("More than %d%% of the deployment's nodes were unreachable over 10 minutes (NodesUnreachable / all nodes, from the fleet sweep's records): see the dashboard's nodes by state per pool", unreachablePercent),
		share, unreachablePercent, awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, quiet)
	// A split view: a node reported a release log checkpoint the log never
	// had (the sweep's NodesSplitView, per deployment).
	alarm(AlarmReleaseLogSplit, "A node reported a release log checkpoint whose root the log never had at that size (NodesSplitView ≥ 1): someone showed it another history of the releases. It is told no release until it is re-registered; see nodes get's log.splitView and docs/releases.md (Reading a node's witness)",
		fleetMax(MetricNodesSplitView), 1, gte, quiet)
	aborting := s.emfMetric(MetricRolloutTransitions, map[string]string{DimensionState: "aborting"},
		awscloudwatch.MetricProps{Statistic: jsii.String("Sum"), Period: five, Unit: awscloudwatch.Unit_COUNT})
	alarm(AlarmRolloutAborting, "A rollout is aborting (failed nodes past its maxFailedNodes, or an operator's abort): its nodes go back to the release they ran (docs/rollouts.md)",
		aborting, 1, gte, quiet)

	s.addDashboard(fns, alarms, lag, dlqDepth)
}

// perPool is a search over the pools' [Table, Pool] series of one fleet
// metric of this deployment: one line per pool (pools are created at run
// time; a dashboard cannot list them).
func (s *Stack) perPool(name, stat, label string, period awscdk.Duration) awscloudwatch.IMetric {
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String(fmt.Sprintf(`SEARCH('{%s,%s,%s} MetricName="%s" %s="%s"', '%s', %d)`,
			MetricNamespace, DimensionPool, DimensionTable, name, DimensionTable, *s.Table.TableName(), stat, int(*period.ToSeconds(nil)))),
		Label: jsii.String(label), Period: period,
	})
}

// emfMetric is one of the functions' EMF metrics of this deployment: its
// dimension Table, more dimensions (method or outcome) when given, and p's
// statistic, period, label and unit.
func (s *Stack) emfMetric(name string, dims map[string]string, p awscloudwatch.MetricProps) awscloudwatch.Metric {
	d := map[string]*string{DimensionTable: s.Table.TableName()}
	for k, v := range dims {
		d[k] = jsii.String(v)
	}
	p.Namespace, p.MetricName, p.DimensionsMap = jsii.String(MetricNamespace), jsii.String(name), &d
	return awscloudwatch.NewMetric(&p)
}

// passMetric is one of the reconciler's pass metrics.
func (s *Stack) passMetric(name, stat string, period awscdk.Duration, unit awscloudwatch.Unit) awscloudwatch.Metric {
	return s.emfMetric(name, nil, awscloudwatch.MetricProps{
		Statistic: jsii.String(stat), Period: period,
		Unit: unit, // as emitted: an alarm on another unit sees no data
	})
}

// requestMetric is one of the request lines' metrics, per minute, with more
// dimensions (method or outcome) when given.
func (s *Stack) requestMetric(name, stat, label string, dims map[string]string) awscloudwatch.Metric {
	return s.emfMetric(name, dims, awscloudwatch.MetricProps{
		Statistic: jsii.String(stat), Label: jsii.String(label), Period: awscdk.Duration_Minutes(jsii.Number(1)),
	})
}

// tableOperations are the DynamoDB operations the functions may call (their
// declared actions), for the table's per-operation metrics.
func tableOperations(fns []Function) []awsdynamodb.Operation {
	seen := map[string]bool{}
	for _, f := range fns {
		for _, a := range slices.Concat(f.Access.TableItem, f.Access.TableQuery) {
			seen[strings.TrimPrefix(a, "dynamodb:")] = true
		}
	}
	var out []awsdynamodb.Operation
	for _, op := range []struct {
		action string
		op     awsdynamodb.Operation
	}{
		{"GetItem", awsdynamodb.Operation_GET_ITEM}, {"BatchGetItem", awsdynamodb.Operation_BATCH_GET_ITEM},
		{"Query", awsdynamodb.Operation_QUERY}, {"Scan", awsdynamodb.Operation_SCAN},
		{"PutItem", awsdynamodb.Operation_PUT_ITEM}, {"UpdateItem", awsdynamodb.Operation_UPDATE_ITEM},
		{"DeleteItem", awsdynamodb.Operation_DELETE_ITEM}, {"BatchWriteItem", awsdynamodb.Operation_BATCH_WRITE_ITEM},
		{"TransactGetItems", awsdynamodb.Operation_TRANSACT_GET_ITEMS}, {"TransactWriteItems", awsdynamodb.Operation_TRANSACT_WRITE_ITEMS},
	} {
		if seen[op.action] {
			out = append(out, op.op)
		}
	}
	return out
}

func (s *Stack) addDashboard(fns []Function, alarms []awscloudwatch.IAlarm, lag, dlqDepth awscloudwatch.IMetric) {
	one := awscdk.Duration_Minutes(jsii.Number(1))
	opt := func(stat string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Statistic: jsii.String(stat), Period: one}
	}
	graph := func(title string, width float64, left []awscloudwatch.IMetric, right ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		p := &awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Width: jsii.Number(width), Height: jsii.Number(6), Left: &left}
		if len(right) > 0 {
			p.Right = &right
		}
		return awscloudwatch.NewGraphWidget(p)
	}
	perFunction := func(metric func(name string) awscloudwatch.IMetric) []awscloudwatch.IMetric {
		out := make([]awscloudwatch.IMetric, 0, len(fns))
		for _, f := range fns {
			out = append(out, metric(f.Name))
		}
		return out
	}
	perMethod := func(metric func(m *api.Method, i int) awscloudwatch.IMetric) []awscloudwatch.IMetric {
		out := make([]awscloudwatch.IMetric, 0, len(api.Catalog))
		for i, m := range api.Catalog {
			out = append(out, metric(m, i))
		}
		return out
	}
	label := func(o *awscloudwatch.MetricOptions, l string) *awscloudwatch.MetricOptions {
		c := *o
		c.Label = jsii.String(l)
		return &c
	}
	method := func(m *api.Method) map[string]string { return map[string]string{api.DimensionMethod: m.Name} }

	d := awscloudwatch.NewDashboard(s.Stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
	})
	d.AddWidgets(awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
		Title: jsii.String("Alarms"), Width: jsii.Number(24), Height: jsii.Number(4), Alarms: alarmRefs(alarms),
	}))
	d.AddWidgets(
		graph("API requests and errors", 12, []awscloudwatch.IMetric{
			s.API.MetricCount(label(opt("Sum"), "requests")),
			s.API.MetricClientError(label(opt("Sum"), "4xx")),
			s.API.MetricServerError(label(opt("Sum"), "5xx")),
		}),
		graph("API latency (ms)", 12, []awscloudwatch.IMetric{
			s.API.MetricLatency(label(opt("p50"), "p50")),
			s.API.MetricLatency(label(opt("p99"), "p99")),
			s.API.MetricIntegrationLatency(label(opt("p99"), "integration p99")),
		}),
	)
	// From the request lines (EMF): what each method costs and how it answers.
	d.AddWidgets(
		graph("Latency p50 by method (ms, in the function)", 12, perMethod(func(m *api.Method, _ int) awscloudwatch.IMetric {
			return s.requestMetric(api.MetricLatency, "p50", m.Name, method(m))
		})),
		graph("Latency p99 by method (ms, in the function)", 12, perMethod(func(m *api.Method, _ int) awscloudwatch.IMetric {
			return s.requestMetric(api.MetricLatency, "p99", m.Name, method(m))
		})),
	)
	all := s.requestMetric(api.MetricLatency, "SampleCount", "answers", nil)
	var byCode []awscloudwatch.IMetric
	for i, c := range apierr.Codes {
		byCode = append(byCode, awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String(fmt.Sprintf("100 * FILL(c%d, 0) / answers", i)),
			UsingMetrics: &map[string]awscloudwatch.IMetric{
				fmt.Sprintf("c%d", i): s.requestMetric(api.MetricLatency, "SampleCount", string(c), map[string]string{api.DimensionOutcome: string(c)}),
				"answers":             all,
			},
			Label: jsii.String(string(c)), Period: one,
		}))
	}
	d.AddWidgets(
		graph("Answers by error code (% of all answers)", 8, byCode),
		graph("DynamoDB capacity units by method (read + write, sum)", 8, perMethod(func(m *api.Method, i int) awscloudwatch.IMetric {
			return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression: jsii.String(fmt.Sprintf("FILL(r%d, 0) + FILL(w%d, 0)", i, i)),
				UsingMetrics: &map[string]awscloudwatch.IMetric{
					fmt.Sprintf("r%d", i): s.requestMetric(api.MetricRCU, "Sum", m.Name+" read", method(m)),
					fmt.Sprintf("w%d", i): s.requestMetric(api.MetricWCU, "Sum", m.Name+" write", method(m)),
				},
				Label: jsii.String(m.Name), Period: one,
			})
		})),
		graph("DynamoDB round trips per request by method (average)", 8, perMethod(func(m *api.Method, _ int) awscloudwatch.IMetric {
			return s.requestMetric(api.MetricDynamoCalls, "Average", m.Name, method(m))
		})),
	)
	d.AddWidgets(
		graph("Function errors", 8, perFunction(func(n string) awscloudwatch.IMetric {
			return s.Lambdas[n].MetricErrors(label(opt("Sum"), n))
		})),
		graph("Function duration p99 (ms)", 8, perFunction(func(n string) awscloudwatch.IMetric {
			return s.Lambdas[n].MetricDuration(label(opt("p99"), n))
		})),
		graph("Function throttles", 8, perFunction(func(n string) awscloudwatch.IMetric {
			return s.Lambdas[n].MetricThrottles(label(opt("Sum"), n))
		})),
	)
	reconciler := s.Lambdas[api.ReconcilerFunction]
	d.AddWidgets(
		graph("Reconciler passes", 6, []awscloudwatch.IMetric{
			reconciler.MetricInvocations(label(opt("Sum"), "passes")),
			reconciler.MetricErrors(label(opt("Sum"), "failed")),
		}),
		graph("Reconciler transitions, repairs and sweeps", 6, []awscloudwatch.IMetric{
			s.passMetric(MetricTransitions, "Sum", one, awscloudwatch.Unit_COUNT),
			s.passMetric(MetricRepaired, "Sum", one, awscloudwatch.Unit_COUNT),
			s.passMetric(MetricSwept, "Sum", one, awscloudwatch.Unit_COUNT),
		}),
		graph("Reconciler lag (ms) and DLQ depth", 6, []awscloudwatch.IMetric{lag}, dlqDepth),
		graph("Table", 6, []awscloudwatch.IMetric{
			s.Table.MetricConsumedReadCapacityUnits(label(opt("Sum"), "read units")),
			s.Table.MetricConsumedWriteCapacityUnits(label(opt("Sum"), "write units")),
		}, s.Table.MetricConditionalCheckFailedRequests(label(opt("Sum"), "conditional check failed"))),
	)

	// The fleet, from the pools' sweep records (fleet.PoolStats) and the
	// reconciler's moves; rollouts from their transition records.
	count := func(name, stat, label string, dims map[string]string) awscloudwatch.IMetric {
		return s.emfMetric(name, dims, awscloudwatch.MetricProps{
			Statistic: jsii.String(stat), Label: jsii.String(label), Period: one, Unit: awscloudwatch.Unit_COUNT,
		})
	}
	var byState, byStatePerPool []awscloudwatch.IMetric
	for _, name := range nodeStateMetrics {
		byState = append(byState, count(name, "Sum", name, nil))
		byStatePerPool = append(byStatePerPool, s.perPool(name, "Maximum", name, one))
	}
	d.AddWidgets(
		graph("Nodes by state (all pools: sum of the minute's sweeps)", 8, byState),
		graph("Nodes by state per pool", 8, byStatePerPool),
		graph("Heartbeat age per pool (ms): p50, p99", 8, []awscloudwatch.IMetric{
			s.perPool(MetricHeartbeatAgeP50, "Maximum", "p50", one),
			s.perPool(MetricHeartbeatAgeP99, "Maximum", "p99", one),
		}),
	)
	var rollouts []awscloudwatch.IMetric
	for _, st := range RolloutStates {
		rollouts = append(rollouts, count(MetricRolloutTransitions, "Sum", st, map[string]string{DimensionState: st}))
	}
	d.AddWidgets(
		graph("Silent and held nodes; pools in a mass silence", 8, []awscloudwatch.IMetric{
			count(MetricNodesSilent, "Sum", "silent", nil),
			count(MetricNodesHeld, "Sum", "held (mass silence)", nil),
		}, count(MetricPoolDisrupted, "Maximum", "a pool disrupted (0/1)", nil)),
		graph("Reservations moved off failed nodes", 8, []awscloudwatch.IMetric{
			s.passMetric(MetricNodesMoved, "Sum", one, awscloudwatch.Unit_COUNT),
		}),
		graph("Rollouts by state reached (aborts and rollbacks)", 8, rollouts),
	)
}

func alarmRefs(alarms []awscloudwatch.IAlarm) *[]interfacesawscloudwatch.IAlarmRef {
	out := make([]interfacesawscloudwatch.IAlarmRef, len(alarms))
	for i, a := range alarms {
		out[i] = a
	}
	return &out
}
