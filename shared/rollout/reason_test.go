package rollout

import (
	"strings"
	"testing"
)

// An agent's install reason (at most 256 characters in a report) is kept
// whole after "install: "; only a longer one is cut, ending in "…".
func TestClipReasonKeepsAnAgentsReason(t *testing.T) {
	agent := "download https://bin.example/bcd: sha256 " + strings.Repeat("ab", 32) + ", the manifest says " + strings.Repeat("cd", 32)
	agent += strings.Repeat(" x", (256-len(agent))/2)
	if len(agent) > 256 {
		t.Fatalf("test reason of %d characters", len(agent))
	}
	if got := clipReason(ReasonInstall + ": " + agent); got != ReasonInstall+": "+agent {
		t.Errorf("an agent's reason of %d characters was cut: %q", len(agent), got)
	}
	long := strings.Repeat("y", MaxReason+10)
	if got := []rune(clipReason(long)); len(got) != MaxReason || got[len(got)-1] != '…' {
		t.Errorf("a reason of %d characters: %d kept, ending %q", len(long), len(got), string(got[len(got)-1]))
	}
}
