package capacitydb

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// Snapshot implements capacity.SnapshotReader with a consistent Scan of
// the whole table and of each index (an operator's tool and the tests'
// oracle, never a request path): pools, quota rows, reservations and
// node-hours, and the index entries whose item is gone.
func (s *Store) Snapshot(ctx context.Context) (capacity.Snapshot, error) {
	var snap capacity.Snapshot
	items := map[[2]string]bool{}
	p := dynamodb.NewScanPaginator(s.DB, &dynamodb.ScanInput{TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return snap, err
		}
		for _, item := range page.Items {
			items[dynamo.ItemKey(item)] = true
			kind, _ := item["kind"].(*types.AttributeValueMemberS)
			if kind == nil {
				continue
			}
			var err error
			switch kind.Value {
			case dynamo.KindPool:
				var it poolItem
				if err = attributevalue.UnmarshalMap(item, &it); err == nil {
					snap.Pools = append(snap.Pools, it.pool())
				}
			case dynamo.KindQuota:
				var it quotaItem
				if err = attributevalue.UnmarshalMap(item, &it); err == nil {
					snap.Quotas = append(snap.Quotas, it.row())
				}
			case dynamo.KindReservation:
				var it reservationItem
				if err = attributevalue.UnmarshalMap(item, &it); err == nil {
					snap.Reservations = append(snap.Reservations, it.reservation())
				}
			case dynamo.KindHour:
				var m capacity.HourMap
				if m, err = hourMapOf(item); err == nil {
					snap.Maps = append(snap.Maps, m)
				}
			case dynamo.KindNodeHour:
				var it nodeHourItem
				if err = attributevalue.UnmarshalMap(item, &it); err == nil {
					snap.NodeHours = append(snap.NodeHours, it.nodeHour())
				}
			}
			if err != nil {
				return snap, err
			}
		}
	}
	for _, index := range schema.IndexNames() {
		in := &dynamodb.ScanInput{TableName: aws.String(s.Table), IndexName: aws.String(index),
			ProjectionExpression: aws.String("#pk, #sk"), ExpressionAttributeNames: map[string]string{"#pk": schema.AttrPK, "#sk": schema.AttrSK}}
		p := dynamodb.NewScanPaginator(s.DB, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return snap, err
			}
			for _, item := range page.Items {
				if k := dynamo.ItemKey(item); !items[k] {
					snap.Orphans = append(snap.Orphans, index+": "+k[0]+" / "+k[1])
				}
			}
		}
	}
	return snap, nil
}

// hourMapOf reads an hour item (its key names the pool, resource and hour).
func hourMapOf(item map[string]types.AttributeValue) (capacity.HourMap, error) {
	pk, _ := item[schema.AttrPK].(*types.AttributeValueMemberS)
	if pk == nil {
		return capacity.HourMap{}, fmt.Errorf("dynamo: hour item without pk")
	}
	parts := strings.Split(strings.TrimPrefix(pk.Value, "CAL#"), "#")
	if len(parts) < 3 {
		return capacity.HourMap{}, fmt.Errorf("dynamo: hour item %q", pk.Value)
	}
	at, err := time.Parse("2006010215", parts[len(parts)-1])
	if err != nil {
		return capacity.HourMap{}, fmt.Errorf("dynamo: hour item %q: %w", pk.Value, err)
	}
	o, err := occupancyOf(item)
	return capacity.HourMap{PoolID: strings.Join(parts[:len(parts)-2], "#"), Resource: parts[len(parts)-2],
		Hour: capacity.HourOf(at), Occupancy: o}, err
}
