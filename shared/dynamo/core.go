// The core every store builds on (this file): the table's single-item
// reads and conditional writes (Table), primary keys (Key, ItemKey), the
// condition-failed check (ConditionFailed), flat conjunctions (All), a
// cursor bound to its partition (StartKey, ErrBadCursor) and the pause
// before re-asking for keys a batch call left unprocessed
// (UnprocessedPause). The stores of package dynamo use it through their
// unexported names; shared/dynamo/releasedb, the first store of a package
// of its own, uses it directly.

package dynamo

import (
	"context"
	"errors"
	"math/rand/v2"
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

// Table is the one table the stores share: its single-item reads and
// conditional writes, the same for every item kind.
type Table struct {
	DB   *dynamodb.Client
	Name string
}

// Put writes item (a struct with dynamodbav tags), under cond if not nil.
func (t Table) Put(ctx context.Context, item any, cond *expression.ConditionBuilder) error {
	av, err := attributevalue.MarshalMap(item)
	if err != nil {
		return err
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(t.Name), Item: av}
	if cond != nil {
		e, err := expression.NewBuilder().WithCondition(*cond).Build()
		if err != nil {
			return err
		}
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.Condition(), e.Names(), e.Values()
	}
	_, err = t.DB.PutItem(ctx, in)
	return err
}

// Update applies upd to the item of key k, under cond if not nil, and
// answers the attributes rv asks for.
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

// Get reads one item consistently into out; found=false if missing.
func (t Table) Get(ctx context.Context, k map[string]types.AttributeValue, out any) (bool, error) {
	res, err := t.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.Name), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, err
	}
	if len(res.Item) == 0 {
		return false, nil
	}
	return true, attributevalue.UnmarshalMap(res.Item, out)
}

// Key is a primary key.
func Key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrPK: &types.AttributeValueMemberS{Value: pk},
		schema.AttrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

// ItemKey is an item's primary key (zero if it has none).
func ItemKey(item map[string]types.AttributeValue) [2]string {
	pk, _ := item[schema.AttrPK].(*types.AttributeValueMemberS)
	sk, _ := item[schema.AttrSK].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return [2]string{}
	}
	return [2]string{pk.Value, sk.Value}
}

// ConditionFailed says a conditional write's condition did not hold
// (nothing was written).
func ConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// All joins conditions into one flat AND (at least two). Every condition
// of more than two terms is built with it (or expression.Or's flat form):
// dynalite's parser takes time exponential in the nesting of parentheses
// that chained And calls produce.
func All(conds []expression.ConditionBuilder) expression.ConditionBuilder {
	if len(conds) == 1 {
		return conds[0]
	}
	return expression.And(conds[0], conds[1], conds[2:]...)
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

// UnprocessedPause waits before retry n (n ≥ 1) of keys a batch call left
// unprocessed: 10 ms doubling to at most ~1 s, with full jitter, as AWS
// advises — never at once in a loop.
func UnprocessedPause(ctx context.Context, n int) error {
	ceil := 10 * time.Millisecond << min(n-1, 7)
	return conc.Sleep(ctx, time.Duration(rand.Int64N(int64(ceil))+1))
}
