// Package capacity is the domain of pools, quotas and reservations (docs/capacity.md;
// the contract is docs/reference): who may hold how many devices of a pool (quotas), which
// devices of which nodes a tenant holds for which half-open window
// (reservations), the reservation state machine, the placement choice, the
// invariant checker and the reconciler pass. It knows nothing of Lambda or
// DynamoDB: it states what it needs from storage as the Store interface
// (shared/dynamo implements it with single-item conditional writes, each
// item of bounded size) and asks Better IAM through a Decide function
// handed in by the transport.
package capacity

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

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

// Sentinel errors of the store and the state machine. The service maps them
// to API errors; they never reach a client as such.
var (
	ErrNotFound      = errors.New("capacity: not found")
	ErrExists        = errors.New("capacity: already exists")
	ErrStale         = errors.New("capacity: stored state changed (condition failed)")
	ErrQuotaExceeded = errors.New("capacity: quota does not fit")
	ErrBusy          = errors.New("capacity: too many admissions in flight on one quota row")
	ErrCalendarFull  = errors.New("capacity: a node's day holds its maximum of reservations")
	ErrNotDraft      = errors.New("capacity: reservation is not a draft")
	ErrTerminal      = errors.New("capacity: reservation is terminal")
	ErrTransition    = errors.New("capacity: transition not allowed")
)

// Pool is a set of devices owned by one tenant (docs/reference/reservations.md), grouped per
// resource into nodes of NodeSize devices. Pools are immutable once
// created: the same request returns the stored pool.
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

	// ProvisionedTo: every node-hour before this hour is stored (the
	// reconciler provisions the hours ahead; zero: none yet).
	ProvisionedTo Hour `json:"-"`
}

// Device is one device of a pool: "<resource>-<n>", n from 0, on node
// "<resource>-node-<⌊n/nodeSize⌋>".
type Device struct {
	DeviceID string `json:"deviceId" doc:"the device's id: <resource>-<n>, n from 0"`
	Resource string `json:"resource" doc:"the resource it is a device of"`
	NodeID   string `json:"nodeId" doc:"the node holding it: <resource>-node-<k>, k = ⌊n / nodeSize⌋"`
}

// NewPool builds a pool; nodeSize defaults to DefaultNodeSize per resource.
func NewPool(id, owner string, resources, nodeSize map[string]int, createdAt time.Time) Pool {
	ns := make(map[string]int, len(resources))
	for r := range resources {
		ns[r] = DefaultNodeSize
		if n, ok := nodeSize[r]; ok {
			ns[r] = n
		}
	}
	return Pool{PoolID: id, OwnerTenantID: owner, Resources: resources, NodeSize: ns, CreatedAt: createdAt.UTC()}
}

// WithDevices fills Devices from Resources (stores keep only the counts).
func (p Pool) WithDevices() Pool {
	p.Devices, p.DevicesListed = []Device{}, p.DeviceCount() <= InlineDevices
	if !p.DevicesListed {
		return p
	}
	for _, r := range p.ResourceNames() {
		t := p.Topology(r)
		for n := 0; n < t.Devices; n++ {
			p.Devices = append(p.Devices, Device{DeviceID: DeviceID(r, n), Resource: r, NodeID: NodeID(r, t.NodeOf(n))})
		}
	}
	return p
}

// Topology is one resource's layout in the pool.
func (p Pool) Topology(resource string) Topology {
	return Topology{Resource: resource, Devices: p.Resources[resource], NodeSize: p.NodeSize[resource]}
}

// ResourceNames returns the pool's resource names, sorted.
func (p Pool) ResourceNames() []string {
	names := make([]string, 0, len(p.Resources))
	for r := range p.Resources {
		names = append(names, r)
	}
	sort.Strings(names)
	return names
}

// DeviceCount is the number of devices of every resource.
func (p Pool) DeviceCount() int {
	n := 0
	for _, c := range p.Resources {
		n += c
	}
	return n
}

// OwnedBy reports whether tenant owns the pool (tenants it was offered to
// see it too; the store answers that).
func (p Pool) OwnedBy(tenant string) bool { return p.OwnerTenantID == tenant }

// SameDefinition reports whether p and q define the same pool (owner,
// resources and node sizes; createdAt is not part of the definition).
func (p Pool) SameDefinition(q Pool) bool {
	if p.PoolID != q.PoolID || p.OwnerTenantID != q.OwnerTenantID || len(p.Resources) != len(q.Resources) {
		return false
	}
	for r, n := range p.Resources {
		if q.Resources[r] != n || p.NodeSize[r] != q.NodeSize[r] {
			return false
		}
	}
	return true
}

// QuotaKey names one quota row: a tenant's cap on one resource of a pool.
type QuotaKey struct {
	TenantID string
	PoolID   string
	Resource string
}

func (k QuotaKey) String() string { return fmt.Sprintf("%s/%s/%s", k.TenantID, k.PoolID, k.Resource) }

// Quota is the API's view of a quota row (docs/reference/quotas.md).
type Quota struct {
	TenantID string `json:"tenantId" doc:"the tenant the quota is for"`
	PoolID   string `json:"poolId" doc:"the pool"`
	Resource string `json:"resource" doc:"the pool's resource"`
	Max      int64  `json:"max" doc:"the most the tenant's live reservations of this pool and resource may hold charged (0..${capacity.MaxQuota}); may exceed the pool's devices: a cap, not a guarantee"`
	Used     int64  `json:"used" doc:"what they hold charged: the sum of count over the tenant's placed, binding and active reservations of this pool and resource, each charged from admission until terminal, bookings for later included; not the devices held now (above max after max was lowered)"`
}

// Key returns the row's key.
func (q Quota) Key() QuotaKey { return QuotaKey{q.TenantID, q.PoolID, q.Resource} }
