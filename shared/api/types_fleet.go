package api

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/dsse"
)

// The vocabulary, limits and wire types of nodes: the node agent's
// report and heartbeat answer, and nodes as the API answers them (the
// contract shared/fleet enforces and the agent speaks).

// ReportPayloadType is the only DSSE payload type a node report may carry.
const ReportPayloadType = "application/vnd.bettercompute.node-report+json"

// Limits of the model (docs/fleet.md).
const (
	MaxChecks   = 32  // health checks of one report
	MaxBindings = 128 // bindings of one report, and pending entries of one node
	// MaxSkew is how far a report's `at` may be from the server's clock.
	MaxSkew = 5 * time.Minute
	// DefaultInterval is the heartbeat interval of an idle node (the
	// answer's nextHeartbeatSeconds), BusyInterval that of a node with
	// work: a binding not yet reported, a release to install.
	DefaultInterval = 30 * time.Second
	BusyInterval    = 5 * time.Second
	// UnreachableAfter: a node with no accepted heartbeat for this many
	// (idle) intervals is unreachable.
	UnreachableAfter = 3
	// KeyCacheTTL is how long a function keeps a node's key after reading
	// it (the write is still conditioned on that key: a stale cache is
	// never trusted past a key change).
	KeyCacheTTL = time.Minute
	// CheckpointTTL is how long a function tells nodes the checkpoint it read
	// last before it reads the latest again; a release beyond it, or a node
	// that reports a larger size, reads it at once.
	CheckpointTTL = time.Minute
)

// Reasons of a refused heartbeat (docs/reference/nodes.md).
const (
	ReasonMalformed    = dsse.ReasonMalformed
	ReasonPayloadType  = dsse.ReasonPayloadType
	ReasonBadSignature = dsse.ReasonBadSignature
	ReasonInvalidField = "invalid_field"
	ReasonMismatch     = "mismatch"
	ReasonReportStale  = "stale" // its `at` is too far from the server's clock
	ReasonReplay       = "replay"
)

// NodeState is where a node is (docs/reference/nodes.md).
type NodeState string

const (
	Registered  NodeState = "registered"  // no heartbeat yet
	Ready       NodeState = "ready"       // its last report was healthy
	Unhealthy   NodeState = "unhealthy"   // fewer devices visible than expected, or a failed check
	Unreachable NodeState = "unreachable" // no accepted heartbeat for UnreachableAfter intervals
)

// NodeStates lists every node state.
var NodeStates = []NodeState{Registered, Ready, Unhealthy, Unreachable}

// ParseNodeState reads a state filter.
func ParseNodeState(s string) (NodeState, bool) {
	st := NodeState(s)
	return st, slices.Contains(NodeStates, st)
}

// Cordon sources.
const (
	ByOperator = "operator"
	ByRollout  = "rollout"
)

// Binding actions and reported binding states.
const (
	ActionBind   = "bind"
	ActionUnbind = "unbind"
	BindBound    = "bound"
	BindUnbound  = "unbound"
	BindFailed   = "failed"
)

// Install states a node reports.
const (
	InstallInstalling = "installing"
	InstallInstalled  = "installed"
	InstallFailed     = "failed"
)

// Version is a release a node runs.
type Version struct {
	Version  string `json:"version" bc:"required,min=1,max=128" doc:"the release's SemVer version"`
	Sequence int64  `json:"sequence" bc:"required,min=1,max=9007199254740991" doc:"its sequence"`
}

// Cordon keeps new reservations off a node.
type Cordon struct {
	By        string    `json:"by" enum:"cordonBy" doc:"who cordoned it"`
	Reason    string    `json:"reason" doc:"why, as given"`
	RolloutID string    `json:"rolloutId,omitempty" doc:"the rollout that cordoned it (by rollout)"`
	At        time.Time `json:"at" doc:"when"`
}

// Check is one health check a node ran.
type Check struct {
	Name   string  `json:"name" bc:"required,min=1,max=64" doc:"the check's name"`
	OK     bool    `json:"ok" bc:"required" doc:"whether it passed"`
	Detail *string `json:"detail,omitempty" bc:"max=256" doc:"what it found"`
}

// Health is a node's own view of its devices.
type Health struct {
	DevicesExpected int     `json:"devicesExpected" bc:"required,min=0,max=64" doc:"devices the node should see"`
	DevicesVisible  int     `json:"devicesVisible" bc:"required,min=0,max=64" doc:"devices it sees"`
	Checks          []Check `json:"checks" bc:"required,max=fleet.MaxChecks" doc:"the checks it ran"`
}

// Healthy: every expected device visible and every check passed.
func (h Health) Healthy() bool {
	if h.DevicesVisible < h.DevicesExpected {
		return false
	}
	for _, c := range h.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// Install is what a node reports of a release it was told to run.
type Install struct {
	Version string  `json:"version" bc:"required,min=1,max=128" doc:"the release being installed"`
	State   string  `json:"state" bc:"required" enum:"installState" doc:"installing, installed or failed"`
	Reason  *string `json:"reason,omitempty" bc:"max=256" doc:"why it failed"`
}

// ReportedBinding is a node's word on one reservation it was told about.
type ReportedBinding struct {
	ReservationID string  `json:"reservationId" bc:"required,min=1,max=64" doc:"the reservation"`
	State         string  `json:"state" bc:"required" enum:"bindingState" doc:"bound, unbound or failed"`
	Reason        *string `json:"reason,omitempty" bc:"max=256" doc:"why it failed"`
}

// Report is the signed payload of a heartbeat.
type Report struct {
	PoolID   string            `json:"poolId" bc:"required,min=1,max=63" doc:"the pool (must be the request's)"`
	NodeID   string            `json:"nodeId" bc:"required,min=1,max=128" doc:"the node (must be the request's)"`
	Counter  int64             `json:"counter" bc:"required,min=1,max=9007199254740991,strictint" doc:"strictly rising: a report whose counter is not above the last accepted one is a replay"`
	At       time.Time         `json:"at" bc:"required" doc:"when the node made it; within ${fleet.MaxSkew} of the server's clock"`
	Running  *Version          `json:"running" bc:"required,nullable" doc:"the release it runs, or null"`
	Install  *Install          `json:"install,omitempty" doc:"where an install it was told to do is"`
	Health   Health            `json:"health" bc:"required" doc:"its devices and checks"`
	Bindings []ReportedBinding `json:"bindings" bc:"required,max=fleet.MaxBindings" doc:"its word on each binding it was told about"`
	Log      *LogReport        `json:"log,omitempty" doc:"the release log checkpoint it verified last"`
}

// LogReport is a node's last verified release log checkpoint, as its
// reports carry it: the node witnesses the log.
type LogReport struct {
	Size int64  `json:"size" bc:"required,min=0,max=9007199254740991,strictint" doc:"its tree size"`
	Root string `json:"root" bc:"required,min=44,max=44" doc:"its root hash, base64"`
}

// NodeLog is a node's witness of the release log as the API shows it.
type NodeLog struct {
	Size       int64     `json:"size" doc:"the tree size of the checkpoint it reported last"`
	Root       string    `json:"root" doc:"its root hash, base64"`
	Consistent bool      `json:"consistent" doc:"false once it reported a root the log never had at that size (a split view)"`
	SplitView  *LogSplit `json:"splitView,omitempty" doc:"the first such report, kept until the node is re-registered"`
}

// LogSplit is the evidence of a split view: what the node reported, when.
type LogSplit struct {
	Size int64     `json:"size" doc:"the size it reported"`
	Root string    `json:"root" doc:"the root it reported"`
	At   time.Time `json:"at" doc:"when it was accepted"`
}

// Node is a registered node as the API answers it.
type Node struct {
	PoolID          string        `json:"poolId" doc:"the pool"`
	NodeID          string        `json:"nodeId" doc:"the node: <resource>-node-<k>"`
	Resource        string        `json:"resource" doc:"the resource its devices are"`
	Platform        string        `json:"platform" doc:"os/arch[/variant], as in release manifests"`
	KeyID           string        `json:"keyId" doc:"hex SHA-256 of its registered key's SubjectPublicKeyInfo DER"`
	State           NodeState     `json:"state" enum:"nodeState" doc:"where it is"`
	Cordon          *Cordon       `json:"cordon" doc:"the cordon keeping new reservations off it (an operator's first), or null"`
	Running         *Version      `json:"running" doc:"the release it last reported running, or null"`
	Install         *Install      `json:"install,omitempty" doc:"the install its last report told of, if any"`
	Health          *Health       `json:"health,omitempty" doc:"its last report's health; absent before its first heartbeat"`
	LastHeartbeatAt *time.Time    `json:"lastHeartbeatAt,omitempty" doc:"when its last heartbeat was accepted; absent before the first"`
	Log             *NodeLog      `json:"log,omitempty" doc:"its release log witness; absent until it reports one"`
	CreatedAt       time.Time     `json:"createdAt" doc:"when it was registered"`
	Bindings        []NodeBinding `json:"bindings" doc:"what it is told to bind and unbind now (unbinds first), with what it last reported of each"`
}

// NodeBinding is one pending bind or unbind of a node, with its report.
type NodeBinding struct {
	DesiredBinding
	Reported string `json:"reported,omitempty" enum:"bindingState" doc:"what the node last reported of it; absent when it has not"`
}

// DesiredBinding is a bind or unbind a node is told.
type DesiredBinding struct {
	ReservationID string   `json:"reservationId" doc:"the reservation"`
	TenantID      string   `json:"tenantId" doc:"the tenant that holds it"`
	DeviceIDs     []string `json:"deviceIds" doc:"its devices on this node"`
	Window        Window   `json:"window" doc:"its window"`
	Action        string   `json:"action" enum:"bindAction" doc:"bind or unbind"`
}

// DesiredRelease is the release a node is told to run.
type DesiredRelease struct {
	Version        string          `json:"version" doc:"its version"`
	Sequence       int64           `json:"sequence" doc:"its sequence"`
	ManifestDigest string          `json:"manifestDigest" doc:"sha256: + hex SHA-256 of its signed statement"`
	Manifest       json.RawMessage `json:"manifest" shape:"dsse" doc:"its DSSE envelope exactly as registered: the node verifies it under its own pins"`
	Log            *DesiredLog     `json:"log,omitempty" doc:"its release log evidence: the node installs it only once it verifies"`
}

// DesiredLog is the release log's evidence for a release a node is told:
// computed once per checkpoint, entry and reported size, and cached.
type DesiredLog struct {
	Index       int64    `json:"index" doc:"the release's entry"`
	Checkpoint  string   `json:"checkpoint" doc:"the latest signed checkpoint"`
	Inclusion   []string `json:"inclusion" doc:"its inclusion proof in that tree (base64 hashes)"`
	Consistency []string `json:"consistency" doc:"the consistency proof from the size the node reported (base64 hashes)"`
}

// Desired is what a heartbeat's answer tells the node.
type Desired struct {
	Release       *DesiredRelease  `json:"release" doc:"the release to run, or null (keep running what it runs)"`
	FloorSequence int64            `json:"floorSequence" doc:"the lowest release sequence it may install: that of the release it runs (0 with none)"`
	Bindings      []DesiredBinding `json:"bindings" doc:"reservations to bind and unbind, the unbind of a device's previous holder before the bind of the next"`
	Cordoned      bool             `json:"cordoned" doc:"whether new reservations are kept off it"`
}

// HeartbeatResult is nodes.heartbeat's answer.
type HeartbeatResult struct {
	Node                 Node    `json:"node" doc:"the node as this heartbeat left it"`
	Desired              Desired `json:"desired" doc:"what it should do"`
	NextHeartbeatSeconds int     `json:"nextHeartbeatSeconds" doc:"when to heartbeat next: ${fleet.BusyInterval} while it has work, the idle interval otherwise"`
}
