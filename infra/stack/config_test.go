package stack

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

func ctxOf(m map[string]any) func(string) any { return func(k string) any { return m[k] } }

func validContext() map[string]any {
	return map[string]any{
		CtxJWTIssuer: "https://auth.example.com/", CtxJWTAudience: "a, b", CtxIAMURL: "https://iam.example.com",
	}
}

func TestConfigFromDefaultsAndCLIStrings(t *testing.T) {
	ctx := validContext()
	ctx[CtxReleaseThreshold] = "3"
	ctx[CtxLogRetentionDays] = 14.0
	ctx[CtxThrottleRate] = "25.5"
	ctx[CtxRemovalPolicy] = "destroy"
	ctx[CtxArchitecture] = "x86_64"
	ctx[CtxPlaceholders] = "auto"
	c, err := ConfigFrom(ctxOf(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if c.StackName != "BetterCompute" || c.AssetRoot != "build" || c.LogLevel != "info" {
		t.Errorf("defaults: %+v", c)
	}
	if c.HeartbeatReservedConcurrency != 300 || c.HeartbeatRateLimit != 5000 || c.HeartbeatBurstLimit != 5000 {
		t.Errorf("heartbeat defaults: reserved %d rate %v burst %d, want 300, 5000, 5000 (docs/infrastructure.md)",
			c.HeartbeatReservedConcurrency, c.HeartbeatRateLimit, c.HeartbeatBurstLimit)
	}
	ctx[CtxHeartbeatReserved] = "0" // none reserved (an account with little concurrency)
	if c0, err := ConfigFrom(ctxOf(ctx)); err != nil || c0.HeartbeatReservedConcurrency != 0 {
		t.Errorf("heartbeatReservedConcurrency 0: %v %v", c0.HeartbeatReservedConcurrency, err)
	}
	delete(ctx, CtxHeartbeatReserved)
	if strings.Join(c.JWTAudience, "|") != "a|b" || c.ReleaseThreshold != 3 || c.LogRetentionDays != 14 ||
		c.ThrottleRate != 25.5 || !c.Destroy || c.Architecture != ArchX86 || !c.Placeholders {
		t.Errorf("parsed: %+v", c)
	}
	ctx[CtxJWTAudience] = []any{"x", "y,z"}
	if c, err = ConfigFrom(ctxOf(ctx)); err != nil || strings.Join(c.JWTAudience, "|") != "x|y|z" {
		t.Errorf("audience list: %v %v", c.JWTAudience, err)
	}
}

func TestCDKJSONDefaults(t *testing.T) {
	raw, err := os.ReadFile("../../cdk.json")
	if err != nil {
		t.Fatal(err)
	}
	var cdk struct{ Context map[string]any }
	if err := json.Unmarshal(raw, &cdk); err != nil {
		t.Fatal(err)
	}
	fromFile, err := ConfigFrom(ctxOf(cdk.Context))
	if err != nil {
		t.Fatalf("cdk.json context: %v", err)
	}
	builtIn, err := ConfigFrom(ctxOf(map[string]any{
		CtxJWTIssuer: cdk.Context[CtxJWTIssuer], CtxJWTAudience: cdk.Context[CtxJWTAudience], CtxIAMURL: cdk.Context[CtxIAMURL],
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromFile, builtIn) {
		t.Errorf("cdk.json defaults differ from ConfigFrom's:\n cdk.json %+v\n built in %+v", fromFile, builtIn)
	}
	for _, key := range []string{CtxStackName, CtxJWTIssuer, CtxJWTAudience, CtxIAMURL, CtxPolicyFile, CtxReleasePins,
		CtxReleasePinsFile, CtxReleaseThreshold, CtxReleaseSignerRole, CtxReleaseKeyAdmin, CtxAssetRoot, CtxPlaceholders, CtxArchitecture, CtxLogRetentionDays,
		CtxLogLevel, CtxThrottleRate, CtxThrottleBurst, CtxHeartbeatReserved, CtxHeartbeatRate, CtxHeartbeatBurst, CtxAlarmEmail, CtxRemovalPolicy, CtxConsoleAuthorize, CtxConsoleToken} {
		if _, ok := cdk.Context[key]; !ok {
			t.Errorf("cdk.json does not list context key %s", key)
		}
	}
	if cdk.Context["cli-telemetry"] != false {
		t.Errorf("cdk.json leaves CLI telemetry on")
	}
}

func TestConfigReleasePinsFile(t *testing.T) {
	f := t.TempDir() + "/pins.pem"
	if err := os.WriteFile(f, []byte("# comment\n-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := validContext()
	ctx[CtxReleasePinsFile] = f
	c, err := ConfigFrom(ctxOf(ctx))
	if err != nil || !strings.HasPrefix(c.ReleasePins, "# comment\n-----BEGIN") {
		t.Errorf("pins from file: %q %v", c.ReleasePins, err)
	}
	ctx[CtxReleasePins] = "inline"
	if _, err := ConfigFrom(ctxOf(ctx)); err == nil {
		t.Errorf("both releasePins and releasePinsFile accepted")
	}
	ctx = validContext()
	ctx[CtxReleasePinsFile] = f + ".missing"
	if _, err := ConfigFrom(ctxOf(ctx)); err == nil {
		t.Errorf("missing pins file accepted")
	}
}

func TestConfigFromRejects(t *testing.T) {
	for key, bad := range map[string]any{
		CtxJWTIssuer:         "http://insecure.example.com",
		CtxJWTAudience:       "",
		CtxPolicyFile:        "policy.json", // with iamUrl set too
		CtxReleaseThreshold:  "0",
		CtxArchitecture:      "riscv64",
		CtxLogRetentionDays:  31,
		CtxThrottleBurst:     "-1",
		CtxHeartbeatReserved: "-1",
		CtxHeartbeatRate:     "0",
		CtxHeartbeatBurst:    "2.5", // CloudFormation's burst limit is an integer
		CtxRemovalPolicy:     "snapshot",
		CtxPlaceholders:      "maybe",
		CtxStackName:         42.0,
		CtxLogLevel:          "warn", // would drop the request lines, and with them the metrics
		CtxReleaseSignerRole: "arn:aws:iam::123456789012:user/alice",
		CtxReleaseKeyAdmin:   "admins",
	} {
		ctx := validContext()
		ctx[key] = bad
		if _, err := ConfigFrom(ctxOf(ctx)); err == nil {
			t.Errorf("%s = %v accepted", key, bad)
		}
	}
	if _, err := ConfigFrom(ctxOf(map[string]any{})); err == nil ||
		!strings.Contains(err.Error(), CtxJWTIssuer) || !strings.Contains(err.Error(), CtxIAMURL) {
		t.Errorf("empty context: %v", err)
	}
}

func TestAccessFor(t *testing.T) {
	a, err := AccessFor("f", []string{"dynamodb:Query", "dynamodb:GetItem", "kms:GetPublicKey", "dynamodb:GetItem", api.ReadsCursorKey},
		[]string{schema.IndexOrdered, api.BaseTable})
	if err != nil {
		t.Fatal(err)
	}
	if a.Writes() || strings.Join(a.TableQuery, ",") != "dynamodb:Query" || strings.Join(a.TableItem, ",") != "dynamodb:GetItem" ||
		strings.Join(a.Signing, ",") != "kms:GetPublicKey" || strings.Join(a.TableKey, ",") != "kms:Decrypt,kms:DescribeKey" ||
		strings.Join(a.CursorKey, ",") != api.ReadsCursorKey || strings.Join(a.Indexes, ",") != "ordered,(table)" {
		t.Errorf("read access: %+v", a)
	}
	for name, tc := range map[string]struct{ actions, indexes []string }{
		"query without indexes":    {[]string{"dynamodb:Query"}, nil},
		"indexes without a query":  {[]string{"dynamodb:GetItem"}, []string{schema.IndexOrdered}},
		"an index the table lacks": {[]string{"dynamodb:Query"}, []string{"fit-typo"}},
	} {
		if _, err := AccessFor("f", tc.actions, tc.indexes); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	if a, _ = AccessFor("f", []string{"dynamodb:UpdateItem"}, nil); !a.Writes() || len(a.TableKey) != 5 {
		t.Errorf("write access: %+v", a)
	}
	if a, _ = AccessFor("f", nil, nil); len(a.TableKey) != 0 {
		t.Errorf("no actions still reaches the table key: %+v", a)
	}
	if a, err := AccessFor("f", []string{api.SignsReleaseLog}, nil); err != nil || len(a.Signing) != 0 || !equal(a.LogKey, []string{"kms:Sign", "kms:GetPublicKey"}) {
		t.Errorf("kms:Sign is the release log key's alone: %+v %v", a, err)
	}
	for _, bad := range []string{"kms:CreateKey", "kms:ScheduleKeyDeletion", "s3:GetObject", "dynamodb:*", "GetItem", "secretsmanager:PutSecretValue"} {
		if _, err := AccessFor("f", []string{bad}, nil); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestCatalogFunctions(t *testing.T) {
	fns, err := Functions()
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != len(api.Catalog)+2 || fns[len(fns)-1].Name != api.ReconcilerFunction || fns[len(fns)-2].Name != api.ConsoleFunction {
		t.Fatalf("%d functions", len(fns))
	}
	for _, f := range fns {
		if f.Method != nil && f.Method.Kind == api.Read && f.Access.Writes() {
			t.Errorf("%s: read with write access", f.Name)
		}
	}
}

func TestSchemaFromDefinition(t *testing.T) {
	s, err := SchemaFrom(schema.Definition("t"))
	if err != nil {
		t.Fatal(err)
	}
	if *s.PartitionKey.Name != schema.AttrPK || *s.SortKey.Name != schema.AttrSK || len(s.LocalIndexes) != 5 || len(s.GlobalIndexes) != 1 {
		t.Errorf("schema %+v", s)
	}
	def := schema.Definition("t")
	def.BillingMode = types.BillingModeProvisioned
	if _, err := SchemaFrom(def); err == nil {
		t.Errorf("provisioned billing accepted")
	}
	def = schema.Definition("t")
	def.KeySchema = append(def.KeySchema, types.KeySchemaElement{AttributeName: aws.String("nope"), KeyType: types.KeyTypeRange})
	if _, err := SchemaFrom(def); err == nil {
		t.Errorf("key without attribute definition accepted")
	}
}
