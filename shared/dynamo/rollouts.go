package dynamo

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
	kindRollout  = "rollout"
	skPoolClaim  = "#ROLLOUT"
	progressSK   = "N#"
	rolloutOrder = "R#"
)

func rolloutSK(id string) string             { return "R#" + id }
func progressPK(id string) string            { return "ROLLOUT#" + id }
func progressItemSK(k string) string         { return progressSK + k }
func rolloutListKey(r rollout.Record) string { return fmtTime(r.CreatedAt) + "#" + r.RolloutID }

// Rollouts is the rollout.RolloutStore on DynamoDB.
type Rollouts struct {
	DB    *dynamodb.Client
	Table string
}

var _ rollout.RolloutStore = (*Rollouts)(nil)

func (s *Rollouts) table() table   { return table{s.DB, s.Table} }
func (s *Rollouts) cap() *Capacity { return &Capacity{DB: s.DB, Table: s.Table} }

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
	av["kind"] = &types.AttributeValueMemberS{Value: kindRollout}
	if r.Listed {
		av[schema.AttrLSK] = &types.AttributeValueMemberS{Value: rolloutOrder + rolloutListKey(r)}
		av[schema.AttrState] = &types.AttributeValueMemberS{Value: string(r.State) + "#" + rolloutListKey(r)}
	}
	if !r.Finished && !r.Due.IsZero() {
		av[schema.AttrDueSh] = &types.AttributeValueMemberS{Value: dueShard(r.RolloutID)}
		av[schema.AttrDueAt] = &types.AttributeValueMemberS{Value: fmtTime(r.Due)}
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

func recordFrom(av map[string]types.AttributeValue) (rollout.Record, error) {
	var r rollout.Record
	err := attributevalue.UnmarshalMapWithOptions(av, &r, jsonTagsDecode)
	return r, err
}

// CreateRollout implements rollout.RolloutStore.
func (s *Rollouts) CreateRollout(ctx context.Context, r rollout.Record) (rollout.Record, error) {
	r.Ver = 1
	av, err := rolloutItem(r)
	if err != nil {
		return rollout.Record{}, err
	}
	e, _ := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(schema.AttrPK))).Build()
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: av,
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names()})
	if isConditionFailed(err) {
		stored, gerr := s.GetRollout(ctx, r.RolloutID)
		if gerr != nil {
			return rollout.Record{}, gerr
		}
		return stored, rollout.ErrExists
	}
	return r, err
}

// GetRollout implements rollout.RolloutStore.
func (s *Rollouts) GetRollout(ctx context.Context, id string) (rollout.Record, error) {
	res, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: key(rolloutPK, rolloutSK(id)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return rollout.Record{}, err
	}
	if len(res.Item) == 0 {
		return rollout.Record{}, rollout.ErrNotFound
	}
	return recordFrom(res.Item)
}

// UpdateRollout implements rollout.RolloutStore: a PutItem conditioned on
// Ver.
func (s *Rollouts) UpdateRollout(ctx context.Context, r rollout.Record) (rollout.Record, error) {
	old := r.Ver
	r.Ver++
	av, err := rolloutItem(r)
	if err != nil {
		return rollout.Record{}, err
	}
	e, _ := expression.NewBuilder().WithCondition(expression.Name("Ver").Equal(expression.Value(old))).Build()
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: av,
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()})
	if err != nil {
		return rollout.Record{}, whenConditionFails(err, rollout.ErrStale)
	}
	return r, nil
}

// ListRollouts implements rollout.RolloutStore: the `ordered` LSI (all
// listed rollouts) or the keys-only `bystate` LSI and a BatchGetItem,
// newest first.
func (s *Rollouts) ListRollouts(ctx context.Context, st api.RolloutState, page paging.Page) ([]rollout.Record, map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = paging.DefaultLimit
	}
	index, attr, prefix := schema.IndexOrdered, schema.AttrLSK, rolloutOrder
	if st != "" {
		index, attr, prefix = schema.IndexState, schema.AttrState, string(st)+"#"
	}
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(rolloutPK)).And(expression.Key(attr).BeginsWith(prefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, nil, err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(index), KeyConditionExpression: e.KeyCondition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true),
		ScanIndexForward: aws.Bool(false), Limit: aws.Int32(int32(limit + 1))}
	if sk, ik := page.After["sk"], page.After["ik"]; sk != "" {
		if !strings.HasPrefix(sk, "R#") || !strings.HasPrefix(ik, prefix) {
			return nil, nil, errBadCursor
		}
		in.ExclusiveStartKey = key(rolloutPK, sk)
		in.ExclusiveStartKey[attr] = &types.AttributeValueMemberS{Value: ik}
	}
	res, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	items := res.Items
	var next map[string]string
	if len(items) > limit {
		items = items[:limit]
		last := items[limit-1]
		next = map[string]string{"sk": last[schema.AttrSK].(*types.AttributeValueMemberS).Value, "ik": last[attr].(*types.AttributeValueMemberS).Value}
	}
	keys := make([]map[string]types.AttributeValue, len(items))
	for i, it := range items {
		keys[i] = map[string]types.AttributeValue{schema.AttrPK: it[schema.AttrPK], schema.AttrSK: it[schema.AttrSK]}
	}
	got := map[string]rollout.Record{}
	err = s.cap().batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		r, err := recordFrom(item)
		got[r.RolloutID] = r
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]rollout.Record, 0, len(keys))
	for _, k := range keys {
		id := strings.TrimPrefix(k[schema.AttrSK].(*types.AttributeValueMemberS).Value, "R#")
		if r, ok := got[id]; ok && r.Listed && (st == "" || r.State == st) {
			out = append(out, r)
		}
	}
	return out, next, nil
}

type claimItem struct {
	PK  string `dynamodbav:"pk"`
	SK  string `dynamodbav:"sk"`
	RID string `dynamodbav:"rid"`
}

// ClaimPool implements rollout.RolloutStore: put if free or this one's.
func (s *Rollouts) ClaimPool(ctx context.Context, pool, id string) (string, error) {
	c := expression.Or(expression.AttributeNotExists(expression.Name("rid")), expression.Name("rid").Equal(expression.Value(id)))
	_, err := s.table().update(ctx, key(poolPK(pool), skPoolClaim), expression.Set(expression.Name("rid"), expression.Value(id)), &c, types.ReturnValueNone)
	if !isConditionFailed(err) {
		return "", err
	}
	var cur claimItem
	ok, err := s.table().get(ctx, key(poolPK(pool), skPoolClaim), &cur)
	if err != nil {
		return "", err
	}
	if !ok || cur.RID == "" {
		return s.ClaimPool(ctx, pool, id)
	}
	return cur.RID, nil
}

// ReleasePool implements rollout.RolloutStore.
func (s *Rollouts) ReleasePool(ctx context.Context, pool, id string) error {
	c := expression.Name("rid").Equal(expression.Value(id))
	_, err := s.table().update(ctx, key(poolPK(pool), skPoolClaim), expression.Remove(expression.Name("rid")), &c, types.ReturnValueNone)
	return whenConditionFails(err, nil)
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
func (s *Rollouts) GetProgress(ctx context.Context, id, poolID, nodeID string) (rollout.Progress, error) {
	k := rollout.Progress{NodeProgress: api.NodeProgress{PoolID: poolID, NodeID: nodeID}, Order: rollout.OrderKey(id, poolID, nodeID)}.Key()
	var raw map[string]types.AttributeValue
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true),
		Key: key(progressPK(id), progressItemSK(k))})
	if err != nil {
		return rollout.Progress{}, err
	}
	if raw = out.Item; raw == nil {
		return rollout.Progress{}, rollout.ErrNotFound
	}
	return progressFrom(raw)
}

// PutProgress implements rollout.RolloutStore.
func (s *Rollouts) PutProgress(ctx context.Context, p rollout.Progress) error {
	av, err := progressItem(p)
	if err != nil {
		return err
	}
	e, _ := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(schema.AttrPK))).Build()
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: av,
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names()})
	return whenConditionFails(err, nil)
}

// UpdateProgress implements rollout.RolloutStore: a PutItem conditioned on
// the step and rollback as read.
func (s *Rollouts) UpdateProgress(ctx context.Context, p rollout.Progress, from api.RolloutStep, fromRollback string) error {
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
	e, err := expression.NewBuilder().WithCondition(c).Build()
	if err != nil {
		return err
	}
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: av,
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()})
	return whenConditionFails(err, rollout.ErrStale)
}

// indexed reads the progress items an index query names, in its order.
func (s *Rollouts) indexed(ctx context.Context, id, index, attr, prefix string, limit int, after string) ([]rollout.Progress, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(progressPK(id))).And(expression.Key(attr).BeginsWith(prefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(index), KeyConditionExpression: e.KeyCondition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true),
		Limit: aws.Int32(int32(max(limit, 1)))}
	if after != "" {
		in.ExclusiveStartKey = key(progressPK(id), progressItemSK(after))
		in.ExclusiveStartKey[attr] = &types.AttributeValueMemberS{Value: prefix + after}
	}
	res, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, err
	}
	keys := make([]map[string]types.AttributeValue, len(res.Items))
	for i, it := range res.Items {
		keys[i] = map[string]types.AttributeValue{schema.AttrPK: it[schema.AttrPK], schema.AttrSK: it[schema.AttrSK]}
	}
	got := map[string]rollout.Progress{}
	err = s.cap().batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		p, err := progressFrom(item)
		got[progressItemSK(p.Key())] = p
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]rollout.Progress, 0, len(keys))
	for _, k := range keys {
		if p, ok := got[k[schema.AttrSK].(*types.AttributeValueMemberS).Value]; ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// ProgressByStep implements rollout.RolloutStore (`bystate`).
func (s *Rollouts) ProgressByStep(ctx context.Context, id string, st api.RolloutStep, limit int, after string) ([]rollout.Progress, error) {
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
func (s *Rollouts) ProgressByRollback(ctx context.Context, id, rb string, limit int) ([]rollout.Progress, error) {
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
func (s *Rollouts) ProgressInOrder(ctx context.Context, id string, limit int, after string) ([]rollout.Progress, string, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(progressPK(id))).And(expression.Key(schema.AttrSK).BeginsWith(progressSK))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, "", err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), KeyConditionExpression: e.KeyCondition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true),
		Limit: aws.Int32(int32(limit + 1))}
	if after != "" {
		in.ExclusiveStartKey = key(progressPK(id), progressItemSK(after))
	}
	res, err := s.DB.Query(ctx, in)
	if err != nil {
		return nil, "", err
	}
	items, next := res.Items, ""
	if len(items) > limit {
		items = items[:limit]
	}
	out := make([]rollout.Progress, 0, len(items))
	for _, it := range items {
		p, err := progressFrom(it)
		if err != nil {
			return nil, "", err
		}
		out = append(out, p)
	}
	if len(res.Items) > limit && len(out) > 0 {
		next = out[len(out)-1].Key()
	}
	return out, next, nil
}

// CountStep implements rollout.RolloutStore: a COUNT query of `bystate`.
func (s *Rollouts) CountStep(ctx context.Context, id string, st api.RolloutStep) (int, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(progressPK(id))).And(expression.Key(schema.AttrState).BeginsWith(string(st) + "#"))
	return s.table().count(ctx, schema.IndexState, kc, nil)
}

// PoolNodes implements rollout.RolloutStore: a page of the pool's node
// items (after: the last one's sort key; "" when the pool is done).
func (s *Rollouts) PoolNodes(ctx context.Context, pool string, limit int, after string) ([]fleet.Record, string, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(poolPK(pool))).And(expression.Key(schema.AttrSK).BeginsWith(nodePrefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, "", err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), KeyConditionExpression: e.KeyCondition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true),
		Limit: aws.Int32(int32(limit))}
	if after != "" {
		in.ExclusiveStartKey = key(poolPK(pool), after)
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

// CountPoolNodes implements rollout.RolloutStore: one paged Query of the
// pool's node items (what it reads: their creation times and platforms).
func (s *Rollouts) CountPoolNodes(ctx context.Context, pool string, t time.Time, platforms map[string]bool) (int, int, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(poolPK(pool))).And(expression.Key(schema.AttrSK).BeginsWith(nodePrefix))
	proj := expression.NamesList(expression.Name("createdAt"), expression.Name("platform"))
	nodes, withBinary := 0, 0
	err := queryEach(ctx, s.table(), kc, &proj, func(n struct {
		CreatedAt string `dynamodbav:"createdAt"`
		Platform  string `dynamodbav:"platform"`
	}) error {
		if parseTime(n.CreatedAt).After(t) {
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

// PoolsUpdated implements rollout.RolloutStore: the keys-only `bystate`
// query of the rollout's updated nodes, whose index keys
// (`updated#<order>#<pool>#<node>`) name each one's pool; it stops once
// every pool of want has been seen.
func (s *Rollouts) PoolsUpdated(ctx context.Context, id string, want []string) (map[string]bool, error) {
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
