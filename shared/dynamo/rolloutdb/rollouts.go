// Package rolloutdb is the rollout module's store on DynamoDB: rollouts,
// their pool claims and their nodes' progress, each method one conditional
// write or one read on the table's core (package dynamo).
package rolloutdb

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/paging"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// Rollout items (docs/rollouts.md, Items):
//
//	ROLLOUT / R#<id>   the rollout: its definition, waves, state, counts
//	     and timeline, how far enumeration got, the intent of a pass
//	     starting nodes; `Ver` conditions every write (optimistic). Listed
//	     ones carry lsk (RES-like order: R#<createdAt>#<id>) and ssk
//	     (<state>#<createdAt>#<id>); due (dueShard/dueAt) until finished.
//	     Worst case ≈ 42 KB (32 timeline events with 256-character
//	     reasons in 4-byte UTF-8; 50 pool ids ≈ 3.3 KB), ≈ 11 KB in ASCII;
//	     typical ≈ 1.5 KB (docs/rollouts.md, Items).
//	ROLLOUT#<id> / N#<order>#<pool>#<node>   one node's progress: ssk
//	     <step>#<order>#… (`bystate`: a step's nodes in order, and counts),
//	     psk RB#<rollback>#<order>#… (`bypool`: nodes to roll back). ≈ 450 B,
//	     at most ≈ 2.1 KB (a 200-character reason in 4-byte UTF-8).
//	POOL#<pool> / #ROLLOUT   the pool's claim by a non-terminal rollout.
const (
	rolloutPK    = "ROLLOUT"
	skPoolClaim  = "#ROLLOUT"
	progressSK   = "N#"
	rolloutOrder = "R#"
)

func rolloutSK(id string) string             { return "R#" + id }
func progressPK(id string) string            { return "ROLLOUT#" + id }
func progressItemSK(k string) string         { return progressSK + k }
func rolloutListKey(r rollout.Record) string { return dynamo.FmtTime(r.CreatedAt) + "#" + r.RolloutID }

// Store is the rollout.RolloutStore on DynamoDB.
type Store struct {
	DB    *dynamodb.Client
	Table string
}

var _ rollout.RolloutStore = (*Store)(nil)

func (s *Store) table() dynamo.Table { return dynamo.Table{DB: s.DB, Name: s.Table} }

var jsonTags = func(o *attributevalue.EncoderOptions) { o.TagKey = "json" }
var jsonTagsDecode = func(o *attributevalue.DecoderOptions) { o.TagKey = "json" }

// rolloutItem is a Record marshalled by its json tags (and field names),
// with the keys.
func rolloutItem(r rollout.Record) (map[string]types.AttributeValue, error) {
	av, err := attributevalue.MarshalMapWithOptions(r, jsonTags)
	if err != nil {
		return nil, err
	}
	av[schema.AttrPK] = &types.AttributeValueMemberS{Value: rolloutPK}
	av[schema.AttrSK] = &types.AttributeValueMemberS{Value: rolloutSK(r.RolloutID)}
	av["kind"] = &types.AttributeValueMemberS{Value: dynamo.KindRollout}
	if r.Listed {
		av[schema.AttrLSK] = &types.AttributeValueMemberS{Value: rolloutOrder + rolloutListKey(r)}
		av[schema.AttrState] = &types.AttributeValueMemberS{Value: string(r.State) + "#" + rolloutListKey(r)}
	}
	if !r.Finished && !r.Due.IsZero() {
		av[schema.AttrDueSh] = &types.AttributeValueMemberS{Value: dynamo.DueShard(r.RolloutID)}
		av[schema.AttrDueAt] = &types.AttributeValueMemberS{Value: dynamo.FmtTime(r.Due)}
	}
	if r.Finished && !r.Listed {
		av[schema.AttrTTL] = &types.AttributeValueMemberN{Value: itoa64(time.Now().Add(24 * time.Hour).Unix())}
	}
	return av, nil
}

func itoa64(n int64) string {
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// RecordFrom decodes a rollout item (the due index's reader dispatches on
// the kind attribute).
func RecordFrom(av map[string]types.AttributeValue) (rollout.Record, error) {
	var r rollout.Record
	err := attributevalue.UnmarshalMapWithOptions(av, &r, jsonTagsDecode)
	return r, err
}

// CreateRollout implements rollout.RolloutStore.
func (s *Store) CreateRollout(ctx context.Context, r rollout.Record) (rollout.Record, error) {
	r.Ver = 1
	av, err := rolloutItem(r)
	if err != nil {
		return rollout.Record{}, err
	}
	err = s.table().PutItem(ctx, av, dynamo.NotExists)
	if dynamo.ConditionFailed(err) {
		stored, gerr := s.GetRollout(ctx, r.RolloutID)
		if gerr != nil {
			return rollout.Record{}, gerr
		}
		return stored, rollout.ErrExists
	}
	return r, err
}

// GetRollout implements rollout.RolloutStore.
func (s *Store) GetRollout(ctx context.Context, id string) (rollout.Record, error) {
	av, err := s.table().GetItem(ctx, dynamo.Key(rolloutPK, rolloutSK(id)))
	if err != nil {
		return rollout.Record{}, err
	}
	if av == nil {
		return rollout.Record{}, rollout.ErrNotFound
	}
	return RecordFrom(av)
}

// UpdateRollout implements rollout.RolloutStore: a PutItem conditioned on
// Ver.
func (s *Store) UpdateRollout(ctx context.Context, r rollout.Record) (rollout.Record, error) {
	old := r.Ver
	r.Ver++
	av, err := rolloutItem(r)
	if err != nil {
		return rollout.Record{}, err
	}
	err = s.table().PutItem(ctx, av, dynamo.Cond(expression.Name("Ver").Equal(expression.Value(old))))
	if err != nil {
		return rollout.Record{}, dynamo.WhenConditionFails(err, rollout.ErrStale)
	}
	return r, nil
}

// ListRollouts implements rollout.RolloutStore: the `ordered` LSI (all
// listed rollouts) or the keys-only `bystate` LSI and a BatchGetItem,
// newest first.
func (s *Store) ListRollouts(ctx context.Context, st api.RolloutState, page paging.Page) ([]rollout.Record, map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = paging.DefaultLimit
	}
	r := dynamo.Range{PK: rolloutPK, Index: schema.IndexOrdered, Attr: schema.AttrLSK, Prefix: rolloutOrder, SKPrefix: "R#",
		Backward: true, KeysOnly: true}
	if st != "" {
		r.Index, r.Attr, r.Prefix = schema.IndexState, schema.AttrState, string(st)+"#"
	}
	var out []rollout.Record
	next, err := s.table().Page(ctx, r, limit, page.After, func(item map[string]types.AttributeValue) (bool, bool, error) {
		rec, err := RecordFrom(item)
		if err != nil {
			return false, false, err
		}
		if rec.Listed && (st == "" || rec.State == st) {
			out = append(out, rec)
		}
		return true, false, nil
	})
	return out, next, err
}

type claimItem struct {
	PK  string `dynamodbav:"pk"`
	SK  string `dynamodbav:"sk"`
	RID string `dynamodbav:"rid"`
}

// ClaimPool implements rollout.RolloutStore: put if free or this one's.
func (s *Store) ClaimPool(ctx context.Context, pool, id string) (string, error) {
	c := expression.Or(expression.AttributeNotExists(expression.Name("rid")), expression.Name("rid").Equal(expression.Value(id)))
	_, err := s.table().Update(ctx, dynamo.Key(dynamo.PoolPK(pool), skPoolClaim), expression.Set(expression.Name("rid"), expression.Value(id)), &c, types.ReturnValueNone)
	if !dynamo.ConditionFailed(err) {
		return "", err
	}
	var cur claimItem
	ok, err := s.table().Get(ctx, dynamo.Key(dynamo.PoolPK(pool), skPoolClaim), &cur)
	if err != nil {
		return "", err
	}
	if !ok || cur.RID == "" {
		return s.ClaimPool(ctx, pool, id)
	}
	return cur.RID, nil
}

// ReleasePool implements rollout.RolloutStore.
func (s *Store) ReleasePool(ctx context.Context, pool, id string) error {
	c := expression.Name("rid").Equal(expression.Value(id))
	_, err := s.table().Update(ctx, dynamo.Key(dynamo.PoolPK(pool), skPoolClaim), expression.Remove(expression.Name("rid")), &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil)
}

func progressItem(p rollout.Progress) (map[string]types.AttributeValue, error) {
	av, err := attributevalue.MarshalMapWithOptions(p, jsonTags)
	if err != nil {
		return nil, err
	}
	k := p.Key()
	av[schema.AttrPK] = &types.AttributeValueMemberS{Value: progressPK(p.RolloutID)}
	av[schema.AttrSK] = &types.AttributeValueMemberS{Value: progressItemSK(k)}
	av[schema.AttrState] = &types.AttributeValueMemberS{Value: string(p.Step) + "#" + k}
	av["kind"] = &types.AttributeValueMemberS{Value: "progress"}
	if p.Rollback != "" {
		av[schema.AttrPool] = &types.AttributeValueMemberS{Value: "RB#" + p.Rollback + "#" + k}
	}
	return av, nil
}

func progressFrom(av map[string]types.AttributeValue) (rollout.Progress, error) {
	var p rollout.Progress
	err := attributevalue.UnmarshalMapWithOptions(av, &p, jsonTagsDecode)
	return p, err
}

// GetProgress implements rollout.RolloutStore: one consistent GetItem.
func (s *Store) GetProgress(ctx context.Context, id, poolID, nodeID string) (rollout.Progress, error) {
	k := rollout.Progress{NodeProgress: api.NodeProgress{PoolID: poolID, NodeID: nodeID}, Order: rollout.OrderKey(id, poolID, nodeID)}.Key()
	raw, err := s.table().GetItem(ctx, dynamo.Key(progressPK(id), progressItemSK(k)))
	if err != nil {
		return rollout.Progress{}, err
	}
	if raw == nil {
		return rollout.Progress{}, rollout.ErrNotFound
	}
	return progressFrom(raw)
}

// PutProgress implements rollout.RolloutStore.
func (s *Store) PutProgress(ctx context.Context, p rollout.Progress) error {
	av, err := progressItem(p)
	if err != nil {
		return err
	}
	return dynamo.WhenConditionFails(s.table().PutItem(ctx, av, dynamo.NotExists), nil)
}

// UpdateProgress implements rollout.RolloutStore: a PutItem conditioned on
// the step and rollback as read.
func (s *Store) UpdateProgress(ctx context.Context, p rollout.Progress, from api.RolloutStep, fromRollback string) error {
	av, err := progressItem(p)
	if err != nil {
		return err
	}
	c := expression.Name("step").Equal(expression.Value(string(from)))
	if fromRollback == "" {
		c = c.And(expression.Or(expression.AttributeNotExists(expression.Name("rollback")), expression.Name("rollback").Equal(expression.Value(""))))
	} else {
		c = c.And(expression.Name("rollback").Equal(expression.Value(fromRollback)))
	}
	return dynamo.WhenConditionFails(s.table().PutItem(ctx, av, &c), rollout.ErrStale)
}

// indexed reads at most limit progress items an index query names, in
// its order, after the order key after ("" from the start).
func (s *Store) indexed(ctx context.Context, id, index, attr, prefix string, limit int, after string) ([]rollout.Progress, error) {
	r := dynamo.Range{PK: progressPK(id), Index: index, Attr: attr, Prefix: prefix, SKPrefix: progressSK, KeysOnly: true}
	var cursor map[string]string
	if after != "" {
		cursor = map[string]string{dynamo.CursorSK: progressItemSK(after), dynamo.CursorIK: prefix + after}
	}
	var out []rollout.Progress
	_, err := s.table().Page(ctx, r, max(limit, 1), cursor, func(item map[string]types.AttributeValue) (bool, bool, error) {
		p, err := progressFrom(item)
		out = append(out, p)
		return true, false, err
	})
	return out, err
}

// ProgressByStep implements rollout.RolloutStore (`bystate`).
func (s *Store) ProgressByStep(ctx context.Context, id string, st api.RolloutStep, limit int, after string) ([]rollout.Progress, error) {
	ps, err := s.indexed(ctx, id, schema.IndexState, schema.AttrState, string(st)+"#", limit, after)
	out := ps[:0]
	for _, p := range ps {
		if p.Step == st { // the index may lag its item for a moment
			out = append(out, p)
		}
	}
	return out, err
}

// ProgressByRollback implements rollout.RolloutStore (`bypool`).
func (s *Store) ProgressByRollback(ctx context.Context, id, rb string, limit int) ([]rollout.Progress, error) {
	ps, err := s.indexed(ctx, id, schema.IndexPool, schema.AttrPool, "RB#"+rb+"#", limit, "")
	out := ps[:0]
	for _, p := range ps {
		if p.Rollback == rb {
			out = append(out, p)
		}
	}
	return out, err
}

// ProgressInOrder implements rollout.RolloutStore.
func (s *Store) ProgressInOrder(ctx context.Context, id string, limit int, after string) ([]rollout.Progress, string, error) {
	r := dynamo.Range{PK: progressPK(id), Attr: schema.AttrSK, Prefix: progressSK, SKPrefix: progressSK}
	var cursor map[string]string
	if after != "" {
		cursor = map[string]string{dynamo.CursorSK: progressItemSK(after)}
	}
	var out []rollout.Progress
	next, err := s.table().Page(ctx, r, limit, cursor, func(item map[string]types.AttributeValue) (bool, bool, error) {
		p, err := progressFrom(item)
		out = append(out, p)
		return true, false, err
	})
	if err != nil || next == nil {
		return out, "", err
	}
	return out, strings.TrimPrefix(next[dynamo.CursorSK], progressSK), nil
}

// CountStep implements rollout.RolloutStore: a COUNT query of `bystate`.
func (s *Store) CountStep(ctx context.Context, id string, st api.RolloutStep) (int, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(progressPK(id))).And(expression.Key(schema.AttrState).BeginsWith(string(st) + "#"))
	return s.table().Count(ctx, schema.IndexState, kc, nil)
}

// PoolNodes implements rollout.RolloutStore: a page of the pool's node
// items, which the fleet's store keeps (fleetdb.Store.NodePage).
func (s *Store) PoolNodes(ctx context.Context, pool string, limit int, after string) ([]fleet.Record, string, error) {
	return s.nodes().NodePage(ctx, pool, limit, after)
}

// CountPoolNodes implements rollout.RolloutStore (fleetdb.Store.CountNodes).
func (s *Store) CountPoolNodes(ctx context.Context, pool string, t time.Time, platforms map[string]bool) (int, int, error) {
	return s.nodes().CountNodes(ctx, pool, t, platforms)
}

func (s *Store) nodes() *fleetdb.Store { return &fleetdb.Store{DB: s.DB, Table: s.Table} }

// PoolsUpdated implements rollout.RolloutStore: the keys-only `bystate`
// query of the rollout's updated nodes, whose index keys
// (`updated#<order>#<pool>#<node>`) name each one's pool; it stops once
// every pool of want has been seen.
func (s *Store) PoolsUpdated(ctx context.Context, id string, want []string) (map[string]bool, error) {
	prefix := string(api.Updated) + "#"
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(progressPK(id))).And(expression.Key(schema.AttrState).BeginsWith(prefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, err
	}
	p := dynamodb.NewQueryPaginator(s.DB, &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexState),
		KeyConditionExpression: e.KeyCondition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ConsistentRead: aws.Bool(true)})
	out := map[string]bool{}
	for p.HasMorePages() && len(out) < len(want) {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			k, _ := it[schema.AttrState].(*types.AttributeValueMemberS)
			if k == nil {
				continue
			}
			// order#pool#node: pool ids hold no '#'.
			if parts := strings.SplitN(strings.TrimPrefix(k.Value, prefix), "#", 3); len(parts) == 3 {
				out[parts[1]] = true
			}
		}
	}
	return out, nil
}
