package capacitydb

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// The pool item, POOL#<poolId> / #POOL, is the global claim of a pool id
// and the pool's definition (immutable). It carries dueShard/dueAt for
// good: first until its creation is complete, then for the reconciler to
// provision its hours ahead each hour (provTo: every hour before it is
// provisioned).
//
// Worst case: 64 resources × (a 63-character name + a count + a node size,
// twice ≈ 150 B) ≈ 9.6 KB. Typical: ~200 B.

func poolPK(id string) string { return "POOL#" + id }

const skPool = "#POOL"

type poolItem struct {
	PK            string         `dynamodbav:"pk"`
	SK            string         `dynamodbav:"sk"`
	Kind          string         `dynamodbav:"kind"`
	PoolID        string         `dynamodbav:"poolId"`
	OwnerTenantID string         `dynamodbav:"ownerTenantId"`
	Resources     map[string]int `dynamodbav:"resources"`
	NodeSize      map[string]int `dynamodbav:"nodeSize"`
	CreatedAt     string         `dynamodbav:"createdAt"`
	DueShard      string         `dynamodbav:"dueShard,omitempty"`
	DueAt         string         `dynamodbav:"dueAt,omitempty"`
	ProvTo        int64          `dynamodbav:"provTo,omitempty"`
}

func (it poolItem) pool() capacity.Pool {
	return capacity.Pool{Pool: api.Pool{PoolID: it.PoolID, OwnerTenantID: it.OwnerTenantID, Resources: it.Resources,
		NodeSize: it.NodeSize, CreatedAt: dynamo.ParseTime(it.CreatedAt)}, ProvisionedTo: capacity.Hour(it.ProvTo)}
}

func newPoolItem(pk, sk, kind string, p capacity.Pool) poolItem {
	return poolItem{PK: pk, SK: sk, Kind: kind, PoolID: p.PoolID, OwnerTenantID: p.OwnerTenantID,
		Resources: p.Resources, NodeSize: p.NodeSize, CreatedAt: dynamo.FmtTime(p.CreatedAt)}
}

// ClaimPool implements capacity.PoolStore.
func (s *Store) ClaimPool(ctx context.Context, p capacity.Pool, due time.Time) (capacity.Pool, error) {
	it := newPoolItem(dynamo.PoolPK(p.PoolID), skPool, dynamo.KindPool, p)
	it.DueShard, it.DueAt = dynamo.DueShard(p.PoolID), dynamo.FmtTime(due)
	err := s.put(ctx, it, dynamo.NotExists)
	if dynamo.ConditionFailed(err) {
		stored, gerr := s.GetPool(ctx, p.PoolID)
		if gerr != nil {
			return capacity.Pool{}, gerr
		}
		return stored, capacity.ErrExists
	}
	return p, err
}

// GetPool implements capacity.PoolStore.
func (s *Store) GetPool(ctx context.Context, poolID string) (capacity.Pool, error) {
	return getOne(ctx, s, dynamo.Key(dynamo.PoolPK(poolID), skPool), poolItem.pool)
}

// PoolDue implements capacity.PoolStore and capacity.StepStore.
func (s *Store) PoolDue(ctx context.Context, poolID string, next time.Time, provisioned capacity.Hour) error {
	upd := expression.Set(expression.Name(schema.AttrDueAt), expression.Value(dynamo.FmtTime(next))).
		Set(expression.Name(schema.AttrDueSh), expression.Value(dynamo.DueShard(poolID)))
	if provisioned > 0 {
		upd = upd.Set(expression.Name("provTo"), expression.Value(int64(provisioned)))
	}
	_, err := s.update(ctx, dynamo.Key(dynamo.PoolPK(poolID), skPool), upd, dynamo.Cond(rowExists), types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil)
}
