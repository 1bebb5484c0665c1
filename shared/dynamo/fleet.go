package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/paging"
)

// A node, POOL#<pool> / NODE#<resource>#<k, 6 digits>, is one registered
// host of a pool, in its pool's partition:
//
//	pub, keyId, platform, owner, idx, ns   its registration (key and
//	     platform replaced only by nodes.register with replace, which also
//	     sets counter 0 and state registered)
//	counter, last, running, install, health, state   the last accepted
//	     report (a heartbeat's one conditional write sets them)
//	rep  reservation → bound|unbound|failed: that report's bindings
//	b    reservation → {t: tenant, m: device mask, s, e: window in Unix ms,
//	     a: bind|unbind}: what the node is told (the reservation
//	     reconciler writes them; the sweep forgets unbinds reported done);
//	     nb counts them
//	oc, rc    the operator's and a rollout's cordon
//	fg   the generation the last flag writer claimed; fl, flTo, flGen what
//	     the last writer to finish applied: its node-hours carry the
//	     ineligible flag through flTo (docs/fleet.md, Eligibility)
//	psk  NODE#OUT#<resource>#<k> while the node is out of service (the
//	     `bypool` LSI: a count of the pool's nodes out of service, what a
//	     rollout's maxUnavailable counts) — set by the very write that takes
//	     it out (a report, a cordon, the sweep), removed once its flags are
//	     lifted
//	bv   rises with every change of b (a bind is conditioned on it)
//	adp  the reservations it held when it registered were told to it
//	tgt, floor  a rollout's target release {v, s, rid} and the floor it
//	     tells meanwhile
//	ssk  NODE#<state>#<resource>#<k> (the `bystate` LSI: lists by state)
//
// Worst case: 128 entries × ~230 B (26-character id, a 128-character
// tenant, three numbers) + 128 reported states × ~40 B + 32 checks × ~340 B
// (64-character name, 256-character detail) + the key (~180 B of PEM) and
// the rest (~1 KB) ≈ 46 KB. Typical: a few entries, three checks ≈ 1.5 KB
// — what a heartbeat's write costs (1–2 write units).
//
// The pool's sweep, POOL#<pool> / #FLEET, carries dueShard/dueAt: the
// reconciler's cue to look at the pool's nodes (fleet.Service.Sweep).

const (
	kindNode   = "node"
	kindFleet  = "fleet"
	skFleet    = "#FLEET"
	nodePrefix = "NODE#"
)

// Fleet is the fleet.Store and capacity.NodeStore on DynamoDB.
type Fleet struct {
	DB    *dynamodb.Client
	Table string
}

var (
	_ fleet.Store        = (*Fleet)(nil)
	_ fleet.Rekeyer      = (*Fleet)(nil)
	_ capacity.NodeStore = (*Fleet)(nil)
)

func (s *Fleet) table() table { return table{s.DB, s.Table} }

func nodeItemSK(resource string, k int) string {
	return fmt.Sprintf("%s%s#%06d", nodePrefix, resource, k)
}

func nodeSSK(st fleet.State, resource string, k int) string {
	return fmt.Sprintf("%s%s#%s#%06d", nodePrefix, st, resource, k)
}

type versionItem struct {
	V string `dynamodbav:"v"`
	S int64  `dynamodbav:"s"`
}

type installItem struct {
	V  string `dynamodbav:"v"`
	St string `dynamodbav:"st"`
	R  string `dynamodbav:"r,omitempty"`
}

type checkItem struct {
	N  string `dynamodbav:"n"`
	OK bool   `dynamodbav:"ok"`
	D  string `dynamodbav:"d,omitempty"`
}

type healthItem struct {
	E int         `dynamodbav:"e"`
	V int         `dynamodbav:"v"`
	C []checkItem `dynamodbav:"c"`
}

type cordonItem struct {
	By  string `dynamodbav:"by"`
	R   string `dynamodbav:"r"`
	RID string `dynamodbav:"rid,omitempty"`
	At  string `dynamodbav:"at"`
}

type bindItem struct {
	T  string `dynamodbav:"t"`
	M  int64  `dynamodbav:"m"`
	S  int64  `dynamodbav:"s"`
	E  int64  `dynamodbav:"e"`
	A  string `dynamodbav:"a"`
	MV int    `dynamodbav:"mv"`
}

type nodeItem struct {
	PK        string              `dynamodbav:"pk"`
	SK        string              `dynamodbav:"sk"`
	SSK       string              `dynamodbav:"ssk"`
	Kind      string              `dynamodbav:"kind"`
	PoolID    string              `dynamodbav:"poolId"`
	NodeID    string              `dynamodbav:"nodeId"`
	Resource  string              `dynamodbav:"resource"`
	Index     int                 `dynamodbav:"idx"`
	NodeSize  int                 `dynamodbav:"ns"`
	Owner     string              `dynamodbav:"owner"`
	Platform  string              `dynamodbav:"platform"`
	KeyID     string              `dynamodbav:"keyId"`
	Pub       string              `dynamodbav:"pub"`
	State     string              `dynamodbav:"state"`
	CreatedAt string              `dynamodbav:"createdAt"`
	Counter   int64               `dynamodbav:"counter"`
	Last      string              `dynamodbav:"last,omitempty"`
	Running   *versionItem        `dynamodbav:"running,omitempty"`
	Install   *installItem        `dynamodbav:"install,omitempty"`
	Health    *healthItem         `dynamodbav:"health,omitempty"`
	Operator  *cordonItem         `dynamodbav:"oc,omitempty"`
	Rollout   *cordonItem         `dynamodbav:"rc,omitempty"`
	Entries   map[string]bindItem `dynamodbav:"b"`
	NB        int                 `dynamodbav:"nb"`
	Reported  map[string]string   `dynamodbav:"rep"`
	Gen       int64               `dynamodbav:"fg,omitempty"`
	FlagGen   int64               `dynamodbav:"flGen,omitempty"`
	Flagged   bool                `dynamodbav:"fl,omitempty"`
	FlaggedTo int64               `dynamodbav:"flTo,omitempty"`
	PSK       string              `dynamodbav:"psk,omitempty"`
	BV        int64               `dynamodbav:"bv,omitempty"`
	Adopted   bool                `dynamodbav:"adp,omitempty"`
	Target    *targetItem         `dynamodbav:"tgt,omitempty"`
	Floor     int64               `dynamodbav:"floor,omitempty"`
}

type targetItem struct {
	V   string `dynamodbav:"v"`
	S   int64  `dynamodbav:"s"`
	RID string `dynamodbav:"rid,omitempty"`
}

func (t *targetItem) target() *fleet.Target {
	if t == nil {
		return nil
	}
	return &fleet.Target{Version: t.V, Sequence: t.S, RolloutID: t.RID}
}

func nodeOutPSK(resource string, k int) string {
	return fmt.Sprintf("%sOUT#%s#%06d", nodePrefix, resource, k)
}

func toCordonItem(c *fleet.Cordon) *cordonItem {
	if c == nil {
		return nil
	}
	return &cordonItem{By: c.By, R: c.Reason, RID: c.RolloutID, At: fmtTime(c.At)}
}

func (c *cordonItem) cordon() *fleet.Cordon {
	if c == nil {
		return nil
	}
	return &fleet.Cordon{By: c.By, Reason: c.R, RolloutID: c.RID, At: parseTime(c.At)}
}

func toHealthItem(h fleet.Health) *healthItem {
	it := &healthItem{E: h.DevicesExpected, V: h.DevicesVisible, C: make([]checkItem, len(h.Checks))}
	for i, c := range h.Checks {
		it.C[i] = checkItem{N: c.Name, OK: c.OK}
		if c.Detail != nil {
			it.C[i].D = *c.Detail
		}
	}
	return it
}

func (it nodeItem) record() fleet.Record {
	r := fleet.Record{Node: fleet.Node{PoolID: it.PoolID, NodeID: it.NodeID, Resource: it.Resource, Platform: it.Platform,
		KeyID: it.KeyID, State: fleet.State(it.State), CreatedAt: parseTime(it.CreatedAt)},
		Index: it.Index, Owner: it.Owner, PublicKey: it.Pub, Counter: it.Counter, NodeSize: it.NodeSize,
		Operator: it.Operator.cordon(), Rollout: it.Rollout.cordon(), Entries: map[string]fleet.Entry{}, Reported: it.Reported,
		Gen: it.Gen, FlagGen: it.FlagGen, Flagged: it.Flagged, FlaggedTo: capacity.Hour(it.FlaggedTo), Out: it.PSK != "",
		BindVersion: it.BV, Adopted: it.Adopted, Target: it.Target.target(), Floor: it.Floor}
	if r.Reported == nil {
		r.Reported = map[string]string{}
	}
	if it.Last != "" {
		t := parseTime(it.Last)
		r.LastHeartbeatAt = &t
	}
	if it.Running != nil {
		r.Running = &fleet.Version{Version: it.Running.V, Sequence: it.Running.S}
	}
	if it.Install != nil {
		r.Install = &fleet.Install{Version: it.Install.V, State: it.Install.St}
		if it.Install.R != "" {
			reason := it.Install.R
			r.Install.Reason = &reason
		}
	}
	if it.Health != nil {
		h := fleet.Health{DevicesExpected: it.Health.E, DevicesVisible: it.Health.V, Checks: make([]fleet.Check, len(it.Health.C))}
		for i, c := range it.Health.C {
			h.Checks[i] = fleet.Check{Name: c.N, OK: c.OK}
			if c.D != "" {
				d := c.D
				h.Checks[i].Detail = &d
			}
		}
		r.Health = &h
	}
	for id, e := range it.Entries {
		r.Entries[id] = fleet.Entry{TenantID: e.T, Mask: capacity.Mask(uint64(e.M)), Action: e.A, Moves: e.MV,
			Window: capacity.Window{Start: time.UnixMilli(e.S).UTC(), End: time.UnixMilli(e.E).UTC()}}

	}
	return r
}

func nodeKey(pool, resource string, k int) map[string]types.AttributeValue {
	return key(poolPK(pool), nodeItemSK(resource, k))
}

func recKey(r fleet.Record) map[string]types.AttributeValue {
	return nodeKey(r.PoolID, r.Resource, r.Index)
}

// PutNode implements fleet.Store.
func (s *Fleet) PutNode(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	it := nodeItem{PK: poolPK(r.PoolID), SK: nodeItemSK(r.Resource, r.Index), SSK: nodeSSK(r.State, r.Resource, r.Index), Kind: kindNode,
		PoolID: r.PoolID, NodeID: r.NodeID, Resource: r.Resource, Index: r.Index, NodeSize: r.NodeSize, Owner: r.Owner,
		Platform: r.Platform, KeyID: r.KeyID, Pub: r.PublicKey, State: string(r.State), CreatedAt: fmtTime(r.CreatedAt),
		Entries: map[string]bindItem{}, Reported: map[string]string{}, PSK: nodeOutPSK(r.Resource, r.Index)}
	err := s.table().put(ctx, it, notExists)
	if isConditionFailed(err) {
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
func (s *Fleet) GetNode(ctx context.Context, pool, resource string, k int) (fleet.Record, error) {
	var it nodeItem
	ok, err := s.table().get(ctx, nodeKey(pool, resource, k), &it)
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
func (s *Fleet) ListNodes(ctx context.Context, pool string, st fleet.State, page paging.Page) ([]fleet.Record, map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = paging.DefaultLimit
	}
	attr, prefix := schema.AttrSK, nodePrefix
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true), Limit: aws.Int32(int32(limit + 1))}
	if st != "" {
		attr, prefix = schema.AttrState, nodePrefix+string(st)+"#"
		in.IndexName = aws.String(schema.IndexState)
	}
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(poolPK(pool))).And(expression.Key(attr).BeginsWith(prefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, nil, err
	}
	in.KeyConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.KeyCondition(), e.Names(), e.Values()
	if sk := page.After["sk"]; sk != "" {
		if !strings.HasPrefix(sk, nodePrefix) {
			return nil, nil, errBadCursor
		}
		in.ExclusiveStartKey = key(poolPK(pool), sk)
		if st != "" {
			ik := page.After["ik"]
			if !strings.HasPrefix(ik, prefix) {
				return nil, nil, errBadCursor
			}
			in.ExclusiveStartKey[attr] = &types.AttributeValueMemberS{Value: ik}
		}
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
		next = map[string]string{"sk": last[schema.AttrSK].(*types.AttributeValueMemberS).Value}
		if st != "" {
			next["ik"] = last[attr].(*types.AttributeValueMemberS).Value
		}
	}
	if st == "" {
		out := make([]fleet.Record, 0, len(items))
		for _, item := range items {
			var it nodeItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return nil, nil, err
			}
			out = append(out, it.record())
		}
		return out, next, nil
	}
	keys := make([]map[string]types.AttributeValue, len(items))
	for i, item := range items {
		keys[i] = map[string]types.AttributeValue{schema.AttrPK: item[schema.AttrPK], schema.AttrSK: item[schema.AttrSK]}
	}
	got := map[string]fleet.Record{}
	c := &Capacity{DB: s.DB, Table: s.Table}
	err = c.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		var it nodeItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return err
		}
		got[it.SK] = it.record()
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]fleet.Record, 0, len(keys))
	for _, k := range keys {
		if r, ok := got[k[schema.AttrSK].(*types.AttributeValueMemberS).Value]; ok && r.State == st {
			out = append(out, r)
		}
	}
	return out, next, nil
}

// PoolNodes implements fleet.Store: the pool's node items, page by page.
func (s *Fleet) PoolNodes(ctx context.Context, pool string, fn func(fleet.Record) error) error {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(poolPK(pool))).And(expression.Key(schema.AttrSK).BeginsWith(nodePrefix))
	return queryEach(ctx, s.table(), kc, nil, func(it nodeItem) error { return fn(it.record()) })
}

// allNew decodes an ALL_NEW answer.
func nodeFrom(av map[string]types.AttributeValue) (fleet.Record, error) {
	var it nodeItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return fleet.Record{}, err
	}
	return it.record(), nil
}

// Heartbeat implements fleet.Store: one conditional UpdateItem.
func (s *Fleet) Heartbeat(ctx context.Context, r fleet.Record, keyID string, rep fleet.Report, st fleet.State, now time.Time) (fleet.Record, error) {
	reported := make(map[string]string, len(rep.Bindings))
	for _, b := range rep.Bindings {
		reported[b.ReservationID] = b.State
	}
	upd := expression.Set(expression.Name("counter"), expression.Value(rep.Counter)).
		Set(expression.Name("last"), expression.Value(fmtTime(now))).
		Set(expression.Name("state"), expression.Value(string(st))).
		Set(expression.Name(schema.AttrState), expression.Value(nodeSSK(st, r.Resource, r.Index))).
		Set(expression.Name("health"), expression.Value(toHealthItem(rep.Health))).
		Set(expression.Name("rep"), expression.Value(reported))
	if st != fleet.Ready {
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
	c := expression.And(expression.AttributeExists(expression.Name(schema.AttrPK)),
		expression.Name("keyId").Equal(expression.Value(keyID)),
		expression.Name("counter").LessThan(expression.Value(rep.Counter)))
	av, err := s.table().update(ctx, recKey(r), upd, &c, types.ReturnValueAllNew)
	if isConditionFailed(err) {
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
// write that takes a node out. Entries, cordons, flags and the last
// report's fields are not touched, so no concurrent writer's update of
// them is lost; a heartbeat racing it is conditioned on the old key and
// loses, or lands first and is superseded.
func (s *Fleet) ReplaceKey(ctx context.Context, r fleet.Record, keyID, pub, platform string) (fleet.Record, error) {
	upd := expression.Set(expression.Name("keyId"), expression.Value(keyID)).
		Set(expression.Name("pub"), expression.Value(pub)).
		Set(expression.Name("platform"), expression.Value(platform)).
		Set(expression.Name("counter"), expression.Value(0)).
		Set(expression.Name("state"), expression.Value(string(fleet.Registered))).
		Set(expression.Name(schema.AttrState), expression.Value(nodeSSK(fleet.Registered, r.Resource, r.Index))).
		Set(expression.Name(schema.AttrPool), expression.Value(nodeOutPSK(r.Resource, r.Index)))
	c := expression.And(expression.AttributeExists(expression.Name(schema.AttrPK)),
		expression.Name("keyId").Equal(expression.Value(r.KeyID)),
		expression.Name("platform").Equal(expression.Value(r.Platform)))
	return s.updateNode(ctx, r, upd, c)
}

// updateNode is one conditional UpdateItem of the node's item that
// returns it as written; a failed condition is ErrStale.
func (s *Fleet) updateNode(ctx context.Context, r fleet.Record, upd expression.UpdateBuilder, c expression.ConditionBuilder) (fleet.Record, error) {
	av, err := s.table().update(ctx, recKey(r), upd, &c, types.ReturnValueAllNew)
	if isConditionFailed(err) {
		return fleet.Record{}, fleet.ErrStale
	}
	if err != nil {
		return fleet.Record{}, err
	}
	return nodeFrom(av)
}

// SetCordon implements fleet.Store.
func (s *Fleet) SetCordon(ctx context.Context, r fleet.Record, by string, c *fleet.Cordon) (fleet.Record, error) {
	attr := expression.Name("oc")
	if by == fleet.ByRollout {
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
	return expression.And(expression.Name("state").Equal(expression.Value(string(fleet.Ready))),
		expression.AttributeNotExists(expression.Name("oc")), expression.AttributeNotExists(expression.Name("rc")))
}

// ClaimFlags implements fleet.Store.
func (s *Fleet) ClaimFlags(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	av, err := s.table().update(ctx, recKey(r), expression.Add(expression.Name("fg"), expression.Value(1)),
		cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueAllNew)
	if isConditionFailed(err) {
		return fleet.Record{}, fleet.ErrNotFound
	}
	if err != nil {
		return fleet.Record{}, err
	}
	return nodeFrom(av)
}

// SetFlagged implements fleet.Store.
func (s *Fleet) SetFlagged(ctx context.Context, r fleet.Record, gen int64, flagged bool, to capacity.Hour) error {
	upd := expression.Set(expression.Name("fl"), expression.Value(flagged)).Set(expression.Name("flGen"), expression.Value(gen))
	c := expression.Name("fg").Equal(expression.Value(gen))
	if flagged {
		upd = upd.Set(expression.Name("flTo"), expression.Value(int64(to))).
			Set(expression.Name(schema.AttrPool), expression.Value(nodeOutPSK(r.Resource, r.Index)))
	} else {
		upd = upd.Remove(expression.Name("flTo")).Remove(expression.Name(schema.AttrPool))
		c = c.And(eligibleNow())
	}
	_, err := s.table().update(ctx, recKey(r), upd, &c, types.ReturnValueNone)
	return whenConditionFails(err, fleet.ErrStale)
}

// MarkUnreachable implements fleet.Store.
func (s *Fleet) MarkUnreachable(ctx context.Context, r fleet.Record) (fleet.Record, error) {
	upd := expression.Set(expression.Name("state"), expression.Value(string(fleet.Unreachable))).
		Set(expression.Name(schema.AttrState), expression.Value(nodeSSK(fleet.Unreachable, r.Resource, r.Index))).
		Set(expression.Name(schema.AttrPool), expression.Value(nodeOutPSK(r.Resource, r.Index)))
	// The key too: a replaced node restarts its counter, which could reach
	// r's again under the new key.
	c := expression.And(expression.Name("counter").Equal(expression.Value(r.Counter)),
		expression.Name("keyId").Equal(expression.Value(r.KeyID)))
	return s.updateNode(ctx, r, upd, c)
}

// DropEntry implements fleet.Store.
func (s *Fleet) DropEntry(ctx context.Context, r fleet.Record, id string) error {
	upd := expression.Remove(path("b", id)).Add(expression.Name("nb"), expression.Value(-1)).Add(expression.Name("bv"), expression.Value(1))
	c := expression.And(path("b", id).AppendName(expression.Name("a")).Equal(expression.Value(fleet.ActionUnbind)),
		path("rep", id).Equal(expression.Value(fleet.BindUnbound)))
	_, err := s.table().update(ctx, recKey(r), upd, &c, types.ReturnValueNone)
	return whenConditionFails(err, fleet.ErrStale)
}

// SetAdopted implements fleet.Store.
func (s *Fleet) SetAdopted(ctx context.Context, r fleet.Record) error {
	_, err := s.table().update(ctx, recKey(r), expression.Set(expression.Name("adp"), expression.Value(true)),
		cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueNone)
	return whenConditionFails(err, nil) // deregistered meanwhile
}

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

// SetTarget implements fleet.Store.
func (s *Fleet) SetTarget(ctx context.Context, r fleet.Record, rolloutID string, t *fleet.Target, floor int64) (fleet.Record, error) {
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

// CountOut implements fleet.Store: a COUNT Query of the keys-only
// `bypool` LSI (what it reads: the out-of-service nodes' keys).
func (s *Fleet) CountOut(ctx context.Context, pool string) (int, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(poolPK(pool))).
		And(expression.Key(schema.AttrPool).BeginsWith(nodePrefix + "OUT#"))
	return s.table().count(ctx, schema.IndexPool, kc, nil)
}

// Baseline implements fleet.Store (on the pool's sweep item).
func (s *Fleet) Baseline(ctx context.Context, pool string) (*fleet.Target, error) {
	var it fleetItem
	ok, err := s.table().get(ctx, key(poolPK(pool), skFleet), &it)
	if err != nil || !ok {
		return nil, err
	}
	return it.Baseline.target(), nil
}

// SetBaseline implements fleet.Store. A baseline only ever moves to a
// higher sequence (SPEC §4.7, v0.7): a rollout whose finish lags a newer
// one's leaves the newer baseline, and an equal or lower one is a no-op.
func (s *Fleet) SetBaseline(ctx context.Context, pool string, t fleet.Target) error {
	base := expression.Name("baseline")
	c := expression.AttributeExists(expression.Name(schema.AttrPK)).And(
		expression.Or(expression.AttributeNotExists(base), base.AppendName(expression.Name("s")).LessThan(expression.Value(t.Sequence))))
	_, err := s.table().update(ctx, key(poolPK(pool), skFleet),
		expression.Set(base, expression.Value(targetItem{V: t.Version, S: t.Sequence, RID: t.RolloutID})),
		&c, types.ReturnValueNone)
	return whenConditionFails(err, nil) // not a managed pool (no node to tell), or a baseline as high already
}

// EnsureSweep implements fleet.Store.
func (s *Fleet) EnsureSweep(ctx context.Context, pool string, due time.Time) error {
	err := s.table().put(ctx, fleetItem{PK: poolPK(pool), SK: skFleet, Kind: kindFleet, PoolID: pool,
		DueShard: dueShard("fleet#" + pool), DueAt: fmtTime(due)}, notExists)
	return whenConditionFails(err, nil)
}

// ClaimSweep implements fleet.Store.
func (s *Fleet) ClaimSweep(ctx context.Context, pool string, due, next time.Time) (fleet.SweepState, error) {
	c := expression.Name(schema.AttrDueAt).Equal(expression.Value(fmtTime(due)))
	av, err := s.table().update(ctx, key(poolPK(pool), skFleet), expression.Set(expression.Name(schema.AttrDueAt), expression.Value(fmtTime(next))), &c, types.ReturnValueAllNew)
	if isConditionFailed(err) {
		return fleet.SweepState{}, fleet.ErrStale
	}
	if err != nil {
		return fleet.SweepState{}, err
	}
	var it fleetItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return fleet.SweepState{}, err
	}
	st := fleet.SweepState{DisruptedSince: it.disrupted()}
	if it.Rsm != "" {
		t := parseTime(it.Rsm)
		st.ResumedAt = &t
	}
	return st, nil
}

func (it fleetItem) disrupted() *time.Time {
	if it.Dis == "" {
		return nil
	}
	t := parseTime(it.Dis)
	return &t
}

// SetDisrupted implements fleet.Store.
func (s *Fleet) SetDisrupted(ctx context.Context, pool string, since *time.Time) error {
	upd := expression.Remove(expression.Name("dis")).Remove(expression.Name("rsm"))
	if since != nil {
		upd = expression.Set(expression.Name("dis"), expression.Value(fmtTime(*since)))
	}
	_, err := s.table().update(ctx, key(poolPK(pool), skFleet), upd,
		cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueNone)
	return whenConditionFails(err, nil)
}

// SetResumed implements fleet.Store.
func (s *Fleet) SetResumed(ctx context.Context, pool string, at *time.Time) error {
	upd := expression.Remove(expression.Name("rsm"))
	if at != nil {
		upd = expression.Set(expression.Name("rsm"), expression.Value(fmtTime(*at)))
	}
	_, err := s.table().update(ctx, key(poolPK(pool), skFleet), upd,
		cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueNone)
	return whenConditionFails(err, nil)
}

// Disrupted implements fleet.Store.
func (s *Fleet) Disrupted(ctx context.Context, pool string) (*time.Time, error) {
	var it fleetItem
	ok, err := s.table().get(ctx, key(poolPK(pool), skFleet), &it)
	if err != nil || !ok {
		return nil, err
	}
	return it.disrupted(), nil
}

// NodeStates implements capacity.NodeStore: one consistent BatchGetItem of
// the nodes' items (an unmanaged node has none).
func (s *Fleet) NodeStates(ctx context.Context, t capacity.PoolResource, nodes []int, id string) (map[int]capacity.NodeState, error) {
	keys := make([]map[string]types.AttributeValue, len(nodes))
	for i, n := range nodes {
		keys[i] = nodeKey(t.PoolID, t.Resource, n)
	}
	out := map[int]capacity.NodeState{}
	c := &Capacity{DB: s.DB, Table: s.Table}
	err := c.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		var it nodeItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return err
		}
		ns := capacity.NodeState{Ready: it.State == string(fleet.Ready), Cordoned: it.Operator != nil || it.Rollout != nil,
			Reported: it.Reported[id], Holders: map[string]capacity.Mask{}, Version: it.BV, Adopted: it.Adopted,
			Registered: parseTime(it.CreatedAt)}
		for rid, e := range it.Entries {
			switch {
			case rid == id:
				ns.Entry, ns.EntryMoves = e.A, e.MV
			case e.A == fleet.ActionBind:
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
func (s *Fleet) Bind(ctx context.Context, t capacity.PoolResource, node int, id string, b capacity.NodeBinding, previous []string, seen capacity.NodeState) error {
	k := nodeKey(t.PoolID, t.Resource, node)
	upd := expression.Set(path("b", id), entryValue(b, fleet.ActionBind)).Add(expression.Name("bv"), expression.Value(1))
	if seen.Reported != "" {
		// Its last word on an earlier bind is no answer to this one (the
		// rep map exists then: a path into a missing map is invalid).
		upd = upd.Remove(path("rep", id))
	}
	conds := []expression.ConditionBuilder{expression.AttributeExists(expression.Name(schema.AttrPK)), atVersion(seen.Version)}
	if seen.Entry == "" {
		upd = upd.Add(expression.Name("nb"), expression.Value(1))
		conds = append(conds, expression.AttributeNotExists(path("b", id)), expression.Name("nb").LessThan(expression.Value(fleet.MaxBindings)))
	} else {
		conds = append(conds, path("b", id).AppendName(expression.Name("a")).Equal(expression.Value(fleet.ActionUnbind)),
			path("rep", id).Equal(expression.Value(fleet.BindUnbound)),
			path("b", id).AppendName(expression.Name("mv")).LessThan(expression.Value(b.Moves)))
	}
	for _, p := range previous {
		upd = upd.Set(path("b", p).AppendName(expression.Name("a")), expression.Value(fleet.ActionUnbind))
		conds = append(conds, expression.AttributeExists(path("b", p)))
	}
	return s.writeEntry(ctx, k, upd, all(conds), id, seen.Entry == "", func(e bindItem) bool { return e.A == fleet.ActionBind })
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
func (s *Fleet) writeEntry(ctx context.Context, k map[string]types.AttributeValue, upd expression.UpdateBuilder, c expression.ConditionBuilder,
	id string, fresh bool, done func(bindItem) bool) error {
	_, err := s.table().update(ctx, k, upd, &c, types.ReturnValueNone)
	if !isConditionFailed(err) {
		return err
	}
	var cur nodeItem
	ok, err := s.table().get(ctx, k, &cur)
	switch {
	case err != nil:
		return err
	case !ok:
		return nil // unregistered meanwhile: nothing to tell
	}
	if e, held := cur.Entries[id]; held && done(e) {
		return nil
	}
	if fresh && cur.NB >= fleet.MaxBindings {
		return capacity.ErrCalendarFull
	}
	return capacity.ErrStale
}

// Scrub implements capacity.NodeStore: one conditional UpdateItem that
// writes id's entry as an unbind where the node has none (and forgets its
// last word on id, as Bind does), moving the entries' version.
func (s *Fleet) Scrub(ctx context.Context, t capacity.PoolResource, node int, id string, b capacity.NodeBinding, seen capacity.NodeState) error {
	upd := expression.Set(path("b", id), entryValue(b, fleet.ActionUnbind)).
		Add(expression.Name("bv"), expression.Value(1)).Add(expression.Name("nb"), expression.Value(1))
	if seen.Reported != "" {
		upd = upd.Remove(path("rep", id))
	}
	c := all([]expression.ConditionBuilder{expression.AttributeExists(expression.Name(schema.AttrPK)),
		expression.AttributeNotExists(path("b", id)), expression.Name("nb").LessThan(expression.Value(fleet.MaxBindings))})
	// An entry there already, bind or unbind, is the node told: a bind
	// ends as an unbind.
	return s.writeEntry(ctx, nodeKey(t.PoolID, t.Resource, node), upd, c, id, true, func(bindItem) bool { return true })
}

// Unbind implements capacity.NodeStore: the entry turned into an unbind,
// or, with none, only the entries' version moved — either way a bind
// conditioned on the version read before fails.
func (s *Fleet) Unbind(ctx context.Context, t capacity.PoolResource, node int, id string) error {
	k := nodeKey(t.PoolID, t.Resource, node)
	e := path("b", id)
	// A fresh builder per write: an UpdateBuilder's copies share their
	// operations (Set on a copy adds to the original).
	bv := func() expression.UpdateBuilder { return expression.Add(expression.Name("bv"), expression.Value(1)) }
	for range 4 {
		c := expression.AttributeExists(e)
		_, err := s.table().update(ctx, k, bv().Set(e.AppendName(expression.Name("a")), expression.Value(fleet.ActionUnbind)), &c, types.ReturnValueNone)
		if !isConditionFailed(err) {
			return err
		}
		c = expression.And(expression.AttributeExists(expression.Name(schema.AttrPK)), expression.AttributeNotExists(e))
		_, err = s.table().update(ctx, k, bv(), &c, types.ReturnValueNone)
		if !isConditionFailed(err) {
			return err
		}
		var cur nodeItem
		if ok, err := s.table().get(ctx, k, &cur); err != nil {
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
func (s *Fleet) Ineligible(ctx context.Context, t capacity.PoolResource) (map[int]bool, error) {
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(poolPK(t.PoolID))).
		And(expression.Key(schema.AttrSK).BeginsWith(nodePrefix + t.Resource + "#"))
	proj := expression.NamesList(expression.Name("idx"), expression.Name("state"), expression.Name("oc"), expression.Name("rc"))
	out := map[int]bool{}
	err := queryEach(ctx, s.table(), kc, &proj, func(it nodeItem) error {
		if it.State != string(fleet.Ready) || it.Operator != nil || it.Rollout != nil {
			out[it.Index] = true
		}
		return nil
	})
	return out, err
}
