package dynamo

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/paging"
)

// A tenant's view of a pool it owns or was offered, TENANT#<tenant> /
// POOL#<poolId>, is a copy of the (immutable) pool: pools.get is one
// GetItem and pools.list one Query of the tenant's partition, which no other
// tenant's request can reach. Worst case as the pool item: ≈ 9.6 KB.

func poolViewSK(id string) string { return "POOL#" + id }

// ShowPool implements capacity.PoolStore.
func (s *Capacity) ShowPool(ctx context.Context, tenant string, p capacity.Pool) error {
	return s.put(ctx, newPoolItem(tenantPK(tenant), poolViewSK(p.PoolID), kindPoolView, p), nil)
}

// VisiblePool implements capacity.PoolStore.
func (s *Capacity) VisiblePool(ctx context.Context, tenant, poolID string) (capacity.Pool, error) {
	return getOne(ctx, s, key(tenantPK(tenant), poolViewSK(poolID)), poolItem.pool)
}

// ListPools implements capacity.PoolStore.
func (s *Capacity) ListPools(ctx context.Context, tenant string, page paging.Page) ([]capacity.Pool, map[string]string, error) {
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
func (s *Capacity) queryPartition(ctx context.Context, tenant, prefix string, page paging.Page, take func(map[string]types.AttributeValue) (bool, error)) (map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = paging.DefaultLimit
	}
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(tenantPK(tenant))).And(expression.Key(schema.AttrSK).BeginsWith(prefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), KeyConditionExpression: e.KeyCondition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true)}
	if after := page.After["sk"]; after != "" {
		if !strings.HasPrefix(after, prefix) {
			return nil, errBadCursor
		}
		in.ExclusiveStartKey = key(tenantPK(tenant), after)
	}
	taken, full := 0, false
	var lastSK string
	for {
		// One more than needed: a full last page then carries no cursor.
		in.Limit = aws.Int32(int32(limit - taken + 1))
		res, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, item := range res.Items {
			if full {
				return map[string]string{"sk": lastSK}, nil // a further item exists
			}
			more, err := take(item)
			if err != nil {
				return nil, err
			}
			taken++
			lastSK = item[schema.AttrSK].(*types.AttributeValueMemberS).Value
			full = taken == limit || !more
		}
		if res.LastEvaluatedKey == nil {
			return nil, nil
		}
		if full {
			return map[string]string{"sk": lastSK}, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}
