package dynamo

import (
	"context"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// timeFormat is fixed-width UTC with nanoseconds: lexical order is time order.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

func fmtTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t.UTC()
}

func tenantPK(t string) string { return "TENANT#" + t }

// dueShard spreads due items over schema.DueShards partitions of the due index.
func dueShard(id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return strconv.Itoa(int(h.Sum32() % schema.DueShards))
}

// table is Table under the name the stores of this package use.
type table = Table

func (t table) put(ctx context.Context, item any, cond *expression.ConditionBuilder) error {
	return t.Put(ctx, item, cond)
}

func (t table) update(ctx context.Context, k map[string]types.AttributeValue, upd expression.UpdateBuilder, cond *expression.ConditionBuilder, rv types.ReturnValue) (map[string]types.AttributeValue, error) {
	return t.Update(ctx, k, upd, cond, rv)
}

func (t table) get(ctx context.Context, k map[string]types.AttributeValue, out any) (bool, error) {
	return t.Get(ctx, k, out)
}

func (s *Capacity) table() table { return table{s.DB, s.Table} }

func (s *Capacity) put(ctx context.Context, item any, cond *expression.ConditionBuilder) error {
	return s.table().put(ctx, item, cond)
}

func (s *Capacity) update(ctx context.Context, k map[string]types.AttributeValue, upd expression.UpdateBuilder, cond *expression.ConditionBuilder, rv types.ReturnValue) (map[string]types.AttributeValue, error) {
	return s.table().update(ctx, k, upd, cond, rv)
}

func (s *Capacity) get(ctx context.Context, k map[string]types.AttributeValue, out any) (bool, error) {
	return s.table().get(ctx, k, out)
}

// getOne reads one item as I and converts it; a missing item is
// capacity.ErrNotFound.
func getOne[I, T any](ctx context.Context, s *Capacity, k map[string]types.AttributeValue, convert func(I) T) (T, error) {
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

// batchGet reads keys consistently, 100 at a time, calling fn per item.
// Keys DynamoDB leaves unprocessed (throttling) are asked for again after
// a jittered, growing pause, as AWS advises — never at once in a loop.
func (s *Capacity) batchGet(ctx context.Context, keys []map[string]types.AttributeValue, fn func(map[string]types.AttributeValue) error) error {
	for len(keys) > 0 {
		n := min(len(keys), 100)
		batch := keys[:n]
		keys = keys[n:]
		for attempt := 0; len(batch) > 0; attempt++ {
			if attempt > 0 {
				if err := unprocessedPause(ctx, attempt); err != nil {
					return err
				}
			}
			res, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.Table: {Keys: batch, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return err
			}
			for _, item := range res.Responses[s.Table] {
				if err := fn(item); err != nil {
					return err
				}
			}
			batch = res.UnprocessedKeys[s.Table].Keys
		}
	}
	return nil
}

func unprocessedPause(ctx context.Context, n int) error { return UnprocessedPause(ctx, n) }

func cond(c expression.ConditionBuilder) *expression.ConditionBuilder { return &c }

var notExists = cond(expression.AttributeNotExists(expression.Name(schema.AttrPK)))

// path names a member of a map attribute: path("q", id) is q.#id.
func path(attr string, keys ...string) expression.NameBuilder {
	n := expression.Name(attr)
	for _, k := range keys {
		n = n.AppendName(expression.Name(k))
	}
	return n
}

// count is a consistent COUNT query (of index, "" for the table) under kc
// and filter, summed over every page.
func (t table) count(ctx context.Context, index string, kc expression.KeyConditionBuilder, filter *expression.ConditionBuilder) (int, error) {
	b := expression.NewBuilder().WithKeyCondition(kc)
	if filter != nil {
		b = b.WithFilter(*filter)
	}
	e, err := b.Build()
	if err != nil {
		return 0, err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(t.Name), KeyConditionExpression: e.KeyCondition(), FilterExpression: e.Filter(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true), Select: types.SelectCount}
	if index != "" {
		in.IndexName = aws.String(index)
	}
	p := dynamodb.NewQueryPaginator(t.DB, in)
	n := 0
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		n += int(page.Count)
	}
	return n, nil
}

// queryEach streams a consistent Query of the table under kc (projected
// when proj is not nil), page by page, decoding each item into a T.
func queryEach[T any](ctx context.Context, t table, kc expression.KeyConditionBuilder, proj *expression.ProjectionBuilder, fn func(T) error) error {
	b := expression.NewBuilder().WithKeyCondition(kc)
	if proj != nil {
		b = b.WithProjection(*proj)
	}
	e, err := b.Build()
	if err != nil {
		return err
	}
	p := dynamodb.NewQueryPaginator(t.DB, &dynamodb.QueryInput{TableName: aws.String(t.Name), KeyConditionExpression: e.KeyCondition(),
		ProjectionExpression: e.Projection(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, item := range page.Items {
			var it T
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return err
			}
			if err := fn(it); err != nil {
				return err
			}
		}
	}
	return nil
}
