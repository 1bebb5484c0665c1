package capacity_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// seedPlaced writes n placed reservations whose windows started during the
// minute before now (what a rate(1 minute) schedule finds), straight into
// storage: the pass's work is the same as for reservations made through
// the API (placed → binding → active: two conditional writes each).
func seedPlaced(b *testing.B, e *env, n int) {
	b.Helper()
	now := e.clock.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				start := now.Add(-time.Duration(i) * time.Minute / time.Duration(n))
				r := capacity.Reservation{Reservation: api.Reservation{ReservationID: fmt.Sprintf("B%025d", i), TenantID: fmt.Sprintf("t%03d",
					i%100), PoolID: "p1", Resource: "gpu", Count: 1, Window: api.Window{Start: start, End: start.Add(time.Hour)},
					State: api.Placed, DeviceIDs: []string{"gpu-0"}, CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)},
					Due: start}
				if _, err := e.store.PutDraft(context.Background(), r); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// memory is what peakHeap saw: the allocated heap above its level at the
// start (live data plus garbage not yet collected: bounded by the GC's
// target), and the live heap the GC marked above its level at the start
// (what the pass retains).
type memory struct{ alloc, live uint64 }

// peakHeap samples the heap every millisecond until stop is closed.
func peakHeap(stop <-chan struct{}) <-chan memory {
	out := make(chan memory, 1)
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapAlloc
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	liveBase := live[0].Value.Uint64()
	go func() {
		var peak memory
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > base {
				peak.alloc = max(peak.alloc, m.HeapAlloc-base)
			}
			metrics.Read(live)
			if v := live[0].Value.Uint64(); v > liveBase {
				peak.live = max(peak.live, v-liveBase)
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// BenchmarkReconcilePass: one pass over n due reservations against the local
// DynamoDB — transitions per second, peak heap (flat from 1,000 to 10,000:
// the due index is streamed page by page into bounded workers) and the
// pass's lag (now − oldest dueAt).
func BenchmarkReconcilePass(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("due-%d", n), func(b *testing.B) {
			var transitions int
			var took time.Duration
			var peak memory
			var lag time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e := newEnv(b)
				seedPlaced(b, e, n)
				runtime.GC()
				stop := make(chan struct{})
				peakC := peakHeap(stop)
				b.StartTimer()
				t0 := time.Now()
				res, err := e.reconciler().Pass(context.Background())
				took += time.Since(t0)
				b.StopTimer()
				close(stop)
				m := <-peakC
				peak.alloc, peak.live = max(peak.alloc, m.alloc), max(peak.live, m.live)
				if err != nil || res.Errors != 0 || res.Transitions["active"] != n {
					b.Fatalf("pass: %+v %v", res, err)
				}
				transitions += res.TransitionCount()
				lag = res.Lag
				b.StartTimer()
			}
			b.ReportMetric(float64(transitions)/took.Seconds(), "transitions/s")
			b.ReportMetric(float64(peak.alloc)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(peak.live)/(1<<20), "peak-live-MB")
			b.ReportMetric(float64(lag.Milliseconds()), "lag-ms")
		})
	}
}
