package dynamo

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// The due index is the sparse GSI `due` (dueShard, dueAt), keys only: a
// reservation carries dueAt while it has pending work (a draft in flight, a
// window start or end, a sweep after a fence), a pool for good (its
// creation, then its hours ahead), a quota row while it holds charge
// records. It is not an item of its own: the index's entries are these
// items' keys, and a walk reads the items they name.

// Shards implements reconcile.DueStore.
func (s *Capacity) Shards() int { return schema.DueShards }

// Due implements reconcile.DueStore: a Query of one shard of the sparse due
// index (never a scan), oldest first, page by page, reading each page's
// items with consistent BatchGetItems, so memory stays flat however many
// items are due. An entry whose item is gone (a GSI lags its table for a
// moment) is skipped.
func (s *Capacity) Due(ctx context.Context, shard int, now time.Time, fn func(reconcile.DueItem) bool) error {
	kc := expression.Key(schema.AttrDueSh).Equal(expression.Value(strconv.Itoa(shard))).
		And(expression.Key(schema.AttrDueAt).LessThanEqual(expression.Value(fmtTime(now))))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexDue),
		KeyConditionExpression: e.KeyCondition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ScanIndexForward: aws.Bool(true), Limit: aws.Int32(100)}
	for {
		res, err := s.DB.Query(ctx, in)
		if err != nil {
			return err
		}
		keys := make([]map[string]types.AttributeValue, len(res.Items))
		for i, item := range res.Items {
			keys[i] = map[string]types.AttributeValue{schema.AttrPK: item[schema.AttrPK], schema.AttrSK: item[schema.AttrSK]}
		}
		items := make(map[[2]string]reconcile.DueItem, len(keys))
		err = s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
			d, err := dueItem(item)
			if err == nil && !d.Due.IsZero() {
				items[itemKey(item)] = d
			}
			return err
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			d, ok := items[itemKey(k)]
			if ok && !d.Due.After(now) && !fn(d) {
				return nil
			}
		}
		if res.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

func itemKey(item map[string]types.AttributeValue) [2]string { return ItemKey(item) }

func dueItem(item map[string]types.AttributeValue) (reconcile.DueItem, error) {
	var head struct {
		Kind  string `dynamodbav:"kind"`
		DueAt string `dynamodbav:"dueAt"`
	}
	if err := attributevalue.UnmarshalMap(item, &head); err != nil {
		return reconcile.DueItem{}, err
	}
	if head.DueAt == "" {
		return reconcile.DueItem{}, nil // no longer due: the index lags
	}
	d := reconcile.DueItem{Due: parseTime(head.DueAt)}
	switch head.Kind {
	case kindReservation:
		var it reservationItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return d, err
		}
		r := it.reservation()
		d.Reservation = &r
	case kindPool:
		var it poolItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return d, err
		}
		p := it.pool()
		d.Pool = &p
	case kindQuota:
		var it quotaItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return d, err
		}
		q := it.row()
		d.Quota = &q
	case kindRollout:
		r, err := recordFrom(item)
		if err != nil {
			return d, err
		}
		d.Rollout = r.RolloutID
	case kindFleet:
		var it fleetItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return d, err
		}
		d.FleetPool = it.PoolID
	default:
		return d, fmt.Errorf("due index holds an item of kind %q", head.Kind)
	}
	return d, nil
}
