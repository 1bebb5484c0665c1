package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/meter"
	"github.com/bettercompute/control-plane/test/teststack"
)

// The capacity benchmarks (issue "capacity at scale"): cost and latency of
// reservations.create from 0 to 100,000 live allocations in one pool,
// against a raw conditional UpdateItem on the same dynalite in the same
// run; placement retries of 64 concurrent creates; what a count-1,024
// create costs; and how well placement packs nodes.

const (
	scaleDevices  = 100_000 // the largest resource a pool may have
	scaleNodeSize = 8
	busyPerNode   = 4 // seeded allocations per loaded node and day
)

// scale is the full app behind the local gateway on a fresh table, with a
// meter totalling every DynamoDB request, and a 100,000-device pool.
type scale struct {
	st    *teststack.Stack
	srv   *server // st's gateway
	store *capacitydb.Store
	m     *meter.Meter
	top   capacity.Topology
	now   time.Time
}

func newScale(b testing.TB, devices int) *scale {
	b.Helper()
	m := &meter.Meter{}
	st := startStack(b, teststack.WithAppOptions(app.WithDynamoOptions(dynamo.MeterAll(m))))
	s := &scale{st: st, srv: &server{URL: st.URL}, store: &capacitydb.Store{DB: st.Dev.DynamoDB(), Table: st.App.Config.Table}, m: m,
		top: capacity.Topology{Resource: "gpu", Devices: devices, NodeSize: scaleNodeSize}, now: time.Now().UTC()}
	s.call(b, "pools.create", map[string]any{"tenantId": "owner", "poolId": "scale", "resources": map[string]any{"gpu": devices},
		"nodeSize": map[string]any{"gpu": scaleNodeSize}})
	s.call(b, "pools.offer", map[string]any{"tenantId": "owner", "poolId": "scale", "toTenantId": "acme", "resource": "gpu", "max": 1_000_000})
	return s
}

func (s *scale) call(b testing.TB, method string, body any) []byte {
	b.Helper()
	raw, _ := json.Marshal(body)
	_, out := s.srv.do(b, strings.Replace(method, ".", "/", 1), raw)
	return out
}

// seed loads live placed single-device reservations through the store,
// each for one whole hour after the measured one (s.next): busyPerNode on
// every node of the first such hour, then of the hour after, and so on; tenantLive of them
// are acme's (its quota's used), the rest another tenant's. Every
// node-hour of those hours is written: the hours are provisioned.
func (s *scale) seed(b *testing.B, live, tenantLive int) {
	b.Helper()
	ctx := context.Background()
	first := s.next() + 1
	perHour := s.top.Nodes() * busyPerNode
	last := first + capacity.Hour(max(0, (live-1)/perHour))
	pr := capacity.PoolResource{PoolID: "scale", Topology: s.top}
	nhs := map[capacity.NodeHourKey]*capacity.NodeHour{}
	for h := first; h <= last; h++ {
		for k := 0; k < s.top.Nodes(); k++ {
			nh := capacity.EmptyNodeHour(pr, capacity.NodeHourKey{Node: k, Hour: h})
			nhs[nh.Key()] = &nh
		}
	}
	var rs []capacity.Reservation
	acme := 0
	for i := 0; i < live; i++ {
		h := first + capacity.Hour(i/perHour)
		slot := i % perHour
		node, dev := slot/busyPerNode, slot%busyPerNode
		w := h.Window()
		tenant := "others"
		if acme < tenantLive {
			tenant, acme = "acme", acme+1
		}
		id := fmt.Sprintf("SEED%06d", i)
		r := capacity.Reservation{Reservation: api.Reservation{ReservationID: id, TenantID: tenant, PoolID: "scale",
			Resource: "gpu", Count: 1, Window: w, Topology: api.OnNodes, State: api.Placed, CreatedAt: s.now, UpdatedAt: s.now,
			History: []api.Event{{State: api.Draft, At: s.now}, {State: api.Placed, At: s.now}}}, Devices: []int{node*scaleNodeSize + dev},
			NodeSize: scaleNodeSize, Request: "seed", Due: w.Start}
		rs = append(rs, r)
		nhs[capacity.NodeHourKey{Node: node, Hour: h}].Add(id, capacity.Entry{Mask: 1 << uint(dev), Window: w})
	}
	hours := make([]capacity.NodeHour, 0, len(nhs))
	for _, nh := range nhs {
		hours = append(hours, *nh)
	}
	quotas := []api.Quota{{TenantID: "acme", PoolID: "scale", Resource: "gpu", Max: 1_000_000, Used: int64(tenantLive)}}
	if live > tenantLive {
		quotas = append(quotas, api.Quota{TenantID: "others", PoolID: "scale", Resource: "gpu", Max: 1_000_000, Used: int64(live - tenantLive)})
	}
	if err := s.store.BulkLoad(ctx, rs, hours, quotas); err != nil {
		b.Fatal(err)
	}
	for h := first; h <= last; h++ {
		if err := s.store.PutHour(ctx, pr, h); err != nil {
			b.Fatal(err)
		}
	}
}

// next is the hour the benchmarks create in: the next whole hour.
func (s *scale) next() capacity.Hour { return capacity.HourOf(s.now) + 1 }

// creates runs n sequential creates for the next whole hour over HTTP, each
// followed by one raw conditional UpdateItem on the same dynalite (so both
// see the same machine), after a warm-up of dynalite's JIT; it returns
// both latencies and the DynamoDB cost per create.
func (s *scale) creates(b *testing.B, n, count int) (lat, raw []time.Duration, per meter.Usage) {
	b.Helper()
	w := s.next().Window()
	body := func() []byte {
		raw, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "scale", "resource": "gpu", "count": count,
			"window": map[string]any{"start": w.Start.Format(time.RFC3339), "end": w.End.Format(time.RFC3339)}})
		return raw
	}
	update := rawUpdater(b, s.st)
	for i := range 30 {
		s.srv.do(b, "reservations/create", body())
		update(i)
	}
	var used meter.Usage
	lat, raw = make([]time.Duration, n), make([]time.Duration, n)
	for i := range lat {
		before := s.m.Usage()
		lat[i], _ = s.srv.do(b, "reservations/create", body())
		after := s.m.Usage()
		used.Calls += after.Calls - before.Calls
		used.RCU += after.RCU - before.RCU
		used.WCU += after.WCU - before.WCU
		raw[i] = update(i)
	}
	per = meter.Usage{Calls: used.Calls / n, RCU: used.RCU / float64(n), WCU: used.WCU / float64(n)}
	return lat, raw, per
}

func pct(lat []time.Duration, p float64) float64 {
	l := slices.Clone(lat)
	slices.Sort(l)
	return float64(l[int(p*float64(len(l)-1))].Microseconds()) / 1000
}

// rawUpdater returns a function doing one raw conditional UpdateItem on
// the same dynalite (the floor a create is compared with) and returning
// its latency.
func rawUpdater(b *testing.B, st *teststack.Stack) func(i int) time.Duration {
	b.Helper()
	db := st.Dev.DynamoDB()
	upd := expression.Set(expression.Name("used"), expression.Plus(expression.IfNotExists(expression.Name("used"), expression.Value(0)), expression.Value(1)))
	e, _ := expression.NewBuilder().WithUpdate(upd).WithCondition(
		expression.Or(expression.AttributeNotExists(expression.Name("used")), expression.Name("used").LessThan(expression.Value(1<<40)))).Build()
	return func(i int) time.Duration {
		start := time.Now()
		_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: aws.String(st.App.Config.Table),
			Key: map[string]types.AttributeValue{schema.AttrPK: &types.AttributeValueMemberS{Value: "BENCH#" + strconv.Itoa(i%64)},
				schema.AttrSK: &types.AttributeValueMemberS{Value: "ROW"}},
			UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
}

// rawUpdate is n raw UpdateItem latencies.
func rawUpdate(b *testing.B, st *teststack.Stack, n int) []time.Duration {
	update := rawUpdater(b, st)
	lat := make([]time.Duration, n)
	for i := range lat {
		lat[i] = update(i)
	}
	return lat
}

// BenchmarkCreateAtScale: reservations.create (count 1, the next hour)
// through the local gateway at 0 to 100,000 live allocations in one
// 100,000-device pool and in one 4,096-device pool, 10,000 of them (at
// most) the creating tenant's. Reported per
// create: p50/p99, DynamoDB round trips, read and write units, the p50 of a
// raw conditional UpdateItem interleaved with the creates and the ratio;
// above 0 live, units and p50 against those at 0 (and the p50 ratio of the
// ratios, which cancels the machine's drift between levels).
func BenchmarkCreateAtScale(b *testing.B) {
	const n = 400
	levels := []struct{ devices, live int }{
		{scaleDevices, 0}, {scaleDevices, 1_000}, {scaleDevices, 10_000}, {scaleDevices, 100_000},
		// The pool: 4,096 devices, live reservations on today and
		// the days after (two per device already broke the old calendar).
		{4096, 0}, {4096, 500}, {4096, 6_000}, {4096, 100_000},
	}
	type baseline struct {
		units, p50, ratio float64
	}
	base := map[int]baseline{}
	for _, l := range levels {
		b.Run(fmt.Sprintf("pool-%d/live-%d", l.devices, l.live), func(b *testing.B) {
			for b.Loop() {
				s := newScale(b, l.devices)
				s.provision(b)
				s.seed(b, l.live, min(l.live, 10_000))
				lat, raw, per := s.creates(b, n, 1)
				p50, rawP50 := pct(lat, 0.5), pct(raw, 0.5)
				b.ReportMetric(p50, "p50-ms")
				b.ReportMetric(pct(lat, 0.99), "p99-ms")
				b.ReportMetric(float64(per.Calls), "ddb-calls/op")
				b.ReportMetric(per.RCU, "rcu/op")
				b.ReportMetric(per.WCU, "wcu/op")
				b.ReportMetric(rawP50, "raw-update-p50-ms")
				b.ReportMetric(p50/rawP50, "create/raw-p50")
				if l.live == 0 {
					base[l.devices] = baseline{per.Units(), p50, p50 / rawP50}
				} else if bl, ok := base[l.devices]; ok {
					b.ReportMetric(per.Units()/bl.units, "units-vs-0-live")
					b.ReportMetric(p50/bl.p50, "p50-vs-0-live")
					b.ReportMetric((p50/rawP50)/bl.ratio, "raw-normalised-p50-vs-0-live")
				}
			}
		})
	}
}

// provision runs one reconciler pass: the pool's next hours are stored, as
// they are a minute after a pool is created (two hours: what the
// benchmarks' windows use).
func (s *scale) provision(b *testing.B) {
	b.Helper()
	rc := s.st.App.Reconciler()
	rc.Capacity.ProvisionHours = 2
	res, err := rc.Pass(context.Background())
	if err != nil || res.Provisioned == 0 {
		b.Fatalf("provisioning pass: %+v %v", res, err)
	}
}

// BenchmarkConcurrentCreates: 64 creates at once on one 4,096-device pool
// (its days provisioned), six rounds, straight on the capacity service
// (its retry counter): the placement retries per create, for single
// devices, quads, whole nodes and a mix of 1..8.
func BenchmarkConcurrentCreates(b *testing.B) {
	for _, count := range []int{1, 4, 8, 0} {
		name := fmt.Sprintf("count-%d", count)
		if count == 0 {
			name = "count-1..8"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				s := newScale(b, 4096)
				s.provision(b)
				svc := s.st.App.CapacityService()
				ctx := context.Background()
				w := s.next().Window()
				start, end := w.Start, w.End
				warm := capacity.CreateRequest{TenantID: "acme", PoolID: "scale", Resource: "gpu", Count: 1, Start: &start, End: end}
				if _, err := svc.Admission().Create(ctx, warm, allowAll); err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(3, 4))
				const racers, rounds = 64, 6
				before := svc.Admission().PlaceRetries()
				creates, failed := 0, 0
				for range rounds {
					var wg sync.WaitGroup
					var mu sync.Mutex
					for range racers {
						c := count
						if c == 0 {
							c = 1 + rng.IntN(8)
						}
						wg.Add(1)
						go func() {
							defer wg.Done()
							_, err := svc.Admission().Create(ctx, capacity.CreateRequest{TenantID: "acme", PoolID: "scale", Resource: "gpu", Count: c, Start: &start, End: end}, allowAll)
							mu.Lock()
							creates++
							if err != nil {
								failed++
							}
							mu.Unlock()
						}()
					}
					wg.Wait()
				}
				b.ReportMetric(float64(svc.Admission().PlaceRetries()-before)/float64(creates), "retries/create")
				b.ReportMetric(float64(failed), "failed")
			}
		})
	}
}

func allowAll(context.Context, map[string]any) error { return nil }

// BenchmarkLargeCreate: what one count-1,024 create (128 whole nodes)
// costs, for an hour already provisioned.
func BenchmarkLargeCreate(b *testing.B) {
	for b.Loop() {
		s := newScale(b, 4096)
		s.provision(b)
		raw, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "scale", "resource": "gpu", "count": 1024,
			"window": map[string]any{"start": s.next().Start().Format(time.RFC3339), "end": s.next().End().Format(time.RFC3339)}})
		before := s.m.Usage()
		d, _ := s.srv.do(b, "reservations/create", raw)
		after := s.m.Usage()
		b.ReportMetric(float64(d.Microseconds())/1000, "ms")
		b.ReportMetric(float64(after.Calls-before.Calls), "ddb-calls/op")
		b.ReportMetric(after.RCU-before.RCU, "rcu/op")
		b.ReportMetric(after.WCU-before.WCU, "wcu/op")
	}
}

// BenchmarkFragmentation: creates of 1..8 devices (topology node) fill a
// 4,096-device pool to 75% for the same window; how many whole nodes are
// left, next to what an optimal packing of the same requests leaves
// (every node full but one: nodes − ⌈Σcount / 8⌉).
func BenchmarkFragmentation(b *testing.B) {
	for b.Loop() {
		s := newScale(b, 4096)
		s.provision(b)
		svc := s.st.App.CapacityService()
		ctx := context.Background()
		w := s.next().Window()
		start, end := w.Start, w.End
		rng := rand.New(rand.NewPCG(1, 2))
		total := 0
		for total < 4096*3/4 {
			c := 1 + rng.IntN(8)
			if _, err := svc.Admission().Create(ctx, capacity.CreateRequest{TenantID: "acme", PoolID: "scale", Resource: "gpu", Count: c, Start: &start, End: end}, allowAll); err != nil {
				b.Fatal(err)
			}
			total += c
		}
		whole := 0
		pr := capacity.PoolResource{PoolID: "scale", Topology: s.top}
		if err := s.store.Hour(ctx, pr, s.next(), func(nd capacity.NodeHour) error {
			if nd.Untouched == nd.Size {
				whole++
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		optimal := s.top.Nodes() - (total+scaleNodeSize-1)/scaleNodeSize
		b.ReportMetric(float64(whole), "whole-free-nodes")
		b.ReportMetric(float64(optimal), "optimal-whole-free-nodes")
		b.ReportMetric(float64(whole)/float64(optimal), "of-optimal")
	}
}

// opTimes records how long each kind of DynamoDB request takes, by
// operation and item kind (the key's prefix).
type opTimes struct {
	mu sync.Mutex
	by map[string]time.Duration
}

func (t *opTimes) option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("benchOpTimes",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					start := time.Now()
					out, md, err := next.HandleInitialize(ctx, in)
					d := time.Since(start)
					kind := middleware.GetOperationName(ctx)
					var k map[string]types.AttributeValue
					switch p := in.Parameters.(type) {
					case *dynamodb.UpdateItemInput:
						k = p.Key
					case *dynamodb.PutItemInput:
						k = p.Item
					}
					if sk, ok := k[schema.AttrSK].(*types.AttributeValueMemberS); ok {
						kind += " " + strings.SplitN(sk.Value, "#", 2)[0]
					}
					t.mu.Lock()
					t.by[kind] += d
					t.mu.Unlock()
					return out, md, err
				}), middleware.After)
		})
	}
}

// BenchmarkCreateBreakdown: where a create's time goes, through the local
// gateway on a provisioned 4,096-device pool: the time of each kind of
// DynamoDB request per create (the draft's PutItem and the candidates'
// Query run at once), their sum, and the create's p50.
func BenchmarkCreateBreakdown(b *testing.B) {
	for b.Loop() {
		ot := &opTimes{by: map[string]time.Duration{}}
		st := startStack(b, teststack.WithAppOptions(app.WithDynamoOptions(ot.option())))
		srv := &server{URL: st.URL}
		raw, _ := json.Marshal(map[string]any{"tenantId": "owner", "poolId": "p", "resources": map[string]any{"gpu": 4096}})
		srv.do(b, "pools/create", raw)
		rc := st.App.Reconciler()
		rc.Capacity.ProvisionHours = 2
		if _, err := rc.Pass(context.Background()); err != nil {
			b.Fatal(err)
		}
		next := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
		body, _ := json.Marshal(map[string]any{"tenantId": "owner", "poolId": "p", "resource": "gpu", "count": 1,
			"window": map[string]any{"start": next.Format(time.RFC3339), "end": next.Add(time.Hour).Format(time.RFC3339)}})
		for range 20 { // warm dynalite's JIT
			srv.do(b, "reservations/create", body)
		}
		ot.mu.Lock()
		clear(ot.by)
		ot.mu.Unlock()
		const n = 300
		lat := make([]time.Duration, n)
		for i := range lat {
			lat[i], _ = srv.do(b, "reservations/create", body)
		}
		var sum time.Duration
		for kind, d := range ot.by {
			ms := float64(d.Microseconds()) / 1000 / n
			sum += d
			b.ReportMetric(ms, strings.ReplaceAll(kind, " ", ":")+"-ms")
		}
		b.ReportMetric(float64(sum.Microseconds())/1000/n, "ddb-sum-ms")
		b.ReportMetric(pct(lat, 0.5), "p50-ms")
		b.ReportMetric(pct(rawUpdate(b, st, n), 0.5), "raw-update-p50-ms")
	}
}
