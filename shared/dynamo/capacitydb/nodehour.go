package capacitydb

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

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// A node-hour, CAL#<pool>#<resource>#<yyyymmddhh> / N#<node>, is one
// node's placement state for one UTC hour:
//
//	a    reservation id → {m: device mask, s, e: window in Unix ms, t:
//	     tenant} — the allocations that overlap the hour
//	v    "d<i>" → version of device i (bumped by every write that adds or
//	     removes an entry using it)
//	fit  untouched·2^20 + spread(node): devices no allocation of the hour
//	     uses, then a fixed scramble of the node (the `fit` LSI's sort key)
//	cap  coverable·2^20 + spread(node): devices no single allocation holds
//	     for the whole hour (the `cap` LSI's sort key, keys only)
//	tm   the mask of devices some allocation of the hour uses (moved by
//	     ADD: a placement adds only devices no other entry touches, under
//	     their versions' conditions, so the sum is an OR)
//	n    number of entries (at most capacity.MaxEntriesPerNodeHour)
//	off  set while the fleet keeps new placements off the node (cordoned,
//	     not ready): fit and cap then sit offBias lower, below every
//	     count a candidate or proof read asks for, so the node is neither a
//	     candidate nor counted free; the offset moves by ADD, so it
//	     composes with placements and frees, and lifting it restores both
//	size, ns, devices, node, hour: the node's devices, the resource's node
//	     size and device count (so any node-hour tells the layout)
//
// A node-hour is stored by the first placement on it (a conditional put)
// or when the reconciler provisions its hour: every node of the hour, then
// a `#HOUR` marker whose fit and cap sort after every node's. A create
// reads its candidates with one consistent Query of the `fit` index — the
// fullest node-hours that may fit, first; ties (equally untouched nodes)
// come in spread order, and a read may start part-way through the first
// count (racing creates then read different ones) — and writes one
// node-hour per node and hour its window covers. The `fit` index projects
// what a placement on untouched devices needs (tm, the versions, the
// layout), not the entries: a candidate costs ~200 B of read however busy
// its node is. A refusal is proved with a Query of the `cap` index, which
// reads keys only.
//
// Worst case: 64 entries × ~205 B (26-character id, three numbers, a
// 128-character tenant) + 64 versions × ~12 B + ~200 B ≈ 14 KB. Typical: a
// few entries of short tenant ids, ~350 B.
const (
	offBias   = 1 << 30 // a multiple of 2^fitShift, above every fit and cap
	fitShift  = capacity.SpreadBits
	markerFit = (api.MaxNodeSize + 1) << fitShift
	skHour    = "#HOUR"
	// nodeHourRetention: how long an hour's items outlive it (TTL), for
	// pools.usage and the checker to see the recent past.
	nodeHourRetention = 7 * 24 * time.Hour
)

// fitKey is a node-hour's `fit` (or `cap`): a count of its devices, then
// its spread.
func fitKey(count, node int) int { return count<<fitShift | int(capacity.Spread(node)) }

func calPK(pool, resource string, h capacity.Hour) string {
	return "CAL#" + pool + "#" + resource + "#" + h.String()
}

func nodeSK(node int) string { return fmt.Sprintf("N#%06d", node) }

type entryItem struct {
	M int64  `dynamodbav:"m"`
	S int64  `dynamodbav:"s"`
	E int64  `dynamodbav:"e"`
	T string `dynamodbav:"t,omitempty"`
}

type nodeHourItem struct {
	PK        string               `dynamodbav:"pk"`
	SK        string               `dynamodbav:"sk"`
	Kind      string               `dynamodbav:"kind"`
	Pool      string               `dynamodbav:"pool"`
	Resource  string               `dynamodbav:"resource"`
	Hour      int64                `dynamodbav:"hour"`
	Node      int                  `dynamodbav:"node"`
	Size      int                  `dynamodbav:"size"`
	NodeSize  int                  `dynamodbav:"ns"`
	Devices   int                  `dynamodbav:"devices"`
	Fit       int                  `dynamodbav:"fit"`
	Cap       int                  `dynamodbav:"cap"`
	TM        int64                `dynamodbav:"tm"`
	N         int                  `dynamodbav:"n"`
	Versions  map[string]int64     `dynamodbav:"v"`
	Entries   map[string]entryItem `dynamodbav:"a"`
	ExpiresAt int64                `dynamodbav:"expiresAt,omitempty"`
	Off       bool                 `dynamodbav:"off,omitempty"`
	// OG is the generation of the node's flags that last wrote Off
	// (fleet: a writer never undoes a newer generation's flag).
	OG int64 `dynamodbav:"og,omitempty"`
}

func (it nodeHourItem) nodeHour() capacity.NodeHour {
	fit := it.Fit
	if it.Off {
		fit += offBias
	}
	nh := capacity.NodeHour{Pool: it.Pool, Resource: it.Resource, Hour: capacity.Hour(it.Hour), Node: it.Node, Size: it.Size, Off: it.Off,
		NodeSize: it.NodeSize, Devices: it.Devices, Stored: true, Untouched: fit >> fitShift, TouchedMask: capacity.Mask(uint64(it.TM)),
		Versions: map[int]int64{}, Entries: make(map[string]capacity.Entry, len(it.Entries))}
	for d, v := range it.Versions {
		if i, err := strconv.Atoi(strings.TrimPrefix(d, "d")); err == nil {
			nh.Versions[i] = v
		}
	}
	for id, e := range it.Entries {
		nh.Entries[id] = capacity.Entry{Mask: capacity.Mask(uint64(e.M)), Tenant: e.T,
			Window: api.Window{Start: time.UnixMilli(e.S).UTC(), End: time.UnixMilli(e.E).UTC()}}
	}
	return nh
}

// hourItem marks an hour provisioned: every node-hour of it is stored.
type hourItem struct {
	PK       string `dynamodbav:"pk"`
	SK       string `dynamodbav:"sk"`
	Kind     string `dynamodbav:"kind"`
	Fit      int    `dynamodbav:"fit"`
	Cap      int    `dynamodbav:"cap"`
	Nodes    int    `dynamodbav:"nodes"`
	NodeSize int    `dynamodbav:"ns"`
	Devices  int    `dynamodbav:"devices"`
	Expires  int64  `dynamodbav:"expiresAt,omitempty"`
}

func hourExpiry(h capacity.Hour) int64 { return h.End().Add(nodeHourRetention).Unix() }

func isMarker(item map[string]types.AttributeValue) bool {
	sk, _ := item[schema.AttrSK].(*types.AttributeValueMemberS)
	return sk != nil && sk.Value == skHour
}

// Candidates implements capacity.CandidateStore: one consistent Query of
// the `fit` index from minUntouched (and from's spread) up, ascending. The
// marker sorts after every node: seen, the read saw every qualifying
// node-hour of a provisioned hour.
func (s *Store) Candidates(ctx context.Context, t capacity.PoolResource, h capacity.Hour, minUntouched, limit int, from uint32) ([]capacity.NodeHour, capacity.Scan, error) {
	lo := minUntouched<<fitShift | int(from&(1<<fitShift-1))
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(calPK(t.PoolID, t.Resource, h))).
		And(expression.Key(schema.AttrFit).Between(expression.Value(lo), expression.Value(markerFit)))
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, capacity.Scan{}, err
	}
	res, err := s.DB.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(s.Table), IndexName: aws.String(schema.IndexFit),
		KeyConditionExpression: e.KeyCondition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ConsistentRead: aws.Bool(true), ScanIndexForward: aws.Bool(true), Limit: aws.Int32(int32(limit + 1))})
	if err != nil {
		return nil, capacity.Scan{}, err
	}
	var out []capacity.NodeHour
	var scan capacity.Scan
	for _, item := range res.Items {
		if isMarker(item) {
			scan.Provisioned = true
			continue
		}
		if len(out) == limit {
			scan.More = true
			continue
		}
		var it nodeHourItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return nil, capacity.Scan{}, err
		}
		nh := it.nodeHour()
		nh.Partial = true // the index does not project the entries
		out = append(out, nh)
	}
	return out, scan, nil
}

// Coverable implements capacity.CandidateStore: one consistent Query of the
// keys-only `cap` index from the top down (the marker first), reading the
// count from each key.
func (s *Store) Coverable(ctx context.Context, t capacity.PoolResource, h capacity.Hour, min, limit int) ([]capacity.NodeCount, capacity.Scan, error) {
	items, scan, err := s.fromTop(ctx, t, h, schema.IndexCap, schema.AttrCap, min, limit, nil)
	if err != nil {
		return nil, scan, err
	}
	var out []capacity.NodeCount
	for _, item := range items {
		var k struct {
			SK  string `dynamodbav:"sk"`
			Cap int    `dynamodbav:"cap"`
		}
		if err := attributevalue.UnmarshalMap(item, &k); err != nil {
			return nil, capacity.Scan{}, err
		}
		node, err := strconv.Atoi(strings.TrimPrefix(k.SK, "N#"))
		if err != nil {
			return nil, capacity.Scan{}, fmt.Errorf("dynamo: node-hour key %q", k.SK)
		}
		out = append(out, capacity.NodeCount{Node: node, Count: k.Cap >> fitShift})
	}
	return out, scan, nil
}

// NodeHours implements capacity.CalendarStore.
func (s *Store) NodeHours(ctx context.Context, t capacity.PoolResource, keys []capacity.NodeHourKey) (map[capacity.NodeHourKey]capacity.NodeHour, error) {
	avs := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		avs[i] = dynamo.Key(calPK(t.PoolID, t.Resource, k.Hour), nodeSK(k.Node))
	}
	out := make(map[capacity.NodeHourKey]capacity.NodeHour, len(keys))
	err := s.batchGet(ctx, avs, func(item map[string]types.AttributeValue) error {
		var it nodeHourItem
		if err := attributevalue.UnmarshalMap(item, &it); err != nil {
			return err
		}
		nh := it.nodeHour()
		out[nh.Key()] = nh
		return nil
	})
	return out, err
}

// Hour implements capacity.CandidateStore: a consistent Query of the hour's
// partition, page by page.
func (s *Store) Hour(ctx context.Context, t capacity.PoolResource, h capacity.Hour, fn func(capacity.NodeHour) error) error {
	return s.nodeQuery(ctx, expression.Key(schema.AttrPK).Equal(expression.Value(calPK(t.PoolID, t.Resource, h))).
		And(expression.Key(schema.AttrSK).BeginsWith("N#")), fn)
}

// NodeRange implements capacity.PoolStore: a consistent Query of a
// range of the hour's partition.
func (s *Store) NodeRange(ctx context.Context, t capacity.PoolResource, h capacity.Hour, first, last int, fn func(capacity.NodeHour) error) error {
	if last < first {
		return nil
	}
	return s.nodeQuery(ctx, expression.Key(schema.AttrPK).Equal(expression.Value(calPK(t.PoolID, t.Resource, h))).
		And(expression.Key(schema.AttrSK).Between(expression.Value(nodeSK(first)), expression.Value(nodeSK(last)))), fn)
}

func (s *Store) nodeQuery(ctx context.Context, kc expression.KeyConditionBuilder, fn func(capacity.NodeHour) error) error {
	return dynamo.QueryEach(ctx, s.table(), kc, nil, func(it nodeHourItem) error { return fn(it.nodeHour()) })
}

// provisionWorkers bounds the puts of one Provision.
const provisionWorkers = 32

// provisionStop: Provision starts no put once less than this is left
// before its context's deadline, so the puts in flight finish in time.
const provisionStop = time.Second

// Provision implements capacity.StepStore: every missing node-hour of
// the hour (a conditional put each, so one that a create already wrote is
// left alone), then the marker. Concurrent provisioners of one hour do the
// same puts; whichever finishes first writes the marker.
//
// It first reads which node-hours of the hour are stored (one keys-and-node
// Query of the hour's partition: a few pages for 12,500 nodes) and puts
// only the others, so an hour a deadline cut short goes on where it
// stopped rather than paying a failed conditional put per node again. Once
// less than provisionStop is left before ctx's deadline it starts no more
// puts, waits for those in flight and returns capacity.ErrProvisionCut
// (wrapped): what it put stays, the marker is not written.
func (s *Store) Provision(ctx context.Context, t capacity.PoolResource, h capacity.Hour) (bool, error) {
	pk := calPK(t.PoolID, t.Resource, h)
	var marker hourItem
	if ok, err := s.get(ctx, dynamo.Key(pk, skHour), &marker); err != nil || (ok && marker.Fit > 0) {
		return false, err // a #HOUR item without fit is only the occupancy map
	}
	nodes := t.Nodes()
	stored, missing := make([]bool, nodes), nodes
	proj := expression.NamesList(expression.Name("node"))
	kc := expression.Key(schema.AttrPK).Equal(expression.Value(pk)).And(expression.Key(schema.AttrSK).BeginsWith("N#"))
	if err := dynamo.QueryEach(ctx, s.table(), kc, &proj, func(it struct {
		Node int `dynamodbav:"node"`
	}) error {
		if it.Node >= 0 && it.Node < nodes && !stored[it.Node] {
			stored[it.Node] = true
			missing--
		}
		return nil
	}); err != nil {
		return false, err
	}
	stopAt, hasDeadline := ctx.Deadline()
	stopAt = stopAt.Add(-provisionStop)
	jobs := make(chan int)
	errc := make(chan error, provisionWorkers)
	var wg sync.WaitGroup
	for range min(provisionWorkers, nodes) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				it := newNodeHourItem(capacity.EmptyNodeHour(t, capacity.NodeHourKey{Node: k, Hour: h}))
				if err := s.put(ctx, it, dynamo.NotExists); err != nil && !dynamo.ConditionFailed(err) {
					errc <- err
					return
				}
			}
		}()
	}
	var err error
	put := 0
feed:
	for k := 0; k < nodes; k++ {
		if stored[k] {
			continue
		}
		if (hasDeadline && time.Now().After(stopAt)) || ctx.Err() != nil {
			err = fmt.Errorf("%w: %s hour %s: %d of %d missing node-hours put", capacity.ErrProvisionCut, pk, h, put, missing)
			break feed
		}
		select {
		case jobs <- k:
			put++
		case err = <-errc:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	close(errc)
	for e := range errc {
		err = e // a failed put outranks the cut
		break
	}
	if err != nil {
		return false, err
	}
	return true, s.PutHour(ctx, t, h)
}

// PutHour marks an hour provisioned (every node-hour of it stored).
func (s *Store) PutHour(ctx context.Context, t capacity.PoolResource, h capacity.Hour) error {
	return s.put(ctx, hourItem{PK: calPK(t.PoolID, t.Resource, h), SK: skHour, Kind: dynamo.KindHour, Fit: markerFit, Cap: markerFit,
		Nodes: t.Nodes(), NodeSize: t.NodeSize, Devices: t.Devices, Expires: hourExpiry(h)}, nil)
}

// newNodeHourItem is the item of a node-hour (entries, versions and all).
func newNodeHourItem(nh capacity.NodeHour) nodeHourItem {
	it := nodeHourItem{PK: calPK(nh.Pool, nh.Resource, nh.Hour), SK: nodeSK(nh.Node), Kind: dynamo.KindNodeHour, Pool: nh.Pool,
		Resource: nh.Resource, Hour: int64(nh.Hour), Node: nh.Node, Size: nh.Size, NodeSize: nh.NodeSize, Devices: nh.Devices,
		Fit: fitKey(nh.Untouched, nh.Node), Cap: fitKey(nh.Coverable(), nh.Node), TM: int64(nh.Touched()), N: len(nh.Entries),
		Versions: map[string]int64{}, Entries: map[string]entryItem{}, ExpiresAt: hourExpiry(nh.Hour)}
	if nh.Off {
		it.Off, it.Fit, it.Cap = true, it.Fit-offBias, it.Cap-offBias
	}
	for i, v := range nh.Versions {
		it.Versions[devKey(i)] = v
	}
	for id, e := range nh.Entries {
		it.Entries[id] = entryItem{M: int64(e.Mask), S: e.Window.Start.UnixMilli(), E: e.Window.End.UnixMilli(), T: e.Tenant}
	}
	return it
}

func devKey(i int) string { return "d" + strconv.Itoa(i) }

// versions adds, for every device of mask, "its version is still the one
// read" to the conditions and "bump it" to upd. The conditions are joined
// into one flat AND by the caller: chaining ConditionBuilder.And nests a
// level of parentheses per device, which dynalite's parser takes
// exponential time over (seconds at seven devices).
func versions(nh capacity.NodeHour, mask capacity.Mask, conds []expression.ConditionBuilder, upd expression.UpdateBuilder) ([]expression.ConditionBuilder, expression.UpdateBuilder) {
	for i := 0; i < nh.Size; i++ {
		if !mask.Has(i) {
			continue
		}
		v := nh.Versions[i]
		name := dynamo.Path("v", devKey(i))
		if v == 0 {
			conds = append(conds, expression.AttributeNotExists(name))
		} else {
			conds = append(conds, name.Equal(expression.Value(v)))
		}
		upd = upd.Set(name, expression.Value(v+1))
	}
	return conds, upd
}

// coverDelta is how an entry's add (or removal) moves a node-hour's
// coverable count: only an entry that holds its devices for the whole hour
// covers them, and no two entries ever cover one device (they would
// overlap).
func coverDelta(h capacity.Hour, e capacity.Entry, remove bool) int {
	if !h.CoveredBy(e.Window) {
		return 0
	}
	if remove {
		return e.Mask.Count()
	}
	return -e.Mask.Count()
}

// Allocate implements capacity.CalendarStore.
func (s *Store) Allocate(ctx context.Context, nh capacity.NodeHour, id string, e capacity.Entry) error {
	k := dynamo.Key(calPK(nh.Pool, nh.Resource, nh.Hour), nodeSK(nh.Node))
	var err error
	if !nh.Stored {
		// Read as missing: create it with the entry, if it still is.
		nh.Versions, nh.Entries = maps.Clone(nh.Versions), maps.Clone(nh.Entries)
		nh.Add(id, e)
		err = s.put(ctx, newNodeHourItem(nh), dynamo.NotExists)
	} else {
		err = s.allocate(ctx, k, nh, id, e)
	}
	if !dynamo.ConditionFailed(err) {
		return err
	}
	// Refused: written by an earlier attempt (an SDK retry of a write whose
	// answer was lost), or the node-hour moved or is full.
	var cur nodeHourItem
	if ok, err := s.get(ctx, k, &cur); err != nil || !ok {
		if err == nil {
			err = capacity.ErrStale
		}
		return err
	}
	if got, held := cur.Entries[id]; held && got.M == int64(e.Mask) {
		return nil
	}
	if cur.N >= capacity.MaxEntriesPerNodeHour {
		return capacity.ErrCalendarFull
	}
	return capacity.ErrStale
}

// allocate is Allocate's conditional update of a stored node-hour. The
// counts behind fit and cap move by ADD, so writes on other devices of the
// node in between (which the version conditions allow) compose.
func (s *Store) allocate(ctx context.Context, k map[string]types.AttributeValue, nh capacity.NodeHour, id string, e capacity.Entry) error {
	upd := expression.Set(dynamo.Path("a", id), expression.Value(entryItem{M: int64(e.Mask), S: e.Window.Start.UnixMilli(), E: e.Window.End.UnixMilli(), T: e.Tenant})).
		Add(expression.Name("n"), expression.Value(1))
	if delta := nh.UntouchedAfter(id, e.Mask, false) - nh.Untouched; delta != 0 {
		upd = upd.Add(expression.Name(schema.AttrFit), expression.Value(delta<<fitShift))
	}
	if bits := nh.Touching(id, e.Mask, false); bits != 0 {
		upd = upd.Add(expression.Name("tm"), expression.Value(int64(bits)))
	}
	if delta := coverDelta(nh.Hour, e, false); delta != 0 {
		upd = upd.Add(expression.Name(schema.AttrCap), expression.Value(delta<<fitShift))
	}
	conds, upd := versions(nh, e.Mask, []expression.ConditionBuilder{expression.AttributeNotExists(dynamo.Path("a", id)),
		expression.Name("n").LessThan(expression.Value(capacity.MaxEntriesPerNodeHour)),
		expression.AttributeNotExists(expression.Name("off"))}, upd)
	c := dynamo.All(conds)
	_, err := s.update(ctx, k, upd, &c, types.ReturnValueNone)
	return err
}

// freeWorkers bounds the writes of one Free.
const freeWorkers = 32

// Free implements capacity.CalendarStore: the node-hours are read with
// consistent BatchGetItems (100 at a time), then each that holds the entry
// loses it in a conditional write on the versions of its devices as read
// (a racing write on them makes that one read again).
func (s *Store) Free(ctx context.Context, t capacity.PoolResource, keys []capacity.NodeHourKey, id string) error {
	got, err := s.NodeHours(ctx, t, keys)
	if err != nil {
		return err
	}
	var held []capacity.NodeHour
	for _, k := range keys {
		if nh, ok := got[k]; ok {
			if _, has := nh.Entries[id]; has {
				held = append(held, nh)
			}
		}
	}
	return conc.Each(ctx, len(held), freeWorkers, func(i int) error { return s.free(ctx, held[i], id) })
}

// free removes id's entry from one node-hour read as nh, reading it again
// when its versions moved.
func (s *Store) free(ctx context.Context, nh capacity.NodeHour, id string) error {
	k := dynamo.Key(calPK(nh.Pool, nh.Resource, nh.Hour), nodeSK(nh.Node))
	for attempt := 0; attempt < 16; attempt++ {
		if attempt > 0 {
			var cur nodeHourItem
			ok, err := s.get(ctx, k, &cur)
			if err != nil || !ok {
				return err
			}
			nh = cur.nodeHour()
		}
		e, held := nh.Entries[id]
		if !held {
			return nil
		}
		upd := expression.Remove(dynamo.Path("a", id)).Add(expression.Name("n"), expression.Value(-1))
		if delta := nh.UntouchedAfter(id, e.Mask, true) - nh.Untouched; delta != 0 {
			upd = upd.Add(expression.Name(schema.AttrFit), expression.Value(delta<<fitShift))
		}
		if bits := nh.Touching(id, e.Mask, true); bits != 0 {
			upd = upd.Add(expression.Name("tm"), expression.Value(-int64(bits)))
		}
		if delta := coverDelta(nh.Hour, e, true); delta != 0 {
			upd = upd.Add(expression.Name(schema.AttrCap), expression.Value(delta<<fitShift))
		}
		conds, upd := versions(nh, e.Mask, []expression.ConditionBuilder{expression.AttributeExists(dynamo.Path("a", id))}, upd)
		c := dynamo.All(conds)
		_, err := s.update(ctx, k, upd, &c, types.ReturnValueNone)
		if !dynamo.ConditionFailed(err) {
			return err
		}
	}
	return errors.New("dynamo: a node-hour changed too often to free an entry")
}

// Flag implements fleet.Calendar: it makes node-hour (node, h) say
// what generation gen of the node's flags wants, unless a newer generation
// wrote it already (og ≥ gen) — so a writer that read the node before
// another changed it can never undo the other's flag, whatever the
// interleaving of their writes. Marking sets off and moves fit and cap
// down by offBias, lifting is the reverse; an hour already as wanted only
// records gen; a missing one is put as wanted (unmarked too, so a slower
// writer's put of a marked one fails). At most 3 calls; 1 on a change.
func (s *Store) Flag(ctx context.Context, t capacity.PoolResource, node int, h capacity.Hour, off bool, gen int64) error {
	k := dynamo.Key(calPK(t.PoolID, t.Resource, h), nodeSK(node))
	og, offAttr := expression.Name("og"), expression.Name("off")
	newer := expression.Or(expression.AttributeNotExists(og), og.LessThan(expression.Value(gen)))
	stored := expression.AttributeExists(expression.Name(schema.AttrPK))
	for range 4 {
		var upd expression.UpdateBuilder
		var c expression.ConditionBuilder
		if off {
			upd = expression.Set(offAttr, expression.Value(true)).Set(og, expression.Value(gen)).
				Add(expression.Name(schema.AttrFit), expression.Value(-offBias)).Add(expression.Name(schema.AttrCap), expression.Value(-offBias))
			c = expression.And(stored, expression.AttributeNotExists(offAttr), newer)
		} else {
			upd = expression.Remove(offAttr).Set(og, expression.Value(gen)).
				Add(expression.Name(schema.AttrFit), expression.Value(offBias)).Add(expression.Name(schema.AttrCap), expression.Value(offBias))
			c = expression.And(expression.AttributeExists(offAttr), newer)
		}
		_, err := s.update(ctx, k, upd, &c, types.ReturnValueNone)
		if !dynamo.ConditionFailed(err) {
			return err
		}
		as := expression.AttributeNotExists(offAttr)
		if off {
			as = expression.AttributeExists(offAttr)
		}
		c = expression.And(stored, as, newer)
		_, err = s.update(ctx, k, expression.Set(og, expression.Value(gen)), &c, types.ReturnValueNone)
		if !dynamo.ConditionFailed(err) {
			return err
		}
		var cur nodeHourItem
		ok, err := s.get(ctx, k, &cur)
		switch {
		case err != nil:
			return err
		case ok && cur.OG >= gen:
			return nil // a newer generation has it
		case !ok:
			nh := capacity.EmptyNodeHour(t, capacity.NodeHourKey{Node: node, Hour: h})
			nh.Off = off
			it := newNodeHourItem(nh)
			it.OG = gen
			switch err := s.put(ctx, it, dynamo.NotExists); {
			case err == nil:
				// Stored now: the hour's occupancy map must name it (a failed
				// map write is the next create's to repair: it finds the node
				// stored when it takes it as vacant).
				_ = s.Occupy(ctx, t, h, []int{node})
				return nil
			case !dynamo.ConditionFailed(err):
				return err
			}
		}
		// Changed between the calls: again.
	}
	return errors.New("dynamo: a node-hour changed too often to flag it")
}
