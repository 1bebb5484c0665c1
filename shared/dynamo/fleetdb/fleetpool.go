package fleetdb

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// The pool's fleet item, POOL#<pool> / #FLEET: the out-of-service count
// (through the bypool index), the baseline release, the sweep's cue and the
// mass-silence hold.

type fleetItem struct {
	PK       string      `dynamodbav:"pk"`
	SK       string      `dynamodbav:"sk"`
	Kind     string      `dynamodbav:"kind"`
	PoolID   string      `dynamodbav:"poolId"`
	DueShard string      `dynamodbav:"dueShard"`
	DueAt    string      `dynamodbav:"dueAt"`
	Baseline *targetItem `dynamodbav:"baseline,omitempty"`
	Dis      string      `dynamodbav:"dis,omitempty"`
	Rsm      string      `dynamodbav:"rsm,omitempty"`
}

// CountOut implements fleet.Store: a COUNT Query of the keys-only
// `bypool` LSI (what it reads: the out-of-service nodes' keys).
func (s *Store) CountOut(ctx context.Context, pool string) (int, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(dynamo.PoolPK(pool))).
		And(expression.Key(schema.AttrPool).BeginsWith(outPrefix))
	return s.table().Count(ctx, schema.IndexPool, kc, nil)
}

// OutOfService lists the pool's nodes out of service (their node ids),
// at most limit of them: the keys-only `bypool` LSI's entries, read as
// keys (a rollout's start compares them with the nodes it started; what
// it reads is what CountOut counts, stopping at limit).
func (s *Store) OutOfService(ctx context.Context, pool string, limit int) ([]string, error) {
	r := dynamo.Range{PK: dynamo.PoolPK(pool), Index: schema.IndexPool, Attr: schema.AttrPool, Prefix: outPrefix, SKPrefix: NodePrefix}
	var out []string
	_, err := s.table().Page(ctx, r, limit, nil, func(item map[string]types.AttributeValue) (bool, bool, error) {
		var it struct {
			PSK string `dynamodbav:"psk"`
		}
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return false, false, err
		}
		resource, k, ok := parseOutPSK(it.PSK)
		if !ok {
			return false, false, fmt.Errorf("fleetdb: out-of-service entry %q of pool %s", it.PSK, pool)
		}
		out = append(out, capacity.NodeID(resource, k))
		return true, false, nil
	})
	return out, err
}

// Baseline implements fleet.Store (on the pool's sweep item).
func (s *Store) Baseline(ctx context.Context, pool string) (*fleet.Target, error) {
	var it fleetItem
	ok, err := s.table().Get(ctx, dynamo.Key(dynamo.PoolPK(pool), skFleet), &it)
	if err != nil || !ok {
		return nil, err
	}
	return it.Baseline.target(), nil
}

// SetBaseline implements fleet.Store. A baseline only ever moves to a
// higher sequence: a rollout whose finish lags a newer
// one's leaves the newer baseline, and an equal or lower one is a no-op.
func (s *Store) SetBaseline(ctx context.Context, pool string, t fleet.Target) error {
	base := expression.Name("baseline")
	c := expression.AttributeExists(expression.Name(schema.AttrPK)).And(
		expression.Or(expression.AttributeNotExists(base), base.AppendName(expression.Name("s")).LessThan(expression.Value(t.Sequence))))
	_, err := s.table().Update(ctx, dynamo.Key(dynamo.PoolPK(pool), skFleet),
		expression.Set(base, expression.Value(targetItem{V: t.Version, S: t.Sequence, RID: t.RolloutID})),
		&c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil) // not a managed pool (no node to tell), or a baseline as high already
}

// EnsureSweep implements fleet.Store.
func (s *Store) EnsureSweep(ctx context.Context, pool string, due time.Time) error {
	err := s.table().Put(ctx, fleetItem{PK: dynamo.PoolPK(pool), SK: skFleet, Kind: dynamo.KindFleet, PoolID: pool,
		DueShard: dynamo.DueShard("fleet#" + pool), DueAt: dynamo.FmtTime(due)}, dynamo.NotExists)
	return dynamo.WhenConditionFails(err, nil)
}

// ClaimSweep implements fleet.Store.
func (s *Store) ClaimSweep(ctx context.Context, pool string, due, next time.Time) (fleet.SweepState, error) {
	c := expression.Name(schema.AttrDueAt).Equal(expression.Value(dynamo.FmtTime(due)))
	av, err := s.table().Update(ctx, dynamo.Key(dynamo.PoolPK(pool), skFleet), expression.Set(expression.Name(schema.AttrDueAt), expression.Value(dynamo.FmtTime(next))), &c, types.ReturnValueAllNew)
	if err != nil {
		return fleet.SweepState{}, dynamo.WhenConditionFails(err, fleet.ErrStale)
	}
	var it fleetItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return fleet.SweepState{}, err
	}
	st := fleet.SweepState{DisruptedSince: it.disrupted()}
	if it.Rsm != "" {
		t := dynamo.ParseTime(it.Rsm)
		st.ResumedAt = &t
	}
	return st, nil
}

func (it fleetItem) disrupted() *time.Time {
	if it.Dis == "" {
		return nil
	}
	t := dynamo.ParseTime(it.Dis)
	return &t
}

// SetDisrupted implements fleet.Store.
func (s *Store) SetDisrupted(ctx context.Context, pool string, since *time.Time) error {
	upd := expression.Remove(expression.Name("dis")).Remove(expression.Name("rsm"))
	if since != nil {
		upd = expression.Set(expression.Name("dis"), expression.Value(dynamo.FmtTime(*since)))
	}
	_, err := s.table().Update(ctx, dynamo.Key(dynamo.PoolPK(pool), skFleet), upd,
		dynamo.Cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil)
}

// SetResumed implements fleet.Store.
func (s *Store) SetResumed(ctx context.Context, pool string, at *time.Time) error {
	upd := expression.Remove(expression.Name("rsm"))
	if at != nil {
		upd = expression.Set(expression.Name("rsm"), expression.Value(dynamo.FmtTime(*at)))
	}
	_, err := s.table().Update(ctx, dynamo.Key(dynamo.PoolPK(pool), skFleet), upd,
		dynamo.Cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil)
}

// Disrupted implements fleet.Store.
func (s *Store) Disrupted(ctx context.Context, pool string) (*time.Time, error) {
	var it fleetItem
	ok, err := s.table().Get(ctx, dynamo.Key(dynamo.PoolPK(pool), skFleet), &it)
	if err != nil || !ok {
		return nil, err
	}
	return it.disrupted(), nil
}

// SweptPool is the pool a #FLEET item is the sweep of (the due index's
// reader dispatches on the kind attribute).
func SweptPool(item map[string]types.AttributeValue) (string, error) {
	var it fleetItem
	err := attributevalue.UnmarshalMap(item, &it)
	return it.PoolID, err
}
