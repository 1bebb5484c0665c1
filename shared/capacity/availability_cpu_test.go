package capacity

import (
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
)

// BenchmarkAvailabilitySweep: the search's own work, without DynamoDB, for
// the largest pools and spans: 12,500 nodes of 8 (100,000 devices) over
// 31 days of starts and a day's window, every hour beyond the first six
// unprovisioned — all of it free (every node a run of the whole span), or
// with every other node stored in every other hour (runs of one hour).
func BenchmarkAvailabilitySweep(b *testing.B) {
	top := Topology{Resource: "gpu", Devices: 100_000, NodeSize: 8}
	starts, hours := 31*24+1, 24
	for _, busy := range []bool{false, true} {
		reads := make([]hourRead, starts+hours-1)
		for i := range reads {
			r := hourRead{}
			switch {
			case i < 6:
				r.provisioned, r.more = true, true
				for k := range 33 {
					r.nodes = append(r.nodes, NodeFree{Node: k * 7, Free: Full(8)})
				}
			case busy && i%2 == 0:
				occ := Occupancy{Words: map[int]uint64{}}
				for j := range (top.Nodes() + OccWordBits - 1) / OccWordBits {
					occ.Words[j] = 0x555555555555
				}
				r.stored = storedBits(occ, top.Nodes())
			}
			reads[i] = r
		}
		name := map[bool]string{false: "free", true: "busy"}[busy]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				s := newAvailSearch(top, 8, api.OnNodes, hours, 20)
				s.run(reads, nil, starts)
			}
		})
	}
}
