package dynamo

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/paging"
)

// A reservation, TENANT#<tenant> / RES#<id>, lives under its tenant's
// partition (a get or list can never reach another tenant's rows). Its
// devices are kept as indexes (`dev`, set when it is placed) with the node
// size (`ns`): the ids the API shows are rendered from them; `plan` is, on
// a draft, a placement too large for the charge's record (never shown).
// `hist` is the timeline (one event per state entered: at most 5). Three
// keys order lists (see listKeys): lsk (`ordered`) and psk (`bypool`) for
// the states a plain list shows, ssk (`bystate`) for every state.
//
// On managed nodes (docs/fleet.md) it also carries `bn`, the nodes told to
// bind it, and while it moves off a failed node `mv`/`mvt` (the devices it
// moves onto) and `mvf` (those it left, until freed), with `mvn` moves so
// far (at most capacity.MaxMoves) and `nu` (a node failure noted).
//
// Worst case: 1,024 device indexes × ~4 B (`dev`, or `plan` on a draft) +
// 10 events × ~60 B + the request's fields (ids ≤ 128 characters) and
// three list keys ≈ 6 KB, plus a move's 2 × 1,024 indexes and `bn` ≈ 15 KB.
// Typical: ~900 B.

func resSK(id string) string { return "RES#" + id }

type eventItem struct {
	State   string `dynamodbav:"s"`
	At      string `dynamodbav:"at"`
	Reason  string `dynamodbav:"r,omitempty"`
	Rollout string `dynamodbav:"rid,omitempty"`
}

type reservationItem struct {
	PK            string      `dynamodbav:"pk"`
	SK            string      `dynamodbav:"sk"`
	LSK           string      `dynamodbav:"lsk,omitempty"`
	SSK           string      `dynamodbav:"ssk"`
	PSK           string      `dynamodbav:"psk,omitempty"`
	Kind          string      `dynamodbav:"kind"`
	ReservationID string      `dynamodbav:"reservationId"`
	TenantID      string      `dynamodbav:"tenantId"`
	PoolID        string      `dynamodbav:"poolId"`
	Resource      string      `dynamodbav:"resource"`
	Count         int         `dynamodbav:"count"`
	Topology      string      `dynamodbav:"topology"`
	Start         string      `dynamodbav:"start"`
	End           string      `dynamodbav:"end"`
	State         string      `dynamodbav:"state"`
	Reason        string      `dynamodbav:"reason,omitempty"`
	Devices       []int       `dynamodbav:"dev"`
	Plan          []int       `dynamodbav:"plan,omitempty"`
	NodeSize      int         `dynamodbav:"ns,omitempty"`
	History       []eventItem `dynamodbav:"hist"`
	CreatedAt     string      `dynamodbav:"createdAt"`
	UpdatedAt     string      `dynamodbav:"updatedAt"`
	ReleasedBy    string      `dynamodbav:"releasedBy,omitempty"`
	Credited      bool        `dynamodbav:"credited,omitempty"`
	Bound         []int       `dynamodbav:"bn,omitempty"`
	Move          []int       `dynamodbav:"mv,omitempty"`
	MoveToken     string      `dynamodbav:"mvt,omitempty"`
	MovedFrom     []int       `dynamodbav:"mvf,omitempty"`
	Moves         int         `dynamodbav:"mvn,omitempty"`
	NodeNoted     bool        `dynamodbav:"nu,omitempty"`
	Amended       int64       `dynamodbav:"ag,omitempty"`
	Lease         string      `dynamodbav:"lease,omitempty"`
	Request       string      `dynamodbav:"request"`
	ClientToken   string      `dynamodbav:"clientToken,omitempty"`
	Principal     string      `dynamodbav:"principal,omitempty"`
	Invalid       string      `dynamodbav:"invalid,omitempty"`
	DueShard      string      `dynamodbav:"dueShard,omitempty"`
	DueAt         string      `dynamodbav:"dueAt,omitempty"`
	ExpiresAt     int64       `dynamodbav:"expiresAt,omitempty"`
}

// Reservations are ordered for lists by three keys, each
// <prefix><createdAt>#<id>: lsk = RES#… (all pools) and psk = <pool>#… for
// the states a plain list shows — draft, placed, binding, active,
// released — and ssk = <state>#… for every state. Denied, rejected and
// expired reservations have no lsk or psk: a caller without a grant can
// make denied ones in any tenant's partition, and failed creates would
// fill a tenant's list, so they are listed only when their state is asked
// for (docs/reference/reservations.md), and a state-filtered list reads only that state.
const lskListed = "RES#"

// listed reports whether plain lists show a reservation in state st.
func listed(st api.ReservationState) bool {
	return st != api.Denied && st != api.Rejected && st != api.Expired
}

// listKeys are a reservation's lsk, ssk and psk ("" for none).
func listKeys(r capacity.Reservation) (lsk, ssk, psk string) {
	order := fmtTime(r.CreatedAt) + "#" + r.ReservationID
	ssk = string(r.State) + "#" + order
	if listed(r.State) {
		lsk, psk = lskListed+order, r.PoolID+"#"+order
	}
	return lsk, ssk, psk
}

func toReservationItem(r capacity.Reservation) reservationItem {
	lsk, ssk, psk := listKeys(r)
	it := reservationItem{
		PK: tenantPK(r.TenantID), SK: resSK(r.ReservationID), LSK: lsk, SSK: ssk, PSK: psk,
		Kind: kindReservation, ReservationID: r.ReservationID, TenantID: r.TenantID, PoolID: r.PoolID, Resource: r.Resource,
		Count: r.Count, Topology: r.Topology, Start: fmtTime(r.Window.Start), End: fmtTime(r.Window.End), State: string(r.State),
		Reason: r.Reason, Devices: r.Devices, Plan: r.Plan, NodeSize: r.NodeSize, CreatedAt: fmtTime(r.CreatedAt), UpdatedAt: fmtTime(r.UpdatedAt),
		ReleasedBy: r.ReleasedBy, Credited: r.Credited, Request: r.Request, ClientToken: r.ClientToken,
		Principal: r.Principal, Invalid: r.Invalid,
		Bound: r.Bound, Move: r.Move, MoveToken: capacity.MoveToken(r.Move), MovedFrom: r.MovedFrom, Moves: r.Moves, NodeNoted: r.NodeNoted, Amended: r.Amended,
	}
	if it.Devices == nil {
		it.Devices = []int{}
	}
	it.History = make([]eventItem, len(r.History))
	for i, e := range r.History {
		it.History[i] = eventItem{State: string(e.State), At: fmtTime(e.At), Reason: e.Reason, Rollout: e.RolloutID}
	}
	if !r.Lease.IsZero() {
		it.Lease = fmtTime(r.Lease)
	}
	if !r.Due.IsZero() {
		it.DueShard, it.DueAt = dueShard(r.ReservationID), fmtTime(r.Due)
	}
	if e := r.ExpiresAt(); !e.IsZero() {
		it.ExpiresAt = e.Unix()
	}
	return it
}

func (it reservationItem) reservation() capacity.Reservation {
	r := capacity.Reservation{
		Reservation: api.Reservation{
			ReservationID: it.ReservationID,
			TenantID:      it.TenantID,
			PoolID:        it.PoolID,
			Resource:      it.Resource,
			Count:         it.Count,
			Window:        api.Window{Start: parseTime(it.Start), End: parseTime(it.End)},
			Topology:      it.Topology,
			State:         api.ReservationState(it.State),
			Reason:        it.Reason,
			CreatedAt:     parseTime(it.CreatedAt),
			UpdatedAt:     parseTime(it.UpdatedAt),
			ReleasedBy:    it.ReleasedBy,
			History:       make([]api.Event, len(it.History)),
		},
		Devices:     it.Devices,
		Plan:        it.Plan,
		NodeSize:    it.NodeSize,
		Credited:    it.Credited,
		Request:     it.Request,
		ClientToken: it.ClientToken,
		Principal:   it.Principal,
		Invalid:     it.Invalid,
		Bound:       it.Bound,
		Move:        it.Move,
		MovedFrom:   it.MovedFrom,
		Moves:       it.Moves,
		NodeNoted:   it.NodeNoted,
		Amended:     it.Amended,
	}
	for i, e := range it.History {
		r.History[i] = api.Event{State: api.ReservationState(e.State), At: parseTime(e.At), Reason: e.Reason, RolloutID: e.Rollout}
	}
	if it.Lease != "" {
		r.Lease = parseTime(it.Lease)
	}
	if it.DueAt != "" {
		r.Due = parseTime(it.DueAt)
	}
	return r.WithIDs()
}

func resKey(r capacity.Reservation) map[string]types.AttributeValue {
	return key(tenantPK(r.TenantID), resSK(r.ReservationID))
}

// PutDraft implements capacity.ReservationStore.
func (s *Capacity) PutDraft(ctx context.Context, r capacity.Reservation) (capacity.Reservation, error) {
	err := s.put(ctx, toReservationItem(r), notExists)
	if isConditionFailed(err) {
		stored, gerr := s.GetReservation(ctx, r.TenantID, r.ReservationID)
		if gerr != nil {
			return capacity.Reservation{}, gerr
		}
		return stored, capacity.ErrExists
	}
	return r, err
}

// GetReservation implements capacity.ReservationStore.
func (s *Capacity) GetReservation(ctx context.Context, tenant, id string) (capacity.Reservation, error) {
	return getOne(ctx, s, key(tenantPK(tenant), resSK(id)), reservationItem.reservation)
}

// Transition implements capacity.ReservationStore: one conditional
// UpdateItem that returns the item as it left it. It writes the devices
// only on the transition that places them, so a writer that read the
// reservation before its create placed it (a release of the draft) never
// overwrites what the create recorded.
func (s *Capacity) Transition(ctx context.Context, to capacity.Reservation, from api.ReservationState) (capacity.Reservation, error) {
	it := toReservationItem(to)
	upd := expression.Set(expression.Name("state"), expression.Value(it.State)).
		Set(expression.Name("updatedAt"), expression.Value(it.UpdatedAt)).
		Set(expression.Name(schema.AttrState), expression.Value(it.SSK))
	// The event of the state entered is appended: what a binding step
	// wrote into the history meanwhile (Amend) is kept.
	if n := len(it.History); n > 0 {
		upd = upd.Set(expression.Name("hist"), expression.ListAppend(expression.Name("hist"), expression.Value(it.History[n-1:])))
	}
	if to.State == api.Placed {
		upd = upd.Set(expression.Name("dev"), expression.Value(it.Devices)).Set(expression.Name("ns"), expression.Value(it.NodeSize))
	}
	for name, v := range map[string]string{"reason": it.Reason, "releasedBy": it.ReleasedBy, "invalid": it.Invalid,
		schema.AttrDueAt: it.DueAt, schema.AttrDueSh: it.DueShard, schema.AttrLSK: it.LSK, schema.AttrPool: it.PSK} {
		if v != "" {
			upd = upd.Set(expression.Name(name), expression.Value(v))
		} else {
			upd = upd.Remove(expression.Name(name))
		}
	}
	if it.ExpiresAt != 0 {
		upd = upd.Set(expression.Name(schema.AttrTTL), expression.Value(it.ExpiresAt))
	}
	c := expression.Name("state").Equal(expression.Value(string(from)))
	av, err := s.update(ctx, resKey(to), upd, &c, types.ReturnValueAllNew)
	if err != nil {
		return capacity.Reservation{}, whenConditionFails(err, capacity.ErrStale)
	}
	var cur reservationItem
	if err := attributevalue.UnmarshalMap(av, &cur); err != nil {
		return capacity.Reservation{}, err
	}
	return cur.reservation(), nil
}

// Amend implements capacity.ReservationStore: one conditional UpdateItem
// on the state, the move token (mvt) and the amend count (ag) as r read
// them.
func (s *Capacity) Amend(ctx context.Context, r, to capacity.Reservation) (capacity.Reservation, error) {
	it := toReservationItem(to)
	upd := expression.Set(expression.Name("hist"), expression.Value(it.History)).
		Set(expression.Name("dev"), expression.Value(it.Devices)).
		Set(expression.Name("mvn"), expression.Value(it.Moves)).
		Set(expression.Name("nu"), expression.Value(it.NodeNoted))
	for name, v := range map[string][]int{"bn": it.Bound, "mv": it.Move, "mvf": it.MovedFrom} {
		if len(v) > 0 {
			upd = upd.Set(expression.Name(name), expression.Value(v))
		} else {
			upd = upd.Remove(expression.Name(name))
		}
	}
	if it.MoveToken != "" {
		upd = upd.Set(expression.Name("mvt"), expression.Value(it.MoveToken))
	} else {
		upd = upd.Remove(expression.Name("mvt"))
	}
	// ag counts the amends: one made from an older copy (another writer
	// amended since it read) is refused, whatever it would overwrite — the
	// nodes told to bind it above all (bn).
	ag := expression.Name("ag")
	upd = upd.Set(ag, expression.Value(r.Amended+1))
	c := expression.Name("state").Equal(expression.Value(string(r.State)))
	if r.Amended > 0 {
		c = c.And(ag.Equal(expression.Value(r.Amended)))
	} else {
		c = c.And(expression.AttributeNotExists(ag))
	}
	if tok := capacity.MoveToken(r.Move); tok != "" {
		c = c.And(expression.Name("mvt").Equal(expression.Value(tok)))
	} else {
		c = c.And(expression.AttributeNotExists(expression.Name("mvt")))
	}
	av, err := s.update(ctx, resKey(r), upd, &c, types.ReturnValueAllNew)
	if err != nil {
		return capacity.Reservation{}, whenConditionFails(err, capacity.ErrStale)
	}
	var cur reservationItem
	if err := attributevalue.UnmarshalMap(av, &cur); err != nil {
		return capacity.Reservation{}, err
	}
	return cur.reservation(), nil
}

// maxDisruptions bounds the disrupted entries of one reservation's
// history (and so its size): later rollouts disrupt it unrecorded.
const maxDisruptions = 4

// Disrupt implements capacity.ReservationStore: one conditional UpdateItem
// appending the entry and the rollout to `dis` (at most maxDisruptions).
func (s *Capacity) Disrupt(ctx context.Context, tenant, id, rolloutID string, at time.Time) error {
	r, err := s.GetReservation(ctx, tenant, id)
	switch {
	case errors.Is(err, capacity.ErrNotFound):
		return nil
	case err != nil:
		return err
	case r.State.Terminal():
		return nil
	}
	ev := []eventItem{{State: string(r.State), At: fmtTime(at), Reason: api.ReasonDisrupted, Rollout: rolloutID}}
	upd := expression.Set(expression.Name("hist"), expression.ListAppend(expression.Name("hist"), expression.Value(ev))).
		Set(expression.Name("dis"), expression.ListAppend(expression.IfNotExists(expression.Name("dis"), expression.Value([]string{})), expression.Value([]string{rolloutID})))
	c := expression.And(expression.Name("state").Equal(expression.Value(string(r.State))),
		expression.Or(expression.AttributeNotExists(expression.Name("dis")),
			expression.And(expression.Not(expression.Contains(expression.Name("dis"), rolloutID)),
				expression.Size(expression.Name("dis")).LessThan(expression.Value(maxDisruptions)))))
	_, err = s.update(ctx, resKey(r), upd, &c, types.ReturnValueNone)
	return whenConditionFails(err, nil) // recorded already, full, or its state moved (terminal: nothing to say)
}

// SetPlan implements capacity.ReservationStore.
func (s *Capacity) SetPlan(ctx context.Context, r capacity.Reservation, p capacity.Placement, nodeSize int) error {
	c := expression.Name("state").Equal(expression.Value(string(api.Draft)))
	_, err := s.update(ctx, resKey(r), expression.Set(expression.Name("plan"), expression.Value(p.Devices(nodeSize))).
		Set(expression.Name("ns"), expression.Value(nodeSize)), &c, types.ReturnValueNone)
	return whenConditionFails(err, capacity.ErrStale)
}

// Reservations implements capacity.ReservationStore.
func (s *Capacity) Reservations(ctx context.Context, tenant string, ids []string) (map[string]capacity.Reservation, error) {
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = key(tenantPK(tenant), resSK(id))
	}
	out := make(map[string]capacity.Reservation, len(ids))
	err := s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		var it reservationItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return err
		}
		out[it.ReservationID] = it.reservation()
		return nil
	})
	return out, err
}

// TakeOver implements capacity.ReservationStore.
func (s *Capacity) TakeOver(ctx context.Context, r capacity.Reservation, old, lease time.Time) error {
	c := expression.Name("state").Equal(expression.Value(string(api.Draft))).
		And(expression.Name("lease").Equal(expression.Value(fmtTime(old))))
	_, err := s.update(ctx, resKey(r), expression.Set(expression.Name("lease"), expression.Value(fmtTime(lease))), &c, types.ReturnValueNone)
	return whenConditionFails(err, capacity.ErrStale)
}

// MarkCredited implements capacity.ReservationStore.
func (s *Capacity) MarkCredited(ctx context.Context, r capacity.Reservation) error {
	c := expression.AttributeExists(expression.Name(schema.AttrPK))
	_, err := s.update(ctx, resKey(r), expression.Set(expression.Name("credited"), expression.Value(true)), &c, types.ReturnValueNone)
	return whenConditionFails(err, capacity.ErrStale)
}

// ClaimDue implements capacity.ReservationStore.
func (s *Capacity) ClaimDue(ctx context.Context, r capacity.Reservation, until time.Time) (capacity.Reservation, error) {
	c := expression.Name("state").Equal(expression.Value(string(r.State))).
		And(expression.Name(schema.AttrDueAt).Equal(expression.Value(fmtTime(r.Due))))
	av, err := s.update(ctx, resKey(r), expression.Set(expression.Name(schema.AttrDueAt), expression.Value(fmtTime(until))).
		Set(expression.Name(schema.AttrDueSh), expression.Value(dueShard(r.ReservationID))), &c, types.ReturnValueAllNew)
	if isConditionFailed(err) {
		if _, gerr := s.GetReservation(ctx, r.TenantID, r.ReservationID); gerr != nil {
			return capacity.Reservation{}, gerr
		}
		return capacity.Reservation{}, capacity.ErrStale
	}
	if err != nil {
		return capacity.Reservation{}, err
	}
	var it reservationItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return capacity.Reservation{}, err
	}
	return it.reservation(), nil
}

// ClearDue implements capacity.ReservationStore.
func (s *Capacity) ClearDue(ctx context.Context, r capacity.Reservation) error {
	c := expression.Name("state").Equal(expression.Value(string(r.State))).
		And(expression.Name(schema.AttrDueAt).Equal(expression.Value(fmtTime(r.Due))))
	_, err := s.update(ctx, resKey(r),
		expression.Remove(expression.Name(schema.AttrDueAt)).Remove(expression.Name(schema.AttrDueSh)), &c, types.ReturnValueNone)
	return whenConditionFails(err, capacity.ErrStale)
}

// ListReservations implements capacity.ReservationStore: a Query of the
// tenant's partition, newest first, through the index that holds exactly
// what is asked for — `bystate` for a state (the pool, when both are given,
// is checked on the items read: a pool and a state read that state's
// reservations only), `bypool` for a pool, `ordered` (which projects the
// items) for neither. The keys-only indexes are read for their keys, then
// the page's items with consistent BatchGetItems (what DynamoDB would
// charge to fetch them through the index, without the fetch: dynalite
// fails on it while the items change). The cursor is the last returned
// item's keys.
func (s *Capacity) ListReservations(ctx context.Context, tenant string, f capacity.ListFilter, page paging.Page) ([]capacity.Reservation, map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = paging.DefaultLimit
	}
	pk := tenantPK(tenant)
	index, attr, prefix := schema.IndexOrdered, schema.AttrLSK, lskListed
	switch {
	case f.State != "":
		index, attr, prefix = schema.IndexState, schema.AttrState, string(f.State)+"#"
	case f.PoolID != "":
		index, attr, prefix = schema.IndexPool, schema.AttrPool, f.PoolID+"#"
	}
	keysOnly := index != schema.IndexOrdered
	e, err := expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(pk)).And(expression.Key(attr).BeginsWith(prefix))).Build()
	if err != nil {
		return nil, nil, err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(index),
		KeyConditionExpression: e.KeyCondition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ScanIndexForward: aws.Bool(false), ConsistentRead: aws.Bool(true)}
	if sk, ik := page.After["sk"], page.After["ik"]; sk != "" || ik != "" {
		if !strings.HasPrefix(sk, "RES#") || !strings.HasPrefix(ik, prefix) {
			return nil, nil, errBadCursor
		}
		in.ExclusiveStartKey = key(pk, sk)
		in.ExclusiveStartKey[attr] = &types.AttributeValueMemberS{Value: ik}
	}
	filtered := f.State != "" && f.PoolID != ""
	var out []capacity.Reservation
	var lastSK, lastIK string
	next := func() map[string]string { return map[string]string{"sk": lastSK, "ik": lastIK} }
	for {
		// One more than needed: a full last page then carries no cursor.
		// A filtered query reads bigger pages (the pool is checked after).
		want := limit - len(out) + 1
		if filtered {
			want = min(100, max(want, 25))
		}
		in.Limit = aws.Int32(int32(want))
		res, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		items := res.Items
		if keysOnly {
			if items, err = s.fetch(ctx, items); err != nil {
				return nil, nil, err
			}
		}
		for _, item := range items {
			if len(out) == limit {
				return out, next(), nil // a further match exists
			}
			// A fresh item per row: unmarshalling into a reused one keeps the
			// fields a row lacks (reason, releasedBy) and shares its slices.
			var it reservationItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return nil, nil, err
			}
			if filtered && it.PoolID != f.PoolID {
				continue
			}
			lastSK = it.SK
			switch attr {
			case schema.AttrState:
				lastIK = it.SSK
			case schema.AttrPool:
				lastIK = it.PSK
			default:
				lastIK = it.LSK
			}
			out = append(out, it.reservation())
		}
		if res.LastEvaluatedKey == nil {
			return out, nil, nil
		}
		if len(out) == limit {
			return out, next(), nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// fetch reads the items of index entries, in the entries' order; an item
// gone or moved out of the index since is left out.
func (s *Capacity) fetch(ctx context.Context, entries []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	keys := make([]map[string]types.AttributeValue, len(entries))
	for i, e := range entries {
		keys[i] = map[string]types.AttributeValue{schema.AttrPK: e[schema.AttrPK], schema.AttrSK: e[schema.AttrSK]}
	}
	got := make(map[[2]string]map[string]types.AttributeValue, len(keys))
	if err := s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		got[itemKey(item)] = item
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]map[string]types.AttributeValue, 0, len(entries))
	for _, e := range entries {
		if item, ok := got[itemKey(e)]; ok && sameIndexKey(e, item) {
			out = append(out, item)
		}
	}
	return out, nil
}

// sameIndexKey reports whether an item still carries an index entry's
// sort key (it has not moved in the index since the entry was read).
func sameIndexKey(entry, item map[string]types.AttributeValue) bool {
	for _, attr := range []string{schema.AttrState, schema.AttrPool} {
		if ev, ok := entry[attr].(*types.AttributeValueMemberS); ok {
			iv, ok := item[attr].(*types.AttributeValueMemberS)
			return ok && iv.Value == ev.Value
		}
	}
	return true
}
