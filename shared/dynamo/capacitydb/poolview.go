package capacitydb

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/paging"
)

// A tenant's view of a pool it owns or was offered, TENANT#<tenant> /
// POOL#<poolId>, is a copy of the (immutable) pool: pools.get is one
// GetItem and pools.list one Query of the tenant's partition, which no other
// tenant's request can reach. Worst case as the pool item: ≈ 9.6 KB.

func poolViewSK(id string) string { return "POOL#" + id }

// ShowPool implements capacity.PoolStore.
func (s *Store) ShowPool(ctx context.Context, tenant string, p capacity.Pool) error {
	return s.put(ctx, newPoolItem(dynamo.TenantPK(tenant), poolViewSK(p.PoolID), dynamo.KindPoolView, p), nil)
}

// VisiblePool implements capacity.PoolStore and capacity.CandidateStore.
func (s *Store) VisiblePool(ctx context.Context, tenant, poolID string) (capacity.Pool, error) {
	return getOne(ctx, s, dynamo.Key(dynamo.TenantPK(tenant), poolViewSK(poolID)), poolItem.pool)
}

// ListPools implements capacity.PoolStore.
func (s *Store) ListPools(ctx context.Context, tenant string, page paging.Page) ([]capacity.Pool, map[string]string, error) {
	var out []capacity.Pool
	devices := 0
	next, err := s.queryPartition(ctx, tenant, "POOL#", page, func(av map[string]types.AttributeValue) (bool, error) {
		var it poolItem
		if err := attributevalue.UnmarshalMap(av, &it); err != nil {
			return false, err
		}
		p := it.pool()
		out = append(out, p)
		if n := p.DeviceCount(); n <= api.InlineDevices {
			devices += n // what the answer lists (the service fills Devices)
		}
		return devices < api.PoolPageDevices, nil
	})
	return out, next, err
}

// queryPartition pages through tenant's items whose sk begins with prefix,
// in sk order, calling take for each until limit items were taken or take
// says stop; next is the sk of the last item taken when more may follow.
func (s *Store) queryPartition(ctx context.Context, tenant, prefix string, page paging.Page, take func(map[string]types.AttributeValue) (bool, error)) (map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = paging.DefaultLimit
	}
	r := dynamo.Range{PK: dynamo.TenantPK(tenant), Attr: schema.AttrSK, Prefix: prefix, SKPrefix: prefix}
	return s.table().Page(ctx, r, limit, page.After, func(item map[string]types.AttributeValue) (bool, bool, error) {
		more, err := take(item)
		return true, !more, err
	})
}
