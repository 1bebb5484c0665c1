package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/jsii-runtime-go"

	"github.com/bettercompute/control-plane/infra/cfnspec"
	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/metrics"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// nagMessage is one annotation of a synthesis: the construct path it is
// on, its level (error, warning or info) and its text.
type nagMessage struct{ Path, Level, Text string }

// rulePack tells the rule packs' annotations from the stack's own.
var rulePack = regexp.MustCompile(`(AwsSolutions|Serverless)-`)

// findings are the rule packs' annotations on the tested stack (from the
// synthesis TestMain made).
func findings() []nagMessage {
	pack := assertions.Match_StringLikeRegexp(jsii.String(rulePack.String()))
	var out []nagMessage
	for level, found := range map[string]*[]*cxapi.SynthesisMessage{
		"error":   ann.FindError(jsii.String("*"), pack),
		"warning": ann.FindWarning(jsii.String("*"), pack),
		"info":    ann.FindInfo(jsii.String("*"), pack),
	} {
		for _, m := range *found {
			out = append(out, nagMessage{Path: *m.Id, Level: level, Text: fmt.Sprint(m.Entry.Data)})
		}
	}
	return out
}

// What an info finding of a suppressed rule says: the rule, and the
// suppression's appliesTo entry when it has one.
var (
	suppressedRule = regexp.MustCompile(`((?:AwsSolutions|Serverless)-[A-Za-z0-9]+) was triggered but suppressed`)
	appliesTo      = regexp.MustCompile(`^CdkNagSuppression\[([^\]]+)\]`)
)

// The AwsSolutions and Serverless packs find nothing that is not suppressed
// in code, and every suppression still matches a finding (a stale one would
// hide the next real finding on that resource).
func TestRulePacks(t *testing.T) {
	fns, err := Functions()
	if err != nil {
		t.Fatal(err)
	}
	perPack := checkRulePacks(t, findings(), *stack.Node().Path(), Suppressions(tested, fns))
	t.Logf("suppressed findings by pack: %v", perPack)
}

// checkRulePacks fails t for every unsuppressed error or warning of the
// rule packs among msgs (a synthesis' annotations) and for every
// suppression of sups that matches none of its findings on the stack at
// stackPath. It returns the suppressed findings' count per pack.
func checkRulePacks(t *testing.T, msgs []nagMessage, stackPath string, sups []Suppression) map[string]int {
	t.Helper()
	suppressed := map[string]bool{}
	perPack := map[string]int{}
	for _, m := range msgs {
		if !rulePack.MatchString(m.Text) {
			continue
		}
		if m.Level == "error" || m.Level == "warning" {
			t.Errorf("unsuppressed %s at %s: %s", m.Level, m.Path, strings.TrimSpace(m.Text))
			continue
		}
		rule := suppressedRule.FindStringSubmatch(m.Text)
		if rule == nil {
			continue
		}
		applies := appliesTo.FindStringSubmatch(m.Text)
		key := m.Path + " " + rule[1]
		if applies != nil {
			key += " " + applies[1]
		}
		suppressed[key] = true
		perPack[strings.SplitN(rule[1], "-", 2)[0]]++
	}
	for _, s := range sups {
		if s.Rule == "" || len(s.Resources) == 0 || len(s.Reason) < 40 {
			t.Errorf("suppression %+v: every suppression names its rule, its resources and a reason", s)
		}
		for _, r := range s.Resources {
			keys := []string{"/" + stackPath + "/" + r + " " + s.Rule}
			if len(s.AppliesTo) > 0 {
				keys = nil
				for _, a := range s.AppliesTo {
					keys = append(keys, "/"+stackPath+"/"+r+" "+s.Rule+" "+a)
				}
			}
			for _, k := range keys {
				if !suppressed[k] {
					t.Errorf("suppression %s matches no finding (stale: remove it)", k)
				}
			}
		}
	}
	return perPack
}

// Every resource's properties are what CloudFormation's registry schemas
// accept (the spec of @aws-cdk/aws-service-spec, pinned by package-lock.json).
func TestTemplateMatchesRegistrySchemas(t *testing.T) {
	spec, err := cfnspec.Load(filepath.Join("..", "..", cfnspec.DBPath))
	if err != nil {
		t.Fatal(err)
	}
	found, err := spec.Validate(tmplJSON)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s", f)
	}
	counts := map[string]int{}
	for _, r := range res {
		counts[r.Type]++
	}
	t.Logf("%d resources checked: %v", len(res), counts)
}

// records are real EMF lines: a request answered ok, one answered with an
// error code, a reconciler pass summary, a pool's fleet sweep record, and a
// rollout transition.
func records(t *testing.T) map[string]metrics.Point {
	t.Helper()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	admin := &iam.Policy{Grants: []iam.Grant{{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}}}}
	g := &api.Gateway{Decider: admin, Logger: logger, Table: "bc-table"}
	ep := api.Bind(api.Lookup("pools.get"), func(_ context.Context, _ *api.Call, in *api.GetPoolInput) (any, error) {
		if in.PoolID == "missing" {
			return nil, apierr.New(apierr.NotFound, "no pool")
		}
		return map[string]string{"poolId": in.PoolID}, nil
	})
	for _, pool := range []string{"p1", "missing"} {
		g.Serve(context.Background(), ep, events.APIGatewayV2HTTPRequest{Version: "2.0",
			Body: `{"tenantId":"acme","poolId":"` + pool + `"}`,
			RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "r-" + pool,
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"},
				Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
					JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "admin"}}}}})
	}
	reconcile.PassResult{Found: 2, Transitions: map[string]int{"active": 1}, Repaired: 1, NodesMoved: 1, Lag: 2 * time.Second}.
		Log(context.Background(), logger, "bc-table")
	var ps fleet.PoolStats
	at := time.Now().Add(-10 * time.Second)
	ps.Add(fleet.Record{Node: api.Node{NodeID: "gpu-node-0", State: api.Ready, LastHeartbeatAt: &at}}, time.Now())
	ps.Emit(logger, "bc-table", "p1", time.Now())
	// Stand-in for shared/rollout's transition record (metrics.go, another
	// change): the shape that file writes, with the names the stack uses.
	// Replace with its emitter once it is in the tree.
	logger.LogAttrs(context.Background(), slog.LevelInfo, "rollout transition",
		slog.String(DimensionTable, "bc-table"), slog.String(DimensionState, "aborting"), slog.Int(MetricRolloutTransitions, 1),
		metrics.Attr(time.Now(), metrics.Directive{Dimensions: [][]string{{DimensionTable, DimensionState}},
			Metrics: []metrics.Metric{{Name: MetricRolloutTransitions, Unit: metrics.Count}}}))
	out := map[string]metrics.Point{}
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 5 {
		t.Fatalf("%d log lines, want 5:\n%s", len(lines), buf.Bytes())
	}
	for _, line := range lines {
		points, ok, err := metrics.Parse(line)
		if err != nil || !ok {
			t.Fatalf("not an EMF record (%v): %s", err, line)
		}
		for _, p := range points {
			out[p.Key()] = p
		}
	}
	return out
}

// Every BetterCompute metric the dashboard graphs or an alarm watches is one
// the functions' EMF records publish, with the same dimensions.
func TestDashboardAndAlarmMetricsExistInTheRecords(t *testing.T) {
	published := records(t)
	var used []string
	for _, r := range ofType("AWS::CloudWatch::Dashboard") {
		used = append(used, dashboardMetrics(t, r.Properties["DashboardBody"])...)
	}
	key := func(m any) {
		if path(m, "Namespace") != MetricNamespace {
			return
		}
		var dims []string
		for _, d := range path(m, "Dimensions").([]any) {
			dims = append(dims, path(d, "Name").(string))
		}
		used = append(used, metrics.Key(MetricNamespace, path(m, "MetricName").(string), dims...))
	}
	for _, a := range ofType("AWS::CloudWatch::Alarm") {
		key(a.Properties) // an alarm on one metric
		ms, _ := a.Properties["Metrics"].([]any)
		for _, m := range ms { // or on metric math
			if stat := path(m, "MetricStat", "Metric"); stat != nil {
				key(stat)
			}
		}
	}
	seen := map[string]bool{}
	for _, k := range used {
		seen[k] = true
		if _, ok := published[k]; !ok {
			t.Errorf("the dashboard or an alarm uses %s, which no record publishes", k)
		}
	}
	// And what operators asked for is there: latency and cost by method,
	// answers by code, the reconciler's transitions, repairs, sweeps, lag
	// and release log audit.
	for _, k := range []string{
		metrics.Key(MetricNamespace, api.MetricLatency, DimensionTable, api.DimensionMethod),
		metrics.Key(MetricNamespace, api.MetricLatency, DimensionTable, api.DimensionOutcome),
		metrics.Key(MetricNamespace, api.MetricLatency, DimensionTable),
		metrics.Key(MetricNamespace, api.MetricRCU, DimensionTable, api.DimensionMethod),
		metrics.Key(MetricNamespace, api.MetricWCU, DimensionTable, api.DimensionMethod),
		metrics.Key(MetricNamespace, api.MetricDynamoCalls, DimensionTable, api.DimensionMethod),
		metrics.Key(MetricNamespace, MetricTransitions, DimensionTable),
		metrics.Key(MetricNamespace, MetricRepaired, DimensionTable),
		metrics.Key(MetricNamespace, MetricSwept, DimensionTable),
		metrics.Key(MetricNamespace, MetricLag, DimensionTable),
		metrics.Key(MetricNamespace, MetricNodesMoved, DimensionTable),
		metrics.Key(MetricNamespace, MetricLogAuditFailed, DimensionTable),
		metrics.Key(MetricNamespace, MetricNodesReady, DimensionTable),
		metrics.Key(MetricNamespace, MetricNodesReady, DimensionTable, DimensionPool),
		metrics.Key(MetricNamespace, MetricNodesUnreachable, DimensionTable, DimensionPool),
		metrics.Key(MetricNamespace, MetricHeartbeatAgeP50, DimensionTable, DimensionPool),
		metrics.Key(MetricNamespace, MetricHeartbeatAgeP99, DimensionTable, DimensionPool),
		metrics.Key(MetricNamespace, MetricNodesHeld, DimensionTable),
		metrics.Key(MetricNamespace, MetricPoolDisrupted, DimensionTable),
		metrics.Key(MetricNamespace, MetricRolloutTransitions, DimensionTable, DimensionState),
	} {
		if !seen[k] {
			t.Errorf("the dashboard does not show %s", k)
		}
	}
}

var searchExpr = regexp.MustCompile(`SEARCH\('\{([^,}]+),([^}]+)\} MetricName="([^"]+)"`)

func lastOf(m []any) any {
	if len(m) == 0 {
		return nil
	}
	return m[len(m)-1]
}

// dashboardMetrics reads the dashboard body (a Fn::Join of JSON text and
// references) and returns the keys of its BetterCompute metrics.
func dashboardMetrics(t *testing.T, body any) []string {
	t.Helper()
	var text strings.Builder
	parts, _ := path(body, "Fn::Join").([]any)
	if len(parts) != 2 {
		t.Fatalf("dashboard body %s", jsonOf(body))
	}
	for _, p := range parts[1].([]any) {
		if s, ok := p.(string); ok {
			text.WriteString(s)
		} else {
			text.WriteString("REF") // a reference inside a JSON string
		}
	}
	var d struct {
		Widgets []struct {
			Properties struct {
				Metrics [][]any `json:"metrics"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	if err := json.Unmarshal([]byte(text.String()), &d); err != nil {
		t.Fatalf("dashboard body: %v\n%s", err, text.String())
	}
	var out []string
	for _, w := range d.Widgets {
		for _, m := range w.Properties.Metrics {
			// A search over the pools' series: {namespace,dims…} MetricName="…".
			if e, ok := path(lastOf(m), "expression").(string); ok {
				if sm := searchExpr.FindStringSubmatch(e); sm != nil && sm[1] == MetricNamespace {
					out = append(out, metrics.Key(MetricNamespace, sm[3], strings.Split(sm[2], ",")...))
				}
				continue
			}
			if len(m) < 2 || m[0] != MetricNamespace {
				continue
			}
			var dims []string
			for i := 2; i+1 < len(m); i += 2 {
				if name, ok := m[i].(string); ok {
					dims = append(dims, name)
				}
			}
			out = append(out, metrics.Key(MetricNamespace, m[1].(string), dims...))
		}
	}
	if len(out) == 0 {
		t.Fatalf("the dashboard graphs no %s metric", MetricNamespace)
	}
	return out
}
