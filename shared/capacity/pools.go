package capacity

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Pools is the pools' methods: pools.create, pools.offer, pools.get,
// pools.list and pools.usage (usage.go). A pool's creation is finished by
// the reconciler (Steps.Pool) when a crash cut it short.
type Pools struct {
	hooks
	store PoolStore
}

// PoolStore is what the pools' methods read and write: the pools (global
// ids), each tenant's view of the pools owned by or offered to it, the
// quota rows a pool's creation and an offer set, and the node-hours a
// usage page reads.
type PoolStore interface {
	// ClaimPool writes p, due for completion at due, if its id is free.
	// If the id is taken it returns the stored pool and ErrExists.
	ClaimPool(ctx context.Context, p Pool, due time.Time) (Pool, error)
	// GetPool reads a pool by id (ErrNotFound).
	GetPool(ctx context.Context, poolID string) (Pool, error)
	// EnsureQuota creates a quota row with max unless it exists.
	EnsureQuota(ctx context.Context, k QuotaKey, max int64, now time.Time) error
	// SetQuotaMax sets max (creating the row with used 0) and returns the row.
	SetQuotaMax(ctx context.Context, k QuotaKey, max int64, now time.Time) (api.Quota, error)
	// ShowPool makes p visible to tenant (idempotent).
	ShowPool(ctx context.Context, tenant string, p Pool) error
	// PoolDue moves the pool's due marker to next (its creation is
	// complete; the reconciler provisions its hours ahead then) and, when
	// provisioned is not zero, records that every hour before it is
	// provisioned.
	PoolDue(ctx context.Context, poolID string, next time.Time, provisioned Hour) error
	// VisiblePool reads a pool owned by or offered to tenant (else ErrNotFound).
	VisiblePool(ctx context.Context, tenant, poolID string) (Pool, error)
	// ListPools lists the pools visible to tenant by id.
	ListPools(ctx context.Context, tenant string, page paging.Page) ([]Pool, map[string]string, error)
	// NodeRange calls fn with the stored node-hours of nodes first..last
	// (inclusive) of h, in node order.
	NodeRange(ctx context.Context, t PoolResource, h Hour, first, last int, fn func(NodeHour) error) error
}

// Create is pools.create: a pool and its owner's quota rows (max = device
// count). The same request again returns the stored pool; the id owned by
// another tenant or defined otherwise is CONFLICT. nodeSize defaults to
// api.DefaultNodeSize for a resource it does not name.
//
// Protocol: (1) claim the global id with the pool item, marked due; (2) the
// owner's quota rows, each created only if missing; (3) the owner's view;
// (4) move the due mark to now. A crash anywhere leaves the pool due: a
// retry of the request or the reconciler (Steps.Pool) runs 2–4 again. The
// pool stays in the due index for good: the reconciler provisions its
// hours ahead (ProvisionHours) and marks it due again at the next hour.
func (ps *Pools) Create(ctx context.Context, tenant, poolID string, resources, nodeSize map[string]int) (Pool, error) {
	for r, n := range nodeSize {
		if _, ok := resources[r]; !ok {
			return Pool{}, apierr.Invalid("unknown_resource", "nodeSize."+r, "nodeSize names %q, which is not among the resources", r)
		}
		if n < 1 || n > api.MaxNodeSize {
			return Pool{}, apierr.Invalid("constraint", "nodeSize."+r, "a node holds 1..%d devices", api.MaxNodeSize)
		}
	}
	p := NewPool(poolID, tenant, resources, nodeSize, ps.now())
	stored, err := ps.store.ClaimPool(ctx, p, p.CreatedAt.Add(api.StaleAfter))
	switch {
	case errors.Is(err, ErrExists):
		if !stored.OwnedBy(tenant) {
			return Pool{}, apierr.New(apierr.Conflict, "pool id %q is taken", poolID).With("field", "poolId")
		}
		if !stored.SameDefinition(p) {
			return Pool{}, apierr.New(apierr.Conflict, "pool %q exists with another definition", poolID).With("field", "resources")
		}
		p = stored
	case err != nil:
		return Pool{}, unavailable(err)
	}
	if err := ps.fault(FaultPoolClaimed); err != nil {
		return Pool{}, err
	}
	if err := ps.complete(ctx, p, ps.now()); err != nil {
		return Pool{}, err
	}
	return p.WithDevices(), nil
}

// complete runs steps 2–4 of Create, leaving the pool due at next;
// every step is idempotent.
func (ps *Pools) complete(ctx context.Context, p Pool, next time.Time) error {
	names := p.ResourceNames()
	err := ps.each(ctx, len(names), func(i int) error {
		r := names[i]
		return ps.store.EnsureQuota(ctx, QuotaKey{p.OwnerTenantID, p.PoolID, r}, int64(p.Resources[r]), p.CreatedAt)
	})
	if err != nil {
		return unavailable(err)
	}
	if err := ps.store.ShowPool(ctx, p.OwnerTenantID, p); err != nil {
		return unavailable(err)
	}
	if err := ps.store.PoolDue(ctx, p.PoolID, next, 0); err != nil {
		return unavailable(err)
	}
	return nil
}

// Offer is pools.offer: it sets toTenant's quota max on one resource of a
// pool tenant owns. Protocol: (1) show the pool to toTenant, (2) set the row's max — a crash
// between leaves the pool visible with a missing row, which grants 0.
func (ps *Pools) Offer(ctx context.Context, tenant, poolID, toTenant, resource string, max int64) (api.Quota, error) {
	p, err := ps.store.GetPool(ctx, poolID)
	if errors.Is(err, ErrNotFound) || (err == nil && !p.OwnedBy(tenant)) {
		return api.Quota{}, errPoolNotFound(poolID)
	}
	if err != nil {
		return api.Quota{}, unavailable(err)
	}
	if _, ok := p.Resources[resource]; !ok {
		return api.Quota{}, errNoResource(poolID, resource)
	}
	if max < 0 || max > api.MaxQuota {
		return api.Quota{}, apierr.Invalid("constraint", "max", "max must be 0..%d", api.MaxQuota)
	}
	if err := ps.store.ShowPool(ctx, toTenant, p); err != nil {
		return api.Quota{}, unavailable(err)
	}
	q, err := ps.store.SetQuotaMax(ctx, QuotaKey{toTenant, poolID, resource}, max, ps.now())
	if err != nil {
		return api.Quota{}, unavailable(err)
	}
	return q, nil
}

// Get is pools.get: a pool owned by or offered to tenant.
func (ps *Pools) Get(ctx context.Context, tenant, poolID string) (Pool, error) {
	p, err := ps.store.VisiblePool(ctx, tenant, poolID)
	if errors.Is(err, ErrNotFound) {
		return Pool{}, errPoolNotFound(poolID)
	}
	if err != nil {
		return Pool{}, unavailable(err)
	}
	return p.WithDevices(), nil
}

// List is pools.list: the pools owned by or offered to tenant, by id.
func (ps *Pools) List(ctx context.Context, tenant string, page paging.Page) ([]Pool, map[string]string, error) {
	pools, next, err := ps.store.ListPools(ctx, tenant, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	for i := range pools {
		pools[i] = pools[i].WithDevices()
	}
	return pools, next, nil
}
