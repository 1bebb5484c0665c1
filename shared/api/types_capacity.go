package api

import (
	"slices"
	"time"
)

// The vocabulary, limits and result types of pools, quotas and
// reservations: what the contract states and shared/capacity enforces.

// Limits of the model (docs/reference, and docs/capacity.md where the
// spec is silent).
const (
	MaxDevicesPerResource = 100_000   // pools.create, per resource
	MaxResources          = 64        // resources of one pool
	DefaultNodeSize       = 8         // devices per node when pools.create names none
	MaxNodeSize           = 64        // a node's devices fit one 64-bit mask
	MaxQuota              = 1_000_000 // pools.offer max
	MaxCount              = 1024      // reservations.create count
	MaxWindow             = 90 * 24 * time.Hour
	MaxLeadDays           = 365
	MaxLeadTime           = MaxLeadDays * 24 * time.Hour
	MaxStartSkew          = 5 * time.Minute // how far in the past window.start may be
	// StaleAfter: a draft with no outcome this old is fenced to expired; it is
	// also how long after any fence the reconciler sweeps once more for the
	// writes of a create that was still in flight (longer than any flow's
	// deadline, so nothing can still be running by then).
	StaleAfter = 2 * time.Minute
	// Retention of rejected and expired reservations (DynamoDB TTL).
	Retention = 30 * 24 * time.Hour
	// ReleasedRetention of released ones: kept as history, then gone, so
	// no tenant's partition grows without bound (docs/capacity.md).
	ReleasedRetention = 90 * 24 * time.Hour
	// DeniedRetention of denied ones: a caller without a grant can make
	// them in a tenant's partition, so they are hidden from plain lists and
	// kept only a day (docs/reference/reservations.md).
	DeniedRetention = 24 * time.Hour
	// InlineDevices: a pool of at most this many devices in all lists them
	// in its answers (every pool of v0.4 did); a bigger one is described by
	// its resources and node sizes, from which every id follows.
	InlineDevices = 8192
	// MaxInFlight: creates charged on one quota row and not yet settled
	// (and credits not yet forgotten) at once; one more answers UNAVAILABLE
	// and is retried. It bounds the quota row's size (docs/capacity.md).
	MaxInFlight = 64
	// PoolPageDevices: a pools.list page stops early once its pools list
	// this many devices inline, so an answer stays far below Lambda's 6 MB
	// response limit.
	PoolPageDevices = 40_000
)

// Usage limits: a span of at most MaxUsageHours, at most MaxUsageNodes
// nodes a page. The answer gives each reservation once per node, however
// many of the span's hours it holds: at most 100 nodes × 25 hours × 64
// entries of ~120 B ≈ 19 MB in theory (every entry a different
// reservation, each shorter than an hour), ~100 KB for a busy page in
// practice; a page stops early (NextCursor) once it holds
// capacity.MaxUsageEntries.
const (
	MaxUsageHours     = 24
	DefaultUsageNodes = 50
	MaxUsageNodes     = 100
)

// ReservationState is a reservation's place in its life (docs/reference/reservations.md):
//
//	draft → denied | rejected | placed | expired | released
//	placed → binding | released
//	binding → active | released
//	active → released
//
// States only move forward; denied, rejected, expired and released are
// terminal. draft → released is the tenant's release of a draft: a release
// is allowed from any non-terminal state, and of a draft it fences the
// create in flight. The reference draws this machine from ReservationStates
// and CanMoveTo; the transition methods of capacity.Reservation are the
// only way to move one, so an impossible transition cannot be written.
type ReservationState string

const (
	Draft    ReservationState = "draft"
	Denied   ReservationState = "denied"
	Rejected ReservationState = "rejected"
	Placed   ReservationState = "placed"
	Binding  ReservationState = "binding"
	Active   ReservationState = "active"
	Released ReservationState = "released"
	Expired  ReservationState = "expired"
)

// ReservationStates lists every state in the order of a reservation's life.
var ReservationStates = []ReservationState{Draft, Denied, Rejected, Placed, Binding, Active, Released, Expired}

// reservationNext is the state machine: the states each one may move to
// (a list, not a map, so it is data every binary carries without code to
// build it).
var reservationNext = []struct {
	from ReservationState
	to   []ReservationState
}{
	{Draft, []ReservationState{Denied, Rejected, Placed, Expired, Released}},
	{Placed, []ReservationState{Binding, Released}},
	{Binding, []ReservationState{Active, Released}},
	{Active, []ReservationState{Released}},
}

// ParseReservationState accepts exactly the names of ReservationStates.
func ParseReservationState(s string) (ReservationState, bool) {
	for _, st := range ReservationStates {
		if string(st) == s {
			return st, true
		}
	}
	return "", false
}

// Terminal states hold no quota and no device.
func (s ReservationState) Terminal() bool {
	return s == Denied || s == Rejected || s == Expired || s == Released
}

// Holding states are the ones whose count is in the tenant's `used`.
func (s ReservationState) Holding() bool {
	return s == Placed || s == Binding || s == Active
}

// CanMoveTo reports whether s → t is an edge of the state machine.
func (s ReservationState) CanMoveTo(t ReservationState) bool {
	for _, e := range reservationNext {
		if e.from == s {
			return slices.Contains(e.to, t)
		}
	}
	return false
}

// Reasons of a rejected or expired reservation, and who released one.
const (
	ReasonQuota      = "quota"
	ReasonCapacity   = "capacity"
	ReasonTopology   = "topology" // devices are free, but not on few enough nodes
	ReasonInvalid    = "invalid"  // the pool or resource did not exist for the tenant
	ReasonStale      = "stale"
	ReleasedByTenant = "tenant"
	ReleasedByEnd    = "window_end"
)

// Window is a half-open interval [Start, End).
type Window struct {
	Start time.Time `json:"start" doc:"the first instant held"`
	End   time.Time `json:"end" doc:"the first instant no longer held"`
}

// Topology requests of reservations.create (docs/reference/reservations.md).
const (
	// OnNodes: a count that fits a node on exactly one node, a larger one
	// on ⌈count / nodeSize⌉ nodes.
	OnNodes = "node"
	// AnyDevices: any free devices, wherever they are.
	AnyDevices = "any"
)

// Event is one entry of a reservation's timeline: the state it entered,
// when, and why (for rejected and expired ones).
type Event struct {
	State  ReservationState `json:"state" enum:"state" doc:"the state entered"`
	At     time.Time        `json:"at" doc:"when"`
	Reason string           `json:"reason,omitempty" enum:"reason" doc:"why: on a rejected or expired entry, and on entries of what happened on its nodes (node_unreachable, replaced, disrupted)"`
	// RolloutID names the rollout of a disrupted entry.
	RolloutID string `json:"rolloutId,omitempty" doc:"the rollout that installed a release on one of its nodes while it held them (reason disrupted)"`
}

// Overlaps reports whether two half-open windows share an instant.
func (w Window) Overlaps(o Window) bool {
	return w.Start.Before(o.End) && o.Start.Before(w.End)
}

// History reasons of what happened to a reservation on its nodes
// (docs/reference/reservations.md).
const (
	ReasonNodeUnreachable = "node_unreachable"
	ReasonReplaced        = "replaced"
	ReasonDisrupted       = "disrupted"
)

// Pool is a set of devices owned by one tenant (docs/reference/pools.md),
// grouped per resource into nodes of NodeSize devices, as the API answers
// it (capacity.Pool is the stored one). Pools are immutable once created:
// the same request returns the stored pool.
type Pool struct {
	PoolID        string         `json:"poolId" doc:"the pool's id (pool ids are a global namespace)"`
	OwnerTenantID string         `json:"ownerTenantId" doc:"the tenant that created and owns the pool"`
	Resources     map[string]int `json:"resources" doc:"devices of each resource: resource name → device count"`
	NodeSize      map[string]int `json:"nodeSize" doc:"devices per node of each resource: resource name → node size (the last node of a resource may be smaller)"`
	// Devices lists every device when the pool has at most InlineDevices
	// (else it is empty and DevicesListed false).
	Devices       []Device  `json:"devices" doc:"every device of the pool, by resource name then index, when devicesListed; empty otherwise"`
	DevicesListed bool      `json:"devicesListed" doc:"true when devices lists every device: pools of at most ${capacity.InlineDevices} devices in all. A larger pool answers devices empty (every id follows from resources and nodeSize); pools.usage reads its nodes a page at a time"`
	CreatedAt     time.Time `json:"createdAt" doc:"when the pool was created"`
}

// Device is one device of a pool: "<resource>-<n>", n from 0, on node
// "<resource>-node-<⌊n/nodeSize⌋>".
type Device struct {
	DeviceID string `json:"deviceId" doc:"the device's id: <resource>-<n>, n from 0"`
	Resource string `json:"resource" doc:"the resource it is a device of"`
	NodeID   string `json:"nodeId" doc:"the node holding it: <resource>-node-<k>, k = ⌊n / nodeSize⌋"`
}

// Quota is the API's view of a quota row (docs/reference/quotas.md).
type Quota struct {
	TenantID string `json:"tenantId" doc:"the tenant the quota is for"`
	PoolID   string `json:"poolId" doc:"the pool"`
	Resource string `json:"resource" doc:"the pool's resource"`
	Max      int64  `json:"max" doc:"the most the tenant's live reservations of this pool and resource may hold charged (0..${capacity.MaxQuota}); may exceed the pool's devices: a cap, not a guarantee"`
	Used     int64  `json:"used" doc:"what they hold charged: the sum of count over the tenant's placed, binding and active reservations of this pool and resource, each charged from admission until terminal, bookings for later included; not the devices held now (above max after max was lowered)"`
}

// Usage is one page of a resource's nodes and what is placed on them over
// a span (pools.usage): the view an operator draws (bc pools show).
type Usage struct {
	PoolID    string      `json:"poolId" doc:"the pool"`
	Resource  string      `json:"resource" doc:"the resource whose nodes these are"`
	NodeSize  int         `json:"nodeSize" doc:"devices per node of the resource"`
	Devices   int         `json:"devices" doc:"devices of the resource in the pool"`
	NodeCount int         `json:"nodeCount" doc:"nodes of the resource in the pool (the last may be smaller)"`
	From      time.Time   `json:"from" doc:"the start of the span"`
	To        time.Time   `json:"to" doc:"the end of the span: from + hours"`
	Page      UsageTotals `json:"page" doc:"totals over this page's nodes (add pages up for the whole resource)"`
	Nodes     []NodeUsage `json:"nodes" doc:"the page's nodes, by node index"`
}

// UsageTotals sums a page's nodes (a caller adds pages up).
type UsageTotals struct {
	Nodes          int `json:"nodes" doc:"nodes on this page"`
	Devices        int `json:"devices" doc:"devices on those nodes"`
	BusyNow        int `json:"busyNow" doc:"devices held at from"`
	WholeFreeNow   int `json:"wholeFreeNow" doc:"nodes with no device held at from"`
	WholeFreeAll   int `json:"wholeFreeSpan" doc:"nodes with no device held at any time of the span"`
	BusyDeviceSecs int `json:"busyDeviceSeconds" doc:"device-seconds held within the span"`
}

// AddPage adds the next page of the same span: its nodes after these, its
// totals to these.
func (u *Usage) AddPage(next Usage) {
	u.Nodes = append(u.Nodes, next.Nodes...)
	u.Page.Nodes += next.Page.Nodes
	u.Page.Devices += next.Page.Devices
	u.Page.BusyNow += next.Page.BusyNow
	u.Page.WholeFreeNow += next.Page.WholeFreeNow
	u.Page.WholeFreeAll += next.Page.WholeFreeAll
	u.Page.BusyDeviceSecs += next.Page.BusyDeviceSecs
}

// NodeUsage is one node over the span.
type NodeUsage struct {
	NodeID  string `json:"nodeId" doc:"the node: <resource>-node-<k>"`
	Size    int    `json:"size" doc:"devices on the node"`
	BusyNow int    `json:"busyNow" doc:"devices held at from"`
	Busy    []Busy `json:"busy" doc:"what is held on the node within the span, by start"`
}

// Busy is one reservation's devices on a node, clipped to the span, with
// the whole window they are held for. The reservation's id is given to the
// pool's owner only: a tenant the pool is offered to sees when devices are
// taken, not by whom.
type Busy struct {
	DeviceIDs     []string  `json:"deviceIds" doc:"the node's devices one reservation holds"`
	Start         time.Time `json:"start" doc:"from when, clipped to the span"`
	End           time.Time `json:"end" doc:"until when, clipped to the span"`
	Window        Window    `json:"window" doc:"the whole window they are held for: it may begin before the span or end after it"`
	ReservationID string    `json:"reservationId,omitempty" doc:"the reservation holding them: shown to the pool's owner only"`
}

// Reservation is a tenant's claim on devices of one pool for a window, as
// the API answers it (capacity.Reservation is the stored one, with what
// the API does not show).
type Reservation struct {
	ReservationID string           `json:"reservationId" doc:"the reservation's id: a ULID, or with a clientToken one derived from tenant, principal and token (26 characters either way)"`
	TenantID      string           `json:"tenantId" doc:"the tenant that holds it"`
	PoolID        string           `json:"poolId" doc:"the pool its devices are in"`
	Resource      string           `json:"resource" doc:"the pool's resource"`
	Count         int              `json:"count" doc:"how many devices (1..${capacity.MaxCount})"`
	Window        Window           `json:"window" doc:"the half-open window [start, end) the devices are held for; start is the creation time when the request omitted it"`
	Topology      string           `json:"topology" enum:"topology" doc:"how the devices were to be spread over nodes"`
	State         ReservationState `json:"state" enum:"state" doc:"where it is in its life (see the reservation states)"`
	Reason        string           `json:"reason,omitempty" enum:"reason" doc:"why it was rejected or expired; absent otherwise"`
	DeviceIDs     []string         `json:"deviceIds" doc:"the devices held (<resource>-<n>); empty until placed, kept once it ended"`
	NodeIDs       []string         `json:"nodeIds" doc:"the nodes of those devices, each once"`
	CreatedAt     time.Time        `json:"createdAt" doc:"when the draft was written"`
	UpdatedAt     time.Time        `json:"updatedAt" doc:"when its state last changed"`
	ReleasedBy    string           `json:"releasedBy,omitempty" enum:"releasedBy" doc:"who released it; only on released reservations"`
	History       []Event          `json:"history" doc:"the timeline: one entry per state entered, oldest first (the first is draft)"`
}
