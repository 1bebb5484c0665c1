package fleetdb

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// The bind/unbind entries on a node (capacity.NodeStore): what the
// reservation reconciler tells a node, fenced by its bind version.

// NodeStates implements capacity.NodeStore: one consistent BatchGetItem of
// the nodes' items (an unmanaged node has none).
func (s *Store) NodeStates(ctx context.Context, t capacity.PoolResource, nodes []int, id string) (map[int]capacity.NodeState, error) {
	keys := make([]map[string]types.AttributeValue, len(nodes))
	for i, n := range nodes {
		keys[i] = nodeKey(t.PoolID, t.Resource, n)
	}
	out := map[int]capacity.NodeState{}
	err := s.table().BatchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		var it nodeItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return err
		}
		ns := capacity.NodeState{Ready: it.State == string(api.Ready), Cordoned: it.Operator != nil || it.Rollout != nil,
			Reported: it.Reported[id], Holders: map[string]capacity.Mask{}, Version: it.BV, Adopted: it.Adopted,
			Registered: dynamo.ParseTime(it.CreatedAt)}
		for rid, e := range it.Entries {
			switch {
			case rid == id:
				ns.Entry, ns.EntryMoves = e.A, e.MV
			case e.A == api.ActionBind:
				ns.Holders[rid] = capacity.Mask(uint64(e.M))
			}
		}
		out[it.Index] = ns
		return nil
	})
	return out, err
}

// atVersion conditions a node write on its entries' version being v.
func atVersion(v int64) expression.ConditionBuilder {
	bv := expression.Name("bv")
	if v == 0 {
		return expression.Or(expression.AttributeNotExists(bv), bv.Equal(expression.Value(0)))
	}
	return bv.Equal(expression.Value(v))
}

// Bind implements capacity.NodeStore: one conditional UpdateItem, against
// the entries as seen (bv), that writes the entry (or turns the node's
// scrubbed unbind of it back into a bind), forgets the node's last word on
// it, and turns previous into unbinds.
func (s *Store) Bind(ctx context.Context, t capacity.PoolResource, node int, id string, b capacity.NodeBinding, previous []string, seen capacity.NodeState) error {
	k := nodeKey(t.PoolID, t.Resource, node)
	upd := expression.Set(dynamo.Path("b", id), entryValue(b, api.ActionBind)).Add(expression.Name("bv"), expression.Value(1))
	if seen.Reported != "" {
		// Its last word on an earlier bind is no answer to this one (the
		// rep map exists then: a path into a missing map is invalid).
		upd = upd.Remove(dynamo.Path("rep", id))
	}
	conds := []expression.ConditionBuilder{expression.AttributeExists(expression.Name(schema.AttrPK)), atVersion(seen.Version)}
	if seen.Entry == "" {
		upd = upd.Add(expression.Name("nb"), expression.Value(1))
		conds = append(conds, expression.AttributeNotExists(dynamo.Path("b", id)), expression.Name("nb").LessThan(expression.Value(api.MaxBindings)))
	} else {
		conds = append(conds, dynamo.Path("b", id).AppendName(expression.Name("a")).Equal(expression.Value(api.ActionUnbind)),
			dynamo.Path("rep", id).Equal(expression.Value(api.BindUnbound)),
			dynamo.Path("b", id).AppendName(expression.Name("mv")).LessThan(expression.Value(b.Moves)))
	}
	for _, p := range previous {
		upd = upd.Set(dynamo.Path("b", p).AppendName(expression.Name("a")), expression.Value(api.ActionUnbind))
		conds = append(conds, expression.AttributeExists(dynamo.Path("b", p)))
	}
	return s.writeEntry(ctx, k, upd, dynamo.All(conds), id, seen.Entry == "", func(e bindItem) bool { return e.A == api.ActionBind })
}

// entryValue is the node's entry for a binding, as action.
func entryValue(b capacity.NodeBinding, action string) expression.ValueBuilder {
	return expression.Value(bindItem{T: b.TenantID, M: int64(b.Mask), S: b.Window.Start.UnixMilli(), E: b.Window.End.UnixMilli(), A: action, MV: b.Moves})
}

// writeEntry makes one conditional write of a node's entry for id and,
// when its condition fails, says why from the node as it is now: nil when
// there is nothing to tell (unregistered) or done says its entry is told
// already, ErrCalendarFull when a fresh entry met MaxBindings, else
// ErrStale.
func (s *Store) writeEntry(ctx context.Context, k map[string]types.AttributeValue, upd expression.UpdateBuilder, c expression.ConditionBuilder,
	id string, fresh bool, done func(bindItem) bool) error {
	_, err := s.table().Update(ctx, k, upd, &c, types.ReturnValueNone)
	if !dynamo.ConditionFailed(err) {
		return err
	}
	var cur nodeItem
	ok, err := s.table().Get(ctx, k, &cur)
	switch {
	case err != nil:
		return err
	case !ok:
		return nil // unregistered meanwhile: nothing to tell
	}
	if e, held := cur.Entries[id]; held && done(e) {
		return nil
	}
	if fresh && cur.NB >= api.MaxBindings {
		return capacity.ErrCalendarFull
	}
	return capacity.ErrStale
}

// Scrub implements capacity.NodeStore: one conditional UpdateItem that
// writes id's entry as an unbind where the node has none (and forgets its
// last word on id, as Bind does), moving the entries' version.
func (s *Store) Scrub(ctx context.Context, t capacity.PoolResource, node int, id string, b capacity.NodeBinding, seen capacity.NodeState) error {
	upd := expression.Set(dynamo.Path("b", id), entryValue(b, api.ActionUnbind)).
		Add(expression.Name("bv"), expression.Value(1)).Add(expression.Name("nb"), expression.Value(1))
	if seen.Reported != "" {
		upd = upd.Remove(dynamo.Path("rep", id))
	}
	c := dynamo.All([]expression.ConditionBuilder{expression.AttributeExists(expression.Name(schema.AttrPK)),
		expression.AttributeNotExists(dynamo.Path("b", id)), expression.Name("nb").LessThan(expression.Value(api.MaxBindings))})
	// An entry there already, bind or unbind, is the node told: a bind
	// ends as an unbind.
	return s.writeEntry(ctx, nodeKey(t.PoolID, t.Resource, node), upd, c, id, true, func(bindItem) bool { return true })
}

// Unbind implements capacity.NodeStore: the entry turned into an unbind,
// or, with none, only the entries' version moved — either way a bind
// conditioned on the version read before fails.
func (s *Store) Unbind(ctx context.Context, t capacity.PoolResource, node int, id string) error {
	k := nodeKey(t.PoolID, t.Resource, node)
	e := dynamo.Path("b", id)
	// A fresh builder per write: an UpdateBuilder's copies share their
	// operations (Set on a copy adds to the original).
	bv := func() expression.UpdateBuilder { return expression.Add(expression.Name("bv"), expression.Value(1)) }
	for range 4 {
		c := expression.AttributeExists(e)
		_, err := s.table().Update(ctx, k, bv().Set(e.AppendName(expression.Name("a")), expression.Value(api.ActionUnbind)), &c, types.ReturnValueNone)
		if !dynamo.ConditionFailed(err) {
			return err
		}
		c = expression.And(expression.AttributeExists(expression.Name(schema.AttrPK)), expression.AttributeNotExists(e))
		_, err = s.table().Update(ctx, k, bv(), &c, types.ReturnValueNone)
		if !dynamo.ConditionFailed(err) {
			return err
		}
		var cur nodeItem
		if ok, err := s.table().Get(ctx, k, &cur); err != nil {
			return err
		} else if !ok {
			return nil // unmanaged: nothing to tell
		}
		// Bound between the calls: again.
	}
	return errors.New("dynamo: a node's entries changed too often to unbind")
}

// Ineligible implements capacity.NodeStore: a Query of the resource's node
// items in the pool's partition, projecting what decides eligibility.
func (s *Store) Ineligible(ctx context.Context, t capacity.PoolResource) (map[int]bool, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(dynamo.PoolPK(t.PoolID))).
		And(expression.Key(schema.AttrSK).BeginsWith(NodePrefix + t.Resource + "#"))
	proj := expression.NamesList(expression.Name("idx"), expression.Name("state"), expression.Name("oc"), expression.Name("rc"))
	out := map[int]bool{}
	err := dynamo.QueryEach(ctx, s.table(), kc, &proj, func(it nodeItem) error {
		if it.State != string(api.Ready) || it.Operator != nil || it.Rollout != nil {
			out[it.Index] = true
		}
		return nil
	})
	return out, err
}
