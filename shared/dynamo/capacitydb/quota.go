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

// The quota row, TENANT#<tenant> / QUOTA#<pool>#<resource>, holds max,
// used, free (= max − used, what a charge's condition reads), and two
// bounded maps of records:
//
//	q   reservation id → {k: "c"|"v", n: count, p: [node, mask, …]}
//	    a charge in flight ("c") or voided ("v": its draft was released and
//	    the count given back, the record kept until what the create wrote
//	    is undone)
//	cr  reservation id → count: a credit given, not yet forgotten
//
// A charge record lives from a create's charge until the reservation is
// placed and a later charge of the same process (or the reconciler: the
// row carries dueAt while it has records) forgets it — no write of the
// create's own — or until what a create wrote for a draft that ended
// unplaced is undone. `q` holds what is in flight, never the reservations
// a tenant holds, so the row does not grow with them. A charge refuses to
// add a record past capacity.MaxInFlight.
//
// Worst case: 64 charge records × (a 26-character id + k, n and a
// placement of InlinePlacement nodes, ≈ 150 B) + 64 credit records × ~40 B
// + ~400 B ≈ 12.5 KB. Typical: ~300 B.
func quotaSK(k capacity.QuotaKey) string { return "QUOTA#" + k.PoolID + "#" + k.Resource }

func quotaKey(k capacity.QuotaKey) map[string]types.AttributeValue {
	return dynamo.Key(dynamo.TenantPK(k.TenantID), quotaSK(k))
}

type quotaItem struct {
	PK        string                  `dynamodbav:"pk"`
	SK        string                  `dynamodbav:"sk"`
	Kind      string                  `dynamodbav:"kind"`
	TenantID  string                  `dynamodbav:"tenantId"`
	PoolID    string                  `dynamodbav:"poolId"`
	Resource  string                  `dynamodbav:"resource"`
	Max       int64                   `dynamodbav:"max"`
	Used      int64                   `dynamodbav:"used"`
	Free      int64                   `dynamodbav:"free"`
	InFlight  map[string]flightRecord `dynamodbav:"q"`
	Credits   map[string]int          `dynamodbav:"cr"`
	UpdatedAt string                  `dynamodbav:"updatedAt"`
	DueShard  string                  `dynamodbav:"dueShard,omitempty"`
	DueAt     string                  `dynamodbav:"dueAt,omitempty"`
}

// flightRecord is one entry of `q`.
type flightRecord struct {
	K string  `dynamodbav:"k"`
	N int     `dynamodbav:"n"`
	P []int64 `dynamodbav:"p,omitempty"` // node, mask, node, mask, …
}

const (
	recCharge = "c"
	recVoided = "v"
)

func placementOf(p []int64) capacity.Placement {
	var out capacity.Placement
	for i := 0; i+1 < len(p); i += 2 {
		out = append(out, capacity.NodeDevices{Node: int(p[i]), Mask: capacity.Mask(uint64(p[i+1]))})
	}
	return out
}

func flatten(p capacity.Placement) []int64 {
	out := make([]int64, 0, 2*len(p))
	for _, nd := range p {
		out = append(out, int64(nd.Node), int64(nd.Mask))
	}
	return out
}

func (rec flightRecord) charged() capacity.Charged {
	return capacity.Charged{Count: rec.N, Placement: placementOf(rec.P), Voided: rec.K == recVoided}
}

func (it quotaItem) row() capacity.QuotaRow {
	r := capacity.QuotaRow{Quota: api.Quota{TenantID: it.TenantID, PoolID: it.PoolID, Resource: it.Resource, Max: it.Max, Used: it.Used},
		Free: it.Free, Charging: map[string]capacity.Charged{}, Crediting: map[string]int{}}
	for id, rec := range it.InFlight {
		r.Charging[id] = rec.charged()
	}
	for id, n := range it.Credits {
		r.Crediting[id] = n
	}
	if it.DueAt != "" {
		r.Due = dynamo.ParseTime(it.DueAt)
	}
	return r
}

// newQuotaItem is a quota row holding max and used, nothing in flight.
func newQuotaItem(k capacity.QuotaKey, max, used int64) quotaItem {
	return quotaItem{PK: dynamo.TenantPK(k.TenantID), SK: quotaSK(k), Kind: dynamo.KindQuota, TenantID: k.TenantID, PoolID: k.PoolID,
		Resource: k.Resource, Max: max, Used: used, Free: max - used, InFlight: map[string]flightRecord{}, Credits: map[string]int{}}
}

// EnsureQuota implements capacity.PoolStore.
func (s *Store) EnsureQuota(ctx context.Context, k capacity.QuotaKey, max int64, now time.Time) error {
	it := newQuotaItem(k, max, 0)
	it.UpdatedAt = dynamo.FmtTime(now)
	err := s.put(ctx, it, dynamo.NotExists)
	return dynamo.WhenConditionFails(err, nil)
}

// SetQuotaMax implements capacity.PoolStore: max, and free = max − used,
// in one write (a row that is missing is created with used 0).
func (s *Store) SetQuotaMax(ctx context.Context, k capacity.QuotaKey, max int64, now time.Time) (api.Quota, error) {
	used := expression.Name("used").IfNotExists(expression.Value(0))
	upd := expression.Set(expression.Name("max"), expression.Value(max)).
		Set(expression.Name("used"), used).
		Set(expression.Name("free"), expression.Value(max).Minus(used)).
		Set(expression.Name("q"), expression.Name("q").IfNotExists(expression.Value(map[string]flightRecord{}))).
		Set(expression.Name("cr"), expression.Name("cr").IfNotExists(expression.Value(map[string]int{}))).
		Set(expression.Name("kind"), expression.Value(dynamo.KindQuota)).
		Set(expression.Name("tenantId"), expression.Value(k.TenantID)).
		Set(expression.Name("poolId"), expression.Value(k.PoolID)).
		Set(expression.Name("resource"), expression.Value(k.Resource)).
		Set(expression.Name("updatedAt"), expression.Value(dynamo.FmtTime(now)))
	av, err := s.update(ctx, quotaKey(k), upd, nil, types.ReturnValueAllNew)
	if err != nil {
		return api.Quota{}, err
	}
	var it quotaItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return api.Quota{}, err
	}
	return it.row().Quota, nil
}

// GetQuota implements capacity.QuotaStore.
func (s *Store) GetQuota(ctx context.Context, k capacity.QuotaKey) (api.Quota, error) {
	it, ok, err := s.quotaRow(ctx, k)
	if err != nil || !ok {
		return api.Quota{TenantID: k.TenantID, PoolID: k.PoolID, Resource: k.Resource}, err
	}
	return it.row().Quota, nil
}

// Row implements capacity.ChargeStore.
func (s *Store) Row(ctx context.Context, k capacity.QuotaKey) (capacity.QuotaRow, bool, error) {
	it, ok, err := s.quotaRow(ctx, k)
	if err != nil || !ok {
		return capacity.QuotaRow{}, ok, err
	}
	return it.row(), true, nil
}

func (s *Store) quotaRow(ctx context.Context, k capacity.QuotaKey) (quotaItem, bool, error) {
	var it quotaItem
	ok, err := s.get(ctx, quotaKey(k), &it)
	return it, ok, err
}

// ListQuotas implements capacity.QuotaStore.
func (s *Store) ListQuotas(ctx context.Context, tenant, poolID string, page paging.Page) ([]api.Quota, map[string]string, error) {
	prefix := "QUOTA#"
	if poolID != "" {
		prefix += poolID + "#"
	}
	var out []api.Quota
	next, err := s.queryPartition(ctx, tenant, prefix, page, func(av map[string]types.AttributeValue) (bool, error) {
		var it quotaItem
		if err := attributevalue.UnmarshalMap(av, &it); err != nil {
			return false, err
		}
		out = append(out, it.row().Quota)
		return true, nil
	})
	return out, next, err
}

func kindOf(id string) expression.NameBuilder { return dynamo.Path("q", id, "k") }

var rowExists = expression.AttributeExists(expression.Name(schema.AttrPK))

// Charge implements capacity.ChargeStore: one UpdateItem, no read first.
// Only a failed condition is classified, by one consistent read: the
// record is there (an earlier flow's charge, or voided), the quota does
// not fit, or the row is full of records in flight (ErrBusy); when the
// read shows none of these — the row changed in between — the charge is
// tried again, as long as ctx lasts (a lost race is not a full row). QUOTA_EXCEEDED is only ever answered from a read in which
// the count does not fit.
func (s *Store) Charge(ctx context.Context, k capacity.QuotaKey, id string, count int, p capacity.Placement, settle []string, due time.Time) (capacity.Charged, error) {
	n := expression.Value(count)
	rec := flightRecord{K: recCharge, N: count, P: flatten(p)}
	upd := expression.Set(expression.Name("used"), expression.Name("used").Plus(n)).
		Set(expression.Name("free"), expression.Name("free").Minus(n)).
		Set(dynamo.Path("q", id), expression.Value(rec)).
		Set(expression.Name(schema.AttrDueAt), expression.Name(schema.AttrDueAt).IfNotExists(expression.Value(dynamo.FmtTime(due)))).
		Set(expression.Name(schema.AttrDueSh), expression.Value(dynamo.DueShard(quotaSK(k)+k.TenantID)))
	for _, old := range settle {
		upd = upd.Remove(dynamo.Path("q", old))
	}
	c := dynamo.All([]expression.ConditionBuilder{expression.Name("free").GreaterThanEqual(n),
		expression.AttributeNotExists(dynamo.Path("q", id)), expression.Name("q").Size().LessThan(expression.Value(api.MaxInFlight))})
	for {
		_, err := s.update(ctx, quotaKey(k), upd, &c, types.ReturnValueNone)
		if err == nil {
			return capacity.Charged{Count: count, Placement: p, Fresh: true}, nil
		}
		if !dynamo.ConditionFailed(err) {
			return capacity.Charged{}, err
		}
		it, ok, err := s.quotaRow(ctx, k)
		switch {
		case err != nil:
			return capacity.Charged{}, err
		case !ok:
			return capacity.Charged{}, capacity.QuotaExceeded{Quota: api.Quota{TenantID: k.TenantID, PoolID: k.PoolID, Resource: k.Resource}}
		}
		if prev, held := it.InFlight[id]; held {
			// Charged by an earlier flow (or attempt) of the same reservation.
			return prev.charged(), nil
		}
		switch {
		case it.Free < int64(count):
			return capacity.Charged{}, capacity.QuotaExceeded{Quota: it.row().Quota}
		case len(it.InFlight) >= api.MaxInFlight:
			return capacity.Charged{}, capacity.ErrBusy
		}
		// The row moved between the write and the read (another charge,
		// refund or settle won): charge again, until the caller's deadline.
		if err := ctx.Err(); err != nil {
			return capacity.Charged{}, err
		}
	}
}

// Replace implements capacity.AdmissionStore.
func (s *Store) Replace(ctx context.Context, k capacity.QuotaKey, id string, p capacity.Placement) error {
	c := kindOf(id).Equal(expression.Value(recCharge))
	_, err := s.update(ctx, quotaKey(k), expression.Set(dynamo.Path("q", id, "p"), expression.Value(flatten(p))), &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, capacity.ErrStale)
}

// Settle implements capacity.ChargeStore: the records go in one write
// (removing one that is not there is no error), whatever they hold.
func (s *Store) Settle(ctx context.Context, k capacity.QuotaKey, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	upd := expression.Remove(dynamo.Path("q", ids[0]))
	for _, id := range ids[1:] {
		upd = upd.Remove(dynamo.Path("q", id))
	}
	_, err := s.update(ctx, quotaKey(k), upd, dynamo.Cond(rowExists), types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil) // no row, no records
}

// Pending implements capacity.FenceStore.
func (s *Store) Pending(ctx context.Context, k capacity.QuotaKey, id string) (capacity.Charged, bool, error) {
	it, ok, err := s.quotaRow(ctx, k)
	if err != nil || !ok {
		return capacity.Charged{}, false, err
	}
	rec, held := it.InFlight[id]
	if !held {
		return capacity.Charged{}, false, nil
	}
	return rec.charged(), true, nil
}

// Void implements capacity.FenceStore: the count back and the record
// marked in one write, conditional on the charge still being in flight.
func (s *Store) Void(ctx context.Context, k capacity.QuotaKey, id string, count int) error {
	n := expression.Value(count)
	upd := expression.Set(expression.Name("used"), expression.Name("used").Minus(n)).
		Set(expression.Name("free"), expression.Name("free").Plus(n)).
		Set(kindOf(id), expression.Value(recVoided))
	c := kindOf(id).Equal(expression.Value(recCharge)).And(dynamo.Path("q", id, "n").Equal(n))
	_, err := s.update(ctx, quotaKey(k), upd, &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil) // voided already, or refunded
}

// Refund implements capacity.ChargeStore: a charge in flight gives its
// count back as its record goes, in one write conditional on the record;
// a voided one (its count already back) only goes.
func (s *Store) Refund(ctx context.Context, k capacity.QuotaKey, id string, count int) error {
	n := expression.Value(count)
	upd := expression.Set(expression.Name("used"), expression.Name("used").Minus(n)).
		Set(expression.Name("free"), expression.Name("free").Plus(n)).
		Remove(dynamo.Path("q", id))
	c := kindOf(id).Equal(expression.Value(recCharge)).And(dynamo.Path("q", id, "n").Equal(n))
	_, err := s.update(ctx, quotaKey(k), upd, &c, types.ReturnValueNone)
	if !dynamo.ConditionFailed(err) {
		return err
	}
	c = kindOf(id).Equal(expression.Value(recVoided))
	_, err = s.update(ctx, quotaKey(k), expression.Remove(dynamo.Path("q", id)), &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil) // refunded already
}

// Credit implements capacity.FenceStore. It consumes a charge record the
// reservation's create left (a placed reservation's record is only
// bookkeeping); a credit record already there means done.
func (s *Store) Credit(ctx context.Context, k capacity.QuotaKey, id string, count int) error {
	n := expression.Value(count)
	upd := expression.Set(expression.Name("used"), expression.Name("used").Minus(n)).
		Set(expression.Name("free"), expression.Name("free").Plus(n)).
		Set(dynamo.Path("cr", id), n).
		Remove(dynamo.Path("q", id))
	c := expression.And(rowExists, expression.AttributeNotExists(dynamo.Path("cr", id)),
		expression.Name("cr").Size().LessThan(expression.Value(api.MaxInFlight)))
	_, err := s.update(ctx, quotaKey(k), upd, &c, types.ReturnValueNone)
	if dynamo.ConditionFailed(err) {
		it, ok, gerr := s.quotaRow(ctx, k)
		switch {
		case gerr != nil:
			return gerr
		case !ok:
			return errors.New("dynamo: credit of a quota row that does not exist")
		}
		if _, done := it.Credits[id]; done {
			return nil // credited by an earlier attempt
		}
		return capacity.ErrBusy // MaxInFlight credits not yet forgotten
	}
	return err
}

// CreditDone implements capacity.FenceStore.
func (s *Store) CreditDone(ctx context.Context, k capacity.QuotaKey, id string) error {
	c := expression.AttributeExists(dynamo.Path("cr", id))
	_, err := s.update(ctx, quotaKey(k), expression.Remove(dynamo.Path("cr", id)), &c, types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil)
}

// QuotaDue implements capacity.StepStore.
func (s *Store) QuotaDue(ctx context.Context, k capacity.QuotaKey, next time.Time, clear bool) error {
	if clear {
		c := expression.And(rowExists, expression.Name("q").Size().Equal(expression.Value(0)))
		_, err := s.update(ctx, quotaKey(k), expression.Remove(expression.Name(schema.AttrDueAt)).Remove(expression.Name(schema.AttrDueSh)),
			&c, types.ReturnValueNone)
		if !dynamo.ConditionFailed(err) {
			return err
		}
		// A record came since (or the row is gone): due again.
	}
	_, err := s.update(ctx, quotaKey(k), expression.Set(expression.Name(schema.AttrDueAt), expression.Value(dynamo.FmtTime(next))).
		Set(expression.Name(schema.AttrDueSh), expression.Value(dynamo.DueShard(quotaSK(k)+k.TenantID))), dynamo.Cond(rowExists), types.ReturnValueNone)
	return dynamo.WhenConditionFails(err, nil)
}
