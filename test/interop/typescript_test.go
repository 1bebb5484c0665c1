package interop_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// compileTypeScript generates openapi-typescript's types of doc beside a
// copy of testdata/ts (a releases/register call) and type-checks it with
// tsc --strict; it returns tsc's output and whether it compiled.
func compileTypeScript(t *testing.T, doc string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"register.ts", "tsconfig.json"} {
		data, err := os.ReadFile(filepath.Join(root(t), "test/interop/testdata/ts", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, ok := npmTool(t, "openapi-typescript", doc, "--output", filepath.Join(dir, "openapi.d.ts")); !ok {
		t.Fatalf("openapi-typescript failed: %s", out)
	}
	return npmTool(t, "tsc", "--project", filepath.Join(dir, "tsconfig.json"))
}

// A TypeScript client of docs/openapi.json compiles a releases/register
// call with a real envelope and reads typed errors; with the manifest
// untyped again (`{"type": "object"}`, which openapi-typescript turns into
// Record<string, never>) the same call does not compile.
func TestTypeScriptClientCompiles(t *testing.T) {
	if out, ok := compileTypeScript(t, filepath.Join(root(t), "docs", "openapi.json")); !ok {
		t.Fatalf("tsc refuses the register call:\n%s", out)
	}
	doc := openAPI(t)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	schemas["Envelope"] = map[string]any{"type": "object"}
	out, ok := compileTypeScript(t, writeJSON(t, "untyped.json", doc))
	if ok || !strings.Contains(out, "register.ts") {
		t.Errorf("with an untyped manifest the call still compiles (%v):\n%s", ok, out)
	}
}
