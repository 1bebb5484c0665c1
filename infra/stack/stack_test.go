package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// The template is synthesized once for the package (each App starts a Node
// process); every test reads it.
var (
	tmpl     assertions.Template
	tmplJSON []byte              // tmpl.ToJSON(), marshalled
	res      map[string]resource // logical id → resource
	outs     map[string]any
	ids      = map[string]fnIDs{}  // function name → logical ids
	ref      = map[string]string{} // the stack's singletons → logical id
	tested   Config
	stack    awscdk.Stack
	ann      assertions.Annotations // the rule packs' (and the stack's own) messages
)

type resource struct {
	Type       string
	Properties map[string]any
}

type fnIDs struct{ Function, Role, Logs string }

// Values the test context sets, to see them arrive where they belong.
const (
	testIssuer = "https://issuer.test.example/"
	testPins   = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
)

var testAudience = []any{"aud-one", "aud-two"}

const (
	testSigner = "arn:aws:iam::123456789012:role/release-signer"
	testEmail  = "alarms@issuer.test.example"
)

func TestMain(m *testing.M) {
	code, err := synth(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "synth:", err)
		code = 1
	}
	jsii.Close()
	os.Exit(code)
}

func synth(m *testing.M) (int, error) {
	// The tested template uses cdk.json's context (feature flags, defaults),
	// so it is the one `cdk synth` produces, with a few values overridden.
	raw, err := os.ReadFile("../../cdk.json")
	if err != nil {
		return 0, err
	}
	var cdkJSON struct{ Context map[string]any }
	if err := json.Unmarshal(raw, &cdkJSON); err != nil {
		return 0, fmt.Errorf("cdk.json: %w", err)
	}
	dir, err := os.MkdirTemp("", "bc-infra-test-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	assets := filepath.Join(dir, "assets")
	if err := WritePlaceholders(assets); err != nil {
		return 0, err
	}
	// A folder that is not in the catalog must not become a function.
	if err := os.MkdirAll(filepath.Join(assets, "stray"), 0o755); err != nil {
		return 0, err
	}
	ctx := cdkJSON.Context
	ctx[CtxAssetRoot] = assets
	ctx[CtxJWTIssuer] = testIssuer
	ctx[CtxJWTAudience] = testAudience
	ctx[CtxReleasePins] = testPins
	ctx[CtxReleaseThreshold] = "2" // as -c gives it
	ctx[CtxReleaseSignerRole] = testSigner
	ctx[CtxHeartbeatReserved] = "250" // not the default: the value must arrive
	ctx[CtxHeartbeatRate] = "4000"
	ctx[CtxAlarmEmail] = testEmail
	app := awscdk.NewApp(&awscdk.AppProps{
		Context: &ctx, Outdir: jsii.String(filepath.Join(dir, "cdk.out")), StackTraces: jsii.Bool(false),
	})
	if tested, err = ConfigFrom(func(k string) any { return app.Node().TryGetContext(jsii.String(k)) }); err != nil {
		return 0, err
	}
	s, err := New(app, tested, nil)
	if err != nil {
		return 0, err
	}
	stack = s.Stack
	// Annotations_FromStack synthesizes the app (forced); Template_FromStack
	// then reuses that assembly: one synthesis for the package.
	ann = assertions.Annotations_FromStack(s.Stack)
	tmpl = assertions.Template_FromStack(s.Stack, nil)

	logical := func(c constructs.IConstruct) string {
		return *s.Stack.GetLogicalId(c.Node().DefaultChild().(awscdk.CfnElement))
	}
	for name, fn := range s.Lambdas {
		ids[name] = fnIDs{Function: logical(fn), Role: logical(s.Roles[name]),
			Logs: logical(fn.Node().Scope().Node().FindChild(jsii.String("Logs")))}
	}
	ref["table"] = logical(s.Table)
	ref["tableKey"] = logical(s.TableKey)
	ref["signingKey"] = logical(s.SigningKey)
	ref["logKey"] = logical(s.LogKey)
	ref["api"] = logical(s.API)
	ref["stage"] = logical(s.Stage)
	ref["dlq"] = logical(s.DLQ)
	ref["alarmDLQ"] = logical(s.AlarmDLQ)
	ref["cursorKey"] = logical(s.CursorKey)
	ref["schedule"] = logical(s.Schedule)

	var doc struct {
		Resources map[string]resource
		Outputs   map[string]any
	}
	if tmplJSON, err = json.Marshal(tmpl.ToJSON()); err != nil {
		return 0, err
	}
	if err := json.Unmarshal(tmplJSON, &doc); err != nil {
		return 0, err
	}
	res, outs = doc.Resources, doc.Outputs
	return m.Run(), nil
}

// check runs an assertions call; a failed match becomes a test error
// instead of a panic that ends the run.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

func ofType(typ string) map[string]resource {
	out := map[string]resource{}
	for id, r := range res {
		if r.Type == typ {
			out[id] = r
		}
	}
	return out
}

func getAtt(id, attr string) any { return map[string]any{"Fn::GetAtt": []any{id, attr}} }
func refTo(id string) any        { return map[string]any{"Ref": id} }

func equal(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func props(id string) map[string]any { return res[id].Properties }

// path walks nested maps ("Environment", "Variables", "BC_TABLE").
func path(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func TestOneFunctionPerMethodPlusReconciler(t *testing.T) {
	want := len(api.Catalog) + 2 // and the console
	check(t, "function count", func() { tmpl.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(want)) })
	if len(ids) != want {
		t.Fatalf("stack has %d functions, want %d", len(ids), want)
	}
	for _, m := range api.Catalog {
		id, ok := ids[m.FunctionName()]
		if !ok {
			t.Errorf("no function for %s", m.Name)
			continue
		}
		p := props(id.Function)
		mem, timeout := readSizing[0], readSizing[1]
		if m.Kind == api.Mutation {
			mem, timeout = mutationSizing[0], mutationSizing[1]
		}
		if p["MemorySize"] != mem || p["Timeout"] != timeout {
			t.Errorf("%s: memory %v timeout %v, want %v and %v (%s)", m.Name, p["MemorySize"], p["Timeout"], mem, timeout, m.Kind)
		}
	}
	if _, ok := ids[api.ReconcilerFunction]; !ok {
		t.Errorf("no reconciler function")
	}
	if id, ok := ids[api.ConsoleFunction]; !ok {
		t.Errorf("no console function")
	} else if p := props(id.Function); p["MemorySize"] != consoleSizing[0] || p["Timeout"] != consoleSizing[1] {
		t.Errorf("console: memory %v timeout %v", p["MemorySize"], p["Timeout"])
	}
	if _, ok := ids["stray"]; ok {
		t.Errorf("a folder outside the catalog became a function")
	}
	for name, id := range ids {
		p := props(id.Function)
		if p["Runtime"] != "provided.al2023" || p["Handler"] != "bootstrap" || !equal(p["Architectures"], []string{"arm64"}) {
			t.Errorf("%s: runtime %v handler %v architectures %v", name, p["Runtime"], p["Handler"], p["Architectures"])
		}
		if !equal(path(p, "Environment", "Variables", "BC_TABLE"), refTo(ref["table"])) {
			t.Errorf("%s: BC_TABLE is %v", name, path(p, "Environment", "Variables", "BC_TABLE"))
		}
		if v := path(p, "Environment", "Variables", "BC_IAM_URL"); v != tested.IAMURL {
			t.Errorf("%s: BC_IAM_URL is %v", name, v)
		}
		// The cursor key is read at cold start, only where cursors are made.
		vars := path(p, "Environment", "Variables").(map[string]any)
		if _, ok := vars["BC_CURSOR_KEY"]; ok {
			t.Errorf("%s: BC_CURSOR_KEY in the environment", name)
		}
		if pages := slices.Contains(declared(name).actions, api.ReadsCursorKey); pages != equal(vars["BC_CURSOR_SECRET_ARN"], refTo(ref["cursorKey"])) {
			t.Errorf("%s: BC_CURSOR_SECRET_ARN = %v, pages with cursors: %v", name, vars["BC_CURSOR_SECRET_ARN"], pages)
		}
		if !equal(p["LoggingConfig"], map[string]any{"ApplicationLogLevel": "INFO", "LogFormat": "JSON", "LogGroup": refTo(id.Logs), "SystemLogLevel": "INFO"}) {
			t.Errorf("%s: logging %v, want JSON with application and system levels", name, p["LoggingConfig"])
		}
		if !equal(p["TracingConfig"], map[string]any{"Mode": "Active"}) {
			t.Errorf("%s: tracing %v", name, p["TracingConfig"])
		}
		// Only the reconciler (1: one pass at a time) and the heartbeat
		// (sized for the fleet) reserve concurrency.
		want := map[string]any{api.ReconcilerFunction: 1.0, api.Lookup(HeartbeatMethod).FunctionName(): 250.0}[name]
		if reserved := p["ReservedConcurrentExecutions"]; reserved != want {
			t.Errorf("%s: reserved concurrency %v, want %v", name, reserved, want)
		}
		if !equal(p["Role"], getAtt(id.Role, "Arn")) {
			t.Errorf("%s: runs as %v, want its own role", name, p["Role"])
		}
	}
	check(t, "reconciler sizing", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{
			"Description": assertions.Match_StringLikeRegexp(jsii.String("reconciler")),
			"MemorySize":  reconcilerSizing[0], "Timeout": reconcilerSizing[1],
		})
	})
	if reconcilerSizing[1] >= ReconcilerPeriod {
		t.Errorf("reconciler timeout %v s is not below its period %d s: passes could overlap", reconcilerSizing[1], ReconcilerPeriod)
	}
}

func TestReleaseConfigReachesOnlyVerifiers(t *testing.T) {
	for name, id := range ids {
		vars := path(props(id.Function), "Environment", "Variables").(map[string]any)
		verifies := slices.Contains(declared(name).actions, "kms:GetPublicKey")
		if got := vars["BC_RELEASE_KMS_KEYS"]; verifies != (got != nil) || (got != nil && !equal(got, refTo(ref["signingKey"]))) {
			t.Errorf("%s: BC_RELEASE_KMS_KEYS = %v (verifies releases: %v)", name, got, verifies)
		}
		if verifies && (vars["BC_RELEASE_THRESHOLD"] != "2" || vars["BC_RELEASE_PINS"] != strings.TrimSpace(testPins)) {
			t.Errorf("%s: threshold %v pins %q", name, vars["BC_RELEASE_THRESHOLD"], vars["BC_RELEASE_PINS"])
		}
	}
	if vars := path(props(ids["releases-register"].Function), "Environment", "Variables").(map[string]any); vars["BC_RELEASE_KMS_KEYS"] == nil {
		t.Errorf("releases-register does not get the signing key id")
	}
}

// declaration is what the catalog (or, for the reconciler, the stack) says
// of a function.
type declaration struct {
	method  *api.Method // nil for the reconciler
	actions []string    // the IAM actions it may take
	indexes []string    // where its Query reads
}

func declared(fn string) declaration {
	if fn == api.ReconcilerFunction {
		return declaration{actions: ReconcilerActions, indexes: ReconcilerIndexes}
	}
	if fn == api.ConsoleFunction {
		actions, indexes, _ := ConsoleActions()
		return declaration{actions: actions, indexes: indexes}
	}
	for _, m := range api.Catalog {
		if m.FunctionName() == fn {
			return declaration{method: m, actions: m.Actions, indexes: m.Indexes}
		}
	}
	return declaration{}
}

func TestOneRoutePerMethodReachingItsFunction(t *testing.T) {
	check(t, "route count", func() {
		tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Route"), jsii.Number(len(api.Catalog)+len(ConsoleRoutes)))
	})
	routes := map[string]map[string]any{}
	for _, r := range ofType("AWS::ApiGatewayV2::Route") {
		routes[r.Properties["RouteKey"].(string)] = r.Properties
	}
	authorizers := ofType("AWS::ApiGatewayV2::Authorizer")
	if len(authorizers) != 1 {
		t.Fatalf("%d authorizers, want 1", len(authorizers))
	}
	var authID string
	for id := range authorizers {
		authID = id
	}
	for _, m := range api.Catalog {
		key := "POST " + m.Path()
		r, ok := routes[key]
		if !ok {
			t.Errorf("no route %s", key)
			continue
		}
		if r["AuthorizationType"] != "JWT" || !equal(r["AuthorizerId"], refTo(authID)) {
			t.Errorf("%s: authorization %v by %v, want JWT by the authorizer", key, r["AuthorizationType"], r["AuthorizerId"])
		}
		// Target is "integrations/<Ref integration>".
		parts, _ := path(r, "Target", "Fn::Join").([]any)
		var integ string
		if len(parts) == 2 {
			if p, ok := parts[1].([]any); ok && len(p) == 2 && p[0] == "integrations/" {
				integ, _ = path(p[1], "Ref").(string)
			}
		}
		ip := props(integ)
		fn := ids[m.FunctionName()].Function
		if ip == nil || ip["IntegrationType"] != "AWS_PROXY" || !equal(ip["IntegrationUri"], getAtt(fn, "Arn")) {
			t.Errorf("%s: integration %s is %v, want a proxy to %s", key, integ, ip, fn)
		}
		if ip != nil && ip["PayloadFormatVersion"] != "2.0" {
			t.Errorf("%s: payload format %v, want 2.0 (API Gateway v2 events)", key, ip["PayloadFormatVersion"])
		}
		// API Gateway may invoke the function, for this route only.
		found := false
		for _, p := range ofType("AWS::Lambda::Permission") {
			src, _ := json.Marshal(p.Properties["SourceArn"])
			if equal(p.Properties["FunctionName"], getAtt(fn, "Arn")) && strings.Contains(string(src), "/*/*"+m.Path()) &&
				p.Properties["Principal"] == "apigateway.amazonaws.com" {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no invoke permission scoped to the route", key)
		}
	}
}

func TestAuthorizerAndStage(t *testing.T) {
	check(t, "JWT authorizer", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), &map[string]any{
			"AuthorizerType": "JWT",
			"IdentitySource": []any{"$request.header.Authorization"},
			"JwtConfiguration": map[string]any{
				"Issuer": testIssuer, "Audience": testAudience,
			},
		})
	})
	p := props(ref["stage"])
	if p["StageName"] != "$default" || p["AutoDeploy"] != true {
		t.Errorf("stage %v auto deploy %v", p["StageName"], p["AutoDeploy"])
	}
	if !equal(p["DefaultRouteSettings"], map[string]any{
		"ThrottlingBurstLimit": tested.ThrottleBurst, "ThrottlingRateLimit": tested.ThrottleRate,
	}) {
		t.Errorf("stage throttling %v", p["DefaultRouteSettings"])
	}
	// The heartbeat route has a bucket of its own, sized for the fleet;
	// every tenant route keeps the default one.
	if tested.HeartbeatRateLimit != 4000 || tested.HeartbeatBurstLimit != DefaultHeartbeatBurstLimit {
		t.Fatalf("test context: heartbeat rate %v burst %v", tested.HeartbeatRateLimit, tested.HeartbeatBurstLimit)
	}
	key := "POST /api/compute/nodes/heartbeat"
	if !equal(p["RouteSettings"], map[string]any{key: map[string]any{
		"ThrottlingBurstLimit": DefaultHeartbeatBurstLimit, "ThrottlingRateLimit": 4000,
	}}) {
		t.Errorf("stage route settings %s, want the heartbeat route's own throttle", jsonOf(p["RouteSettings"]))
	}
	var route string
	for id, r := range ofType("AWS::ApiGatewayV2::Route") {
		if r.Properties["RouteKey"] == key {
			route = id
		}
	}
	var doc map[string]any
	if err := json.Unmarshal(tmplJSON, &doc); err != nil {
		t.Fatal(err)
	}
	if deps := strs(path(doc, "Resources", ref["stage"], "DependsOn")); route == "" || !slices.Contains(deps, route) {
		t.Errorf("the stage names route %q in its settings but does not depend on it (DependsOn %v)", route, deps)
	}
	if format, _ := path(p, "AccessLogSettings", "Format").(string); !json.Valid([]byte(format)) || !strings.Contains(format, "$context.requestId") {
		t.Errorf("access log format %q", format)
	}
}

// statementsOf collects the statements of every policy attached to a role.
func statementsOf(t *testing.T, roleID string) []map[string]any {
	t.Helper()
	role := props(roleID)
	if role["ManagedPolicyArns"] != nil || role["Policies"] != nil {
		t.Errorf("role %s has managed or inline policies: %v %v", roleID, role["ManagedPolicyArns"], role["Policies"])
	}
	var out []map[string]any
	for _, p := range ofType("AWS::IAM::Policy") {
		attached := false
		for _, r := range p.Properties["Roles"].([]any) {
			attached = attached || equal(r, refTo(roleID))
		}
		if !attached {
			continue
		}
		for _, st := range path(p.Properties, "PolicyDocument", "Statement").([]any) {
			out = append(out, st.(map[string]any))
		}
	}
	return out
}

func strs(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, s := range v {
			b, _ := json.Marshal(s)
			if str, ok := s.(string); ok {
				out = append(out, str)
			} else {
				out = append(out, string(b))
			}
		}
		return out
	}
	b, _ := json.Marshal(v)
	return []string{string(b)}
}

// grants maps a resource (its JSON) to the actions allowed on it.
func grants(t *testing.T, fn string) map[string][]string {
	out := map[string][]string{}
	for _, st := range statementsOf(t, ids[fn].Role) {
		if st["Effect"] != "Allow" {
			continue
		}
		for _, r := range strs(st["Resource"]) {
			out[r] = append(out[r], strs(st["Action"])...)
		}
	}
	for r := range out {
		sort.Strings(out[r])
		out[r] = slices.Compact(out[r])
	}
	return out
}

func sorted(s ...[]string) []string {
	var out []string
	for _, x := range s {
		out = append(out, x...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestLeastPrivilegePerFunction(t *testing.T) {
	table := jsonOf(getAtt(ref["table"], "Arn"))
	tableKey := jsonOf(getAtt(ref["tableKey"], "Arn"))
	signingKey := jsonOf(getAtt(ref["signingKey"], "Arn"))
	logKey := jsonOf(getAtt(ref["logKey"], "Arn"))
	cursorKey := jsonOf(refTo(ref["cursorKey"]))
	writes := []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:TransactWriteItems"}
	for name, id := range ids {
		t.Run(name, func(t *testing.T) {
			decl := declared(name)
			var dynamoActs, itemActs, queryActs, kmsActs, secretActs, logActs []string
			for _, a := range decl.actions {
				switch {
				case a == api.SignsReleaseLog: // on the log key alone, with the public key it needs
					logActs = append(logActs, a, "kms:GetPublicKey")
				case a == api.ReadsReleaseLogKey: // releases.log's verifier key: the log key's public half alone
					logActs = append(logActs, "kms:GetPublicKey")
				case a == "dynamodb:Query":
					dynamoActs = append(dynamoActs, a)
					queryActs = append(queryActs, a)
				case strings.HasPrefix(a, "dynamodb:"):
					dynamoActs = append(dynamoActs, a)
					itemActs = append(itemActs, a)
				case strings.HasPrefix(a, "secretsmanager:"):
					secretActs = append(secretActs, a)
				default:
					kmsActs = append(kmsActs, a)
				}
			}
			got := grants(t, name)
			logs := jsonOf(getAtt(id.Logs, "Arn"))
			want := map[string][]string{logs: {"logs:CreateLogStream", "logs:PutLogEvents"},
				// Active tracing; X-Ray has no resource-level permissions.
				"*": {"xray:PutTelemetryRecords", "xray:PutTraceSegments"}}
			if len(itemActs) > 0 {
				want[table] = sorted(itemActs)
			}
			// Query reads exactly where the catalog says.
			for _, ix := range decl.indexes {
				r := table
				if ix != api.BaseTable {
					r = jsonOf(map[string]any{"Fn::Join": []any{"", []any{getAtt(ref["table"], "Arn"), "/index/" + ix}}})
				}
				want[r] = sorted(want[r], queryActs)
			}
			if len(kmsActs) > 0 {
				want[signingKey] = sorted(kmsActs)
			}
			if len(secretActs) > 0 {
				want[cursorKey] = sorted(secretActs)
			}
			if len(logActs) > 0 {
				want[logKey] = sorted(logActs)
			}
			if len(dynamoActs) > 0 {
				keyActs := []string{"kms:Decrypt", "kms:DescribeKey"}
				if slices.ContainsFunc(dynamoActs, func(a string) bool { return slices.Contains(writes, a) }) {
					keyActs = append(keyActs, "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*")
				}
				want[tableKey] = sorted(keyActs)
			}
			for r, acts := range got {
				if strings.Contains(r, "/index/") {
					for _, a := range acts {
						if a != "dynamodb:Query" && a != "dynamodb:Scan" {
							t.Errorf("%s on an index", a)
						}
					}
					if name == api.ReconcilerFunction && !slices.ContainsFunc(ReconcilerIndexes, func(ix string) bool {
						return strings.Contains(r, "/index/"+ix+`"`)
					}) {
						t.Errorf("reconciler may query %s, want only the indexes it declares (%v)", r, ReconcilerIndexes)
					}
					if strings.Contains(r, "/index/*") {
						t.Errorf("Query on every index: %s", r)
					}
				}
			}
			if !equal(got, want) {
				t.Errorf("grants\n got %v\nwant %v", got, want)
			}
			for r, acts := range got {
				for _, a := range acts {
					if strings.Contains(a, "*") && !strings.HasPrefix(a, "kms:ReEncrypt") && !strings.HasPrefix(a, "kms:GenerateDataKey") {
						t.Errorf("wildcard action %s on %s", a, r)
					}
					if a == "kms:Sign" && r != logKey {
						t.Errorf("kms:Sign granted on %s (only the release log key signs)", r)
					}
				}
				if r == "*" && !equal(acts, []string{"xray:PutTelemetryRecords", "xray:PutTraceSegments"}) {
					t.Errorf("actions %v on every resource", acts)
				}
			}
			if m := decl.method; m != nil && m.Kind == api.Read {
				for _, acts := range got {
					for _, a := range acts {
						if slices.Contains(writes, a) {
							t.Errorf("read method %s may %s", m.Name, a)
						}
					}
				}
			}
			// The table key is usable only through DynamoDB.
			for _, st := range statementsOf(t, id.Role) {
				if slices.Contains(strs(st["Resource"]), tableKey) && path(st, "Condition", "StringEquals", "kms:ViaService") == nil {
					t.Errorf("table key statement without kms:ViaService: %v", st)
				}
			}
		})
	}
	// Spelled out for the methods the issues name: releases-list queries
	// only the ordered index and writes nothing; pools-list only the table.
	list := grants(t, "releases-list")
	ordered := jsonOf(map[string]any{"Fn::Join": []any{"", []any{getAtt(ref["table"], "Arn"), "/index/ordered"}}})
	if !equal(list[ordered], []string{"dynamodb:Query"}) || list[table] != nil {
		t.Errorf("releases-list may %v on the ordered index and %v on the table", list[ordered], list[table])
	}
	if pools := grants(t, "pools-list"); !equal(pools[table], []string{"dynamodb:Query"}) || pools[ordered] != nil {
		t.Errorf("pools-list may %v on the table, %v on the ordered index", pools[table], pools[ordered])
	}
	if _, ok := list[signingKey]; ok {
		t.Errorf("releases-list may use the signing key")
	}
	if reg := grants(t, "releases-register"); !slices.Contains(reg[signingKey], "kms:GetPublicKey") {
		t.Errorf("releases-register may %v on the signing key", reg[signingKey])
	}
}

func TestTableFromDefinition(t *testing.T) {
	def := schema.Definition("x")
	var attrs, keySchema []map[string]any
	for _, a := range def.AttributeDefinitions {
		attrs = append(attrs, map[string]any{"AttributeName": *a.AttributeName, "AttributeType": string(a.AttributeType)})
	}
	for _, k := range def.KeySchema {
		keySchema = append(keySchema, map[string]any{"AttributeName": *k.AttributeName, "KeyType": string(k.KeyType)})
	}
	p := props(ref["table"])
	if p["BillingMode"] != "PAY_PER_REQUEST" ||
		!equal(p["KeySchema"], keySchema) ||
		!equal(path(p, "PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled"), true) ||
		!equal(p["TimeToLiveSpecification"], map[string]any{"AttributeName": schema.AttrTTL, "Enabled": true}) ||
		!equal(p["SSESpecification"], map[string]any{"KMSMasterKeyId": getAtt(ref["tableKey"], "Arn"), "SSEEnabled": true, "SSEType": "KMS"}) {
		t.Errorf("table properties: %s", jsonOf(p))
	}
	gotAttrs := map[string]any{}
	for _, a := range p["AttributeDefinitions"].([]any) {
		gotAttrs[path(a, "AttributeName").(string)] = path(a, "AttributeType")
	}
	for _, a := range attrs {
		if gotAttrs[a["AttributeName"].(string)] != a["AttributeType"] {
			t.Errorf("attribute %v: got %v", a, gotAttrs[a["AttributeName"].(string)])
		}
	}
	index := func(list any, name string) map[string]any {
		for _, ix := range list.([]any) {
			if path(ix, "IndexName") == name {
				return ix.(map[string]any)
			}
		}
		return nil
	}
	for _, ix := range def.LocalSecondaryIndexes {
		got := index(p["LocalSecondaryIndexes"], *ix.IndexName)
		if got == nil || path(got, "Projection", "ProjectionType") != string(ix.Projection.ProjectionType) ||
			jsonOf(path(got, "KeySchema")) != jsonOf(ix.KeySchema) {
			t.Errorf("local index %s: %s", *ix.IndexName, jsonOf(got))
		}
	}
	for _, ix := range def.GlobalSecondaryIndexes {
		got := index(p["GlobalSecondaryIndexes"], *ix.IndexName)
		if got == nil || path(got, "Projection", "ProjectionType") != string(ix.Projection.ProjectionType) ||
			jsonOf(path(got, "KeySchema")) != jsonOf(ix.KeySchema) {
			t.Errorf("global index %s: %s", *ix.IndexName, jsonOf(got))
		}
	}
	if len(p["LocalSecondaryIndexes"].([]any)) != len(def.LocalSecondaryIndexes) || len(p["GlobalSecondaryIndexes"].([]any)) != len(def.GlobalSecondaryIndexes) {
		t.Errorf("index counts differ from schema.Definition")
	}
	check(t, "table retained", func() {
		tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), &map[string]any{"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"})
	})
	check(t, "table key", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::KMS::Key"), &map[string]any{
			"EnableKeyRotation": true, "KeySpec": assertions.Match_Absent(),
		})
	})
}

func TestSigningKey(t *testing.T) {
	p := props(ref["signingKey"])
	if p["KeySpec"] != "ECC_NIST_P256" || p["KeyUsage"] != "SIGN_VERIFY" {
		t.Errorf("signing key %v/%v", p["KeySpec"], p["KeyUsage"])
	}
	check(t, "signing key retained", func() {
		tmpl.HasResource(jsii.String("AWS::KMS::Key"), &map[string]any{
			"Properties": map[string]any{"KeyUsage": "SIGN_VERIFY"}, "DeletionPolicy": "Retain",
		})
	})
	// Its own key policy: only the named signer role may sign, and nobody
	// gets kms:* (which would let any IAM principal allowed kms:Sign sign).
	signers := keySigners(t, "signingKey")
	for _, st := range keyStatements(t, "signingKey") {
		acts := strs(st["Action"])
		if st["Sid"] == "KeyAdministration" && (slices.Contains(acts, "kms:Sign") || slices.Contains(acts, "kms:CreateGrant")) {
			t.Errorf("administrators may use the key: %v", acts)
		}
	}
	if want := jsonOf(map[string]any{"AWS": testSigner}); len(signers) != 1 || !signers[want] {
		t.Errorf("principals allowed kms:Sign: %v, want only %s", signers, want)
	}
	for _, key := range []string{"signingKey", "tableKey"} {
		guarded := false
		for _, st := range keyStatements(t, key) {
			guarded = guarded || (st["Effect"] == "Deny" && equal(st["Action"], "kms:CreateGrant") &&
				equal(path(st, "Condition", "Bool", "kms:GrantIsForAWSResource"), "false"))
		}
		if !guarded {
			t.Errorf("%s: no statement denies kms:CreateGrant for anything but AWS resources", key)
		}
	}
}

// keySigners are the principals key's policy allows kms:Sign, each only
// with ECDSA_SHA_256; no statement of it allows kms:*.
func keySigners(t *testing.T, key string) map[string]bool {
	t.Helper()
	signers := map[string]bool{}
	for _, st := range keyStatements(t, key) {
		acts := strs(st["Action"])
		if slices.Contains(acts, "kms:*") {
			t.Errorf("%s: statement %s allows kms:*", key, jsonOf(st))
		}
		if st["Effect"] == "Allow" && slices.Contains(acts, "kms:Sign") {
			signers[jsonOf(st["Principal"])] = true
			if !equal(path(st, "Condition", "StringEquals", "kms:SigningAlgorithm"), "ECDSA_SHA_256") {
				t.Errorf("%s: signing without an algorithm condition: %s", key, jsonOf(st))
			}
		}
	}
	return signers
}

func keyStatements(t *testing.T, key string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, st := range path(props(ref[key]), "KeyPolicy", "Statement").([]any) {
		out = append(out, st.(map[string]any))
	}
	if len(out) == 0 {
		t.Fatalf("%s has no key policy statements", key)
	}
	return out
}

func TestReconcilerSchedule(t *testing.T) {
	p := props(ref["schedule"])
	if p["ScheduleExpression"] != "rate(1 minute)" || p["State"] != "ENABLED" {
		t.Errorf("schedule %v %v", p["ScheduleExpression"], p["State"])
	}
	targets := p["Targets"].([]any)
	if len(targets) != 1 {
		t.Fatalf("%d targets", len(targets))
	}
	tg := targets[0]
	if !equal(path(tg, "Arn"), getAtt(ids[api.ReconcilerFunction].Function, "Arn")) ||
		!equal(path(tg, "DeadLetterConfig", "Arn"), getAtt(ref["dlq"], "Arn")) ||
		path(tg, "RetryPolicy", "MaximumRetryAttempts") == nil || path(tg, "RetryPolicy", "MaximumEventAgeInSeconds") == nil {
		t.Errorf("target %s", jsonOf(tg))
	}
	check(t, "reconciler async config", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventInvokeConfig"), &map[string]any{
			"FunctionName": refTo(ids[api.ReconcilerFunction].Function), "MaximumRetryAttempts": 0,
		})
	})
	checkDLQ(t, ref["dlq"])
	check(t, "EventBridge may send to the DLQ", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), &map[string]any{
			"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{
				assertions.Match_ObjectLike(&map[string]any{
					"Action": "sqs:SendMessage", "Principal": map[string]any{"Service": "events.amazonaws.com"},
				}),
			})},
		})
	})
}

// checkDLQ checks a dead-letter queue: SQS-managed encryption, 14 days'
// retention, and TLS only.
func checkDLQ(t *testing.T, id string) {
	t.Helper()
	if p := props(id); p["MessageRetentionPeriod"] != float64(14*24*3600) || p["SqsManagedSseEnabled"] != true {
		t.Errorf("queue %s: %s, want 14 days' retention and SQS-managed encryption", id, jsonOf(p))
	}
	tls := false
	for _, qp := range ofType("AWS::SQS::QueuePolicy") {
		for _, st := range path(qp.Properties, "PolicyDocument", "Statement").([]any) {
			tls = tls || (path(st, "Effect") == "Deny" && equal(path(st, "Resource"), getAtt(id, "Arn")) &&
				path(st, "Condition", "Bool", "aws:SecureTransport") == "false")
		}
	}
	if !tls {
		t.Errorf("queue %s: no policy denies requests without TLS", id)
	}
}

// The alarm e-mail subscription sends what SNS cannot deliver to its own
// dead-letter queue, which SNS may send to from the alarm topic only
// (cdk-nag's Serverless-SNSRedrivePolicy: without it the README's deploy
// failed its synthesis).
func TestAlarmEmailSubscriptionHasADLQ(t *testing.T) {
	subs := ofType("AWS::SNS::Subscription")
	if len(subs) != 1 {
		t.Fatalf("%d subscriptions, want the alarmEmail one", len(subs))
	}
	var topic string
	for id := range ofType("AWS::SNS::Topic") {
		topic = id
	}
	for id, sub := range subs {
		p := sub.Properties
		if p["Protocol"] != "email" || p["Endpoint"] != testEmail || !equal(p["TopicArn"], refTo(topic)) {
			t.Errorf("subscription %s: %s, want %s's e-mail subscription to the alarm topic", id, jsonOf(p), testEmail)
		}
		if !equal(path(p, "RedrivePolicy", "deadLetterTargetArn"), getAtt(ref["alarmDLQ"], "Arn")) {
			t.Errorf("subscription %s redrives to %s, want the alarm e-mail DLQ", id, jsonOf(p["RedrivePolicy"]))
		}
	}
	checkDLQ(t, ref["alarmDLQ"])
	check(t, "the alarm topic may send to the alarm e-mail DLQ", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), &map[string]any{
			"Queues": []any{refTo(ref["alarmDLQ"])},
			"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{
				assertions.Match_ObjectLike(&map[string]any{
					"Action": "sqs:SendMessage", "Effect": "Allow", "Principal": map[string]any{"Service": "sns.amazonaws.com"},
					"Condition": map[string]any{"ArnEquals": map[string]any{"aws:SourceArn": refTo(topic)}},
				}),
			})},
		})
	})
}

func TestLogGroupsHaveRetention(t *testing.T) {
	for name, id := range ids {
		if !equal(path(props(id.Function), "LoggingConfig", "LogGroup"), refTo(id.Logs)) {
			t.Errorf("%s logs to %v, want its log group", name, path(props(id.Function), "LoggingConfig", "LogGroup"))
		}
	}
	for id, lg := range ofType("AWS::Logs::LogGroup") {
		if lg.Properties["RetentionInDays"] != float64(tested.LogRetentionDays) {
			t.Errorf("log group %s keeps logs %v days", id, lg.Properties["RetentionInDays"])
		}
	}
}

func TestAlarms(t *testing.T) {
	alarms := ofType("AWS::CloudWatch::Alarm")
	has := func(what string, match func(p map[string]any) bool) {
		t.Helper()
		n := 0
		for _, a := range alarms {
			if match(a.Properties) {
				n++
				if len(strs(a.Properties["AlarmActions"])) == 0 {
					t.Errorf("%s alarm notifies no one", what)
				}
			}
		}
		if n != 1 {
			t.Errorf("%d %s alarms, want 1", n, what)
		}
	}
	metric := func(ns, name string) func(p map[string]any) bool {
		return func(p map[string]any) bool { return p["Namespace"] == ns && p["MetricName"] == name }
	}
	dim := func(p map[string]any, want any) bool {
		dims, _ := p["Dimensions"].([]any)
		for _, d := range dims {
			if equal(path(d, "Value"), want) {
				return true
			}
		}
		return false
	}
	// expression: an alarm on metric math over these metrics.
	expression := func(contains string, metrics ...string) func(p map[string]any) bool {
		return func(p map[string]any) bool {
			ms, _ := p["Metrics"].([]any)
			var expr string
			names := map[string]bool{}
			for _, m := range ms {
				if e, ok := path(m, "Expression").(string); ok {
					expr += e
				}
				if n, ok := path(m, "MetricStat", "Metric", "MetricName").(string); ok {
					names[n] = true
				}
			}
			for _, n := range metrics {
				if !names[n] {
					return false
				}
			}
			return strings.Contains(expr, contains)
		}
	}
	has("API 5xx rate", expression("100 * errors / requests", "5xx", "Count"))
	// One throttle alarm, on Lambda's own total, instead of one per function.
	has("Lambda throttles", func(p map[string]any) bool {
		return metric("AWS/Lambda", "Throttles")(p) && p["Dimensions"] == nil
	})
	has("table throttled requests", expression("+", "ThrottledRequests"))
	has("table system errors", expression("+", "SystemErrors"))
	rec := refTo(ids[api.ReconcilerFunction].Function)
	has("reconciler errors", func(p map[string]any) bool { return metric("AWS/Lambda", "Errors")(p) && dim(p, rec) })
	has("reconciler not running", func(p map[string]any) bool {
		return metric("AWS/Lambda", "Invocations")(p) && dim(p, rec) && p["TreatMissingData"] == "breaching"
	})
	has("reconciler lag", func(p map[string]any) bool {
		// The unit must be the one the reconciler emits (reconcile.PassResult.Log).
		return metric(MetricNamespace, MetricLag)(p) && dim(p, refTo(ref["table"])) && p["Unit"] == "Milliseconds"
	})
	has("release log audit", func(p map[string]any) bool {
		// A pass whose audit failed publishes LogAuditFailed = 1 (Count).
		return metric(MetricNamespace, MetricLogAuditFailed)(p) && dim(p, refTo(ref["table"])) && p["Unit"] == "Count" &&
			p["Statistic"] == "Maximum" && p["Threshold"] == 1.0 && p["ComparisonOperator"] == "GreaterThanOrEqualToThreshold" &&
			p["TreatMissingData"] == "notBreaching"
	})
	has("DLQ depth", func(p map[string]any) bool {
		return metric("AWS/SQS", "ApproximateNumberOfMessagesVisible")(p) && dim(p, getAtt(ref["dlq"], "QueueName"))
	})
	has("alarm e-mail DLQ depth", func(p map[string]any) bool {
		return metric("AWS/SQS", "ApproximateNumberOfMessagesVisible")(p) && dim(p, getAtt(ref["alarmDLQ"], "QueueName")) &&
			p["Threshold"] == 1.0 && p["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
	})
	// The fleet: each on the deployment's [Table] series, with its
	// statistic, period and threshold.
	stat := func(p map[string]any, name, statistic string, period float64, dims ...string) bool {
		ms, _ := p["Metrics"].([]any)
		for _, m := range ms {
			ms := path(m, "MetricStat")
			var names []string
			ds, _ := path(ms, "Metric", "Dimensions").([]any)
			for _, d := range ds {
				names = append(names, path(d, "Name").(string))
			}
			if path(ms, "Metric", "Namespace") == MetricNamespace && path(ms, "Metric", "MetricName") == name &&
				path(ms, "Stat") == statistic && path(ms, "Period") == period && path(ms, "Unit") == "Count" && equal(names, dims) {
				return true
			}
		}
		return false
	}
	has("mass silence", func(p map[string]any) bool {
		return expression("MAX([FILL(disrupted, 0), FILL(held, 0)])", MetricPoolDisrupted, MetricNodesHeld)(p) &&
			stat(p, MetricPoolDisrupted, "Maximum", 300, DimensionTable) && stat(p, MetricNodesHeld, "Maximum", 300, DimensionTable) &&
			p["Threshold"] == 1.0 && p["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
	})
	has("unreachable share", func(p map[string]any) bool {
		ok := expression("100 * FILL(s3, 0) / (FILL(s0, 0) + FILL(s1, 0) + FILL(s2, 0) + FILL(s3, 0))",
			MetricNodesRegistered, MetricNodesReady, MetricNodesUnhealthy, MetricNodesUnreachable)(p)
		for _, m := range nodeStateMetrics {
			ok = ok && stat(p, m, "Sum", 600, DimensionTable)
		}
		return ok && p["Threshold"] == 10.0 && p["ComparisonOperator"] == "GreaterThanThreshold"
	})
	has("rollout aborting", func(p map[string]any) bool {
		return metric(MetricNamespace, MetricRolloutTransitions)(p) && dim(p, refTo(ref["table"])) && dim(p, "aborting") &&
			p["Statistic"] == "Sum" && p["Period"] == 300.0 && p["Threshold"] == 1.0 && p["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
	})
	has("release log split view", func(p map[string]any) bool {
		// A node that reported a root the log never had: the sweep's
		// NodesSplitView, Maximum over 5 minutes.
		return metric(MetricNamespace, MetricNodesSplitView)(p) && dim(p, refTo(ref["table"])) && p["Unit"] == "Count" &&
			p["Statistic"] == "Maximum" && p["Period"] == 300.0 && p["Threshold"] == 1.0 && p["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
	})
	if len(alarms) != 14 {
		t.Errorf("%d alarms, want the 14 above", len(alarms))
	}
	check(t, "dashboard", func() { tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Dashboard"), jsii.Number(1)) })
}

func TestOutputs(t *testing.T) {
	for name, want := range map[string]any{
		OutputTableName:    refTo(ref["table"]),
		OutputSigningKeyID: refTo(ref["signingKey"]),
	} {
		if !equal(path(outs[name], "Value"), want) {
			t.Errorf("output %s = %v, want %v", name, path(outs[name], "Value"), want)
		}
	}
	if url := jsonOf(path(outs[OutputAPIURL], "Value")); !strings.Contains(url, ref["api"]) || !strings.Contains(url, "execute-api") {
		t.Errorf("output %s = %s", OutputAPIURL, url)
	}
}

// The release log key: its own ECC key; only the functions
// that append to the log — releases.register, and the reconciler, which
// finishes crashed registrations and signs the checkpoint it audits — may
// sign with it, ECDSA_SHA_256 only; they are told the key and the log's
// origin.
func TestReleaseLogKey(t *testing.T) {
	p := props(ref["logKey"])
	if p["KeySpec"] != "ECC_NIST_P256" || p["KeyUsage"] != "SIGN_VERIFY" {
		t.Errorf("log key %v/%v", p["KeySpec"], p["KeyUsage"])
	}
	appenders := []string{"releases-register", api.ReconcilerFunction}
	for name := range ids {
		if signs := slices.Contains(declared(name).actions, api.SignsReleaseLog); signs != slices.Contains(appenders, name) {
			t.Errorf("%s declares %s: %v", name, api.SignsReleaseLog, signs)
		}
	}
	signers := keySigners(t, "logKey")
	for _, name := range appenders {
		if want := jsonOf(map[string]any{"AWS": getAtt(ids[name].Role, "Arn")}); !signers[want] {
			t.Errorf("%s may not kms:Sign on the log key (principals allowed: %v)", name, signers)
		}
	}
	if len(signers) != len(appenders) {
		t.Errorf("principals allowed kms:Sign on the log key: %v, want only the roles of %v", signers, appenders)
	}
	// releases.log reads the key's public half (its verifierKey), never signs;
	// so does the console, which serves releases.log's answer in process.
	readers := append([]string{"releases-log", api.ConsoleFunction}, appenders...)
	for name, id := range ids {
		vars, _ := path(props(id.Function), "Environment", "Variables").(map[string]any)
		has := vars["BC_RELEASE_LOG_KEY"] != nil
		if has != slices.Contains(readers, name) {
			t.Errorf("%s: BC_RELEASE_LOG_KEY set = %v", name, has)
		}
		if has && (!equal(vars["BC_RELEASE_LOG_KEY"], refTo(ref["logKey"])) || vars["BC_RELEASE_LOG_ORIGIN"] == nil) {
			t.Errorf("%s: log key %v, origin %v", name, vars["BC_RELEASE_LOG_KEY"], vars["BC_RELEASE_LOG_ORIGIN"])
		}
	}
}

// The console's shell and assets are public; its fragments and actions sit
// behind the JWT authorizer like every method; it signs in against the
// authorizer's issuer with its first audience as the client.
func TestConsoleRoutes(t *testing.T) {
	want := map[string]bool{"GET /console": false, "GET /console/{proxy+}": false, "GET /console/f/{proxy+}": true, "POST /console/a/{proxy+}": true}
	seen := 0
	for _, r := range ofType("AWS::ApiGatewayV2::Route") {
		key := r.Properties["RouteKey"].(string)
		auth, ok := want[key]
		if !ok {
			continue
		}
		seen++
		if got := r.Properties["AuthorizationType"] == "JWT"; got != auth {
			t.Errorf("%s: JWT authorization %v, want %v", key, got, auth)
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the console's %d routes", seen, len(want))
	}
	vars := path(props(ids[api.ConsoleFunction].Function), "Environment", "Variables").(map[string]any)
	if vars["BC_CONSOLE_OIDC_ISSUER"] != tested.JWTIssuer || vars["BC_CONSOLE_OIDC_CLIENT_ID"] != tested.JWTAudience[0] {
		t.Errorf("the console's sign-in: %v", vars)
	}
}
