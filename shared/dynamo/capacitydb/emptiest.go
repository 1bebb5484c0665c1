package capacitydb

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// Emptiest implements capacity.AvailabilityStore: one consistent Query of
// the `fit` index from the top down — the hour's marker first when it is
// provisioned, then the node-hours with the most untouched devices (equal
// ones in descending spread, the same order every hour) — down to
// minFree, at most limit of them and one more to tell More. It reads the
// projected node, size, touched mask and entry count; a node-hour the
// fleet flagged off sits below every count asked for. Its cost is the
// items returned (~200 B each in the index), whatever the pool holds.
func (s *Store) Emptiest(ctx context.Context, t capacity.PoolResource, h capacity.Hour, minFree, limit int) ([]capacity.NodeFree, capacity.Scan, error) {
	proj := expression.NamesList(expression.Name(schema.AttrSK), expression.Name("node"), expression.Name("size"),
		expression.Name("tm"), expression.Name("n"))
	items, scan, err := s.fromTop(ctx, t, h, schema.IndexFit, schema.AttrFit, max(minFree, 1), limit, &proj)
	if err != nil {
		return nil, scan, err
	}
	out := make([]capacity.NodeFree, 0, len(items))
	for _, item := range items {
		var it struct {
			Node int   `dynamodbav:"node"`
			Size int   `dynamodbav:"size"`
			TM   int64 `dynamodbav:"tm"`
			N    int   `dynamodbav:"n"`
		}
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return nil, capacity.Scan{}, err
		}
		out = append(out, capacity.NodeFree{Node: it.Node, Free: capacity.Full(it.Size) &^ capacity.Mask(uint64(it.TM)),
			Full: it.N >= capacity.MaxEntriesPerNodeHour})
	}
	return out, scan, nil
}

// fromTop reads an hour's order (the `fit` or `cap` index: attr is its
// key) from the top down to count min, at most limit node-hours: one
// consistent Query of limit + 2 items — the hour's marker, first when the
// hour is provisioned, and one more than asked for, to tell More.
func (s *Store) fromTop(ctx context.Context, t capacity.PoolResource, h capacity.Hour, index, attr string, min, limit int, proj *expression.ProjectionBuilder) ([]map[string]types.AttributeValue, capacity.Scan, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(calPK(t.PoolID, t.Resource, h))).
		And(expression.Key(attr).Between(expression.Value(min<<fitShift), expression.Value(markerFit)))
	b := expression.NewBuilder().WithKeyCondition(kc)
	if proj != nil {
		b = b.WithProjection(*proj)
	}
	e, err := b.Build()
	if err != nil {
		return nil, capacity.Scan{}, err
	}
	res, err := s.DB.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(index),
		KeyConditionExpression: e.KeyCondition(), ProjectionExpression: e.Projection(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ConsistentRead: aws.Bool(true), ScanIndexForward: aws.Bool(false), Limit: aws.Int32(int32(limit + 2))})
	if err != nil {
		return nil, capacity.Scan{}, err
	}
	var out []map[string]types.AttributeValue
	var scan capacity.Scan
	for _, item := range res.Items {
		switch {
		case isMarker(item):
			scan.Provisioned = true
		case len(out) == limit:
			scan.More = true
		default:
			out = append(out, item)
		}
	}
	if res.LastEvaluatedKey != nil && len(out) == limit {
		scan.More = true
	}
	return out, scan, nil
}

// HourMaps implements capacity.AvailabilityStore: the hours' occupancy
// maps, read as Occupancy reads them (one consistent BatchGetItem per 100
// hours) without keeping them as a create's guesses.
func (s *Store) HourMaps(ctx context.Context, t capacity.PoolResource, hours []capacity.Hour) (map[capacity.Hour]capacity.Occupancy, error) {
	return s.occupancy(ctx, t, hours, false)
}
