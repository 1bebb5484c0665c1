package cfnspec

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var loaded struct {
	once sync.Once
	spec *Spec
	err  error
}

func spec(t *testing.T) *Spec {
	t.Helper()
	loaded.once.Do(func() { loaded.spec, loaded.err = Load(filepath.Join("..", "..", DBPath)) })
	if loaded.err != nil {
		t.Fatal(loaded.err)
	}
	return loaded.spec
}

// A small template CloudFormation accepts, to break one thing at a time.
func goodTemplate() map[string]any {
	return map[string]any{
		"Resources": map[string]any{
			"Role": map[string]any{"Type": "AWS::IAM::Role", "Properties": map[string]any{
				"AssumeRolePolicyDocument": map[string]any{"Version": "2012-10-17", "Statement": []any{}},
			}},
			"Fn": map[string]any{"Type": "AWS::Lambda::Function", "DependsOn": []any{"Role"}, "Properties": map[string]any{
				"Code":          map[string]any{"S3Bucket": "b", "S3Key": "k"},
				"Role":          map[string]any{"Fn::GetAtt": []any{"Role", "Arn"}},
				"Runtime":       "provided.al2023",
				"Handler":       "bootstrap",
				"MemorySize":    256,
				"Timeout":       "5", // CloudFormation takes numeric strings
				"Architectures": []any{"arm64"},
				"Environment":   map[string]any{"Variables": map[string]any{"BC_TABLE": map[string]any{"Ref": "AWS::StackName"}}},
				"LoggingConfig": map[string]any{"LogFormat": "JSON", "ApplicationLogLevel": "INFO"},
				"Tags":          []any{map[string]any{"Key": "k", "Value": "v"}},
			}},
		},
	}
}

func validate(t *testing.T, tmpl map[string]any) []Finding {
	t.Helper()
	b, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec(t).Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGoodTemplatePasses(t *testing.T) {
	if f := validate(t, goodTemplate()); len(f) != 0 {
		t.Fatalf("findings on a valid template: %v", f)
	}
}

// Each deliberate mistake is one CloudFormation would refuse, and each is found.
func TestFindsWhatCloudFormationRefuses(t *testing.T) {
	fnProps := func(tmpl map[string]any) map[string]any {
		return tmpl["Resources"].(map[string]any)["Fn"].(map[string]any)["Properties"].(map[string]any)
	}
	for _, tc := range []struct {
		name   string
		break_ func(tmpl map[string]any)
		want   string
	}{
		{"unknown property", func(m map[string]any) { fnProps(m)["Timeoutt"] = 5 }, "Properties.Timeoutt: unknown property"},
		{"unknown nested property", func(m map[string]any) {
			fnProps(m)["LoggingConfig"].(map[string]any)["Format"] = "JSON"
		}, "Properties.LoggingConfig.Format: unknown property"},
		{"number that is not one", func(m map[string]any) { fnProps(m)["MemorySize"] = "lots" }, "want a number"},
		{"fraction for an integer", func(m map[string]any) { fnProps(m)["MemorySize"] = 256.5 }, "want an integer"},
		{"object for a string", func(m map[string]any) { fnProps(m)["Runtime"] = map[string]any{"name": "go"} }, "want a string"},
		{"string for a list", func(m map[string]any) { fnProps(m)["Architectures"] = "arm64" }, "want a list"},
		{"value not allowed", func(m map[string]any) {
			fnProps(m)["LoggingConfig"].(map[string]any)["LogFormat"] = "Json"
		}, `"Json" is not one of`},
		{"required missing", func(m map[string]any) { delete(fnProps(m), "Code") }, "Properties.Code: required property missing"},
		{"tag without a value", func(m map[string]any) { fnProps(m)["Tags"] = []any{map[string]any{"Key": "k"}} }, "Value: required property missing"},
		{"unknown type", func(m map[string]any) {
			m["Resources"].(map[string]any)["Fn"].(map[string]any)["Type"] = "AWS::Lambda::Functions"
		}, "unknown resource type"},
		{"ref to nothing", func(m map[string]any) {
			fnProps(m)["Environment"].(map[string]any)["Variables"].(map[string]any)["BC_TABLE"] = map[string]any{"Ref": "Tabel"}
		}, "Ref to Tabel"},
		{"attribute a type lacks", func(m map[string]any) {
			fnProps(m)["Role"] = map[string]any{"Fn::GetAtt": []any{"Role", "Url"}}
		}, "has no attribute Url"},
		{"unknown resource attribute", func(m map[string]any) {
			m["Resources"].(map[string]any)["Fn"].(map[string]any)["DeletePolicy"] = "Retain"
		}, "DeletePolicy: not a resource attribute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := goodTemplate()
			tc.break_(tmpl)
			f := validate(t, tmpl)
			var all []string
			for _, x := range f {
				all = append(all, x.String())
			}
			if len(f) == 0 || !strings.Contains(strings.Join(all, "\n"), tc.want) {
				t.Errorf("findings %q, want one saying %q", all, tc.want)
			}
		})
	}
}
