package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/meter"
)

// BenchmarkHeartbeat is what a heartbeat costs (docs/fleet.md,
// Heartbeats): steady — a warm, healthy node's report, the one
// conditional write — and transition — a ready node's first unhealthy
// report, which takes it out of placement before it answers (the pool's
// read, the claim, the node-hours' flags over the horizon, the record).
// Reported per heartbeat: DynamoDB calls, read and write units.
func BenchmarkHeartbeat(b *testing.B) {
	b.Run("steady", func(b *testing.B) {
		e := newEnv(b)
		e.pool(b, "p1", 8)
		e.register(b, "p1", nodeName(0))
		e.ready(b, "p1", nodeName(0))
		e.pass(b)
		e.ready(b, "p1", nodeName(0)) // warm: the key and the baseline cached
		var calls, rcu, wcu float64
		b.ResetTimer()
		for range b.N {
			rep := e.report("p1", nodeName(0))
			m := &meter.Meter{}
			if _, err := e.fleet.Heartbeat(meter.With(context.Background(), m), "acme", "p1", nodeName(0), sign(b, rep, e.keys["p1/"+nodeName(0)])); err != nil {
				b.Fatal(err)
			}
			u := m.Usage()
			calls, rcu, wcu = calls+float64(u.Calls), rcu+u.RCU, wcu+u.WCU
		}
		b.ReportMetric(calls/float64(b.N), "calls/op")
		b.ReportMetric(rcu/float64(b.N), "rcu/op")
		b.ReportMetric(wcu/float64(b.N), "wcu/op")
	})
	b.Run("transition", func(b *testing.B) {
		e := newEnv(b)
		e.pool(b, "p1", 8)
		e.register(b, "p1", nodeName(0))
		var calls, rcu, wcu float64
		for range b.N {
			b.StopTimer()
			// Ready and lifted again by a sweep, warm.
			e.clock.Advance(time.Second)
			e.ready(b, "p1", nodeName(0))
			e.pass(b)
			e.ready(b, "p1", nodeName(0))
			b.StartTimer()
			rep := e.report("p1", nodeName(0))
			rep.Health.DevicesVisible = 7
			m := &meter.Meter{}
			ans, err := e.fleet.Heartbeat(meter.With(context.Background(), m), "acme", "p1", nodeName(0), sign(b, rep, e.keys["p1/"+nodeName(0)]))
			if err != nil || ans.Node.State != api.Unhealthy {
				b.Fatal(ans.Node.State, err)
			}
			u := m.Usage()
			calls, rcu, wcu = calls+float64(u.Calls), rcu+u.RCU, wcu+u.WCU
		}
		b.ReportMetric(calls/float64(b.N), "calls/op")
		b.ReportMetric(rcu/float64(b.N), "rcu/op")
		b.ReportMetric(wcu/float64(b.N), "wcu/op")
	})
}
