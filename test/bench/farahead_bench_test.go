package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/meter"
	"github.com/bettercompute/control-plane/test/teststack"
)

// The far-ahead benchmarks (docs/capacity.md, "Beyond the provisioned
// horizon"): creates into an hour four days ahead — past the
// 72-hour provisioned horizon, where only what was placed is stored and
// the hour's occupancy map says which nodes hold anything — booked 0, 50,
// 90 and 99 % by whole-node reservations or by single-device ones (placed
// as best fit places them: node after node filled, so a level's booked
// nodes are full and the rest untouched). Seeded through the store (the
// node-hours, the hour's occupancy map, the quota rows); the measured
// creates are not released, so each whole-node create takes a node nothing
// was placed on (the map's path), as a booking of that hour would.

// farWindow is 10:00–11:00 UTC four days from now; farFree is 15:00 of the
// same day (nothing booked).
func (s *scale) farWindow() api.Window {
	return capacity.HourOf(s.now.Truncate(24 * time.Hour).Add(4*24*time.Hour + 10*time.Hour)).Window()
}

func (s *scale) farFree() api.Window {
	return capacity.HourOf(s.now.Truncate(24 * time.Hour).Add(4*24*time.Hour + 15*time.Hour)).Window()
}

// bookFar books pct percent of w's devices: whole nodes (one reservation
// each) or single devices (eight a node), on a shuffled pct percent of the
// nodes, and writes the hour's occupancy map as the creates would have.
func (s *scale) bookFar(b *testing.B, w api.Window, pct int, single bool) {
	b.Helper()
	ctx := context.Background()
	pr := capacity.PoolResource{PoolID: "scale", Topology: s.top}
	nodes := s.top.Nodes()
	booked := nodes * pct / 100
	order := rand.New(rand.NewPCG(uint64(pct), uint64(nodes))).Perm(nodes)[:booked]
	var nhs []capacity.NodeHour
	n := 0
	for _, k := range order {
		ids := make([]string, 0, scaleNodeSize)
		for range map[bool]int{true: scaleNodeSize, false: 1}[single] {
			n++
			ids = append(ids, fmt.Sprintf("BOOK%07d", n))
		}
		for _, h := range capacity.HoursOf(w) { // each booking holds the whole window
			nh := capacity.EmptyNodeHour(pr, capacity.NodeHourKey{Node: k, Hour: h})
			if single {
				for d := range nh.Size {
					nh.Add(ids[d], capacity.Entry{Mask: 1 << uint(d), Window: w, Tenant: "others"})
				}
			} else {
				nh.Add(ids[0], capacity.Entry{Mask: capacity.Full(nh.Size), Window: w, Tenant: "others"})
			}
			nhs = append(nhs, nh)
		}
	}
	quotas := []api.Quota{{TenantID: "others", PoolID: "scale", Resource: "gpu", Max: 1_000_000, Used: int64(booked * scaleNodeSize)}}
	if err := s.store.BulkLoad(ctx, nil, nhs, quotas); err != nil {
		b.Fatal(err)
	}
	for _, h := range capacity.HoursOf(w) {
		if booked > 0 {
			if err := s.store.Occupy(ctx, pr, h, order); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// createsKept runs n creates of count into w over HTTP, none released,
// and returns their latencies, the DynamoDB cost per create and how many
// were refused.
func (s *scale) createsKept(b *testing.B, n, count int, w api.Window) (lat []time.Duration, per meter.Usage, refused int) {
	b.Helper()
	body, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "scale", "resource": "gpu", "count": count,
		"window": map[string]any{"start": w.Start.Format(time.RFC3339), "end": w.End.Format(time.RFC3339)}})
	var used meter.Usage
	lat = make([]time.Duration, n)
	for i := range lat {
		before := s.m.Usage()
		d, status, out := s.srv.try(b, "reservations/create", body)
		after := s.m.Usage()
		lat[i] = d
		used.Calls += after.Calls - before.Calls
		used.RCU += after.RCU - before.RCU
		used.WCU += after.WCU - before.WCU
		switch status {
		case http.StatusOK:
		case http.StatusConflict:
			refused++
		default:
			b.Fatalf("create: %d %s", status, out)
		}
	}
	return lat, meter.Usage{Calls: used.Calls / n, RCU: used.RCU / float64(n), WCU: used.WCU / float64(n)}, refused
}

// BenchmarkCreateFarAhead: whole-node (count 8) and single-device creates
// into the far hour booked 0/50/90/99 % by whole nodes or single devices,
// in a 4,096-device pool and a 100,000-device one, and the same creates
// into a free hour of that day; per create p50, DynamoDB calls, read and
// write units, and against the empty pool's (level 0) units and p50. The
// measured creates are kept: at most half the untouched nodes are taken
// (5 of the 4,096-device pool's at 99 %: 2 creates).
func BenchmarkCreateFarAhead(b *testing.B) {
	type key struct {
		devices, count int
		single         bool
	}
	type base struct{ rcu, units, p50 float64 }
	empty := map[key]base{}
	for _, devices := range []int{4096, scaleDevices} {
		for _, single := range []bool{false, true} {
			by := "nodes"
			if single {
				by = "devices"
			}
			for _, level := range []int{0, 50, 90, 99} {
				b.Run(fmt.Sprintf("pool-%d/booked-%d-by-%s", devices, level, by), func(b *testing.B) {
					for b.Loop() {
						s := newScale(b, devices)
						w := s.farWindow()
						s.bookFar(b, w, level, single)
						free := s.top.Nodes() - s.top.Nodes()*level/100
						n := max(1, min(50, free/2))
						// Warm dynalite's JIT on the free hour (not measured there).
						s.createsKept(b, 10, 1, s.farFree())
						for _, count := range []int{8, 1} {
							lat, per, refused := s.createsKept(b, n, count, w)
							p50 := pct50(lat)
							me := base{per.RCU, per.Units(), p50}
							tag := fmt.Sprintf("count%d-", count)
							b.ReportMetric(p50, tag+"p50-ms")
							b.ReportMetric(float64(per.Calls), tag+"ddb-calls/op")
							b.ReportMetric(per.RCU, tag+"rcu/op")
							b.ReportMetric(per.WCU, tag+"wcu/op")
							b.ReportMetric(float64(refused), tag+"refused")
							k := key{devices, count, single}
							if level == 0 {
								empty[k] = me
							} else if e, ok := empty[k]; ok {
								b.ReportMetric(me.rcu/e.rcu, tag+"rcu-vs-empty")
								b.ReportMetric(me.units/e.units, tag+"units-vs-empty")
								b.ReportMetric(me.p50/e.p50, tag+"p50-vs-empty")
							}
						}
						lat, per, _ := s.createsKept(b, 20, 8, s.farFree())
						b.ReportMetric(pct50(lat), "free-hour-count8-p50-ms")
						b.ReportMetric(per.Units(), "free-hour-count8-units/op")
					}
				})
			}
		}
	}
}

// BenchmarkFillFarHour repeats the measurement that found the far-ahead cost, the same way: one
// 100,000-device pool (12,500 nodes of 8), the provisioned horizon set to
// 2 hours, and 4 clients creating whole-node (count-8) reservations into
// one hour two days ahead until it is 95 % booked. Per band of the hour's
// bookings: mean and median latency, DynamoDB calls and read units per create (the
// meter's totals over the band's creates: all calls in flight are
// creates). One run (b.N is ignored: the run is the measurement).
func BenchmarkFillFarHour(b *testing.B) {
	const clients = 4
	for b.Loop() {
		m := &meter.Meter{}
		st := startStack(b, teststack.WithAppOptions(app.WithDynamoOptions(dynamo.MeterAll(m))),
			teststack.WithConfig(func(c *app.Config) { c.ProvisionHours = 2 }))
		s := &scale{st: st, srv: &server{URL: st.URL}, m: m, now: time.Now().UTC()}
		s.call(b, "pools.create", map[string]any{"tenantId": "owner", "poolId": "scale", "resources": map[string]any{"gpu": scaleDevices},
			"nodeSize": map[string]any{"gpu": scaleNodeSize}})
		s.call(b, "pools.offer", map[string]any{"tenantId": "owner", "poolId": "scale", "toTenantId": "acme", "resource": "gpu", "max": 1_000_000})
		w := capacity.HourOf(s.now.Truncate(24 * time.Hour).Add(2*24*time.Hour + 10*time.Hour)).Window()
		body, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "scale", "resource": "gpu", "count": scaleNodeSize,
			"window": map[string]any{"start": w.Start.Format(time.RFC3339), "end": w.End.Format(time.RFC3339)}})
		nodes := scaleDevices / scaleNodeSize
		target := nodes * 95 / 100
		bands := []int{0, 10, 50, 70, 80, 90, 95} // percent booked
		type band struct {
			creates   int
			lat       time.Duration
			lats      []time.Duration
			from, to  meter.Usage
			started   bool
			refused   int
			unplanned int
		}
		out := make([]band, len(bands)-1)
		var mu sync.Mutex
		var next atomic.Int64
		var wg sync.WaitGroup
		bandOf := func(k int) int {
			pct := k * 100 / nodes
			for i := len(bands) - 2; i >= 0; i-- {
				if pct >= bands[i] {
					return i
				}
			}
			return 0
		}
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := int(next.Add(1)) - 1
					if k >= target {
						return
					}
					i := bandOf(k)
					mu.Lock()
					if !out[i].started {
						out[i].started, out[i].from = true, m.Usage()
					}
					mu.Unlock()
					d, status, resp := s.srv.try(b, "reservations/create", body)
					mu.Lock()
					out[i].creates++
					out[i].lat += d
					out[i].lats = append(out[i].lats, d)
					out[i].to = m.Usage()
					switch status {
					case http.StatusOK:
					case http.StatusConflict:
						out[i].refused++
					default:
						out[i].unplanned++
						b.Logf("create %d: %d %s", k, status, resp)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for i, o := range out {
			tag := fmt.Sprintf("booked-%d-%d-", bands[i], bands[i+1])
			n := float64(o.creates)
			b.ReportMetric(float64(o.lat.Microseconds())/1000/n, tag+"mean-ms")
			b.ReportMetric(pct50(o.lats), tag+"p50-ms")
			b.ReportMetric(float64(o.to.Calls-o.from.Calls)/n, tag+"calls")
			b.ReportMetric((o.to.RCU-o.from.RCU)/n, tag+"rcu")
			b.ReportMetric(float64(o.refused+o.unplanned), tag+"not-placed")
		}
	}
}

// BenchmarkCreateFarAheadDay: the same levels for a whole day four days
// ahead, booked by 24-hour reservations, and 24-hour creates into it (each
// reads the day's 24 maps, puts 24 node-hours and writes 24 maps), in the
// 4,096-device pool (the 100,000-device pool's day is 300,000 seeded
// node-hours a level: not run).
func BenchmarkCreateFarAheadDay(b *testing.B) {
	type base struct{ rcu, p50 float64 }
	empty := map[[2]int]base{}
	for _, single := range []bool{false, true} {
		by := "nodes"
		if single {
			by = "devices"
		}
		for _, level := range []int{0, 50, 90, 99} {
			b.Run(fmt.Sprintf("pool-4096/day-booked-%d-by-%s", level, by), func(b *testing.B) {
				for b.Loop() {
					s := newScale(b, 4096)
					day := s.farWindow()
					day.Start = day.Start.Truncate(24 * time.Hour)
					day.End = day.Start.Add(24 * time.Hour)
					s.bookFar(b, day, level, single)
					free := s.top.Nodes() - s.top.Nodes()*level/100
					n := max(1, min(20, free/2))
					s.createsKept(b, 5, 1, capacity.HourOf(day.Start.Add(48*time.Hour)).Window()) // warm up, on another day
					for _, count := range []int{8, 1} {
						lat, per, refused := s.createsKept(b, n, count, day)
						tag := fmt.Sprintf("count%d-", count)
						p50 := pct50(lat)
						b.ReportMetric(p50, tag+"p50-ms")
						b.ReportMetric(float64(per.Calls), tag+"ddb-calls/op")
						b.ReportMetric(per.RCU, tag+"rcu/op")
						b.ReportMetric(per.WCU, tag+"wcu/op")
						b.ReportMetric(float64(refused), tag+"refused")
						k := [2]int{count, map[bool]int{true: 1}[single]}
						if level == 0 {
							empty[k] = base{per.RCU, p50}
						} else if e, ok := empty[k]; ok {
							b.ReportMetric(per.RCU/e.rcu, tag+"rcu-vs-empty")
							b.ReportMetric(p50/e.p50, tag+"p50-vs-empty")
						}
					}
				}
			})
		}
	}
}
