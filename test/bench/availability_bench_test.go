package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/meter"
)

// The availability benchmarks (pools.availability; docs/capacity.md, "When
// can I get it?"): answers over 7 and 31 days of starts, for counts of 1,
// 8 and 64 (one device, a node, eight whole nodes) and windows of one hour
// and a day, in a 4,096-device pool and a 100,000-device one (nodes of 8)
// booked 0, 50 and 95 % over the whole span.
//
// The bookings: each node's hours alternate busy and free — busy runs of
// 1 to 47 hours (a day on average), free runs as long as the level makes
// them — and one busy run in availPartialShare holds only some of the
// node's devices (fragments the hour's read sees). The first
// availProvisioned hours are provisioned (every node-hour stored, then
// the marker), as a pool whose reconciler has provisioned that far; the
// hours after are not: a node-hour is stored only where something is
// booked, and each hour's occupancy map names those nodes.
//
// What is written: every node-hour the search can read — every one with a
// free device — and each hour's marker or map. A node-hour with no free
// device is named by its hour's map (or covered by the marker) but not
// written: the search's reads of the `fit` order stop above it, so its
// presence changes no read, no answer and no unit (TestAvailabilityBench
// StateIsHonest compares the two on a pool stored whole), and writing it
// would make the 100,000-device pool booked 95 % over 31 days 9 million
// items.
const (
	availProvisioned  = 6
	availPartialShare = 0.02
	availMargin       = 6 // hours of state past the longest search (the clock moves while it runs)
)

// availBooking is a pool's state over hours from its first hour.
type availBooking struct {
	pool        string
	top         capacity.Topology
	first       capacity.Hour
	hours       int
	provisioned int
	pct         int
	full        bool // also write the node-hours with no free device
	seed        uint64
}

// load writes the state through store and returns the share of the span's
// device-hours booked.
func (bk availBooking) load(tb testing.TB, store *capacitydb.Store) float64 {
	tb.Helper()
	ctx := context.Background()
	pr := capacity.PoolResource{PoolID: bk.pool, Topology: bk.top}
	rng := rand.New(rand.NewPCG(bk.seed, uint64(bk.pct)))
	nodes := bk.top.Nodes()
	p := float64(bk.pct) / 100
	stored := make([][]uint64, bk.hours) // per hour: the nodes with a node-hour stored (or due, when not written)
	for i := range stored {
		stored[i] = make([]uint64, (nodes+63)/64)
	}
	var batch []capacity.NodeHour
	flush := func(force bool) {
		if len(batch) >= 20_000 || (force && len(batch) > 0) {
			if err := store.BulkLoad(ctx, nil, batch, nil); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	busyHours, id := 0.0, 0
	for k := range nodes {
		size := bk.top.Size(k)
		busy := p > 0 && rng.Float64() < p
		for t := 0; t < bk.hours; {
			if !busy {
				n := bk.hours
				if p > 0 { // free runs of mean 24·(1−p)/p hours
					n = 1 + int(rng.ExpFloat64()*max(0, 24*(1-p)/p-1))
				}
				for h := t; h < min(t+n, bk.hours); h++ {
					if h < bk.provisioned {
						batch = append(batch, capacity.EmptyNodeHour(pr, capacity.NodeHourKey{Node: k, Hour: bk.first + capacity.Hour(h)}))
						flush(false)
					}
				}
				t, busy = t+n, true
				continue
			}
			n := 1 + rng.IntN(47)
			mask := capacity.Full(size)
			if size > 1 && rng.Float64() < availPartialShare {
				mask = capacity.Full(1 + rng.IntN(size-1))
			}
			id++
			w := api.Window{Start: (bk.first + capacity.Hour(t)).Start(), End: (bk.first + capacity.Hour(min(t+n, bk.hours))).Start()}
			for h := t; h < min(t+n, bk.hours); h++ {
				busyHours += float64(mask.Count()) / float64(size)
				stored[h][k>>6] |= 1 << uint(k&63)
				if mask == capacity.Full(size) && !bk.full {
					continue
				}
				nh := capacity.EmptyNodeHour(pr, capacity.NodeHourKey{Node: k, Hour: bk.first + capacity.Hour(h)})
				nh.Add(fmt.Sprintf("BOOK%08d", id), capacity.Entry{Mask: mask, Window: w, Tenant: "others"})
				batch = append(batch, nh)
				flush(false)
			}
			t, busy = t+n, false
		}
	}
	flush(true)
	for i := range bk.hours {
		h := bk.first + capacity.Hour(i)
		if i < bk.provisioned {
			if err := store.PutHour(ctx, pr, h); err != nil {
				tb.Fatal(err)
			}
			continue
		}
		var ks []int
		for j, w := range stored[i] {
			for ; w != 0; w &= w - 1 {
				ks = append(ks, j<<6|bits.TrailingZeros64(w))
			}
		}
		if len(ks) > 0 {
			if err := store.Occupy(ctx, pr, h, ks); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return busyHours / float64(nodes*bk.hours)
}

// availabilityAnswers asks n times over HTTP (after a warm-up) and returns
// the latencies, the DynamoDB cost per answer and the last answer.
func (s *scale) availabilityAnswers(b testing.TB, pool string, n, count, hours, days int) ([]time.Duration, meter.Usage, api.Availability) {
	b.Helper()
	body, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": pool, "resource": "gpu", "count": count, "hours": hours,
		"to": time.Now().UTC().Add(time.Duration(days) * 24 * time.Hour).Format(time.RFC3339)})
	var ans api.PoolAvailabilityResult
	for range 2 {
		s.srv.do(b, "pools/availability", body)
	}
	var used meter.Usage
	lat := make([]time.Duration, n)
	for i := range lat {
		before := s.m.Usage()
		d, out := s.srv.do(b, "pools/availability", body)
		after := s.m.Usage()
		lat[i] = d
		used.Calls += after.Calls - before.Calls
		used.RCU += after.RCU - before.RCU
		if err := json.Unmarshal(out, &ans); err != nil {
			b.Fatal(err)
		}
	}
	return lat, meter.Usage{Calls: used.Calls / n, RCU: used.RCU / float64(n)}, ans.Availability
}

// BenchmarkAvailability: per pool size one stack, and in it one pool per
// level, each with its state over 31 days and a day; per search (7 or 31
// days of starts, count, window) the p50 of its answers, DynamoDB calls
// and read units per answer, against the empty pool's (calls-vs-empty,
// units-vs-empty) and the 4,096-device pool's (units-vs-4096), and what it
// answered: offerings, the starts they hold (offered-h) and whether it
// was partial. The stack's table outlives the levels (a table dropped
// after a large load keeps dynalite busy past the next one's creation)
// and is dropped, and waited for, at the end.
func BenchmarkAvailability(b *testing.B) {
	type key struct{ devices, level, days, count, hours int }
	seen := map[key]meter.Usage{}
	for _, devices := range []int{4096, scaleDevices} {
		s := newScale(b, devices)
		dropWhenDone(b, s)
		for _, level := range []int{0, 50, 95} {
			b.Run(fmt.Sprintf("pool-%d/booked-%d", devices, level), func(sb *testing.B) {
				pool := fmt.Sprintf("avail-%d", level)
				s.call(sb, "pools.create", map[string]any{"tenantId": "owner", "poolId": pool, "resources": map[string]any{"gpu": devices},
					"nodeSize": map[string]any{"gpu": scaleNodeSize}})
				s.call(sb, "pools.offer", map[string]any{"tenantId": "owner", "poolId": pool, "toTenantId": "acme", "resource": "gpu", "max": 1_000_000})
				bk := availBooking{pool: pool, top: s.top, first: capacity.HourOf(time.Now()), hours: 31*24 + 24 + availMargin,
					provisioned: availProvisioned, pct: level, seed: 41}
				started := time.Now()
				booked := bk.load(sb, s.store)
				sb.Logf("pool-%d booked %.1f %% of its device-hours (asked %d %%), loaded in %s", devices, 100*booked, level, time.Since(started).Round(time.Second))
				for _, days := range []int{7, 31} {
					for _, count := range []int{1, 8, 64} {
						for _, hours := range []int{1, 24} {
							sb.Run(fmt.Sprintf("%dd/count-%d/window-%dh", days, count, hours), func(b *testing.B) {
								n := map[int]int{7: 10, 31: 5}[days]
								for b.Loop() {
									lat, per, ans := s.availabilityAnswers(b, pool, n, count, hours, days)
									b.ReportMetric(pct50(lat), "p50-ms")
									b.ReportMetric(float64(per.Calls), "ddb-calls/op")
									b.ReportMetric(per.RCU, "rcu/op")
									b.ReportMetric(100*booked, "booked-%")
									offered := 0
									for _, o := range ans.Offerings {
										offered += int(o.LatestStart.Sub(o.EarliestStart)/time.Hour) + 1
									}
									b.ReportMetric(float64(len(ans.Offerings)), "offerings")
									b.ReportMetric(float64(offered), "offered-h")
									b.ReportMetric(map[bool]float64{true: 1}[ans.Partial], "partial")
									seen[key{devices, level, days, count, hours}] = per
									if e, ok := seen[key{devices, 0, days, count, hours}]; ok && level > 0 {
										b.ReportMetric(float64(per.Calls)/float64(e.Calls), "calls-vs-empty")
										b.ReportMetric(per.RCU/e.RCU, "units-vs-empty")
									}
									if sm, ok := seen[key{4096, level, days, count, hours}]; ok && devices != 4096 {
										b.ReportMetric(per.RCU/sm.RCU, "units-vs-4096")
									}
								}
							})
						}
					}
				}
			})
		}
	}
}

// dropWhenDone drops s's table when tb ends and waits (up to 15 minutes)
// until dynalite has deleted it, so the next benchmark's table is created
// on an idle server.
func dropWhenDone(tb testing.TB, s *scale) {
	tb.Cleanup(func() {
		db, table := s.store.DB, s.store.Table
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		if _, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			tb.Logf("drop %s: %v", table, err)
			return
		}
		for ctx.Err() == nil {
			if _, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}); err != nil {
				return // gone (or the server answers no more: nothing to wait for)
			}
			if conc.Sleep(ctx, time.Second) != nil { // polling the deletion: no event to wait on
				return
			}
		}
	})
}

// The benchmark's shortcut changes nothing the search sees: a pool booked
// half over two days, written whole (every node-hour, busy ones included)
// and as the benchmark writes it, answers every search alike, in the same
// calls and read units.
func TestAvailabilityBenchStateIsHonest(t *testing.T) {
	type result struct {
		ans  api.Availability
		cost meter.Usage
	}
	run := func(full bool) []result {
		s := newScale(t, 1024)
		bk := availBooking{pool: "scale", top: s.top, first: capacity.HourOf(s.now), hours: 2*24 + 24 + availMargin, provisioned: availProvisioned,
			pct: 50, full: full, seed: 7}
		bk.load(t, s.store)
		var out []result
		for _, count := range []int{1, 8, 64} {
			for _, hours := range []int{1, 24} {
				_, per, ans := s.availabilityAnswers(t, "scale", 1, count, hours, 2)
				ans.From, ans.To = time.Time{}, time.Time{} // the clock's, per stack
				out = append(out, result{ans, per})
			}
		}
		return out
	}
	var whole, short []result
	for range 2 { // again if an hour began meanwhile: the searches' starts moved
		h := capacity.HourOf(time.Now())
		if whole, short = run(true), run(false); capacity.HourOf(time.Now()) == h {
			break
		}
	}
	for i := range whole {
		a, b := whole[i], short[i]
		if fmt.Sprint(a.ans) != fmt.Sprint(b.ans) || a.cost.Calls != b.cost.Calls || a.cost.RCU != b.cost.RCU {
			t.Errorf("search %d: stored whole %+v in %d calls, %.1f units; as benchmarked %+v in %d calls, %.1f units",
				i, a.ans, a.cost.Calls, a.cost.RCU, b.ans, b.cost.Calls, b.cost.RCU)
		}
	}
}
