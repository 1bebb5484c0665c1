package dynamo

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// Capacity is the DynamoDB store of the capacity module (docs/capacity.md):
//
//	POOL#<poolId>     #POOL                 the pool (global id claim); due until complete
//	POOL#<poolId>     CAL#<resource>        calendar: version, allocs {reservationId: {t,d,s,e}}
//	TENANT#<tenant>   POOL#<poolId>         the tenant's view of a pool it owns or was offered
//	TENANT#<tenant>   QUOTA#<pool>#<res>    quota row: max, used, free, holds {reservationId: count}
//	TENANT#<tenant>   RES#<id>              reservation; lsk RES#<createdAt>#<id> orders lists
//
// Every write is a single-item conditional write; nothing reads before a
// charge or a credit.
type Capacity struct {
	DB    *dynamodb.Client
	Table string
}

var _ capacity.Store = (*Capacity)(nil)
var _ capacity.DueStore = (*Capacity)(nil)
var _ capacity.SnapshotReader = (*Capacity)(nil)

const (
	kindPool        = "pool"
	kindPoolView    = "poolView"
	kindCalendar    = "calendar"
	kindQuota       = "quota"
	kindReservation = "reservation"

	skPool = "#POOL"
	// A list page of pools stops early past this many devices, so a
	// response stays far below Lambda's 6 MB payload limit.
	poolPageDevices = 40_000
)

// timeFormat is fixed-width UTC with nanoseconds: lexical order is time order.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

func fmtTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t.UTC()
}

func poolPK(id string) string            { return "POOL#" + id }
func tenantPK(t string) string           { return "TENANT#" + t }
func calSK(resource string) string       { return "CAL#" + resource }
func poolViewSK(id string) string        { return "POOL#" + id }
func resSK(id string) string             { return "RES#" + id }
func quotaSK(k capacity.QuotaKey) string { return "QUOTA#" + k.PoolID + "#" + k.Resource }

// dueShard spreads due items over schema.DueShards partitions of the due index.
func dueShard(id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return strconv.Itoa(int(h.Sum32() % schema.DueShards))
}

// ---- items ----

type poolItem struct {
	PK            string         `dynamodbav:"pk"`
	SK            string         `dynamodbav:"sk"`
	Kind          string         `dynamodbav:"kind"`
	PoolID        string         `dynamodbav:"poolId"`
	OwnerTenantID string         `dynamodbav:"ownerTenantId"`
	Resources     map[string]int `dynamodbav:"resources"`
	CreatedAt     string         `dynamodbav:"createdAt"`
	DueShard      string         `dynamodbav:"dueShard,omitempty"`
	DueAt         string         `dynamodbav:"dueAt,omitempty"`
}

func (it poolItem) pool() capacity.Pool {
	return capacity.Pool{PoolID: it.PoolID, OwnerTenantID: it.OwnerTenantID, Resources: it.Resources, CreatedAt: parseTime(it.CreatedAt)}
}

func newPoolItem(pk, sk, kind string, p capacity.Pool) poolItem {
	return poolItem{PK: pk, SK: sk, Kind: kind, PoolID: p.PoolID, OwnerTenantID: p.OwnerTenantID,
		Resources: p.Resources, CreatedAt: fmtTime(p.CreatedAt)}
}

type allocItem struct {
	T string `dynamodbav:"t"`
	D []int  `dynamodbav:"d"`
	S int64  `dynamodbav:"s"`
	E int64  `dynamodbav:"e"`
}

type calendarItem struct {
	PK       string               `dynamodbav:"pk"`
	SK       string               `dynamodbav:"sk"`
	Kind     string               `dynamodbav:"kind"`
	PoolID   string               `dynamodbav:"poolId"`
	Resource string               `dynamodbav:"resource"`
	Version  int64                `dynamodbav:"version"`
	Allocs   map[string]allocItem `dynamodbav:"allocs"`
}

func (it calendarItem) calendar() capacity.Calendar {
	c := capacity.Calendar{PoolID: it.PoolID, Resource: it.Resource, Version: it.Version, Allocs: make(map[string]capacity.Alloc, len(it.Allocs))}
	for id, a := range it.Allocs {
		c.Allocs[id] = capacity.Alloc{TenantID: a.T, Devices: a.D,
			Window: capacity.Window{Start: time.Unix(0, a.S).UTC(), End: time.Unix(0, a.E).UTC()}}
	}
	return c
}

func toAllocItem(a capacity.Alloc) allocItem {
	return allocItem{T: a.TenantID, D: a.Devices, S: a.Window.Start.UnixNano(), E: a.Window.End.UnixNano()}
}

type quotaItem struct {
	PK        string           `dynamodbav:"pk"`
	SK        string           `dynamodbav:"sk"`
	Kind      string           `dynamodbav:"kind"`
	TenantID  string           `dynamodbav:"tenantId"`
	PoolID    string           `dynamodbav:"poolId"`
	Resource  string           `dynamodbav:"resource"`
	Max       int64            `dynamodbav:"max"`
	Used      int64            `dynamodbav:"used"`
	Free      int64            `dynamodbav:"free"`
	Holds     map[string]int64 `dynamodbav:"holds"`
	UpdatedAt string           `dynamodbav:"updatedAt"`
}

func (it quotaItem) row() capacity.QuotaRow {
	return capacity.QuotaRow{Quota: capacity.Quota{TenantID: it.TenantID, PoolID: it.PoolID, Resource: it.Resource, Max: it.Max, Used: it.Used},
		Free: it.Free, Holds: it.Holds}
}

type reservationItem struct {
	PK            string   `dynamodbav:"pk"`
	SK            string   `dynamodbav:"sk"`
	LSK           string   `dynamodbav:"lsk"`
	Kind          string   `dynamodbav:"kind"`
	ReservationID string   `dynamodbav:"reservationId"`
	TenantID      string   `dynamodbav:"tenantId"`
	PoolID        string   `dynamodbav:"poolId"`
	Resource      string   `dynamodbav:"resource"`
	Count         int      `dynamodbav:"count"`
	Start         string   `dynamodbav:"start"`
	End           string   `dynamodbav:"end"`
	State         string   `dynamodbav:"state"`
	Reason        string   `dynamodbav:"reason,omitempty"`
	DeviceIDs     []string `dynamodbav:"deviceIds"`
	CreatedAt     string   `dynamodbav:"createdAt"`
	UpdatedAt     string   `dynamodbav:"updatedAt"`
	ReleasedBy    string   `dynamodbav:"releasedBy,omitempty"`
	Request       string   `dynamodbav:"request"`
	ClientToken   string   `dynamodbav:"clientToken,omitempty"`
	Principal     string   `dynamodbav:"principal,omitempty"`
	Invalid       string   `dynamodbav:"invalid,omitempty"`
	DueShard      string   `dynamodbav:"dueShard,omitempty"`
	DueAt         string   `dynamodbav:"dueAt,omitempty"`
	ExpiresAt     int64    `dynamodbav:"expiresAt,omitempty"`
}

// Reservations are ordered for lists by lsk = <prefix><createdAt>#<id>. A
// denied one moves to its own prefix: a caller without a grant can make
// them in any tenant's partition, so plain lists never read them; they are
// listed only when state "denied" is asked for (SPEC §9).
const (
	lskListed = "RES#"
	lskDenied = "DENIED#"
)

func reservationLSK(r capacity.Reservation) string {
	prefix := lskListed
	if r.State == capacity.Denied {
		prefix = lskDenied
	}
	return prefix + fmtTime(r.CreatedAt) + "#" + r.ReservationID
}

func toReservationItem(r capacity.Reservation) reservationItem {
	it := reservationItem{
		PK: tenantPK(r.TenantID), SK: resSK(r.ReservationID), LSK: reservationLSK(r),
		Kind: kindReservation, ReservationID: r.ReservationID, TenantID: r.TenantID, PoolID: r.PoolID, Resource: r.Resource,
		Count: r.Count, Start: fmtTime(r.Window.Start), End: fmtTime(r.Window.End), State: string(r.State), Reason: r.Reason,
		DeviceIDs: r.DeviceIDs, CreatedAt: fmtTime(r.CreatedAt), UpdatedAt: fmtTime(r.UpdatedAt), ReleasedBy: r.ReleasedBy,
		Request: r.Request, ClientToken: r.ClientToken, Principal: r.Principal, Invalid: r.Invalid,
	}
	if it.DeviceIDs == nil {
		it.DeviceIDs = []string{}
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
		ReservationID: it.ReservationID, TenantID: it.TenantID, PoolID: it.PoolID, Resource: it.Resource, Count: it.Count,
		Window: capacity.Window{Start: parseTime(it.Start), End: parseTime(it.End)}, State: capacity.State(it.State),
		Reason: it.Reason, DeviceIDs: it.DeviceIDs, CreatedAt: parseTime(it.CreatedAt), UpdatedAt: parseTime(it.UpdatedAt),
		ReleasedBy: it.ReleasedBy, Request: it.Request, ClientToken: it.ClientToken, Principal: it.Principal, Invalid: it.Invalid,
	}
	if r.DeviceIDs == nil {
		r.DeviceIDs = []string{}
	}
	if it.DueAt != "" {
		r.Due = parseTime(it.DueAt)
	}
	return r
}

// ---- small helpers ----

func (s *Capacity) put(ctx context.Context, item any, cond *expression.ConditionBuilder) error {
	av, err := attributevalue.MarshalMap(item)
	if err != nil {
		return err
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: av}
	if cond != nil {
		e, err := expression.NewBuilder().WithCondition(*cond).Build()
		if err != nil {
			return err
		}
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.Condition(), e.Names(), e.Values()
	}
	_, err = s.DB.PutItem(ctx, in)
	return err
}

func (s *Capacity) update(ctx context.Context, k map[string]types.AttributeValue, upd expression.UpdateBuilder, cond *expression.ConditionBuilder, rv types.ReturnValue) (map[string]types.AttributeValue, error) {
	b := expression.NewBuilder().WithUpdate(upd)
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	e, err := b.Build()
	if err != nil {
		return nil, err
	}
	out, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.Table), Key: k,
		UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ReturnValues: rv})
	if err != nil {
		return nil, err
	}
	return out.Attributes, nil
}

// get reads one item consistently into out; found=false if missing.
func (s *Capacity) get(ctx context.Context, k map[string]types.AttributeValue, out any) (bool, error) {
	res, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, err
	}
	if res.Item == nil {
		return false, nil
	}
	return true, attributevalue.UnmarshalMap(res.Item, out)
}

func cond(c expression.ConditionBuilder) *expression.ConditionBuilder { return &c }

var notExists = cond(expression.AttributeNotExists(expression.Name(schema.AttrPK)))

// ---- pools ----

// ClaimPool implements capacity.PoolStore.
func (s *Capacity) ClaimPool(ctx context.Context, p capacity.Pool, due time.Time) (capacity.Pool, error) {
	it := newPoolItem(poolPK(p.PoolID), skPool, kindPool, p)
	it.DueShard, it.DueAt = dueShard(p.PoolID), fmtTime(due)
	err := s.put(ctx, it, notExists)
	if isConditionFailed(err) {
		stored, gerr := s.GetPool(ctx, p.PoolID)
		if gerr != nil {
			return capacity.Pool{}, gerr
		}
		return stored, capacity.ErrExists
	}
	return p, err
}

// GetPool implements capacity.PoolStore.
func (s *Capacity) GetPool(ctx context.Context, poolID string) (capacity.Pool, error) {
	var it poolItem
	ok, err := s.get(ctx, key(poolPK(poolID), skPool), &it)
	if err != nil {
		return capacity.Pool{}, err
	}
	if !ok {
		return capacity.Pool{}, capacity.ErrNotFound
	}
	return it.pool(), nil
}

// EnsureCalendar implements capacity.PoolStore.
func (s *Capacity) EnsureCalendar(ctx context.Context, poolID, resource string) error {
	err := s.put(ctx, calendarItem{PK: poolPK(poolID), SK: calSK(resource), Kind: kindCalendar, PoolID: poolID, Resource: resource,
		Version: 1, Allocs: map[string]allocItem{}}, notExists)
	if isConditionFailed(err) {
		return nil
	}
	return err
}

// EnsureQuota implements capacity.PoolStore.
func (s *Capacity) EnsureQuota(ctx context.Context, k capacity.QuotaKey, max int64, now time.Time) error {
	err := s.put(ctx, quotaItem{PK: tenantPK(k.TenantID), SK: quotaSK(k), Kind: kindQuota, TenantID: k.TenantID, PoolID: k.PoolID,
		Resource: k.Resource, Max: max, Free: max, Holds: map[string]int64{}, UpdatedAt: fmtTime(now)}, notExists)
	if isConditionFailed(err) {
		return nil
	}
	return err
}

// ShowPool implements capacity.PoolStore. The view is a copy of the
// (immutable) pool, so a tenant's list is one Query.
func (s *Capacity) ShowPool(ctx context.Context, tenant string, p capacity.Pool) error {
	return s.put(ctx, newPoolItem(tenantPK(tenant), poolViewSK(p.PoolID), kindPoolView, p), nil)
}

// PoolReady implements capacity.PoolStore.
func (s *Capacity) PoolReady(ctx context.Context, poolID string) error {
	_, err := s.update(ctx, key(poolPK(poolID), skPool),
		expression.Remove(expression.Name(schema.AttrDueAt)).Remove(expression.Name(schema.AttrDueSh)),
		cond(expression.AttributeExists(expression.Name(schema.AttrPK))), types.ReturnValueNone)
	if isConditionFailed(err) {
		return nil
	}
	return err
}

// VisiblePool implements capacity.PoolStore.
func (s *Capacity) VisiblePool(ctx context.Context, tenant, poolID string) (capacity.Pool, error) {
	var it poolItem
	ok, err := s.get(ctx, key(tenantPK(tenant), poolViewSK(poolID)), &it)
	if err != nil {
		return capacity.Pool{}, err
	}
	if !ok {
		return capacity.Pool{}, capacity.ErrNotFound
	}
	return it.pool(), nil
}

// ListPools implements capacity.PoolStore.
func (s *Capacity) ListPools(ctx context.Context, tenant string, page capacity.Page) ([]capacity.Pool, map[string]string, error) {
	var out []capacity.Pool
	devices := 0
	next, err := s.queryPartition(ctx, tenant, "POOL#", page, func(av map[string]types.AttributeValue) (bool, error) {
		var it poolItem
		if err := attributevalue.UnmarshalMap(av, &it); err != nil {
			return false, err
		}
		p := it.pool()
		out = append(out, p)
		devices += p.DeviceCount()
		return devices < poolPageDevices, nil
	})
	return out, next, err
}

// queryPartition pages through tenant's items whose sk begins with prefix,
// in sk order, calling take for each until limit items were taken or take
// says stop; next is the sk of the last item taken when more may follow.
func (s *Capacity) queryPartition(ctx context.Context, tenant, prefix string, page capacity.Page, take func(map[string]types.AttributeValue) (bool, error)) (map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = capacity.DefaultLimit
	}
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(tenantPK(tenant))).And(expression.Key(schema.AttrSK).BeginsWith(prefix))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), KeyConditionExpression: e.KeyCondition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true)}
	if after := page.After["sk"]; after != "" {
		if !strings.HasPrefix(after, prefix) {
			return nil, errBadCursor
		}
		in.ExclusiveStartKey = key(tenantPK(tenant), after)
	}
	taken, full := 0, false
	var lastSK string
	for {
		// One more than needed: a full last page then carries no cursor.
		in.Limit = aws.Int32(int32(limit - taken + 1))
		res, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, item := range res.Items {
			if full {
				return map[string]string{"sk": lastSK}, nil // a further item exists
			}
			more, err := take(item)
			if err != nil {
				return nil, err
			}
			taken++
			lastSK = item[schema.AttrSK].(*types.AttributeValueMemberS).Value
			full = taken == limit || !more
		}
		if res.LastEvaluatedKey == nil {
			return nil, nil
		}
		if full {
			return map[string]string{"sk": lastSK}, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// ---- quotas ----

// SetQuotaMax implements capacity.QuotaStore: max, and free = max − used,
// in one write (a row that is missing is created with used 0).
func (s *Capacity) SetQuotaMax(ctx context.Context, k capacity.QuotaKey, max int64, now time.Time) (capacity.Quota, error) {
	zero := expression.Value(0)
	used := expression.Name("used").IfNotExists(zero)
	upd := expression.Set(expression.Name("max"), expression.Value(max)).
		Set(expression.Name("used"), used).
		Set(expression.Name("free"), expression.Value(max).Minus(used)).
		Set(expression.Name("holds"), expression.Name("holds").IfNotExists(expression.Value(map[string]int64{}))).
		Set(expression.Name("kind"), expression.Value(kindQuota)).
		Set(expression.Name("tenantId"), expression.Value(k.TenantID)).
		Set(expression.Name("poolId"), expression.Value(k.PoolID)).
		Set(expression.Name("resource"), expression.Value(k.Resource)).
		Set(expression.Name("updatedAt"), expression.Value(fmtTime(now)))
	av, err := s.update(ctx, key(tenantPK(k.TenantID), quotaSK(k)), upd, nil, types.ReturnValueAllNew)
	if err != nil {
		return capacity.Quota{}, err
	}
	var it quotaItem
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return capacity.Quota{}, err
	}
	return it.row().Quota, nil
}

// GetQuota implements capacity.QuotaStore.
func (s *Capacity) GetQuota(ctx context.Context, k capacity.QuotaKey) (capacity.Quota, error) {
	var it quotaItem
	ok, err := s.get(ctx, key(tenantPK(k.TenantID), quotaSK(k)), &it)
	if err != nil {
		return capacity.Quota{}, err
	}
	if !ok {
		return capacity.Quota{TenantID: k.TenantID, PoolID: k.PoolID, Resource: k.Resource}, nil
	}
	return it.row().Quota, nil
}

// ListQuotas implements capacity.QuotaStore.
func (s *Capacity) ListQuotas(ctx context.Context, tenant, poolID string, page capacity.Page) ([]capacity.Quota, map[string]string, error) {
	prefix := "QUOTA#"
	if poolID != "" {
		prefix += poolID + "#"
	}
	var out []capacity.Quota
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

func holdName(id string) expression.NameBuilder {
	return expression.Name("holds").AppendName(expression.Name(id))
}

// Charge implements capacity.QuotaStore: one UpdateItem, no read first.
// Only a failed condition is classified, by one consistent read of the hold.
func (s *Capacity) Charge(ctx context.Context, k capacity.QuotaKey, id string, count int) error {
	n := expression.Value(count)
	upd := expression.Set(expression.Name("used"), expression.Name("used").Plus(n)).
		Set(expression.Name("free"), expression.Name("free").Minus(n)).
		Set(holdName(id), n)
	c := expression.Name("free").GreaterThanEqual(n).And(expression.AttributeNotExists(holdName(id)))
	_, err := s.update(ctx, key(tenantPK(k.TenantID), quotaSK(k)), upd, &c, types.ReturnValueNone)
	if !isConditionFailed(err) {
		return err
	}
	var it quotaItem
	if _, err := s.get(ctx, key(tenantPK(k.TenantID), quotaSK(k)), &it); err != nil {
		return err
	}
	if _, held := it.Holds[id]; held {
		return nil // charged by an earlier attempt for the same reservation
	}
	return capacity.ErrQuotaExceeded
}

// Credit implements capacity.QuotaStore: the reverse of Charge, if the hold exists.
func (s *Capacity) Credit(ctx context.Context, k capacity.QuotaKey, id string, count int) error {
	n := expression.Value(count)
	upd := expression.Set(expression.Name("used"), expression.Name("used").Minus(n)).
		Set(expression.Name("free"), expression.Name("free").Plus(n)).
		Remove(holdName(id))
	c := expression.Name("holds").AppendName(expression.Name(id)).Equal(n)
	_, err := s.update(ctx, key(tenantPK(k.TenantID), quotaSK(k)), upd, &c, types.ReturnValueNone)
	if isConditionFailed(err) {
		return nil // nothing held: credited already, or never charged
	}
	return err
}

// ---- calendars ----

// Calendar implements capacity.CalendarStore.
func (s *Capacity) Calendar(ctx context.Context, poolID, resource string) (capacity.Calendar, error) {
	var it calendarItem
	ok, err := s.get(ctx, key(poolPK(poolID), calSK(resource)), &it)
	if err != nil || !ok {
		return capacity.Calendar{PoolID: poolID, Resource: resource}, err
	}
	return it.calendar(), nil
}

func allocName(id string) expression.NameBuilder {
	return expression.Name("allocs").AppendName(expression.Name(id))
}

// Place implements capacity.CalendarStore: an optimistic write on version.
func (s *Capacity) Place(ctx context.Context, cal capacity.Calendar, id string, a capacity.Alloc) error {
	var upd expression.UpdateBuilder
	var c expression.ConditionBuilder
	if cal.Version == 0 { // no calendar stored yet
		upd = expression.Set(expression.Name("allocs"), expression.Value(map[string]allocItem{id: toAllocItem(a)})).
			Set(expression.Name("version"), expression.Value(1)).
			Set(expression.Name("kind"), expression.Value(kindCalendar)).
			Set(expression.Name("poolId"), expression.Value(cal.PoolID)).
			Set(expression.Name("resource"), expression.Value(cal.Resource))
		c = expression.AttributeNotExists(expression.Name("version"))
	} else {
		upd = expression.Set(allocName(id), expression.Value(toAllocItem(a))).
			Set(expression.Name("version"), expression.Value(cal.Version+1))
		c = expression.Name("version").Equal(expression.Value(cal.Version))
	}
	_, err := s.update(ctx, key(poolPK(cal.PoolID), calSK(cal.Resource)), upd, &c, types.ReturnValueNone)
	if isConditionFailed(err) {
		return capacity.ErrStale
	}
	return err
}

// Unplace implements capacity.CalendarStore. Removing an alloc does not bump
// the version: a choice made while the alloc was there is still valid.
func (s *Capacity) Unplace(ctx context.Context, poolID, resource, id string) error {
	_, err := s.update(ctx, key(poolPK(poolID), calSK(resource)), expression.Remove(allocName(id)),
		cond(expression.AttributeExists(allocName(id))), types.ReturnValueNone)
	if isConditionFailed(err) {
		return nil
	}
	return err
}

// ---- reservations ----

// Admission implements capacity.ReservationStore: one BatchGetItem of the
// tenant's view of the pool and the resource's calendar.
func (s *Capacity) Admission(ctx context.Context, tenant, poolID, resource string) (capacity.Pool, capacity.Calendar, error) {
	viewKey, calKey := key(tenantPK(tenant), poolViewSK(poolID)), key(poolPK(poolID), calSK(resource))
	keys := []map[string]types.AttributeValue{viewKey, calKey}
	cal := capacity.Calendar{PoolID: poolID, Resource: resource}
	var pool *capacity.Pool
	for len(keys) > 0 {
		res, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			s.Table: {Keys: keys, ConsistentRead: aws.Bool(true)}}})
		if err != nil {
			return capacity.Pool{}, cal, err
		}
		for _, item := range res.Responses[s.Table] {
			switch sk := item[schema.AttrSK].(*types.AttributeValueMemberS).Value; {
			case sk == poolViewSK(poolID):
				var it poolItem
				if err := attributevalue.UnmarshalMap(item, &it); err != nil {
					return capacity.Pool{}, cal, err
				}
				p := it.pool()
				pool = &p
			case sk == calSK(resource):
				var it calendarItem
				if err := attributevalue.UnmarshalMap(item, &it); err != nil {
					return capacity.Pool{}, cal, err
				}
				cal = it.calendar()
			}
		}
		keys = res.UnprocessedKeys[s.Table].Keys
	}
	if pool == nil {
		return capacity.Pool{}, cal, capacity.ErrNotFound
	}
	return *pool, cal, nil
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
	var it reservationItem
	ok, err := s.get(ctx, key(tenantPK(tenant), resSK(id)), &it)
	if err != nil {
		return capacity.Reservation{}, err
	}
	if !ok {
		return capacity.Reservation{}, capacity.ErrNotFound
	}
	return it.reservation(), nil
}

// Transition implements capacity.ReservationStore.
func (s *Capacity) Transition(ctx context.Context, to capacity.Reservation, from capacity.State) error {
	it := toReservationItem(to)
	upd := expression.Set(expression.Name("state"), expression.Value(it.State)).
		Set(expression.Name("updatedAt"), expression.Value(it.UpdatedAt)).
		Set(expression.Name("deviceIds"), expression.Value(it.DeviceIDs)).
		Set(expression.Name(schema.AttrLSK), expression.Value(it.LSK))
	for name, v := range map[string]string{"reason": it.Reason, "releasedBy": it.ReleasedBy, "invalid": it.Invalid, schema.AttrDueAt: it.DueAt, schema.AttrDueSh: it.DueShard} {
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
	_, err := s.update(ctx, key(it.PK, it.SK), upd, &c, types.ReturnValueNone)
	if isConditionFailed(err) {
		return capacity.ErrStale
	}
	return err
}

// ClearDue implements capacity.ReservationStore.
func (s *Capacity) ClearDue(ctx context.Context, r capacity.Reservation) error {
	c := expression.Name("state").Equal(expression.Value(string(r.State)))
	_, err := s.update(ctx, key(tenantPK(r.TenantID), resSK(r.ReservationID)),
		expression.Remove(expression.Name(schema.AttrDueAt)).Remove(expression.Name(schema.AttrDueSh)), &c, types.ReturnValueNone)
	if isConditionFailed(err) {
		return capacity.ErrStale
	}
	return err
}

// ListReservations implements capacity.ReservationStore: the tenant's
// partition through the `ordered` index (createdAt#id), newest first; pool
// and state filters are filter expressions, so a page is filled by reading
// on until limit matches or the end. The cursor is the last returned item.
func (s *Capacity) ListReservations(ctx context.Context, tenant string, f capacity.ListFilter, page capacity.Page) ([]capacity.Reservation, map[string]string, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = capacity.DefaultLimit
	}
	pk := tenantPK(tenant)
	prefix := lskListed
	if f.State == capacity.Denied {
		prefix = lskDenied
	}
	b := expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(pk)).And(expression.Key(schema.AttrLSK).BeginsWith(prefix)))
	filtered := f.PoolID != "" || (f.State != "" && f.State != capacity.Denied)
	if filtered {
		var conds []expression.ConditionBuilder
		if f.PoolID != "" {
			conds = append(conds, expression.Name("poolId").Equal(expression.Value(f.PoolID)))
		}
		if f.State != "" && f.State != capacity.Denied {
			conds = append(conds, expression.Name("state").Equal(expression.Value(string(f.State))))
		}
		fc := conds[0]
		if len(conds) == 2 {
			fc = fc.And(conds[1])
		}
		b = b.WithFilter(fc)
	}
	e, err := b.Build()
	if err != nil {
		return nil, nil, err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexOrdered),
		KeyConditionExpression: e.KeyCondition(), FilterExpression: e.Filter(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ScanIndexForward: aws.Bool(false), ConsistentRead: aws.Bool(true)}
	if sk, lsk := page.After["sk"], page.After["lsk"]; sk != "" || lsk != "" {
		if !strings.HasPrefix(sk, "RES#") || !strings.HasPrefix(lsk, prefix) {
			return nil, nil, errBadCursor
		}
		in.ExclusiveStartKey = key(pk, sk)
		in.ExclusiveStartKey[schema.AttrLSK] = &types.AttributeValueMemberS{Value: lsk}
	}
	var out []capacity.Reservation
	var lastSK, lastLSK string
	next := func() map[string]string { return map[string]string{"sk": lastSK, "lsk": lastLSK} }
	for {
		// One more than needed: a full last page then carries no cursor.
		// Filtered queries read bigger pages (the filter runs after Limit).
		want := limit - len(out) + 1
		if filtered {
			want = min(1000, max(want, 100))
		}
		in.Limit = aws.Int32(int32(want))
		res, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		for _, item := range res.Items {
			if len(out) == limit {
				return out, next(), nil // a further match exists
			}
			// A fresh item per row: unmarshalling into a reused one keeps the
			// fields a row lacks (reason, releasedBy) and shares its slices.
			var it reservationItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return nil, nil, err
			}
			lastSK, lastLSK = it.SK, it.LSK
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

// ---- the reconciler's index ----

// Shards implements capacity.DueStore.
func (s *Capacity) Shards() int { return schema.DueShards }

// Due implements capacity.DueStore: a Query of one shard of the sparse due
// index (never a scan), oldest first, page by page, so memory stays flat
// however many items are due.
func (s *Capacity) Due(ctx context.Context, shard int, now time.Time, fn func(capacity.DueItem) bool) error {
	kc := expression.Key(schema.AttrDueSh).Equal(expression.Value(strconv.Itoa(shard))).
		And(expression.Key(schema.AttrDueAt).LessThanEqual(expression.Value(fmtTime(now))))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexDue),
		KeyConditionExpression: e.KeyCondition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ScanIndexForward: aws.Bool(true), Limit: aws.Int32(250)}
	for {
		res, err := s.DB.Query(ctx, in)
		if err != nil {
			return err
		}
		for _, item := range res.Items {
			d, err := dueItem(item)
			if err != nil {
				return err
			}
			if !fn(d) {
				return nil
			}
		}
		if res.LastEvaluatedKey == nil {
			return nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

func dueItem(item map[string]types.AttributeValue) (capacity.DueItem, error) {
	var head struct {
		Kind  string `dynamodbav:"kind"`
		DueAt string `dynamodbav:"dueAt"`
	}
	if err := attributevalue.UnmarshalMap(item, &head); err != nil {
		return capacity.DueItem{}, err
	}
	d := capacity.DueItem{Due: parseTime(head.DueAt)}
	switch head.Kind {
	case kindReservation:
		var it reservationItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return d, err
		}
		r := it.reservation()
		d.Reservation = &r
	case kindPool:
		var it poolItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return d, err
		}
		p := it.pool()
		d.Pool = &p
	default:
		return d, fmt.Errorf("due index holds an item of kind %q", head.Kind)
	}
	return d, nil
}

// ---- the invariant checker's read ----

// Snapshot implements capacity.SnapshotReader with a parallel Scan of the
// quota rows, reservations and calendars (an operator's tool, not a
// request path).
func (s *Capacity) Snapshot(ctx context.Context) (capacity.Snapshot, error) {
	var snap capacity.Snapshot
	filter := expression.Name("kind").In(expression.Value(kindQuota), expression.Value(kindReservation), expression.Value(kindCalendar))
	e, err := expression.NewBuilder().WithFilter(filter).Build()
	if err != nil {
		return snap, err
	}
	p := dynamodb.NewScanPaginator(s.DB, &dynamodb.ScanInput{TableName: aws.String(s.Table), FilterExpression: e.Filter(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return snap, err
		}
		for _, item := range page.Items {
			kind := item["kind"].(*types.AttributeValueMemberS).Value
			switch kind {
			case kindQuota:
				var it quotaItem
				if err := attributevalue.UnmarshalMap(item, &it); err != nil {
					return snap, err
				}
				snap.Quotas = append(snap.Quotas, it.row())
			case kindReservation:
				var it reservationItem
				if err := attributevalue.UnmarshalMap(item, &it); err != nil {
					return snap, err
				}
				snap.Reservations = append(snap.Reservations, it.reservation())
			case kindCalendar:
				var it calendarItem
				if err := attributevalue.UnmarshalMap(item, &it); err != nil {
					return snap, err
				}
				snap.Calendars = append(snap.Calendars, it.calendar())
			}
		}
	}
	return snap, nil
}
