package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/meter"
)

// BenchmarkLongCreate: what a long booking costs — a whole-node create
// (count 8) of 1, 7, 30 and 90 days from tomorrow 00:00 UTC in a
// 512-device pool (64 nodes), then its release. A window writes one
// node-hour per hour it covers (24, 168, 720, 2,160), so the create's
// writes and latency grow with the window's length, by design (docs/
// capacity.md, Limits): per create and per release, p50, DynamoDB calls,
// read and write units. Each create lands on a node of its own (the pool
// has room for every one), so none is refused.
func BenchmarkLongCreate(b *testing.B) {
	const n = 5
	for _, days := range []int{1, 7, 30, 90} {
		b.Run(fmt.Sprintf("days-%d", days), func(b *testing.B) {
			for b.Loop() {
				s := newScale(b, 512)
				start := s.now.Truncate(24 * time.Hour).Add(24 * time.Hour)
				w := api.Window{Start: start, End: start.Add(time.Duration(days) * 24 * time.Hour)}
				body, _ := json.Marshal(map[string]any{"tenantId": "acme", "poolId": "scale", "resource": "gpu", "count": 8,
					"window": map[string]any{"start": w.Start.Format(time.RFC3339), "end": w.End.Format(time.RFC3339)}})
				var create, release meter.Usage
				cl, rl := make([]time.Duration, n), make([]time.Duration, n)
				for i := range n {
					before := s.m.Usage()
					d, status, out := s.srv.try(b, "reservations/create", body)
					after := s.m.Usage()
					if status != http.StatusOK {
						b.Fatalf("create %d of %d days: %d %s", i, days, status, out)
					}
					cl[i] = d
					create = create.Add(after.Sub(before))
					var got struct{ Reservation api.Reservation }
					if err := json.Unmarshal(out, &got); err != nil {
						b.Fatal(err)
					}
					rel, _ := json.Marshal(map[string]any{"tenantId": "acme", "reservationId": got.Reservation.ReservationID})
					before = s.m.Usage()
					d, status, out = s.srv.try(b, "reservations/release", rel)
					after = s.m.Usage()
					if status != http.StatusOK {
						b.Fatalf("release %d of %d days: %d %s", i, days, status, out)
					}
					rl[i] = d
					release = release.Add(after.Sub(before))
				}
				b.ReportMetric(pct50(cl), "create-p50-ms")
				b.ReportMetric(float64(create.Calls)/n, "create-ddb-calls/op")
				b.ReportMetric(create.RCU/n, "create-rcu/op")
				b.ReportMetric(create.WCU/n, "create-wcu/op")
				b.ReportMetric(pct50(rl), "release-p50-ms")
				b.ReportMetric(float64(release.Calls)/n, "release-ddb-calls/op")
				b.ReportMetric(release.RCU/n, "release-rcu/op")
				b.ReportMetric(release.WCU/n, "release-wcu/op")
			}
		})
	}
}
