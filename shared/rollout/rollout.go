package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Reasons of a rollout and of a node's step (the refusals the API
// documents, no_nodes and no_binary, are in shared/api), and a node's
// rollback.
const (
	ReasonFailures     = "failures"    // more nodes failed than maxFailedNodes
	ReasonAbortedBy    = "aborted"     // rollouts.abort
	ReasonBusy         = "busy"        // reservations kept it busy past drain.waitSeconds
	ReasonDeadline     = "deadline"    // no healthy report of the target within progressDeadlineSeconds
	ReasonUnhealthy    = "unhealthy"   // it reported unhealthy running the target
	ReasonInstall      = "install"     // it reported the install failed
	ReasonRunning      = "already"     // it ran the version already
	ReasonNotStarted   = "not_started" // the rollout ended before it took the node
	ReasonNoPrevious   = "no_previous" // rollback: it ran no release before
	ReasonAbandoned    = "abandoned"   // a create that stopped before its claims, finished by the reconciler
	RollbackDue        = "due"         // updated by this rollout: sent back if it aborts
	RollbackInstalling = "installing"
	RollbackDone       = "done"
	RollbackFailed     = "failed"
)

// Defaults of rollouts.create (docs/reference/rollouts.md; its limits are
// the API's: api.MaxPools, api.MaxWaves) and bounds of a pass.
const (
	DefaultBake             = 300 * time.Second
	DefaultMaxUnavailable   = 1
	DefaultProgressDeadline = 900 * time.Second
	DefaultDrainWait        = 3600 * time.Second
	// IntentStale: a pass that recorded nodes it is starting and did not
	// clear the record within this long is gone (crashed, cut off).
	IntentStale = time.Minute
	// MaxStartPerPass bounds the nodes one pass starts (a pass's work, and
	// its time within the scheduled function's timeout, whatever
	// maxUnavailable allows): a start is a progress write and a cordon.
	MaxStartPerPass = 100
	// MaxVisitPerPass bounds the nodes of one step a pass visits.
	MaxVisitPerPass = 400
	// MaxHistory bounds a rollout's timeline.
	MaxHistory = 32
)

// OrderKey is a node's place in a rollout's stable shuffled order: a hash
// of the rollout and the node, so every wave is a sample across pools.
func OrderKey(rolloutID, poolID, nodeID string) string {
	sum := sha256.Sum256([]byte(rolloutID + "/" + poolID + "/" + nodeID))
	return hex.EncodeToString(sum[:8])
}

// WaveSizes turns the asked waves into cumulative sizes over n nodes, or
// an error naming the wave that breaks the rules: each covers at least as
// many as the one before, the last covers every node.
func WaveSizes(waves []api.WaveSpec, n int) ([]int, int, error) {
	out := make([]int, len(waves))
	for i, w := range waves {
		switch {
		case (w.Nodes == nil) == (w.Percent == nil):
			return nil, i, errors.New("give exactly one of nodes and percent")
		case w.Nodes != nil:
			out[i] = min(*w.Nodes, n)
		default:
			out[i] = (n**w.Percent + 99) / 100
		}
		if i > 0 && out[i] < out[i-1] {
			return nil, i, errors.New("a wave covers fewer nodes than the one before (waves are cumulative)")
		}
	}
	if last := len(out) - 1; out[last] < n {
		return nil, last, errors.New("the last wave must cover every node of the rollout")
	}
	return out, 0, nil
}

// WaveOf is the wave of the node at position i (0-based) of the order.
func WaveOf(sizes []int, i int) int {
	for w, s := range sizes {
		if i < s {
			return w
		}
	}
	return len(sizes) - 1
}
