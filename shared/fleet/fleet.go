// Package fleet is the domain of nodes (docs/fleet.md; the contract is
// docs/reference/nodes.md): the hosts of a pool that register a key, prove
// who they are by signing their heartbeats, and learn from each answer
// which release to run and which reservations to bind or unbind. It knows
// nothing of Lambda or DynamoDB: it states what it needs from storage as
// the Store interface, and works with the capacity module through the
// node-hours' eligibility flags (Calendar.Flag) and the
// bindings the reservation reconciler writes (capacity.NodeStore). The
// node agent's report and answer, the node states and the limits are the
// API's (shared/api, types_fleet.go): Record embeds the API's Node.
package fleet

import (
	"errors"
	"sort"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// FlagMarginHours: the hours past the provisioned horizon an ineligible
// node's node-hours are flagged ahead, so provisioning never writes one
// unflagged (docs/fleet.md, Placement). The API's limits of nodes are in
// shared/api (types_fleet.go).
const FlagMarginHours = 4

// Entry is a node's pending bind or unbind of one reservation (the
// reservation reconciler writes them; the node's reports retire unbinds).
type Entry struct {
	TenantID string
	Mask     capacity.Mask
	Window   api.Window
	Action   string
	// Moves is the reservation's move count when it was bound here: only
	// a newer placement turns an unbind back into a bind.
	Moves int
}

// Record is a node as stored: the Node, and what the API does not show.
type Record struct {
	api.Node
	Index     int    // k of <resource>-node-<k>
	Owner     string // the pool's owner (a heartbeat's tenantId must be it)
	PublicKey string // PEM
	Counter   int64  // the last accepted report's
	NodeSize  int    // the resource's node size (device ids of entries)
	// Operator and Rollout are the two cordons (Node.Cordon shows the
	// operator's first): uncordon lifts the operator's only.
	Operator *api.Cordon
	Rollout  *api.Cordon
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
	LogSplit *api.LogSplit
}

// Target is a release a rollout tells a node to run.
type Target struct {
	Version   string
	Sequence  int64
	RolloutID string
}

// Eligible reports whether new reservations may be placed on the node:
// ready and not cordoned (docs/reference/nodes.md).
func (r Record) Eligible() bool { return r.State == api.Ready && r.Operator == nil && r.Rollout == nil }

// FlagsInSync reports whether what was applied is what the record wants
// now: the last writer to finish was the last to claim, and the flags and
// the out-of-service index say !Eligible, the flags far enough ahead
// (through target-1: the sweep extends them hourly).
func (r Record) FlagsInSync(target capacity.Hour) bool {
	off := !r.Eligible()
	return r.FlagGen == r.Gen && r.Flagged == off && r.Out == off && (!off || r.FlaggedTo >= target-1)
}

// View is the node as the API answers it (cordon and bindings filled in).
func (r Record) View() api.Node {
	n := r.Node
	n.Cordon = r.Operator
	if n.Cordon == nil {
		n.Cordon = r.Rollout
	}
	n.Bindings = []api.NodeBinding{}
	for _, b := range r.desiredBindings() {
		n.Bindings = append(n.Bindings, api.NodeBinding{DesiredBinding: b, Reported: r.Reported[b.ReservationID]})
	}
	return n
}

// desiredBindings lists the entries for an answer: every unbind before any
// bind (a device's previous holder is scrubbed before the next is given
// it), each group by window start, then reservation id.
func (r Record) desiredBindings() []api.DesiredBinding {
	out := make([]api.DesiredBinding, 0, len(r.Entries))
	t := capacity.Topology{Resource: r.Resource, NodeSize: max(r.NodeSize, 1), Devices: api.MaxDevicesPerResource}
	for id, e := range r.Entries {
		b := api.DesiredBinding{ReservationID: id, TenantID: e.TenantID, Window: e.Window, Action: e.Action, DeviceIDs: []string{}}
		for _, n := range (capacity.Placement{{Node: r.Index, Mask: e.Mask}}).Devices(t.NodeSize) {
			b.DeviceIDs = append(b.DeviceIDs, capacity.DeviceID(r.Resource, n))
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Action == api.ActionUnbind) != (b.Action == api.ActionUnbind) {
			return a.Action == api.ActionUnbind
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
		want := api.BindBound
		if e.Action == api.ActionUnbind {
			want = api.BindUnbound
		}
		if r.Reported[id] != want {
			return true
		}
	}
	return false
}

// StateOf is the state a report puts a node in.
func StateOf(rep api.Report) api.NodeState {
	if rep.Health.Healthy() {
		return api.Ready
	}
	return api.Unhealthy
}

// Sentinel errors of the store.
var (
	ErrNotFound = errors.New("fleet: not found")
	ErrExists   = errors.New("fleet: already exists")
	ErrStale    = errors.New("fleet: stored state changed (condition failed)")
)
