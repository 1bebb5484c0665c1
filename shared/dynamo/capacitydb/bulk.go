package capacitydb

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/dynamo"
)

// BulkLoad writes placed reservations as the create path would have left
// them — the reservation items, their entries in every node-hour of their
// windows, and the quota rows' used — with unconditional batch writes. It
// is for benchmarks and tests that need a large, consistent state quickly;
// it requires that nothing else writes those items meanwhile and that the
// reservations do not overlap. nodeHours are the node-hours to write (made
// with their entries by NodeHour.Add); quotas the rows to write whole.
func (s *Store) BulkLoad(ctx context.Context, reservations []capacity.Reservation, nodeHours []capacity.NodeHour, quotas []api.Quota) error {
	var reqs []types.WriteRequest
	add := func(item any) error {
		av, err := attributevalue.MarshalMap(item)
		if err != nil {
			return err
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: av}})
		return nil
	}
	for _, r := range reservations {
		if err := add(toReservationItem(r)); err != nil {
			return err
		}
	}
	for _, nh := range nodeHours {
		if err := add(newNodeHourItem(nh)); err != nil {
			return err
		}
	}
	for _, q := range quotas {
		if err := add(newQuotaItem(capacity.QuotaKeyOf(q), q.Max, q.Used)); err != nil {
			return err
		}
	}
	return s.batchWrite(ctx, reqs)
}

// batchWrite writes requests 25 at a time, 8 batches at once.
func (s *Store) batchWrite(ctx context.Context, reqs []types.WriteRequest) error {
	return conc.Each(ctx, (len(reqs)+24)/25, 8, func(i int) error {
		batch := reqs[i*25 : min(i*25+25, len(reqs))]
		for attempt := 0; len(batch) > 0; attempt++ {
			if attempt > 0 {
				if err := dynamo.UnprocessedPause(ctx, attempt); err != nil {
					return err
				}
			}
			out, err := s.DB.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{s.Table: batch}})
			if err != nil {
				return fmt.Errorf("bulk load: %w", err)
			}
			batch = out.UnprocessedItems[s.Table]
		}
		return nil
	})
}
