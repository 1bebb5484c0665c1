// Package capacity is the domain of pools, quotas and reservations (SPEC
// §4.3–§4.5): who may hold how many devices of a pool (quotas), which
// devices a tenant holds for which half-open window (reservations), the
// reservation state machine, the placement choice, the invariant checker and
// the reconciler pass. It knows nothing of Lambda or DynamoDB: it states what
// it needs from storage as the Store interface (shared/dynamo implements it
// with single-item conditional writes) and asks Better IAM through a Decide
// function handed in by the transport.
package capacity

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Limits of the model (SPEC §4.3, §4.4, §9, and docs/capacity.md where the
// spec is silent).
const (
	MaxDevicesPerPool = 8192      // sum of a pool's resource counts
	MaxQuota          = 1_000_000 // pools.offer max
	MaxCount          = 64        // reservations.create count
	MaxWindow         = 90 * 24 * time.Hour
	MaxLeadTime       = 365 * 24 * time.Hour
	MaxStartSkew      = 5 * time.Minute // how far in the past window.start may be
	// StaleAfter: a draft with no outcome this old is fenced to expired; it is
	// also how long after any fence the reconciler sweeps once more for the
	// writes of a create that was still in flight (longer than any
	// function's timeout, so nothing can still be running by then).
	StaleAfter = 2 * time.Minute
	// Retention of rejected and expired reservations (DynamoDB TTL).
	Retention = 30 * 24 * time.Hour
	// DeniedRetention of denied ones: a caller without a grant can make
	// them in a tenant's partition, so they are hidden from plain lists and
	// kept only a day (SPEC §9).
	DeniedRetention = 24 * time.Hour
)

// Sentinel errors of the store and the state machine. The service maps them
// to API errors; they never reach a client as such.
var (
	ErrNotFound      = errors.New("capacity: not found")
	ErrExists        = errors.New("capacity: already exists")
	ErrStale         = errors.New("capacity: stored state changed (condition failed)")
	ErrQuotaExceeded = errors.New("capacity: quota does not fit")
	ErrNotDraft      = errors.New("capacity: reservation is not a draft")
	ErrTerminal      = errors.New("capacity: reservation is terminal")
	ErrTransition    = errors.New("capacity: transition not allowed")
)

// Pool is a set of devices owned by one tenant (SPEC §9). Pools are immutable
// once created: the same request returns the stored pool.
type Pool struct {
	PoolID        string         `json:"poolId"`
	OwnerTenantID string         `json:"ownerTenantId"`
	Resources     map[string]int `json:"resources"`
	Devices       []Device       `json:"devices"`
	CreatedAt     time.Time      `json:"createdAt"`
}

// Device is one device of a pool: "<resource>-<n>", n from 0.
type Device struct {
	DeviceID string `json:"deviceId"`
	Resource string `json:"resource"`
}

// NewPool builds a pool with its devices listed (resources by name, then n).
func NewPool(id, owner string, resources map[string]int, createdAt time.Time) Pool {
	p := Pool{PoolID: id, OwnerTenantID: owner, Resources: resources, CreatedAt: createdAt.UTC()}
	p.Devices = p.devices()
	return p
}

// WithDevices fills Devices from Resources (stores keep only the counts).
func (p Pool) WithDevices() Pool { p.Devices = p.devices(); return p }

func (p Pool) devices() []Device {
	names := p.ResourceNames()
	out := make([]Device, 0, p.DeviceCount())
	for _, r := range names {
		for n := 0; n < p.Resources[r]; n++ {
			out = append(out, Device{DeviceID: DeviceID(r, n), Resource: r})
		}
	}
	return out
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

// SameDefinition reports whether p and q define the same pool (owner and
// resources; createdAt is not part of the definition).
func (p Pool) SameDefinition(q Pool) bool {
	if p.PoolID != q.PoolID || p.OwnerTenantID != q.OwnerTenantID || len(p.Resources) != len(q.Resources) {
		return false
	}
	for r, n := range p.Resources {
		if q.Resources[r] != n {
			return false
		}
	}
	return true
}

// DeviceID names device n of a resource.
func DeviceID(resource string, n int) string { return resource + "-" + strconv.Itoa(n) }

// DeviceIDs names the devices of indexes, in order.
func DeviceIDs(resource string, indexes []int) []string {
	out := make([]string, len(indexes))
	for i, n := range indexes {
		out[i] = DeviceID(resource, n)
	}
	return out
}

// QuotaKey names one quota row: a tenant's cap on one resource of a pool.
type QuotaKey struct {
	TenantID string
	PoolID   string
	Resource string
}

func (k QuotaKey) String() string { return fmt.Sprintf("%s/%s/%s", k.TenantID, k.PoolID, k.Resource) }

// Quota is the API's view of a quota row (SPEC §4.3).
type Quota struct {
	TenantID string `json:"tenantId"`
	PoolID   string `json:"poolId"`
	Resource string `json:"resource"`
	Max      int64  `json:"max"`
	Used     int64  `json:"used"`
}

// QuotaRow is the stored row: Free = Max − Used, and Holds maps each charged
// reservation to its count — the truth the invariant is checked against.
type QuotaRow struct {
	Quota
	Free  int64
	Holds map[string]int64
}

// Key returns the row's key.
func (q Quota) Key() QuotaKey { return QuotaKey{q.TenantID, q.PoolID, q.Resource} }

// Page asks for at most Limit items after the key After (nil: from the start).
type Page struct {
	Limit int
	After map[string]string
}

// DefaultLimit is a list's page size when the request sets none.
const DefaultLimit = 100
