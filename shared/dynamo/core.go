package dynamo

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// The core every module's store (capacitydb, fleetdb, rolloutdb, …) is
// written on: the one table's single-item reads and conditional writes, a
// batch read, the queries, the condition-failed check, keys, cursors and
// the time format. One dialect: stores build expressions with the SDK's
// expression package and send them through Table, never raw inputs.

// Table is the one table the stores share.
type Table struct {
	DB   *dynamodb.Client
	Name string
}

// Put writes item (conditional when cond is not nil).
func (t Table) Put(ctx context.Context, item any, cond *expression.ConditionBuilder) error {
	av, err := attributevalue.MarshalMap(item)
	if err != nil {
		return err
	}
	return t.PutItem(ctx, av, cond)
}

// PutItem writes an item already marshalled.
func (t Table) PutItem(ctx context.Context, av map[string]types.AttributeValue, cond *expression.ConditionBuilder) error {
	in := &dynamodb.PutItemInput{TableName: aws.String(t.Name), Item: av}
	if cond != nil {
		e, err := expression.NewBuilder().WithCondition(*cond).Build()
		if err != nil {
			return err
		}
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.Condition(), e.Names(), e.Values()
	}
	_, err := t.DB.PutItem(ctx, in)
	return err
}

// Update applies upd to the item at k (conditional when cond is not nil)
// and returns the attributes rv asks for.
func (t Table) Update(ctx context.Context, k map[string]types.AttributeValue, upd expression.UpdateBuilder, cond *expression.ConditionBuilder, rv types.ReturnValue) (map[string]types.AttributeValue, error) {
	b := expression.NewBuilder().WithUpdate(upd)
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	e, err := b.Build()
	if err != nil {
		return nil, err
	}
	out, err := t.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(t.Name), Key: k,
		UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ReturnValues: rv})
	if err != nil {
		return nil, err
	}
	return out.Attributes, nil
}

// Delete removes the item at k (conditional when cond is not nil).
func (t Table) Delete(ctx context.Context, k map[string]types.AttributeValue, cond *expression.ConditionBuilder) error {
	in := &dynamodb.DeleteItemInput{TableName: aws.String(t.Name), Key: k}
	if cond != nil {
		e, err := expression.NewBuilder().WithCondition(*cond).Build()
		if err != nil {
			return err
		}
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.Condition(), e.Names(), e.Values()
	}
	_, err := t.DB.DeleteItem(ctx, in)
	return err
}

// Get reads one item consistently into out; found is false if it is missing.
func (t Table) Get(ctx context.Context, k map[string]types.AttributeValue, out any) (found bool, err error) {
	res, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.Name), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, err
	}
	if len(res.Item) == 0 {
		return false, nil
	}
	return true, attributevalue.UnmarshalMap(res.Item, out)
}

// GetItem reads one item consistently as stored (nil if it is missing).
func (t Table) GetItem(ctx context.Context, k map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	res, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.Name), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil || len(res.Item) == 0 {
		return nil, err
	}
	return res.Item, nil
}

// BatchGet reads keys consistently, 100 at a time, calling fn per item.
// Keys DynamoDB leaves unprocessed (throttling) are asked for again after
// a jittered, growing pause, as AWS advises — never at once in a loop.
func (t Table) BatchGet(ctx context.Context, keys []map[string]types.AttributeValue, fn func(map[string]types.AttributeValue) error) error {
	for len(keys) > 0 {
		n := min(len(keys), 100)
		batch := keys[:n]
		keys = keys[n:]
		for attempt := 0; len(batch) > 0; attempt++ {
			if attempt > 0 {
				if err := UnprocessedPause(ctx, attempt); err != nil {
					return err
				}
			}
			res, err := t.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				t.Name: {Keys: batch, ConsistentRead: aws.Bool(true)}}})
			if err != nil {
				return err
			}
			for _, item := range res.Responses[t.Name] {
				if err := fn(item); err != nil {
					return err
				}
			}
			batch = res.UnprocessedKeys[t.Name].Keys
		}
	}
	return nil
}

// UnprocessedPause waits before retry n (n ≥ 1) of what a batch call left
// unprocessed: 10 ms doubling to at most ~1 s, with full jitter.
func UnprocessedPause(ctx context.Context, n int) error {
	ceil := 10 * time.Millisecond << min(n-1, 7)
	return conc.Sleep(ctx, time.Duration(rand.Int64N(int64(ceil))+1))
}

// Count is a consistent COUNT query (of index, "" for the table) under kc
// and filter, summed over every page.
func (t Table) Count(ctx context.Context, index string, kc expression.KeyConditionBuilder, filter *expression.ConditionBuilder) (int, error) {
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

// QueryEach streams a consistent Query of the table under kc (projected
// when proj is not nil), page by page, decoding each item into a T.
func QueryEach[T any](ctx context.Context, t Table, kc expression.KeyConditionBuilder, proj *expression.ProjectionBuilder, fn func(T) error) error {
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

// Key is a primary key.
func Key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrPK: &types.AttributeValueMemberS{Value: pk},
		schema.AttrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

// ItemKey is an item's (pk, sk), zero unless it has both.
func ItemKey(item map[string]types.AttributeValue) [2]string {
	pk, _ := item[schema.AttrPK].(*types.AttributeValueMemberS)
	sk, _ := item[schema.AttrSK].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return [2]string{}
	}
	return [2]string{pk.Value, sk.Value}
}

// ConditionFailed reports whether a write lost its condition.
func ConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// WhenConditionFails is the tail of a conditional write: a failed
// condition becomes lost (the domain's ErrStale, or nil where losing
// means another writer already did it), any other error stays as is.
func WhenConditionFails(err, lost error) error {
	if ConditionFailed(err) {
		return lost
	}
	return err
}

// Cond is a condition as the pointer Put and Update take.
func Cond(c expression.ConditionBuilder) *expression.ConditionBuilder { return &c }

// NotExists: the item does not exist yet.
var NotExists = Cond(expression.AttributeNotExists(expression.Name(schema.AttrPK)))

// All joins conditions into one flat AND (at least one). Every condition
// of more than two terms is built with it (or expression.Or's flat form):
// dynalite's parser takes time exponential in the nesting of parentheses
// that chained And calls produce.
func All(conds []expression.ConditionBuilder) expression.ConditionBuilder {
	if len(conds) == 1 {
		return conds[0]
	}
	return expression.And(conds[0], conds[1], conds[2:]...)
}

// Path names a member of a map attribute: Path("q", id) is q.#id.
func Path(attr string, keys ...string) expression.NameBuilder {
	n := expression.Name(attr)
	for _, k := range keys {
		n = n.AppendName(expression.Name(k))
	}
	return n
}

// ErrBadCursor refuses a cursor whose key lies outside the query's
// partition (the HMAC has already bound it to the method, tenant and
// filters).
var ErrBadCursor = apierr.Invalid("", "cursor", "cursor is invalid or belongs to another query")

// StartKey turns a decoded cursor into an ExclusiveStartKey, refusing one
// outside the partition pk the query is bound to.
func StartKey(after map[string]string, pk string) (map[string]types.AttributeValue, error) {
	if after == nil {
		return nil, nil
	}
	if after[schema.AttrPK] != pk {
		return nil, ErrBadCursor
	}
	k := make(map[string]types.AttributeValue, len(after))
	for name, v := range after {
		k[name] = &types.AttributeValueMemberS{Value: v}
	}
	return k, nil
}

// TimeFormat is fixed-width UTC with nanoseconds: lexical order is time order.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// FmtTime writes t in TimeFormat; ParseTime reads it back (zero if it cannot).
func FmtTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

func ParseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t.UTC()
}

// DueShard spreads due items over schema.DueShards partitions of the due index.
func DueShard(id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return strconv.Itoa(int(h.Sum32() % schema.DueShards))
}
