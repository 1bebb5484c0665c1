// Package fleetdb is the fleet module's store on DynamoDB: node items, a
// pool's #FLEET item (baseline, sweep) and the bind entries the capacity
// module writes through the nodes, each method one conditional write or
// one read on the table's core (package dynamo).
package fleetdb

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/paging"
)

const (
	skFleet = "#FLEET"
	// NodePrefix begins the sort key of every node item of a pool.
	NodePrefix = "NODE#"
)

// Store is the fleet.Store and capacity.NodeStore on DynamoDB.
type Store struct {
	DB    *dynamodb.Client
	Table string
}

var (
	_ fleet.Store        = (*Store)(nil)
	_ fleet.Rekeyer      = (*Store)(nil)
	_ capacity.NodeStore = (*Store)(nil)
)

func (s *Store) table() dynamo.Table { return dynamo.Table{DB: s.DB, Name: s.Table} }

// PutNode implements fleet.Store.
func (s *Store) PutNode(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	it := nodeItem{PK: dynamo.PoolPK(r.PoolID), SK: nodeItemSK(r.Resource, r.Index), SSK: nodeSSK(r.State, r.Resource, r.Index), Kind: dynamo.KindNode,
		PoolID: r.PoolID, NodeID: r.NodeID, Resource: r.Resource, Index: r.Index, NodeSize: r.NodeSize, Owner: r.Owner,
		Platform: r.Platform, KeyID: r.KeyID, Pub: r.PublicKey, State: string(r.State), CreatedAt: dynamo.FmtTime(r.CreatedAt),
		Entries: map[string]bindItem{}, Reported: map[string]string{}, PSK: nodeOutPSK(r.Resource, r.Index)}
	err := s.table().Put(ctx, it, dynamo.NotExists)
	if dynamo.ConditionFailed(err) {
		stored, gerr := s.GetNode(ctx, r.PoolID, r.Resource, r.Index)
		if gerr != nil {
			return fleet.Record{}, gerr
		}
		return stored, fleet.ErrExists
	}
	if err != nil {
		return fleet.Record{}, err
	}
	return it.record(), nil
}

// GetNode implements fleet.Store.
func (s *Store) GetNode(ctx context.Context, pool, resource string, k int) (fleet.Record, error) {
	var it nodeItem
	ok, err := s.table().Get(ctx, nodeKey(pool, resource, k), &it)
	switch {
	case err != nil:
		return fleet.Record{}, err
	case !ok:
		return fleet.Record{}, fleet.ErrNotFound
	}
	return it.record(), nil
}

// ListNodes implements fleet.Store: a Query of the pool's partition by
// sort key, or, for one state, of the keys-only `bystate` index, whose
// page is then read with a consistent BatchGetItem.
func (s *Store) ListNodes(ctx context.Context, pool string, st api.NodeState, page paging.Page) ([]fleet.Record, map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = paging.DefaultLimit
	}
	r := dynamo.Range{PK: dynamo.PoolPK(pool), Attr: schema.AttrSK, Prefix: NodePrefix, SKPrefix: NodePrefix}
	if st != "" {
		r.Index, r.Attr, r.Prefix, r.KeysOnly = schema.IndexState, schema.AttrState, NodePrefix+string(st)+"#", true
	}
	var out []fleet.Record
	next, err := s.table().Page(ctx, r, limit, page.After, func(item map[string]types.AttributeValue) (bool, bool, error) {
		var it nodeItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return false, false, err
		}
		out = append(out, it.record())
		return true, false, nil
	})
	return out, next, err
}

// PoolNodes implements fleet.Store: the pool's node items, page by page.
func (s *Store) PoolNodes(ctx context.Context, pool string, fn func(fleet.Record) error) error {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(dynamo.PoolPK(pool))).And(expression.Key(schema.AttrSK).BeginsWith(NodePrefix))
	return dynamo.QueryEach(ctx, s.table(), kc, nil, func(it nodeItem) error { return fn(it.record()) })
}

// Heartbeat implements fleet.Store: one conditional UpdateItem.
func (s *Store) Heartbeat(ctx context.Context, r fleet.Record, keyID string, rep api.Report, st api.NodeState, split *api.LogSplit, now time.Time) (fleet.Record, error) {
	reported := make(map[string]string, len(rep.Bindings))
	for _, b := range rep.Bindings {
		reported[b.ReservationID] = b.State
	}
	upd := expression.Set(expression.Name("counter"), expression.Value(rep.Counter)).
		Set(expression.Name("last"), expression.Value(dynamo.FmtTime(now))).
		Set(expression.Name("state"), expression.Value(string(st))).
		Set(expression.Name(schema.AttrState), expression.Value(nodeSSK(st, r.Resource, r.Index))).
		Set(expression.Name("health"), expression.Value(toHealthItem(rep.Health))).
		Set(expression.Name("rep"), expression.Value(reported))
	if st != api.Ready {
		// Out of service from the moment the report is accepted: a rollout
		// counting the pool's out-of-service index sees it at once.
		upd = upd.Set(expression.Name(schema.AttrPool), expression.Value(nodeOutPSK(r.Resource, r.Index)))
	}
	if rep.Running != nil {
		upd = upd.Set(expression.Name("running"), expression.Value(versionItem{V: rep.Running.Version, S: rep.Running.Sequence}))
	} else {
		upd = upd.Remove(expression.Name("running"))
	}
	if rep.Install != nil {
		in := installItem{V: rep.Install.Version, St: rep.Install.State}
		if rep.Install.Reason != nil {
			in.R = *rep.Install.Reason
		}
		upd = upd.Set(expression.Name("install"), expression.Value(in))
	} else {
		upd = upd.Remove(expression.Name("install"))
	}
	if rep.Log != nil {
		upd = upd.Set(expression.Name("log"), expression.Value(logItem{S: rep.Log.Size, R: rep.Log.Root}))
	} else {
		upd = upd.Remove(expression.Name("log"))
	}
	if split != nil {
		// The first evidence stays: a later report cannot wipe it.
		ev := logSplitItem{S: split.Size, R: split.Root, At: dynamo.FmtTime(split.At)}
		upd = upd.Set(expression.Name("lsv"), expression.IfNotExists(expression.Name("lsv"), expression.Value(ev)))
	}
	c := expression.And(expression.AttributeExists(expression.Name(schema.AttrPK)),
		expression.Name("keyId").Equal(expression.Value(keyID)),
		expression.Name("counter").LessThan(expression.Value(rep.Counter)))
	av, err := s.table().Update(ctx, recKey(r), upd, &c, types.ReturnValueAllNew)
	if dynamo.ConditionFailed(err) {
		// dynalite has no ReturnValuesOnConditionCheckFailure: one read
		// tells why, and the caller keeps what it read.
		cur, gerr := s.GetNode(ctx, r.PoolID, r.Resource, r.Index)
		if gerr != nil {
			return fleet.Record{}, gerr
		}
		return cur, fleet.ErrStale
	}
	if err != nil {
		return fleet.Record{}, err
	}
	return nodeFrom(av)
}

// ReplaceKey implements fleet.Rekeyer: one conditional UpdateItem of the
// registration's key and platform, the counter restarted, the state
// registered and the node out of service (psk) in the same write, as any
// write that takes a node out, and the release log witness cleared (the
// re-imaged host reports afresh: re-registering is how an operator lifts a
// split view). Entries, cordons, flags and the last report's other fields
// are not touched, so no concurrent writer's update of
// them is lost; a heartbeat racing it is conditioned on the old key and
// loses, or lands first and is superseded.
func (s *Store) ReplaceKey(ctx context.Context, r fleet.Record, keyID, pub, platform string) (fleet.Record, error) {
	upd := expression.Set(expression.Name("keyId"), expression.Value(keyID)).
		Set(expression.Name("pub"), expression.Value(pub)).
		Set(expression.Name("platform"), expression.Value(platform)).
		Set(expression.Name("counter"), expression.Value(0)).
		Set(expression.Name("state"), expression.Value(string(api.Registered))).
		Set(expression.Name(schema.AttrState), expression.Value(nodeSSK(api.Registered, r.Resource, r.Index))).
		Set(expression.Name(schema.AttrPool), expression.Value(nodeOutPSK(r.Resource, r.Index))).
		Remove(expression.Name("log")).Remove(expression.Name("lsv")) // a re-imaged host witnesses afresh
	c := expression.And(expression.AttributeExists(expression.Name(schema.AttrPK)),
		expression.Name("keyId").Equal(expression.Value(r.KeyID)),
		expression.Name("platform").Equal(expression.Value(r.Platform)))
	return s.updateNode(ctx, r, upd, c)
}

// updateNode is one conditional UpdateItem of the node's item that
// returns it as written; a failed condition is ErrStale.
func (s *Store) updateNode(ctx context.Context, r fleet.Record, upd expression.UpdateBuilder, c expression.ConditionBuilder) (fleet.Record, error) {
	av, err := s.table().Update(ctx, recKey(r), upd, &c, types.ReturnValueAllNew)
	if err != nil {
		return fleet.Record{}, dynamo.WhenConditionFails(err, fleet.ErrStale)
	}
	return nodeFrom(av)
}

// SetCordon implements fleet.Store.
func (s *Store) SetCordon(ctx context.Context, r fleet.Record, by string, c *api.Cordon) (fleet.Record, error) {
	attr := expression.Name("oc")
	if by == api.ByRollout {
		attr = expression.Name("rc")
	}
	var upd expression.UpdateBuilder
	var cnd expression.ConditionBuilder
	if c != nil {
		upd, cnd = expression.Set(attr, expression.Value(toCordonItem(c))), expression.AttributeNotExists(attr)
		upd = upd.Set(expression.Name(schema.AttrPool), expression.Value(nodeOutPSK(r.Resource, r.Index)))
	} else {
		upd, cnd = expression.Remove(attr), expression.AttributeExists(attr)
	}
	return s.updateNode(ctx, r, upd, cnd)
}

// eligibleNow conditions a write on the node being eligible: ready and
// not cordoned.
func eligibleNow() expression.ConditionBuilder {
	return expression.And(expression.Name("state").Equal(expression.Value(string(api.Ready))),
		expression.AttributeNotExists(expression.Name("oc")), expression.AttributeNotExists(expression.Name("rc")))
}

// ClaimFlags implements fleet.Store.
func (s *Store) ClaimFlags(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	av, err := s.table().Update(ctx, recKey(r), expression.Add(expression.Name("fg"), expression.Value(1)),
		dynamo.Cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueAllNew)
	if err != nil {
		return fleet.Record{}, dynamo.WhenConditionFails(err, fleet.ErrNotFound)
	}
	return nodeFrom(av)
}

// SetFlagged implements fleet.Store.
func (s *Store) SetFlagged(ctx context.Context, r fleet.Record, gen int64, flagged bool, to capacity.Hour) (fleet.Record, error) {
	upd := expression.Set(expression.Name("fl"), expression.Value(flagged)).Set(expression.Name("flGen"), expression.Value(gen))
	c := expression.Name("fg").Equal(expression.Value(gen))
	if flagged {
		upd = upd.Set(expression.Name("flTo"), expression.Value(int64(to))).
			Set(expression.Name(schema.AttrPool), expression.Value(nodeOutPSK(r.Resource, r.Index)))
	} else {
		upd = upd.Remove(expression.Name("flTo")).Remove(expression.Name(schema.AttrPool))
		c = c.And(eligibleNow())
	}
	return s.updateNode(ctx, r, upd, c)
}

// MarkUnreachable implements fleet.Store.
func (s *Store) MarkUnreachable(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	upd := expression.Set(expression.Name("state"), expression.Value(string(api.Unreachable))).
		Set(expression.Name(schema.AttrState), expression.Value(nodeSSK(api.Unreachable, r.Resource, r.Index))).
		Set(expression.Name(schema.AttrPool), expression.Value(nodeOutPSK(r.Resource, r.Index)))
	// The key too: a replaced node restarts its counter, which could reach
	// r's again under the new key.
	c := expression.And(expression.Name("counter").Equal(expression.Value(r.Counter)),
		expression.Name("keyId").Equal(expression.Value(r.KeyID)))
	return s.updateNode(ctx, r, upd, c)
}

// DropEntry implements fleet.Store.
func (s *Store) DropEntry(ctx context.Context, r fleet.Record, id string) error {
	upd := expression.Remove(dynamo.Path("b", id)).Add(expression.Name("nb"), expression.Value(-1)).Add(expression.Name("bv"), expression.Value(1))
	c := expression.And(dynamo.Path("b", id).AppendName(expression.Name("a")).Equal(expression.Value(api.ActionUnbind)),
		dynamo.Path("rep", id).Equal(expression.Value(api.BindUnbound)))
	_, err := s.table().Update(ctx, recKey(r), upd, &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, fleet.ErrStale)
}

// SetAdopted implements fleet.Store.
func (s *Store) SetAdopted(ctx context.Context, r fleet.Record) error {
	_, err := s.table().Update(ctx, recKey(r), expression.Set(expression.Name("adp"), expression.Value(true)),
		dynamo.Cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil) // deregistered meanwhile
}

// SetTarget implements fleet.Store.
func (s *Store) SetTarget(ctx context.Context, r fleet.Record, rolloutID string, t *fleet.Target, floor int64) (fleet.Record, error) {
	var upd expression.UpdateBuilder
	var c expression.ConditionBuilder
	rid := expression.Name("tgt").AppendName(expression.Name("rid"))
	if t != nil {
		upd = expression.Set(expression.Name("tgt"), expression.Value(targetItem{V: t.Version, S: t.Sequence, RID: rolloutID})).
			Set(expression.Name("floor"), expression.Value(floor))
		c = expression.Or(expression.AttributeNotExists(expression.Name("tgt")), rid.Equal(expression.Value(rolloutID)))
	} else {
		upd = expression.Remove(expression.Name("tgt")).Remove(expression.Name("floor"))
		c = rid.Equal(expression.Value(rolloutID))
	}
	c = c.And(expression.AttributeExists(expression.Name(schema.AttrPK)))
	return s.updateNode(ctx, r, upd, c)
}
