package fleetdb

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// OutOfServiceNodes implements capacity.OutOfServiceStore: one resource's
// out-of-service nodes, read as OutOfService reads a pool's (the keys-only
// `bypool` index's entries: `psk` is set by the very write that takes a
// node out and removed only with its flags), at most limit of them;
// complete is false when more follow. Its cost is the nodes out (~70 B of
// key each), never the pool's nodes.
func (s *Store) OutOfServiceNodes(ctx context.Context, t capacity.PoolResource, limit int) (map[int]bool, bool, error) {
	r := dynamo.Range{PK: dynamo.PoolPK(t.PoolID), Index: schema.IndexPool, Attr: schema.AttrPool, Prefix: outPrefix + t.Resource + "#",
		SKPrefix: NodePrefix}
	out := map[int]bool{}
	next, err := s.table().Page(ctx, r, limit, nil, func(item map[string]types.AttributeValue) (bool, bool, error) {
		var it struct {
			PSK string `dynamodbav:"psk"`
		}
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return false, false, err
		}
		resource, k, ok := parseOutPSK(it.PSK)
		if !ok || resource != t.Resource {
			return false, false, fmt.Errorf("fleetdb: out-of-service entry %q of pool %s", it.PSK, t.PoolID)
		}
		out[k] = true
		return true, false, nil
	})
	return out, next == nil, err
}
