package capacitydb

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
)

func (s *Store) table() dynamo.Table { return dynamo.Table{DB: s.DB, Name: s.Table} }

func (s *Store) put(ctx context.Context, item any, cond *expression.ConditionBuilder) error {
	return s.table().Put(ctx, item, cond)
}

func (s *Store) update(ctx context.Context, k map[string]types.AttributeValue, upd expression.UpdateBuilder, cond *expression.ConditionBuilder, rv types.ReturnValue) (map[string]types.AttributeValue, error) {
	return s.table().Update(ctx, k, upd, cond, rv)
}

func (s *Store) get(ctx context.Context, k map[string]types.AttributeValue, out any) (bool, error) {
	return s.table().Get(ctx, k, out)
}

// getOne reads one item as I and converts it; a missing item is
// capacity.ErrNotFound.
func getOne[I, T any](ctx context.Context, s *Store, k map[string]types.AttributeValue, convert func(I) T) (T, error) {
	var it I
	var zero T
	ok, err := s.get(ctx, k, &it)
	switch {
	case err != nil:
		return zero, err
	case !ok:
		return zero, capacity.ErrNotFound
	}
	return convert(it), nil
}

// batchGet reads keys consistently (dynamo.Table.BatchGet).
func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue, fn func(map[string]types.AttributeValue) error) error {
	return s.table().BatchGet(ctx, keys, fn)
}
