package capacitydb

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
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
// far (at most capacity.MaxMoves) and `nu` (a node failure noted). A
// terminal one whose scrub on a node is not written yet lists those nodes
// in `scr` (at most the nodes of `dev` and `mvf`), and keeps its devices
// there until it is.
//
// Worst case: 1,024 device indexes × ~4 B (`dev`, or `plan` on a draft) +
// 10 events × ~60 B + the request's fields (ids ≤ 128 characters) and
// three list keys ≈ 6 KB, plus a move's 2 × 1,024 indexes and `bn` ≈ 15 KB,
// plus `scr`'s ≤ 2,048 node indexes ≈ 23 KB. Typical: ~900 B.

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
	Unscrubbed    []int       `dynamodbav:"scr,omitempty"`
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
	order := dynamo.FmtTime(r.CreatedAt) + "#" + r.ReservationID
	ssk = string(r.State) + "#" + order
	if listed(r.State) {
		lsk, psk = lskListed+order, r.PoolID+"#"+order
	}
	return lsk, ssk, psk
}

func toReservationItem(r capacity.Reservation) reservationItem {
	lsk, ssk, psk := listKeys(r)
	it := reservationItem{
		PK: dynamo.TenantPK(r.TenantID), SK: resSK(r.ReservationID), LSK: lsk, SSK: ssk, PSK: psk,
		Kind: dynamo.KindReservation, ReservationID: r.ReservationID, TenantID: r.TenantID, PoolID: r.PoolID, Resource: r.Resource,
		Count: r.Count, Topology: r.Topology, Start: dynamo.FmtTime(r.Window.Start), End: dynamo.FmtTime(r.Window.End), State: string(r.State),
		Reason: r.Reason, Devices: r.Devices, Plan: r.Plan, NodeSize: r.NodeSize, CreatedAt: dynamo.FmtTime(r.CreatedAt), UpdatedAt: dynamo.FmtTime(r.UpdatedAt),
		ReleasedBy: r.ReleasedBy, Credited: r.Credited, Request: r.Request, ClientToken: r.ClientToken,
		Principal: r.Principal, Invalid: r.Invalid,
		Bound: r.Bound, Move: r.Move, MoveToken: capacity.MoveToken(r.Move), MovedFrom: r.MovedFrom, Moves: r.Moves, NodeNoted: r.NodeNoted, Amended: r.Amended,
		Unscrubbed: r.Unscrubbed,
	}
	if it.Devices == nil {
		it.Devices = []int{}
	}
	it.History = make([]eventItem, len(r.History))
	for i, e := range r.History {
		it.History[i] = eventItem{State: string(e.State), At: dynamo.FmtTime(e.At), Reason: e.Reason, Rollout: e.RolloutID}
	}
	if !r.Lease.IsZero() {
		it.Lease = dynamo.FmtTime(r.Lease)
	}
	if !r.Due.IsZero() {
		it.DueShard, it.DueAt = dynamo.DueShard(r.ReservationID), dynamo.FmtTime(r.Due)
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
			Window:        api.Window{Start: dynamo.ParseTime(it.Start), End: dynamo.ParseTime(it.End)},
			Topology:      it.Topology,
			State:         api.ReservationState(it.State),
			Reason:        it.Reason,
			CreatedAt:     dynamo.ParseTime(it.CreatedAt),
			UpdatedAt:     dynamo.ParseTime(it.UpdatedAt),
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
		Unscrubbed:  it.Unscrubbed,
	}
	for i, e := range it.History {
		r.History[i] = api.Event{State: api.ReservationState(e.State), At: dynamo.ParseTime(e.At), Reason: e.Reason, RolloutID: e.Rollout}
	}
	if it.Lease != "" {
		r.Lease = dynamo.ParseTime(it.Lease)
	}
	if it.DueAt != "" {
		r.Due = dynamo.ParseTime(it.DueAt)
	}
	return r.WithIDs()
}

func resKey(r capacity.Reservation) map[string]types.AttributeValue {
	return dynamo.Key(dynamo.TenantPK(r.TenantID), resSK(r.ReservationID))
}

// PutDraft implements capacity.AdmissionStore.
func (s *Store) PutDraft(ctx context.Context, r capacity.Reservation) (capacity.Reservation, error) {
	err := s.put(ctx, toReservationItem(r), dynamo.NotExists)
	if dynamo.ConditionFailed(err) {
		stored, gerr := s.GetReservation(ctx, r.TenantID, r.ReservationID)
		if gerr != nil {
			return capacity.Reservation{}, gerr
		}
		return stored, capacity.ErrExists
	}
	return r, err
}

// GetReservation implements capacity.ReservationStore.
func (s *Store) GetReservation(ctx context.Context, tenant, id string) (capacity.Reservation, error) {
	return getOne(ctx, s, dynamo.Key(dynamo.TenantPK(tenant), resSK(id)), reservationItem.reservation)
}

// Transition implements capacity.FenceStore: one conditional
// UpdateItem that returns the item as it left it. It writes the devices
// only on the transition that places them, so a writer that read the
// reservation before its create placed it (a release of the draft) never
// overwrites what the create recorded.
func (s *Store) Transition(ctx context.Context, to capacity.Reservation, from api.ReservationState) (capacity.Reservation, error) {
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
		return capacity.Reservation{}, dynamo.WhenConditionFails(err, capacity.ErrStale)
	}
	var cur reservationItem
	if err := attributevalue.UnmarshalMap(av, &cur); err != nil {
		return capacity.Reservation{}, err
	}
	return cur.reservation(), nil
}

// Amend implements capacity.BindingStore: one conditional UpdateItem
// on the state, the move token (mvt) and the amend count (ag) as r read
// them.
func (s *Store) Amend(ctx context.Context, r, to capacity.Reservation) (capacity.Reservation, error) {
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
		return capacity.Reservation{}, dynamo.WhenConditionFails(err, capacity.ErrStale)
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

// Disrupt implements rollout.Calendar: one conditional UpdateItem
// appending the entry and the rollout to `dis` (at most maxDisruptions).
func (s *Store) Disrupt(ctx context.Context, tenant, id, rolloutID string, at time.Time) error {
	r, err := s.GetReservation(ctx, tenant, id)
	switch {
	case errors.Is(err, capacity.ErrNotFound):
		return nil
	case err != nil:
		return err
	case r.State.Terminal():
		return nil
	}
	ev := []eventItem{{State: string(r.State), At: dynamo.FmtTime(at), Reason: api.ReasonDisrupted, Rollout: rolloutID}}
	// The entry counts as an amend (ag): an Amend from a copy read before
	// it would write the history back without it, so that Amend is
	// refused and its writer reads again — no write replaces an entry.
	upd := expression.Set(expression.Name("hist"), expression.ListAppend(expression.Name("hist"), expression.Value(ev))).
		Set(expression.Name("dis"), expression.ListAppend(expression.IfNotExists(expression.Name("dis"), expression.Value([]string{})), expression.Value([]string{rolloutID}))).
		Add(expression.Name("ag"), expression.Value(1))
	c := expression.And(expression.Name("state").Equal(expression.Value(string(r.State))),
		expression.Or(expression.AttributeNotExists(expression.Name("dis")),
			expression.And(expression.Not(expression.Contains(expression.Name("dis"), rolloutID)),
				expression.Size(expression.Name("dis")).LessThan(expression.Value(maxDisruptions)))))
	_, err = s.update(ctx, resKey(r), upd, &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil) // recorded already, full, or its state moved (terminal: nothing to say)
}

// SetPlan implements capacity.AdmissionStore.
func (s *Store) SetPlan(ctx context.Context, r capacity.Reservation, p capacity.Placement, nodeSize int) error {
	c := expression.Name("state").Equal(expression.Value(string(api.Draft)))
	_, err := s.update(ctx, resKey(r), expression.Set(expression.Name("plan"), expression.Value(p.Devices(nodeSize))).
		Set(expression.Name("ns"), expression.Value(nodeSize)), &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, capacity.ErrStale)
}

// Reservations implements capacity.ChargeStore.
func (s *Store) Reservations(ctx context.Context, tenant string, ids []string) (map[string]capacity.Reservation, error) {
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = dynamo.Key(dynamo.TenantPK(tenant), resSK(id))
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

// TakeOver implements capacity.AdmissionStore.
func (s *Store) TakeOver(ctx context.Context, r capacity.Reservation, old, lease time.Time) error {
	c := expression.Name("state").Equal(expression.Value(string(api.Draft))).
		And(expression.Name("lease").Equal(expression.Value(dynamo.FmtTime(old))))
	_, err := s.update(ctx, resKey(r), expression.Set(expression.Name("lease"), expression.Value(dynamo.FmtTime(lease))), &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, capacity.ErrStale)
}

// SetUnscrubbed implements capacity.FenceStore: one conditional UpdateItem
// on the state r read (a terminal state: it never moves again).
func (s *Store) SetUnscrubbed(ctx context.Context, r capacity.Reservation, nodes []int) error {
	upd := expression.Remove(expression.Name("scr"))
	if len(nodes) > 0 {
		upd = expression.Set(expression.Name("scr"), expression.Value(nodes))
	}
	c := expression.Name("state").Equal(expression.Value(string(r.State)))
	_, err := s.update(ctx, resKey(r), upd, &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, capacity.ErrStale)
}

// MarkCredited implements capacity.FenceStore.
func (s *Store) MarkCredited(ctx context.Context, r capacity.Reservation) error {
	c := expression.AttributeExists(expression.Name(schema.AttrPK))
	_, err := s.update(ctx, resKey(r), expression.Set(expression.Name("credited"), expression.Value(true)), &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, capacity.ErrStale)
}

// ClaimDue implements capacity.ReservationStore and capacity.StepStore.
func (s *Store) ClaimDue(ctx context.Context, r capacity.Reservation, until time.Time) (capacity.Reservation, error) {
	c := expression.Name("state").Equal(expression.Value(string(r.State))).
		And(expression.Name(schema.AttrDueAt).Equal(expression.Value(dynamo.FmtTime(r.Due))))
	av, err := s.update(ctx, resKey(r), expression.Set(expression.Name(schema.AttrDueAt), expression.Value(dynamo.FmtTime(until))).
		Set(expression.Name(schema.AttrDueSh), expression.Value(dynamo.DueShard(r.ReservationID))), &c, types.ReturnValueAllNew)
	if dynamo.ConditionFailed(err) {
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

// ClearDue implements capacity.StepStore.
func (s *Store) ClearDue(ctx context.Context, r capacity.Reservation) error {
	c := expression.Name("state").Equal(expression.Value(string(r.State))).
		And(expression.Name(schema.AttrDueAt).Equal(expression.Value(dynamo.FmtTime(r.Due))))
	_, err := s.update(ctx, resKey(r),
		expression.Remove(expression.Name(schema.AttrDueAt)).Remove(expression.Name(schema.AttrDueSh)), &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, capacity.ErrStale)
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
func (s *Store) ListReservations(ctx context.Context, tenant string, f capacity.ListFilter, page paging.Page) ([]capacity.Reservation, map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = paging.DefaultLimit
	}
	r := dynamo.Range{PK: dynamo.TenantPK(tenant), Index: schema.IndexOrdered, Attr: schema.AttrLSK, Prefix: lskListed, SKPrefix: "RES#",
		Backward: true}
	switch {
	case f.State != "":
		r.Index, r.Attr, r.Prefix, r.KeysOnly = schema.IndexState, schema.AttrState, string(f.State)+"#", true
	case f.PoolID != "":
		r.Index, r.Attr, r.Prefix, r.KeysOnly = schema.IndexPool, schema.AttrPool, f.PoolID+"#", true
	}
	// A list of one state and one pool reads the state's entries and
	// checks the pool (bigger reads: the pool's rows are skipped).
	r.Filtered = f.State != "" && f.PoolID != ""
	var out []capacity.Reservation
	next, err := s.table().Page(ctx, r, limit, page.After, func(item map[string]types.AttributeValue) (bool, bool, error) {
		// A fresh item per row: unmarshalling into a reused one keeps the
		// fields a row lacks (reason, releasedBy) and shares its slices.
		var it reservationItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return false, false, err
		}
		if r.Filtered && it.PoolID != f.PoolID {
			return false, false, nil
		}
		out = append(out, it.reservation())
		return true, false, nil
	})
	return out, next, err
}
