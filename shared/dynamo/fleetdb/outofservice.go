package fleetdb

import (
	"context"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// OutOfService implements capacity.OutOfServiceStore: one consistent Query
// of the keys-only `bypool` index over the resource's out-of-service keys
// (`psk`, set by the very write that takes a node out and removed only with
// its flags), at most limit and one more to tell whether that was all.
// Its cost is the nodes out (~60 B of key each), never the pool's nodes.
func (s *Store) OutOfService(ctx context.Context, t capacity.PoolResource, limit int) (map[int]bool, bool, error) {
	prefix := NodePrefix + "OUT#" + t.Resource + "#"
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(dynamo.PoolPK(t.PoolID))).
		And(expression.Key(schema.AttrPool).BeginsWith(prefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, false, err
	}
	res, err := s.DB.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexPool),
		KeyConditionExpression: e.KeyCondition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ConsistentRead: aws.Bool(true), Limit: aws.Int32(int32(limit + 1))})
	if err != nil {
		return nil, false, err
	}
	out := map[int]bool{}
	for _, item := range res.Items {
		if len(out) == limit {
			return out, false, nil
		}
		psk, _ := item[schema.AttrPool].(*types.AttributeValueMemberS)
		if psk == nil {
			continue
		}
		if k, err := strconv.Atoi(strings.TrimPrefix(psk.Value, prefix)); err == nil {
			out[k] = true
		}
	}
	return out, res.LastEvaluatedKey == nil || len(res.Items) <= limit, nil
}
