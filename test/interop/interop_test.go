// Package interop checks the API's contract with tools nobody here wrote:
// the OpenAPI linters Spectral and Redocly, a TypeScript client generated
// by openapi-typescript and compiled by tsc (npm packages pinned by
// package-lock.json, installed by make tools), the Go client of oapi-codegen
// (oapigo/, pinned by go.mod), and DSSE envelopes made and verified by
// go-securesystemslib and sigstore (dsse_test.go).
package interop_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/devstack"
)

// root is the repository's root directory.
func root(t *testing.T) string {
	t.Helper()
	r, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// npmTool runs a command of node_modules/.bin (make tools installs them)
// and returns its standard output and whether it exited 0; it fails the
// test when the tool cannot be started.
func npmTool(t *testing.T, name string, args ...string) (string, bool) {
	t.Helper()
	bin := filepath.Join(root(t), "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is not installed (make tools runs npm ci): %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root(t)
	// No telemetry or update checks: the tests run without the network.
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_UPDATE_NOTIFIER=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("%s: %v", name, err)
	}
	if err != nil {
		t.Logf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), err == nil
}

// openAPI returns docs/openapi.json decoded, to edit for negative checks.
func openAPI(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// writeJSON writes v to a file of the test and returns its path.
func writeJSON(t *testing.T, name string, v any) string {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
