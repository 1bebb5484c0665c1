package fleetproto

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/bettercompute/control-plane/shared/devstack"
)

// Each revert patch of the revert table (reverts/, make fleetproto-reverts)
// still applies to the tree: a fix that moved fails here, not silently in
// the table (regenerate its patch as the git diff of the revert).
func TestRevertPatchesApply(t *testing.T) {
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	patches, err := filepath.Glob(filepath.Join(root, "test", "fleetproto", "reverts", "*.patch"))
	if err != nil || len(patches) < 27 {
		t.Fatalf("%d revert patches (%v), want the tables' 27 (fleet, log, registration)", len(patches), err)
	}
	for _, p := range patches {
		cmd := exec.Command("git", "apply", "--check", p)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies: %v\n%s", filepath.Base(p), err, out)
		}
	}
}
