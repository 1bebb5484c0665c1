// Package checks tests make test's runner (checks.sh) on a Makefile of its
// own: the Go tests in the foreground, the other checks in lanes beside them.
package checks

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A failing Go test stops nothing: every lane runs to its end (make -k: a
// failed target does not stop the lane's next), and the run ends with one
// summary naming the failed test, package and targets, and fails.
func TestFailuresAreSummedUpAfterEveryLaneRan(t *testing.T) {
	dir := t.TempDir()
	makefile := `gotest:
	@echo '--- FAIL: TestBroken (0.00s)'; echo 'FAIL	example.com/broken	0.01s'; exit 1
vet:
	@echo vet ran
race:
	@echo race ran; exit 1
after-race:
	@echo after-race ran
infra:
	@echo infra ran at niceness $$(nice)
niced:
	@echo niced ran at niceness $$(nice)
`
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(makefile), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("checks.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", script, filepath.Join(dir, "logs"), "gotest", "--", "vet", "race", "after-race", "--", "infra", "--niced", "niced")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MAKE=make", "MAKEFLAGS=", "MAKELEVEL=")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err == nil {
		t.Errorf("the run passed with a failed Go test and a failed target:\n%s", text)
	}
	for _, want := range []string{"vet ran", "race ran", "after-race ran", "infra ran", "== make test:",
		"FAIL gotest", "--- FAIL: TestBroken", "FAIL	example.com/broken", "FAIL vet race after-race", "ok   infra", "[Makefile:6: race] Error 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("the output misses %q:\n%s", want, text)
		}
	}
	// A --niced lane runs 10 nicer than a -- lane (at most 19).
	var plain, nicer int
	if _, err := fmt.Sscanf(text[strings.Index(text, "infra ran at niceness"):], "infra ran at niceness %d", &plain); err != nil {
		t.Fatalf("no niceness of the -- lane: %v\n%s", err, text)
	}
	if _, err := fmt.Sscanf(text[strings.Index(text, "niced ran at niceness"):], "niced ran at niceness %d", &nicer); err != nil {
		t.Fatalf("no niceness of the --niced lane: %v\n%s", err, text)
	}
	if nicer != min(plain+10, 19) {
		t.Errorf("the --niced lane ran at niceness %d, the -- lane at %d", nicer, plain)
	}
	// The summary comes after every lane's output.
	if strings.Index(text, "== make test:") < strings.LastIndex(text, "ran") {
		t.Errorf("the summary is not last:\n%s", text)
	}
}
