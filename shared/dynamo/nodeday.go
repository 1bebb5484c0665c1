package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// A node-day, CAL#<pool>#<resource>#<yyyymmdd> / N#<node>, is one node's
// placement state for one UTC day:
//
//	a    reservation id → {m: device mask, s, e: window in Unix ms} — the
//	     allocations that overlap the day
//	v    "d<i>" → version of device i (bumped by every write that adds or
//	     removes an entry using it)
//	fit  untouched·2^20 + spread(node): devices no allocation of the day
//	     uses, then a fixed scramble of the node (the `fit` LSI's sort key)
//	n    number of entries (at most capacity.MaxEntriesPerNodeDay)
//	size, ns, devices, node, day: the node's devices, the resource's node
//	     size and device count (so any node-day tells the layout)
//
// A node-day is stored by the first placement on it (a conditional put) or
// when the reconciler provisions its day: every node of the day, then a
// `#DAY` marker whose fit sorts after every node's. A create reads its
// candidates with one consistent Query of the `fit` index — the fullest
// node-days that may fit, first; ties (equally untouched nodes) come in
// spread order, and a read may start part-way through the first count
// (racing creates then read different ones) — and writes one node-day per
// node and day its window covers.
//
// Worst case: 256 entries × ~75 B (26-character id, three numbers) + 64
// versions × ~12 B + ~170 B ≈ 20 KB. Typical: a few entries, ~300 B.
const (
	fitShift  = 20
	markerFit = (capacity.MaxNodeSize + 1) << fitShift
	skDay     = "#DAY"
	// nodeDayRetention: how long a day's items outlive it (TTL), for
	// pools.usage and the checker to see the recent past.
	nodeDayRetention = 7 * 24 * time.Hour
)

// fitKey is a node-day's `fit`: its untouched devices, then its spread.
func fitKey(untouched, node int) int { return untouched<<fitShift | int(spread(node)) }

// spread scrambles a node index into [0, 2^20) (Fibonacci hashing), so
// equally untouched nodes sort in an order unrelated to their index.
func spread(node int) uint32 { return uint32(node) * 2654435769 >> (32 - fitShift) }

func calPK(pool, resource string, d capacity.Day) string {
	return "CAL#" + pool + "#" + resource + "#" + d.String()
}

func nodeSK(node int) string { return fmt.Sprintf("N#%06d", node) }

type entryItem struct {
	M int64 `dynamodbav:"m"`
	S int64 `dynamodbav:"s"`
	E int64 `dynamodbav:"e"`
}

type nodeDayItem struct {
	PK        string               `dynamodbav:"pk"`
	SK        string               `dynamodbav:"sk"`
	Kind      string               `dynamodbav:"kind"`
	Pool      string               `dynamodbav:"pool"`
	Resource  string               `dynamodbav:"resource"`
	Day       int                  `dynamodbav:"day"`
	Node      int                  `dynamodbav:"node"`
	Size      int                  `dynamodbav:"size"`
	NodeSize  int                  `dynamodbav:"ns"`
	Devices   int                  `dynamodbav:"devices"`
	Fit       int                  `dynamodbav:"fit"`
	N         int                  `dynamodbav:"n"`
	Versions  map[string]int64     `dynamodbav:"v"`
	Entries   map[string]entryItem `dynamodbav:"a"`
	ExpiresAt int64                `dynamodbav:"expiresAt,omitempty"`
}

func (it nodeDayItem) nodeDay() capacity.NodeDay {
	nd := capacity.NodeDay{Pool: it.Pool, Resource: it.Resource, Day: capacity.Day(it.Day), Node: it.Node, Size: it.Size,
		NodeSize: it.NodeSize, Devices: it.Devices, Stored: true, Untouched: it.Fit >> fitShift, Versions: map[int]int64{},
		Entries: make(map[string]capacity.Entry, len(it.Entries))}
	for d, v := range it.Versions {
		if i, err := strconv.Atoi(strings.TrimPrefix(d, "d")); err == nil {
			nd.Versions[i] = v
		}
	}
	for id, e := range it.Entries {
		nd.Entries[id] = capacity.Entry{Mask: capacity.Mask(uint64(e.M)),
			Window: capacity.Window{Start: time.UnixMilli(e.S).UTC(), End: time.UnixMilli(e.E).UTC()}}
	}
	return nd
}

type dayItem struct {
	PK       string `dynamodbav:"pk"`
	SK       string `dynamodbav:"sk"`
	Kind     string `dynamodbav:"kind"`
	Fit      int    `dynamodbav:"fit"`
	Nodes    int    `dynamodbav:"nodes"`
	NodeSize int    `dynamodbav:"ns"`
	Devices  int    `dynamodbav:"devices"`
	Expires  int64  `dynamodbav:"expiresAt,omitempty"`
}

func dayExpiry(d capacity.Day) int64 { return d.Start().Add(24*time.Hour + nodeDayRetention).Unix() }

// Candidates implements capacity.CalendarStore: one consistent Query of
// the `fit` index from minUntouched (and from's spread) up, ascending.
func (s *Capacity) Candidates(ctx context.Context, t capacity.PoolResource, day capacity.Day, minUntouched, limit int, from uint32) ([]capacity.NodeDay, bool, error) {
	lo := minUntouched<<fitShift | int(from&(1<<fitShift-1))
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(calPK(t.PoolID, t.Resource, day))).
		And(expression.Key(schema.AttrFit).Between(expression.Value(lo), expression.Value(markerFit)))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, false, err
	}
	res, err := s.DB.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexFit),
		KeyConditionExpression: e.KeyCondition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ConsistentRead: aws.Bool(true), ScanIndexForward: aws.Bool(true), Limit: aws.Int32(int32(limit + 1))})
	if err != nil {
		return nil, false, err
	}
	var out []capacity.NodeDay
	marker := false
	for _, item := range res.Items {
		if sk := item[schema.AttrSK].(*types.AttributeValueMemberS).Value; sk == skDay {
			marker = true
			continue
		}
		var it nodeDayItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return nil, false, err
		}
		if len(out) < limit {
			out = append(out, it.nodeDay())
		}
	}
	return out, marker || len(res.Items) > limit, nil
}

// NodeDays implements capacity.CalendarStore.
func (s *Capacity) NodeDays(ctx context.Context, t capacity.PoolResource, keys []capacity.NodeDayKey) (map[capacity.NodeDayKey]capacity.NodeDay, error) {
	avs := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		avs[i] = key(calPK(t.PoolID, t.Resource, k.Day), nodeSK(k.Node))
	}
	out := make(map[capacity.NodeDayKey]capacity.NodeDay, len(keys))
	err := s.batchGet(ctx, avs, func(item map[string]types.AttributeValue) error {
		var it nodeDayItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return err
		}
		out[capacity.NodeDayKey{Node: it.Node, Day: capacity.Day(it.Day)}] = it.nodeDay()
		return nil
	})
	return out, err
}

// Day implements capacity.CalendarStore: a consistent Query of the day's
// partition, page by page.
func (s *Capacity) Day(ctx context.Context, t capacity.PoolResource, day capacity.Day, fn func(capacity.NodeDay) error) error {
	return s.nodeQuery(ctx, expression.Key(schema.AttrPK).Equal(expression.Value(calPK(t.PoolID, t.Resource, day))).
		And(expression.Key(schema.AttrSK).BeginsWith("N#")), fn)
}

// NodeRange implements capacity.CalendarStore: a consistent Query of a
// range of the day's partition.
func (s *Capacity) NodeRange(ctx context.Context, t capacity.PoolResource, day capacity.Day, first, last int, fn func(capacity.NodeDay) error) error {
	if last < first {
		return nil
	}
	return s.nodeQuery(ctx, expression.Key(schema.AttrPK).Equal(expression.Value(calPK(t.PoolID, t.Resource, day))).
		And(expression.Key(schema.AttrSK).Between(expression.Value(nodeSK(first)), expression.Value(nodeSK(last)))), fn)
}

func (s *Capacity) nodeQuery(ctx context.Context, kc expression.KeyConditionBuilder, fn func(capacity.NodeDay) error) error {
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return err
	}
	p := dynamodb.NewQueryPaginator(s.DB, &dynamodb.QueryInput{TableName: aws.String(s.Table),
		KeyConditionExpression: e.KeyCondition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, item := range page.Items {
			var it nodeDayItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return err
			}
			if err := fn(it.nodeDay()); err != nil {
				return err
			}
		}
	}
	return nil
}

// provisionWorkers bounds the puts of one Provision.
const provisionWorkers = 32

// Provision implements capacity.CalendarStore: every missing node-day of
// the day (a conditional put each, so one that a create already wrote is
// left alone), then the marker. Concurrent provisioners of one day do the
// same puts; whichever finishes first writes the marker.
func (s *Capacity) Provision(ctx context.Context, t capacity.PoolResource, day capacity.Day) (bool, error) {
	pk := calPK(t.PoolID, t.Resource, day)
	var marker dayItem
	if ok, err := s.get(ctx, key(pk, skDay), &marker); err != nil || ok {
		return false, err
	}
	nodes := t.Nodes()
	jobs := make(chan int)
	errc := make(chan error, provisionWorkers)
	var wg sync.WaitGroup
	for range min(provisionWorkers, nodes) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				it := newNodeDayItem(capacity.EmptyNodeDay(t, capacity.NodeDayKey{Node: k, Day: day}))
				if err := s.put(ctx, it, notExists); err != nil && !isConditionFailed(err) {
					errc <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for k := 0; k < nodes; k++ {
		select {
		case jobs <- k:
		case err = <-errc:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	close(errc)
	if err != nil {
		return false, err
	}
	for e := range errc {
		return false, e
	}
	return true, s.PutDay(ctx, t, day)
}

// newNodeDayItem is the item of a node-day (entries, versions and all).
func newNodeDayItem(nd capacity.NodeDay) nodeDayItem {
	it := nodeDayItem{PK: calPK(nd.Pool, nd.Resource, nd.Day), SK: nodeSK(nd.Node), Kind: kindNodeDay, Pool: nd.Pool,
		Resource: nd.Resource, Day: int(nd.Day), Node: nd.Node, Size: nd.Size, NodeSize: nd.NodeSize, Devices: nd.Devices,
		Fit: fitKey(nd.Untouched, nd.Node), N: len(nd.Entries), Versions: map[string]int64{}, Entries: map[string]entryItem{},
		ExpiresAt: dayExpiry(nd.Day)}
	for i, v := range nd.Versions {
		it.Versions[devKey(i)] = v
	}
	for id, e := range nd.Entries {
		it.Entries[id] = entryItem{M: int64(e.Mask), S: e.Window.Start.UnixMilli(), E: e.Window.End.UnixMilli()}
	}
	return it
}

func devKey(i int) string { return "d" + strconv.Itoa(i) }

// versions adds, for every device of mask, "its version is still the one
// read" to the conditions and "bump it" to upd. The conditions are joined
// into one flat AND by the caller: chaining ConditionBuilder.And nests a
// level of parentheses per device, which dynalite's parser takes
// exponential time over (seconds at seven devices).
func versions(nd capacity.NodeDay, mask capacity.Mask, conds []expression.ConditionBuilder, upd expression.UpdateBuilder) ([]expression.ConditionBuilder, expression.UpdateBuilder) {
	for i := 0; i < nd.Size; i++ {
		if !mask.Has(i) {
			continue
		}
		v := nd.Versions[i]
		name := path("v", devKey(i))
		if v == 0 {
			conds = append(conds, expression.AttributeNotExists(name))
		} else {
			conds = append(conds, name.Equal(expression.Value(v)))
		}
		upd = upd.Set(name, expression.Value(v+1))
	}
	return conds, upd
}

// all joins conditions into one flat AND (at least two). Every condition
// of more than two terms is built with it (or expression.Or's flat form):
// dynalite's parser takes time exponential in the nesting of parentheses
// that chained And calls produce.
func all(conds []expression.ConditionBuilder) expression.ConditionBuilder {
	return expression.And(conds[0], conds[1], conds[2:]...)
}

// Allocate implements capacity.CalendarStore.
func (s *Capacity) Allocate(ctx context.Context, nd capacity.NodeDay, id string, e capacity.Entry) error {
	k := key(calPK(nd.Pool, nd.Resource, nd.Day), nodeSK(nd.Node))
	var err error
	if !nd.Stored {
		// Read as missing: create it with the entry, if it still is.
		nd.Versions, nd.Entries = maps.Clone(nd.Versions), maps.Clone(nd.Entries)
		nd.Add(id, e)
		err = s.put(ctx, newNodeDayItem(nd), notExists)
	} else {
		err = s.allocate(ctx, k, nd, id, e)
	}
	if !isConditionFailed(err) {
		return err
	}
	// Refused: written by an earlier attempt (an SDK retry of a write whose
	// answer was lost), or the node-day moved or is full.
	var cur nodeDayItem
	if ok, err := s.get(ctx, k, &cur); err != nil || !ok {
		if err == nil {
			err = capacity.ErrStale
		}
		return err
	}
	if got, held := cur.Entries[id]; held && got.M == int64(e.Mask) {
		return nil
	}
	if cur.N >= capacity.MaxEntriesPerNodeDay {
		return capacity.ErrCalendarFull
	}
	return capacity.ErrStale
}

// allocate is Allocate's conditional update of a stored node-day.
func (s *Capacity) allocate(ctx context.Context, k map[string]types.AttributeValue, nd capacity.NodeDay, id string, e capacity.Entry) error {
	upd := expression.Set(path("a", id), expression.Value(entryItem{M: int64(e.Mask), S: e.Window.Start.UnixMilli(), E: e.Window.End.UnixMilli()})).
		Add(expression.Name("n"), expression.Value(1))
	if delta := nd.UntouchedAfter(id, e.Mask, false) - nd.Untouched; delta != 0 {
		upd = upd.Add(expression.Name(schema.AttrFit), expression.Value(delta<<fitShift))
	}
	conds, upd := versions(nd, e.Mask, []expression.ConditionBuilder{expression.AttributeNotExists(path("a", id)),
		expression.Name("n").LessThan(expression.Value(capacity.MaxEntriesPerNodeDay))}, upd)
	c := all(conds)
	_, err := s.update(ctx, k, upd, &c, types.ReturnValueNone)
	return err
}

// Free implements capacity.CalendarStore: read, then remove the entry with
// the versions of its devices as read (a racing write on them makes it
// read again).
func (s *Capacity) Free(ctx context.Context, t capacity.PoolResource, nk capacity.NodeDayKey, id string) error {
	k := key(calPK(t.PoolID, t.Resource, nk.Day), nodeSK(nk.Node))
	for attempt := 0; attempt < 16; attempt++ {
		var cur nodeDayItem
		ok, err := s.get(ctx, k, &cur)
		if err != nil || !ok {
			return err
		}
		nd := cur.nodeDay()
		e, held := nd.Entries[id]
		if !held {
			return nil
		}
		upd := expression.Remove(path("a", id)).Add(expression.Name("n"), expression.Value(-1))
		if delta := nd.UntouchedAfter(id, e.Mask, true) - nd.Untouched; delta != 0 {
			upd = upd.Add(expression.Name(schema.AttrFit), expression.Value(delta<<fitShift))
		}
		conds, upd := versions(nd, e.Mask, []expression.ConditionBuilder{expression.AttributeExists(path("a", id))}, upd)
		c := conds[0]
		if len(conds) > 1 {
			c = all(conds)
		}
		_, err = s.update(ctx, k, upd, &c, types.ReturnValueNone)
		if !isConditionFailed(err) {
			return err
		}
	}
	return errors.New("dynamo: a node-day changed too often to free an entry")
}
