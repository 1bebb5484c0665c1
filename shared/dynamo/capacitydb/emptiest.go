package capacitydb

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

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
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(calPK(t.PoolID, t.Resource, h))).
		And(expression.Key(schema.AttrFit).Between(expression.Value(max(minFree, 1)<<fitShift), expression.Value(markerFit)))
	proj := expression.NamesList(expression.Name(schema.AttrSK), expression.Name("node"), expression.Name("size"),
		expression.Name("tm"), expression.Name("n"))
	e, err := expression.NewBuilder().WithKeyCondition(kc).WithProjection(proj).Build()
	if err != nil {
		return nil, capacity.Scan{}, err
	}
	res, err := s.DB.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexFit),
		KeyConditionExpression: e.KeyCondition(), ProjectionExpression: e.Projection(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ConsistentRead: aws.Bool(true), ScanIndexForward: aws.Bool(false), Limit: aws.Int32(int32(limit + 2))})
	if err != nil {
		return nil, capacity.Scan{}, err
	}
	out := make([]capacity.NodeFree, 0, min(limit, len(res.Items)))
	var scan capacity.Scan
	for _, item := range res.Items {
		if isMarker(item) {
			scan.Provisioned = true
			continue
		}
		if len(out) == limit {
			scan.More = true
			break
		}
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
