package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/fleet"
)

// State is where a rollout is (docs/rollouts.md).
type State string

const (
	Progressing State = "progressing"
	Paused      State = "paused"
	Completed   State = "completed"
	Aborting    State = "aborting"
	Aborted     State = "aborted"
	RolledBack  State = "rolled_back"
)

// States lists every rollout state.
var States = []State{Progressing, Paused, Completed, Aborting, Aborted, RolledBack}

// ParseState reads a state filter.
func ParseState(s string) (State, bool) { st := State(s); return st, slices.Contains(States, st) }

// Terminal: nothing more happens to it.
func (s State) Terminal() bool { return s == Completed || s == Aborted || s == RolledBack }

// next is the state machine (docs/rollouts.md, States): a rollout's state
// changes only along these edges, through Record.move.
var next = map[State][]State{
	Progressing: {Paused, Completed, Aborting},
	Paused:      {Progressing, Aborting},
	Aborting:    {Aborted, RolledBack},
}

// CanMoveTo reports whether s → t is an edge of the state machine.
func (s State) CanMoveTo(t State) bool { return slices.Contains(next[s], t) }

// Step is where one node of a rollout is.
type Step string

const (
	Pending    Step = "pending"
	Draining   Step = "draining"
	Installing Step = "installing"
	Verifying  Step = "verifying"
	Updated    Step = "updated"
	Failed     Step = "failed"
	Skipped    Step = "skipped"
)

// Steps lists every node step, in order.
var Steps = []Step{Pending, Draining, Installing, Verifying, Updated, Failed, Skipped}

// ParseStep reads a step filter.
func ParseStep(s string) (Step, bool) { st := Step(s); return st, slices.Contains(Steps, st) }

// Done: the node's part of the rollout is over (a rollback aside).
func (s Step) Done() bool { return s == Updated || s == Failed || s == Skipped }

// Active: the node is out of service for the rollout.
func (s Step) Active() bool { return s == Draining || s == Installing || s == Verifying }

// Reasons of a rollout, a node's step, and of refusals.
const (
	ReasonFailures     = "failures"    // more nodes failed than maxFailedNodes
	ReasonAbortedBy    = "aborted"     // rollouts.abort
	ReasonNoBinary     = "no_binary"   // the release has no binary for the node's platform
	ReasonBusy         = "busy"        // reservations kept it busy past drain.waitSeconds
	ReasonDeadline     = "deadline"    // no healthy report of the target within progressDeadlineSeconds
	ReasonUnhealthy    = "unhealthy"   // it reported unhealthy running the target
	ReasonInstall      = "install"     // it reported the install failed
	ReasonRunning      = "already"     // it ran the version already
	ReasonNotStarted   = "not_started" // the rollout ended before it took the node
	ReasonNoPrevious   = "no_previous" // rollback: it ran no release before
	ReasonNoNodes      = "no_nodes"    // create: the pools have no managed node
	ReasonAbandoned    = "abandoned"   // a create that stopped before its claims, finished by the reconciler
	OnTimeoutSkip      = "skip"
	OnTimeoutForce     = "force"
	RollbackDue        = "due" // updated by this rollout: sent back if it aborts
	RollbackInstalling = "installing"
	RollbackDone       = "done"
	RollbackFailed     = "failed"
)

// Limits and defaults of rollouts.create (docs/reference/rollouts.md).
const (
	MaxPools                = 50
	MaxWaves                = 10
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

// WaveSpec is one wave as asked: a cumulative node count or percent.
type WaveSpec struct {
	Nodes   *int `json:"nodes,omitempty" bc:"min=1,max=1000000,doc=cumulative node count"`
	Percent *int `json:"percent,omitempty" bc:"min=1,max=100,doc=cumulative percent of the rollout's nodes"`
}

// Wave is a wave as run: its cumulative size.
type Wave struct {
	Size       int        `json:"size" doc:"the cumulative node count it covers"`
	StartedAt  *time.Time `json:"startedAt,omitempty" doc:"when it started"`
	FinishedAt *time.Time `json:"finishedAt,omitempty" doc:"when its last node was updated, failed or skipped"`
}

// Drain is how a node is drained around reservations.
type Drain struct {
	WaitSeconds int    `json:"waitSeconds" doc:"how long a node may wait for its reservations"`
	OnTimeout   string `json:"onTimeout" enum:"onTimeout" doc:"skip the node, or force the install (disrupting the reservations)"`
}

// Settings are the create's options as applied.
type Settings struct {
	Waves                   []WaveSpec `json:"waves" doc:"the waves as asked"`
	BakeSeconds             int        `json:"bakeSeconds" doc:"the wait after a wave is done before the next starts"`
	MaxUnavailable          int        `json:"maxUnavailable" doc:"nodes of the rollout's pools out of service at once, those already not ready or cordoned included"`
	MaxFailedNodes          int        `json:"maxFailedNodes" doc:"the rollout aborts once more nodes than this failed"`
	ProgressDeadlineSeconds int        `json:"progressDeadlineSeconds" doc:"how long a node may take from install to a healthy report of the target"`
	Drain                   Drain      `json:"drain" doc:"draining around reservations"`
	RollbackOnAbort         bool       `json:"rollbackOnAbort" doc:"an aborted rollout sends its updated nodes back to the release each ran before"`
}

// Counts are a rollout's nodes by step.
type Counts struct {
	Nodes      int `json:"nodes" doc:"the rollout's nodes"`
	Pending    int `json:"pending" doc:"not started"`
	Draining   int `json:"draining" doc:"cordoned, waiting for reservations"`
	Installing int `json:"installing" doc:"told to install"`
	Verifying  int `json:"verifying" doc:"installed, waiting for a healthy report"`
	Updated    int `json:"updated" doc:"running the version, healthy"`
	Failed     int `json:"failed" doc:"failed"`
	Skipped    int `json:"skipped" doc:"skipped"`
}

// RolloutEvent is one entry of a rollout's timeline.
type RolloutEvent struct {
	State  State     `json:"state" enum:"rolloutState" doc:"its state then"`
	At     time.Time `json:"at" doc:"when"`
	Reason string    `json:"reason,omitempty" doc:"what happened: a state entered, a wave started (wave-k) or finished (wave-k-done), a pause or resume"`
}

// Rollout is a rollout as the API answers it.
type Rollout struct {
	RolloutID string         `json:"rolloutId" doc:"its id (a ULID, or derived from a clientToken)"`
	Version   string         `json:"version" doc:"the release it rolls out"`
	Sequence  int64          `json:"sequence" doc:"that release's sequence"`
	Pools     []string       `json:"pools" doc:"the pools whose managed nodes it takes"`
	Waves     []Wave         `json:"waves" doc:"the waves as run"`
	State     State          `json:"state" enum:"rolloutState" doc:"where it is"`
	Reason    string         `json:"reason,omitempty" doc:"why it is aborting, aborted or rolled back"`
	Counts    Counts         `json:"counts" doc:"its nodes by step (as of the last pass)"`
	Settings  Settings       `json:"settings" doc:"the create's options as applied"`
	CreatedBy Audit          `json:"createdBy" doc:"who created it"`
	CreatedAt time.Time      `json:"createdAt" doc:"when it was created"`
	UpdatedAt time.Time      `json:"updatedAt" doc:"when it last changed"`
	History   []RolloutEvent `json:"history" doc:"its timeline, oldest first"`
}

// NodeProgress is one node of a rollout, as rollouts.nodes answers it.
type NodeProgress struct {
	PoolID    string         `json:"poolId" doc:"the pool"`
	NodeID    string         `json:"nodeId" doc:"the node"`
	Wave      int            `json:"wave" doc:"the wave it belongs to (0-based)"`
	Step      Step           `json:"step" enum:"rolloutStep" doc:"where it is"`
	Reason    string         `json:"reason,omitempty" doc:"why it failed or was skipped"`
	Previous  *fleet.Version `json:"previous" doc:"the release it ran when the rollout took it, or null"`
	Rollback  string         `json:"rollback,omitempty" doc:"once the rollout rolls back, for a node it updated: installing, done or failed"`
	StartedAt *time.Time     `json:"startedAt,omitempty" doc:"when the rollout took it"`
	UpdatedAt time.Time      `json:"updatedAt" doc:"when its step last changed"`
}

// OrderKey is a node's place in a rollout's stable shuffled order: a hash
// of the rollout and the node, so every wave is a sample across pools.
func OrderKey(rolloutID, poolID, nodeID string) string {
	sum := sha256.Sum256([]byte(rolloutID + "/" + poolID + "/" + nodeID))
	return hex.EncodeToString(sum[:8])
}

// WaveSizes turns the asked waves into cumulative sizes over n nodes, or
// an error naming the wave that breaks the rules: each covers at least as
// many as the one before, the last covers every node.
func WaveSizes(waves []WaveSpec, n int) ([]int, int, error) {
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
