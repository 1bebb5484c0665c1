package api

import (
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/release"
)

// The vocabulary, limits and wire types of rollouts: what the contract
// states and shared/rollout enforces.

// Limits of rollouts.create (docs/reference/rollouts.md).
const (
	MaxPools = 50
	MaxWaves = 10
)

// Refusals of rollouts.create, and a drain's choices.
const (
	ReasonNoNodes  = "no_nodes"  // create: the pools have no managed node
	ReasonNoBinary = "no_binary" // the release has no binary for the node's platform
	OnTimeoutSkip  = "skip"
	OnTimeoutForce = "force"
)

// RolloutState is where a rollout is (docs/rollouts.md).
type RolloutState string

const (
	Progressing RolloutState = "progressing"
	Paused      RolloutState = "paused"
	Completed   RolloutState = "completed"
	Aborting    RolloutState = "aborting"
	Aborted     RolloutState = "aborted"
	RolledBack  RolloutState = "rolled_back"
)

// RolloutStates lists every rollout state.
var RolloutStates = []RolloutState{Progressing, Paused, Completed, Aborting, Aborted, RolledBack}

// ParseRolloutState reads a state filter.
func ParseRolloutState(s string) (RolloutState, bool) {
	st := RolloutState(s)
	return st, slices.Contains(RolloutStates, st)
}

// Terminal: nothing more happens to it.
func (s RolloutState) Terminal() bool {
	return s == Completed || s == Aborted || s == RolledBack
}

// rolloutNext is the state machine (docs/rollouts.md, States): a rollout's
// state changes only along these edges, through rollout.Record.move (a
// list, as reservationNext).
var rolloutNext = []struct {
	from RolloutState
	to   []RolloutState
}{
	{Progressing, []RolloutState{Paused, Completed, Aborting}},
	{Paused, []RolloutState{Progressing, Aborting}},
	{Aborting, []RolloutState{Aborted, RolledBack}},
}

// CanMoveTo reports whether s → t is an edge of the state machine.
func (s RolloutState) CanMoveTo(t RolloutState) bool {
	for _, e := range rolloutNext {
		if e.from == s {
			return slices.Contains(e.to, t)
		}
	}
	return false
}

// RolloutStep is where one node of a rollout is.
type RolloutStep string

const (
	Pending    RolloutStep = "pending"
	Draining   RolloutStep = "draining"
	Installing RolloutStep = "installing"
	Verifying  RolloutStep = "verifying"
	Updated    RolloutStep = "updated"
	Failed     RolloutStep = "failed"
	Skipped    RolloutStep = "skipped"
)

// RolloutSteps lists every node step, in order.
var RolloutSteps = []RolloutStep{Pending, Draining, Installing, Verifying, Updated, Failed, Skipped}

// ParseRolloutStep reads a step filter.
func ParseRolloutStep(s string) (RolloutStep, bool) {
	st := RolloutStep(s)
	return st, slices.Contains(RolloutSteps, st)
}

// Done: the node's part of the rollout is over (a rollback aside).
func (s RolloutStep) Done() bool { return s == Updated || s == Failed || s == Skipped }

// Active: the node is out of service for the rollout.
func (s RolloutStep) Active() bool {
	return s == Draining || s == Installing || s == Verifying
}

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
	State  RolloutState `json:"state" enum:"rolloutState" doc:"its state then"`
	At     time.Time    `json:"at" doc:"when"`
	Reason string       `json:"reason,omitempty" doc:"what happened: a state entered, a wave started (wave-k) or finished (wave-k-done), a pause or resume"`
}

// Rollout is a rollout as the API answers it.
type Rollout struct {
	RolloutID string         `json:"rolloutId" doc:"its id (a ULID, or derived from a clientToken)"`
	Version   string         `json:"version" doc:"the release it rolls out"`
	Sequence  int64          `json:"sequence" doc:"that release's sequence"`
	Pools     []string       `json:"pools" doc:"the pools whose managed nodes it takes"`
	Waves     []Wave         `json:"waves" doc:"the waves as run"`
	State     RolloutState   `json:"state" enum:"rolloutState" doc:"where it is"`
	Reason    string         `json:"reason,omitempty" doc:"why it is aborting, aborted or rolled back"`
	Counts    Counts         `json:"counts" doc:"its nodes by step (as of the last pass)"`
	Settings  Settings       `json:"settings" doc:"the create's options as applied"`
	CreatedBy release.Audit  `json:"createdBy" doc:"who created it"`
	CreatedAt time.Time      `json:"createdAt" doc:"when it was created"`
	UpdatedAt time.Time      `json:"updatedAt" doc:"when it last changed"`
	History   []RolloutEvent `json:"history" doc:"its timeline, oldest first"`
}

// NodeProgress is one node of a rollout, as rollouts.nodes answers it.
type NodeProgress struct {
	PoolID    string      `json:"poolId" doc:"the pool"`
	NodeID    string      `json:"nodeId" doc:"the node"`
	Wave      int         `json:"wave" doc:"the wave it belongs to (0-based)"`
	Step      RolloutStep `json:"step" enum:"rolloutStep" doc:"where it is"`
	Reason    string      `json:"reason,omitempty" doc:"why it failed or was skipped"`
	Previous  *Version    `json:"previous" doc:"the release it ran when the rollout took it, or null"`
	Rollback  string      `json:"rollback,omitempty" doc:"once the rollout rolls back, for a node it updated: installing, done or failed"`
	StartedAt *time.Time  `json:"startedAt,omitempty" doc:"when the rollout took it"`
	UpdatedAt time.Time   `json:"updatedAt" doc:"when its step last changed"`
}
