package capacity

import (
	"context"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Quotas is the quotas' reads: quotas.get and quotas.list. A row's max is
// set by pools.create and pools.offer (Pools); its used count moves with
// admissions (Charges) and give-backs (Fence).
type Quotas struct {
	store QuotaStore
}

// QuotaStore reads quota rows: max, used and free = max − used.
type QuotaStore interface {
	// GetQuota reads a row; a missing row is max 0, used 0 (it grants 0).
	GetQuota(ctx context.Context, k QuotaKey) (api.Quota, error)
	// ListQuotas lists tenant's rows, of one pool if poolID is not "".
	ListQuotas(ctx context.Context, tenant, poolID string, page paging.Page) ([]api.Quota, map[string]string, error)
}

// Get is quotas.get: a quota row; a missing row is max 0, used 0.
func (qs *Quotas) Get(ctx context.Context, k QuotaKey) (api.Quota, error) {
	q, err := qs.store.GetQuota(ctx, k)
	if err != nil {
		return api.Quota{}, unavailable(err)
	}
	return q, nil
}

// List is quotas.list: tenant's quota rows (of one pool when poolID != "").
func (qs *Quotas) List(ctx context.Context, tenant, poolID string, page paging.Page) ([]api.Quota, map[string]string, error) {
	rows, next, err := qs.store.ListQuotas(ctx, tenant, poolID, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	return rows, next, nil
}
