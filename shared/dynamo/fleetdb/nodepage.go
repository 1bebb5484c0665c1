package fleetdb

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// NodePage is a page of the pool's node
// items (rollout enumeration) (after: the last one's sort key; "" when the pool is done).
func (s *Store) NodePage(ctx context.Context, pool string, limit int, after string) ([]fleet.Record, string, error) {
	r := dynamo.Range{PK: dynamo.PoolPK(pool), Attr: schema.AttrSK, Prefix: NodePrefix, SKPrefix: NodePrefix}
	var cursor map[string]string
	if after != "" {
		cursor = map[string]string{dynamo.CursorSK: after}
	}
	var out []fleet.Record
	next, err := s.table().Page(ctx, r, limit, cursor, func(item map[string]types.AttributeValue) (bool, bool, error) {
		rec, err := nodeFrom(item)
		out = append(out, rec)
		return true, false, err
	})
	if err != nil || next == nil {
		return out, "", err
	}
	return out, next[dynamo.CursorSK], nil
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
