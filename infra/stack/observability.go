package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// The reconciler's lag metric, which the reconciler writes as a CloudWatch
// embedded metric format (EMF) record in its pass summary log line
// (capacity.PassResult.Log): milliseconds between the oldest due item's
// dueAt and the pass (0 when nothing is due), dimension Table = BC_TABLE.
const (
	MetricNamespace = capacity.MetricNamespace
	MetricLag       = capacity.MetricLag
	DimensionTable  = capacity.DimensionTable
)

// Alarm thresholds (documented in docs/infrastructure.md).
const (
	api5xxPerFiveMinutes        = 5             // 5xx responses in 5 minutes
	reconcilerErrorsFiveMinutes = 3             // failed passes in 5 minutes (of ~5)
	reconcilerLagMillis         = 5 * 60 * 1000 // due work overdue by 5 minutes
)

// addObservability creates the alarms, their SNS topic and the dashboard.
func (s *Stack) addObservability(cfg Config, fns []Function) {
	topic := awssns.NewTopic(s.Stack, jsii.String("Alarms"), &awssns.TopicProps{
		DisplayName: jsii.String("Better Compute alarms"),
		EnforceSSL:  jsii.Bool(true),
	})
	if cfg.AlarmEmail != "" {
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.AlarmEmail), nil))
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

	alarm("Api5xxAlarm", "API answered 5xx (UNAVAILABLE or INTERNAL): check the functions' logs by requestId",
		s.API.MetricServerError(sum), api5xxPerFiveMinutes, gte, quiet)
	for _, f := range fns {
		alarm(f.Name+"-ThrottlesAlarm", "Lambda "+f.Name+" was throttled (account concurrency or stage limits)",
			s.Lambdas[f.Name].MetricThrottles(sum), 1, gte, quiet)
	}
	reconciler := s.Lambdas[api.ReconcilerFunction]
	alarm("ReconcilerErrorsAlarm", "Reconciler passes are failing: reservations stop moving and crashed creates stay unrepaired",
		reconciler.MetricErrors(sum), reconcilerErrorsFiveMinutes, gte, quiet)
	alarm("ReconcilerNotRunningAlarm", "The reconciler has not been invoked for 5 minutes (schedule disabled or delivery failing)",
		reconciler.MetricInvocations(sum), 1, awscloudwatch.ComparisonOperator_LESS_THAN_THRESHOLD,
		awscloudwatch.TreatMissingData_BREACHING)
	lag := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(MetricNamespace),
		MetricName:    jsii.String(MetricLag),
		DimensionsMap: &map[string]*string{DimensionTable: s.Table.TableName()},
		Statistic:     jsii.String("Maximum"),
		Period:        five,
		Unit:          awscloudwatch.Unit_MILLISECONDS, // as emitted: an alarm on another unit sees no data
	})
	alarm("ReconcilerLagAlarm", "Due reservation work is more than 5 minutes overdue (metric BetterCompute/Lag from the reconciler's EMF logs)",
		lag, reconcilerLagMillis, gte, quiet)
	dlqDepth := s.DLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
		Statistic: jsii.String("Maximum"), Period: five,
	})
	alarm("ReconcilerDLQAlarm", "EventBridge could not deliver reconciler ticks: see the messages in the dead-letter queue",
		dlqDepth, 1, gte, quiet)

	s.addDashboard(fns, alarms, lag, dlqDepth)
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
	label := func(o *awscloudwatch.MetricOptions, l string) *awscloudwatch.MetricOptions {
		c := *o
		c.Label = jsii.String(l)
		return &c
	}

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
		graph("Reconciler passes", 8, []awscloudwatch.IMetric{
			reconciler.MetricInvocations(label(opt("Sum"), "passes")),
			reconciler.MetricErrors(label(opt("Sum"), "failed")),
		}),
		graph("Reconciler lag (ms) and DLQ depth", 8, []awscloudwatch.IMetric{lag}, dlqDepth),
		graph("Table", 8, []awscloudwatch.IMetric{
			s.Table.MetricConsumedReadCapacityUnits(label(opt("Sum"), "read units")),
			s.Table.MetricConsumedWriteCapacityUnits(label(opt("Sum"), "write units")),
		}, s.Table.MetricConditionalCheckFailedRequests(label(opt("Sum"), "conditional check failed"))),
	)
}

func alarmRefs(alarms []awscloudwatch.IAlarm) *[]interfacesawscloudwatch.IAlarmRef {
	out := make([]interfacesawscloudwatch.IAlarmRef, len(alarms))
	for i, a := range alarms {
		out[i] = a
	}
	return &out
}
