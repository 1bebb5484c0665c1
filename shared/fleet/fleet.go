// Package fleet is the domain of nodes (docs/fleet.md; the contract is
// docs/reference/nodes.md): the hosts of a pool that register a key, prove
// who they are by signing their heartbeats, and learn from each answer
// which release to run and which reservations to bind or unbind. It knows
// nothing of Lambda or DynamoDB: it states what it needs from storage as
// the Store interface, and works with the capacity module through the
// node-hours' eligibility flags (capacity.CalendarStore.Flag) and the
// bindings the reservation reconciler writes (capacity.NodeStore).
package fleet

import (
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/bettercompute/control-plane/shared/capacity"
)

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
	// FlagMarginHours: the hours past the provisioned horizon an
	// ineligible node's node-hours are flagged ahead, so provisioning
	// never writes one unflagged (docs/fleet.md, Placement).
	FlagMarginHours = 4
)

// State is where a node is (docs/reference/nodes.md).
type State string

const (
	Registered  State = "registered"  // no heartbeat yet
	Ready       State = "ready"       // its last report was healthy
	Unhealthy   State = "unhealthy"   // fewer devices visible than expected, or a failed check
	Unreachable State = "unreachable" // no accepted heartbeat for UnreachableAfter intervals
)

// States lists every node state.
var States = []State{Registered, Ready, Unhealthy, Unreachable}

// ParseState reads a state filter.
func ParseState(s string) (State, bool) {
	st := State(s)
	return st, slices.Contains(States, st)
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
	State           State         `json:"state" enum:"nodeState" doc:"where it is"`
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
	ReservationID string          `json:"reservationId" doc:"the reservation"`
	TenantID      string          `json:"tenantId" doc:"the tenant that holds it"`
	DeviceIDs     []string        `json:"deviceIds" doc:"its devices on this node"`
	Window        capacity.Window `json:"window" doc:"its window"`
	Action        string          `json:"action" enum:"bindAction" doc:"bind or unbind"`
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

// Entry is a node's pending bind or unbind of one reservation (the
// reservation reconciler writes them; the node's reports retire unbinds).
type Entry struct {
	TenantID string
	Mask     capacity.Mask
	Window   capacity.Window
	Action   string
	// Moves is the reservation's move count when it was bound here: only
	// a newer placement turns an unbind back into a bind.
	Moves int
}

// Record is a node as stored: the Node, and what the API does not show.
type Record struct {
	Node
	Index     int    // k of <resource>-node-<k>
	Owner     string // the pool's owner (a heartbeat's tenantId must be it)
	PublicKey string // PEM
	Counter   int64  // the last accepted report's
	NodeSize  int    // the resource's node size (device ids of entries)
	// Operator and Rollout are the two cordons (Node.Cordon shows the
	// operator's first): uncordon lifts the operator's only.
	Operator *Cordon
	Rollout  *Cordon
	Entries  map[string]Entry  // pending binds and unbinds, by reservation
	Reported map[string]string // the last accepted report's bindings: reservation → state
	// Eligibility as applied (docs/fleet.md, Eligibility): Gen is the
	// generation the last flag writer claimed; FlagGen, Flagged and
	// FlaggedTo what the last writer to finish applied (the node-hours
	// carry the ineligible flag up to FlaggedTo, exclusive); Out, whether
	// the node is in its pool's out-of-service index. What every writer
	// and the sweep compare with what the record wants (Eligible).
	Gen, FlagGen int64
	Flagged      bool
	FlaggedTo    capacity.Hour
	Out          bool
	// BindVersion rises with every change of Entries: a bind is written
	// only against the entries it read.
	BindVersion int64
	// Adopted: the reservations the node held when it registered (bound
	// at once while it was unmanaged) were told to it.
	Adopted bool
	// Target is the release a rollout told the node to install (nil:
	// none), and Floor the lowest sequence it may install meanwhile: that
	// of the release it ran when the rollout took it.
	Target *Target
	Floor  int64
	// LogSplit is the first report of a root the release log never had
	// at that size (nil: none), kept until the node is re-registered.
	LogSplit *LogSplit
}

// Target is a release a rollout tells a node to run.
type Target struct {
	Version   string
	Sequence  int64
	RolloutID string
}

// Eligible reports whether new reservations may be placed on the node:
// ready and not cordoned (docs/reference/nodes.md).
func (r Record) Eligible() bool { return r.State == Ready && r.Operator == nil && r.Rollout == nil }

// FlagsInSync reports whether what was applied is what the record wants
// now: the last writer to finish was the last to claim, and the flags and
// the out-of-service index say !Eligible, the flags far enough ahead
// (through target-1: the sweep extends them hourly).
func (r Record) FlagsInSync(target capacity.Hour) bool {
	off := !r.Eligible()
	return r.FlagGen == r.Gen && r.Flagged == off && r.Out == off && (!off || r.FlaggedTo >= target-1)
}

// View is the node as the API answers it (cordon and bindings filled in).
func (r Record) View() Node {
	n := r.Node
	n.Cordon = r.Operator
	if n.Cordon == nil {
		n.Cordon = r.Rollout
	}
	n.Bindings = []NodeBinding{}
	for _, b := range r.desiredBindings() {
		n.Bindings = append(n.Bindings, NodeBinding{DesiredBinding: b, Reported: r.Reported[b.ReservationID]})
	}
	return n
}

// desiredBindings lists the entries for an answer: every unbind before any
// bind (a device's previous holder is scrubbed before the next is given
// it), each group by window start, then reservation id.
func (r Record) desiredBindings() []DesiredBinding {
	out := make([]DesiredBinding, 0, len(r.Entries))
	t := capacity.Topology{Resource: r.Resource, NodeSize: max(r.NodeSize, 1), Devices: capacity.MaxDevicesPerResource}
	for id, e := range r.Entries {
		b := DesiredBinding{ReservationID: id, TenantID: e.TenantID, Window: e.Window, Action: e.Action, DeviceIDs: []string{}}
		for _, n := range (capacity.Placement{{Node: r.Index, Mask: e.Mask}}).Devices(t.NodeSize) {
			b.DeviceIDs = append(b.DeviceIDs, capacity.DeviceID(r.Resource, n))
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Action == ActionUnbind) != (b.Action == ActionUnbind) {
			return a.Action == ActionUnbind
		}
		if !a.Window.Start.Equal(b.Window.Start) {
			return a.Window.Start.Before(b.Window.Start)
		}
		return a.ReservationID < b.ReservationID
	})
	return out
}

// Busy reports whether the node has work it has not reported done: a bind
// not reported bound, an unbind not reported unbound.
func (r Record) Busy() bool {
	for id, e := range r.Entries {
		want := BindBound
		if e.Action == ActionUnbind {
			want = BindUnbound
		}
		if r.Reported[id] != want {
			return true
		}
	}
	return false
}

// StateOf is the state a report puts a node in.
func StateOf(rep Report) State {
	if rep.Health.Healthy() {
		return Ready
	}
	return Unhealthy
}

// Sentinel errors of the store.
var (
	ErrNotFound = errors.New("fleet: not found")
	ErrExists   = errors.New("fleet: already exists")
	ErrStale    = errors.New("fleet: stored state changed (condition failed)")
)
