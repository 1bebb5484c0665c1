// Package capacity is the domain of pools, quotas and reservations
// (docs/capacity.md; the contract is docs/reference): who may hold how
// many devices of a pool (quotas), which devices of which nodes a tenant
// holds for which half-open window (reservations), the reservation state
// machine, the placement choice, the invariant checker and the
// reconciler's steps. Its flows are types of
// their own, built on a Service (service.go lists them): Pools and Quotas,
// Admission (reservations.create), Reservations (get, list, release),
// Bindings (through the fleet's nodes) and Steps (the reconciler's), over
// Placer, Calendar, Fence and Charges. It knows nothing of Lambda or
// DynamoDB: each flow states what it needs from storage as a narrow store
// interface beside it (Store is their union; shared/dynamo/capacitydb
// implements it with single-item conditional writes, each item of bounded
// size) and asks Better IAM through a Decide function handed in by the
// transport. The contract it enforces — the answered types, the states
// and reasons, the limits — is shared/api's (types_capacity.go): Pool and
// Reservation embed the API's view of each.
package capacity

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
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

// Pool is a pool as stored: the API's view, and how far ahead its
// node-hours are provisioned.
type Pool struct {
	api.Pool
	// ProvisionedTo: every node-hour before this hour is stored (the
	// reconciler provisions the hours ahead; zero: none yet).
	ProvisionedTo Hour
}

// NewPool builds a pool; nodeSize defaults to api.DefaultNodeSize per resource.
func NewPool(id, owner string, resources, nodeSize map[string]int, createdAt time.Time) Pool {
	ns := make(map[string]int, len(resources))
	for r := range resources {
		ns[r] = api.DefaultNodeSize
		if n, ok := nodeSize[r]; ok {
			ns[r] = n
		}
	}
	return Pool{Pool: api.Pool{PoolID: id, OwnerTenantID: owner, Resources: resources, NodeSize: ns, CreatedAt: createdAt.UTC()}}
}

// WithDevices fills Devices from Resources (stores keep only the counts).
func (p Pool) WithDevices() Pool {
	p.Devices, p.DevicesListed = []api.Device{}, p.DeviceCount() <= api.InlineDevices
	if !p.DevicesListed {
		return p
	}
	for _, r := range p.ResourceNames() {
		t := p.Topology(r)
		for n := 0; n < t.Devices; n++ {
			p.Devices = append(p.Devices, api.Device{DeviceID: DeviceID(r, n), Resource: r, NodeID: NodeID(r, t.NodeOf(n))})
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

// QuotaKeyOf is the key of the row a quota shows.
func QuotaKeyOf(q api.Quota) QuotaKey { return QuotaKey{q.TenantID, q.PoolID, q.Resource} }

func (k QuotaKey) String() string { return fmt.Sprintf("%s/%s/%s", k.TenantID, k.PoolID, k.Resource) }
