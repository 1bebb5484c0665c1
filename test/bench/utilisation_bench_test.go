package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/meter"
)

// The utilisation benchmarks (issue "capacity at real utilisation"): what
// reservations.create costs when the pool is busy in the requested window,
// against an empty pool and across pool sizes, and what a refusal costs.
//
// The window is tomorrow 10:00–11:00 UTC. A level books that share of its
// device-hours with one-hour reservations of 1, 2 or 4 devices: spread over
// the nodes (fragmented), but with a quarter of the free devices left as
// whole nodes (a few whole nodes free among many fragmented ones); and
// every node is touched that day besides (a device of each booked at
// 06:00). Seeded through the store: the node-hours with their entries and
// the quota rows (creates read and write nothing else; the seeded
// reservations' own items are not written).

// window is tomorrow 10:00–11:00 UTC.
func (s *scale) window() api.Window {
	h := capacity.HourOf(s.now.Truncate(24 * time.Hour).Add(24*time.Hour + 10*time.Hour))
	return h.Window()
}

// book seeds the window booked to pct percent, and 06:00 of its day with a
// device of every node.
func (s *scale) book(b *testing.B, w api.Window, pct int) {
	b.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(pct), uint64(s.top.Devices)))
	pr := capacity.PoolResource{PoolID: "scale", Topology: s.top}
	nodes := s.top.Nodes()
	devices := s.top.Devices
	booked := devices * pct / 100
	free := devices - booked
	whole := 0
	if pct > 0 {
		whole = (free/scaleNodeSize + 3) / 4 // a quarter of the free devices as whole nodes
	}
	// Free devices per node: whole nodes first (by a shuffled order), the
	// rest spread one at a time over the other nodes.
	freeOn := make([]int, nodes)
	order := rng.Perm(nodes)
	left := free
	for i := 0; i < nodes && (pct == 0 || i < whole); i++ {
		freeOn[order[i]] = scaleNodeSize
		left -= scaleNodeSize
	}
	for left > 0 { // one device at a time, never making a node whole
		if k := order[whole+rng.IntN(nodes-whole)]; freeOn[k] < scaleNodeSize-1 {
			freeOn[k]++
			left--
		}
	}
	var hours []capacity.NodeHour
	n := 0
	morning := capacity.HourOf(w.Start) - 4
	for k := range nodes {
		nh := capacity.EmptyNodeHour(pr, capacity.NodeHourKey{Node: k, Hour: capacity.HourOf(w.Start)})
		// The node's free devices are its lowest freeOn[k]; the busy ones
		// above them go to reservations of 1, 2 or 4 devices.
		for m := capacity.Full(nh.Size) &^ capacity.Full(freeOn[k]); m != 0; {
			size := []int{1, 2, 4}[rng.IntN(3)]
			e := m.Lowest(size)
			m &^= e
			n++
			nh.Add(fmt.Sprintf("BOOK%07d", n), capacity.Entry{Mask: e, Window: w})
		}
		hours = append(hours, nh)
		touch := capacity.EmptyNodeHour(pr, capacity.NodeHourKey{Node: k, Hour: morning})
		n++
		touch.Add(fmt.Sprintf("BOOK%07d", n), capacity.Entry{Mask: 1, Window: morning.Window()})
		hours = append(hours, touch)
	}
	quotas := []api.Quota{
		{TenantID: "acme", PoolID: "scale", Resource: "gpu", Max: 1_000_000},
		{TenantID: "others", PoolID: "scale", Resource: "gpu", Max: 1_000_000, Used: int64(n)},
	}
	if err := s.store.BulkLoad(ctx, nil, hours, quotas); err != nil {
		b.Fatal(err)
	}
	for _, h := range []capacity.Hour{capacity.HourOf(w.Start), morning} {
		if err := s.store.PutHour(ctx, pr, h); err != nil {
			b.Fatal(err)
		}
	}
}

// try is do for an answer that may be an error: its status as well.
func (s *server) try(b *testing.B, method string, body []byte) (time.Duration, int, []byte) {
	b.Helper()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/compute/"+method, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer dev:admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return time.Since(start), resp.StatusCode, data
}

// createsIn runs n creates of count into w over HTTP, each released at
// once (unmeasured: the pool stays at its level) and followed by one raw
// conditional UpdateItem; it returns both latencies, the DynamoDB cost per
// create, and how many were refused (CAPACITY_EXHAUSTED).
func (s *scale) createsIn(b *testing.B, n, count int, w api.Window) (lat, raw []time.Duration, per meter.Usage, refused int) {
	b.Helper()
	body, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "scale", "resource": "gpu", "count": count,
		"window": map[string]any{"start": w.Start.Format(time.RFC3339), "end": w.End.Format(time.RFC3339)}})
	update := rawUpdater(b, s.st)
	release := func(out []byte) {
		var res struct{ Reservation capacity.Reservation }
		if err := json.Unmarshal(out, &res); err != nil || res.Reservation.ReservationID == "" {
			b.Fatalf("create answered %s", out)
		}
		rel, _ := json.Marshal(map[string]any{"tenantId": "acme", "reservationId": res.Reservation.ReservationID})
		s.srv.do(b, "reservations/release", rel)
	}
	for i := range 20 { // warm dynalite's JIT
		if _, status, out := s.srv.try(b, "reservations/create", body); status == 200 {
			release(out)
		}
		update(i)
	}
	var used meter.Usage
	lat, raw = make([]time.Duration, n), make([]time.Duration, n)
	for i := range lat {
		before := s.m.Usage()
		d, status, out := s.srv.try(b, "reservations/create", body)
		after := s.m.Usage()
		lat[i] = d
		used.Calls += after.Calls - before.Calls
		used.RCU += after.RCU - before.RCU
		used.WCU += after.WCU - before.WCU
		switch status {
		case 200:
			release(out)
		case http.StatusConflict:
			refused++
		default:
			b.Fatalf("create: %d %s", status, out)
		}
		raw[i] = update(i)
	}
	per = meter.Usage{Calls: used.Calls / n, RCU: used.RCU / float64(n), WCU: used.WCU / float64(n)}
	return lat, raw, per, refused
}

// BenchmarkCreateAtUtilisation: creates of count 1 and 8 into a window
// booked 0, 50, 90 and 99 % (see book), in a 4,096-device pool and a
// 100,000-device one. Per create: p50/p99, DynamoDB calls, read and write
// units, the raw UpdateItem's p50 and the ratio; against the empty pool's
// (units and p50, and p50 normalised by each level's raw UpdateItem), and
// the 100,000-device pool's against the 4,096-device one's at the same
// level; refusals (a count of 8 finds no whole node free only when none
// is).
func BenchmarkCreateAtUtilisation(b *testing.B) {
	const n = 200
	type key struct{ devices, pct, count int }
	type base struct{ units, p50, ratio float64 }
	seen := map[key]base{}
	for _, devices := range []int{4096, scaleDevices} {
		for _, level := range []int{0, 50, 90, 99} {
			for _, count := range []int{1, 8} {
				b.Run(fmt.Sprintf("pool-%d/booked-%d/count-%d", devices, level, count), func(b *testing.B) {
					for b.Loop() {
						s := newScale(b, devices)
						w := s.window()
						s.book(b, w, level)
						lat, raw, per, refused := s.createsIn(b, n, count, w)
						p50, rawP50 := pct50(lat), pct50(raw)
						b.ReportMetric(p50, "p50-ms")
						b.ReportMetric(pct(lat, 0.99), "p99-ms")
						b.ReportMetric(float64(per.Calls), "ddb-calls/op")
						b.ReportMetric(per.RCU, "rcu/op")
						b.ReportMetric(per.WCU, "wcu/op")
						b.ReportMetric(rawP50, "raw-update-p50-ms")
						b.ReportMetric(p50/rawP50, "create/raw-p50")
						b.ReportMetric(float64(refused), "refused")
						me := base{per.Units(), p50, p50 / rawP50}
						seen[key{devices, level, count}] = me
						if empty, ok := seen[key{devices, 0, count}]; ok && level > 0 {
							b.ReportMetric(me.units/empty.units, "units-vs-empty")
							b.ReportMetric(me.p50/empty.p50, "p50-vs-empty")
							b.ReportMetric(me.ratio/empty.ratio, "normalised-p50-vs-empty")
						}
						if small, ok := seen[key{4096, level, count}]; ok && devices != 4096 {
							b.ReportMetric(me.units/small.units, "units-vs-4096")
							b.ReportMetric(me.ratio/small.ratio, "normalised-p50-vs-4096")
						}
					}
				})
			}
		}
	}
}

func pct50(lat []time.Duration) float64 { return pct(lat, 0.5) }

// BenchmarkRefusal: what a CAPACITY_EXHAUSTED costs, in both pools: a
// count of 1 for the window booked whole; for a 7-day window from it (its
// first hour booked whole proves it); and, in the 4,096-device pool only,
// for a 24-hour window in which every node is busy for one hour and free
// for the others — no single hour proves it, so every node-hour of the
// window is read (the documented worst case, which grows with the pool).
func BenchmarkRefusal(b *testing.B) {
	const n = 100
	run := func(b *testing.B, s *scale, w api.Window) {
		body, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "scale", "resource": "gpu", "count": 1,
			"window": map[string]any{"start": w.Start.Format(time.RFC3339), "end": w.End.Format(time.RFC3339)}})
		for range 10 {
			s.srv.try(b, "reservations/create", body)
		}
		var used meter.Usage
		lat := make([]time.Duration, n)
		for i := range lat {
			before := s.m.Usage()
			d, status, out := s.srv.try(b, "reservations/create", body)
			after := s.m.Usage()
			if status != http.StatusConflict {
				b.Fatalf("want CAPACITY_EXHAUSTED, got %d %s", status, out)
			}
			lat[i] = d
			used.Calls += after.Calls - before.Calls
			used.RCU += after.RCU - before.RCU
			used.WCU += after.WCU - before.WCU
		}
		b.ReportMetric(pct50(lat), "p50-ms")
		b.ReportMetric(float64(used.Calls/n), "ddb-calls/op")
		b.ReportMetric(used.RCU/n, "rcu/op")
		b.ReportMetric(used.WCU/n, "wcu/op")
	}
	for _, devices := range []int{4096, scaleDevices} {
		for _, days := range []int{0, 7} {
			name := fmt.Sprintf("pool-%d/window-1h", devices)
			if days > 0 {
				name = fmt.Sprintf("pool-%d/window-%dd", devices, days)
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					s := newScale(b, devices)
					w := s.window()
					s.book(b, w, 100)
					if days > 0 {
						w.End = w.Start.Add(time.Duration(days) * 24 * time.Hour)
					}
					run(b, s, w)
				}
			})
		}
	}
	b.Run("pool-4096/window-24h-every-node-busy-one-hour", func(b *testing.B) {
		for b.Loop() {
			s := newScale(b, 4096)
			w := s.window()
			w.End = w.Start.Add(24 * time.Hour)
			s.busyOneHourEach(b, w)
			run(b, s, w)
		}
	})
}

// busyOneHourEach books every node whole for one hour of w (a different
// hour from node to node) and provisions w's hours.
func (s *scale) busyOneHourEach(b *testing.B, w api.Window) {
	b.Helper()
	pr := capacity.PoolResource{PoolID: "scale", Topology: s.top}
	rng := rand.New(rand.NewPCG(7, 24))
	hours := capacity.HoursOf(w)
	var nhs []capacity.NodeHour
	for k := range s.top.Nodes() {
		busy := rng.IntN(len(hours))
		for i, h := range hours {
			nh := capacity.EmptyNodeHour(pr, capacity.NodeHourKey{Node: k, Hour: h})
			if i == busy {
				nh.Add(fmt.Sprintf("BUSY%06d", k), capacity.Entry{Mask: capacity.Full(nh.Size), Window: h.Window()})
			}
			nhs = append(nhs, nh)
		}
	}
	ctx := context.Background()
	if err := s.store.BulkLoad(ctx, nil, nhs, []api.Quota{{TenantID: "acme", PoolID: "scale", Resource: "gpu", Max: 1_000_000}}); err != nil {
		b.Fatal(err)
	}
	for _, h := range hours {
		if err := s.store.PutHour(ctx, pr, h); err != nil {
			b.Fatal(err)
		}
	}
}
