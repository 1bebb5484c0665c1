package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
)

// Snapshot implements capacity.SnapshotReader with a consistent Scan of
// the whole table (an operator's tool and the tests' oracle, never a
// request path): pools, quota rows, reservations and node-days.
func (s *Capacity) Snapshot(ctx context.Context) (capacity.Snapshot, error) {
	var snap capacity.Snapshot
	p := dynamodb.NewScanPaginator(s.DB, &dynamodb.ScanInput{TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return snap, err
		}
		for _, item := range page.Items {
			kind, _ := item["kind"].(*types.AttributeValueMemberS)
			if kind == nil {
				continue
			}
			var err error
			switch kind.Value {
			case kindPool:
				var it poolItem
				if err = attributevalue.UnmarshalMap(item, &it); err == nil {
					snap.Pools = append(snap.Pools, it.pool())
				}
			case kindQuota:
				var it quotaItem
				if err = attributevalue.UnmarshalMap(item, &it); err == nil {
					snap.Quotas = append(snap.Quotas, it.row())
				}
			case kindReservation:
				var it reservationItem
				if err = attributevalue.UnmarshalMap(item, &it); err == nil {
					snap.Reservations = append(snap.Reservations, it.reservation())
				}
			case kindNodeDay:
				var it nodeDayItem
				if err = attributevalue.UnmarshalMap(item, &it); err == nil {
					snap.NodeDays = append(snap.NodeDays, it.nodeDay())
				}
			}
			if err != nil {
				return snap, err
			}
		}
	}
	return snap, nil
}
