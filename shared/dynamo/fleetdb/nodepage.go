package fleetdb

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// NodePage is a page of the pool's node
// items (rollout enumeration) (after: the last one's sort key; "" when the pool is done).
func (s *Store) NodePage(ctx context.Context, pool string, limit int, after string) ([]fleet.Record, string, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(dynamo.PoolPK(pool))).And(expression.Key(schema.AttrSK).BeginsWith(NodePrefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, "", err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), KeyConditionExpression: e.KeyCondition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true),
		Limit: aws.Int32(int32(limit))}
	if after != "" {
		in.ExclusiveStartKey = dynamo.Key(dynamo.PoolPK(pool), after)
	}
	res, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, "", err
	}
	out := make([]fleet.Record, 0, len(res.Items))
	next := ""
	for _, it := range res.Items {
		var n nodeItem
		if err := attributevalue.UnmarshalMap(it, &n); err != nil {
			return nil, "", err
		}
		out = append(out, n.record())
		next = n.SK
	}
	if res.LastEvaluatedKey == nil {
		next = ""
	}
	return out, next, nil
}

// CountNodes counts a pool's registered nodes created at or before t, and
// those of them whose platform is one of platforms: one paged Query of the
// pool's node items (what it reads: their creation times and platforms).
func (s *Store) CountNodes(ctx context.Context, pool string, t time.Time, platforms map[string]bool) (int, int, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(dynamo.PoolPK(pool))).And(expression.Key(schema.AttrSK).BeginsWith(NodePrefix))
	proj := expression.NamesList(expression.Name("createdAt"), expression.Name("platform"))
	nodes, withBinary := 0, 0
	err := dynamo.QueryEach(ctx, s.table(), kc, &proj, func(n struct {
		CreatedAt string `dynamodbav:"createdAt"`
		Platform  string `dynamodbav:"platform"`
	}) error {
		if dynamo.ParseTime(n.CreatedAt).After(t) {
			return nil
		}
		nodes++
		if platforms[n.Platform] {
			withBinary++
		}
		return nil
	})
	return nodes, withBinary, err
}
