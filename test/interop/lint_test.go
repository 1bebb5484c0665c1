package interop_test

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// lint runs Spectral (the spectral:oas ruleset) and Redocly (its
// recommended ruleset) on an OpenAPI document and returns their findings
// of every severity, as "linter rule" strings.
func lint(t *testing.T, doc string) []string {
	t.Helper()
	var found []string
	out, _ := npmTool(t, "spectral", "lint", doc, "--ruleset", filepath.Join(root(t), "test/interop/testdata/spectral.yaml"),
		"--format", "json", "--fail-severity", "hint", "--quiet")
	var spectral []struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(out), &spectral); err != nil {
		t.Fatalf("spectral: %v\n%s", err, out)
	}
	for _, r := range spectral {
		found = append(found, "spectral "+r.Code+": "+r.Message)
	}
	out, _ = npmTool(t, "redocly", "lint", doc, "--format", "json")
	var redocly struct {
		Totals   struct{ Errors, Warnings int }
		Problems []struct {
			RuleID  string `json:"ruleId"`
			Message string `json:"message"`
		}
	}
	if err := json.Unmarshal([]byte(out), &redocly); err != nil {
		t.Fatalf("redocly: %v\n%s", err, out)
	}
	for _, p := range redocly.Problems {
		found = append(found, "redocly "+p.RuleID+": "+p.Message)
	}
	if len(redocly.Problems) != redocly.Totals.Errors+redocly.Totals.Warnings {
		t.Errorf("redocly: %d problems listed, totals %+v", len(redocly.Problems), redocly.Totals)
	}
	return found
}

// docs/openapi.json passes both linters without a finding, not even a
// warning; a document with a known flaw does not (so the check can fail).
func TestOpenAPILinters(t *testing.T) {
	if found := lint(t, filepath.Join(root(t), "docs", "openapi.json")); len(found) > 0 {
		t.Errorf("docs/openapi.json: %d findings:\n%v", len(found), found)
	}
	doc := openAPI(t)
	info := doc["info"].(map[string]any)
	delete(info, "contact")
	delete(info, "license")
	found := lint(t, writeJSON(t, "flawed.json", doc))
	want := map[string]bool{"spectral info-contact": false, "redocly info-license": false}
	for _, f := range found {
		for w := range want {
			if len(f) > len(w) && f[:len(w)+1] == w+":" {
				want[w] = true
			}
		}
	}
	for w, ok := range want {
		if !ok {
			t.Errorf("a document without info.contact and info.license: no %s finding in %v", w, found)
		}
	}
}
