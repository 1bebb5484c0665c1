package capacity

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Occupancy is what an hour's index item says of the hour's nodes
// (docs/capacity.md, "Beyond the provisioned horizon"): Provisioned, every
// node-hour of the hour is stored (the reconciler provisioned it); else a
// bitmap of the nodes whose node-hour is known to be stored, OccWordBits
// nodes a word. A node whose bit is set is stored; a node-hour stored
// since the map was written (a crash between the put and the map's write)
// may not be in it yet — the create that finds it so sets its bit.
type Occupancy struct {
	Provisioned bool
	Words       map[int]uint64
}

// OccWordBits is how many nodes one word of an occupancy map holds: 48, so
// every word is exact in a float64 (DynamoDB numbers are decimal, but
// dynalite and some SDKs compare them as doubles).
const OccWordBits = 48

// occWord is the word and bit of node k.
func occWord(k int) (int, uint64) { return k / OccWordBits, 1 << uint(k%OccWordBits) }

// Stored reports whether node k's node-hour is known stored.
func (o Occupancy) Stored(k int) bool {
	if o.Provisioned {
		return true
	}
	w, bit := occWord(k)
	return o.Words[w]&bit != 0
}

// Complete reports whether every one of nodes nodes is known stored: the
// hour is then as good as provisioned (a proof of refusal may use it).
func (o Occupancy) Complete(nodes int) bool {
	if o.Provisioned {
		return true
	}
	for k := 0; k < nodes; k += OccWordBits {
		w, _ := occWord(k)
		want := ^uint64(0) >> (64 - OccWordBits)
		if left := nodes - k; left < OccWordBits {
			want = 1<<uint(left) - 1
		}
		if o.Words[w]&want != want {
			return false
		}
	}
	return true
}

// vacantNodes is how many nodes beyond those a request needs vacant
// offers to Choose.
const vacantNodes = 4

// vacant is the search's step for hours nothing provisioned: it reads the
// occupancy maps of the window's hours (one BatchGetItem per 100 hours)
// and offers Choose the first nodes, from a point that depends on the
// reservation, that no hour of the window has a node-hour stored for —
// whole free nodes, found by one read however busy the hour is. It also
// returns which hours are complete (provisioned, or every node stored):
// prove may refuse on those. nil placement: no vacant node fits.
func (pl *Placer) vacant(ctx context.Context, pr PoolResource, req Request) (Placement, nodeHours, map[Hour]bool, error) {
	hours := HoursOf(req.Window)
	occ, err := pl.store.Occupancy(ctx, pr, hours)
	if err != nil {
		return nil, nil, nil, unavailable(err)
	}
	complete := map[Hour]bool{}
	nodes := pr.Nodes()
	for _, h := range hours {
		if occ[h].Complete(nodes) {
			complete[h] = true
		}
	}
	if len(complete) > 0 {
		return nil, nil, complete, nil // no node of a complete hour is vacant
	}
	need := pr.NodesFor(req.Count)
	if req.Topology == api.AnyDevices {
		need = (req.Count + pr.NodeSize - 1) / pr.NodeSize
	}
	need += vacantNodes
	from := int(tiebreak(req.ID, req.Attempt, -3) % uint32(nodes))
	var cands []Candidate
	state := nodeHours{}
	for i := 0; i < nodes && len(cands) < need; i++ {
		k := (from + i) % nodes
		if req.Exclude[k] || slices.ContainsFunc(hours, func(h Hour) bool { return occ[h].Stored(k) }) {
			continue
		}
		c := Candidate{Node: k}
		for _, h := range hours {
			nh := EmptyNodeHour(pr, NodeHourKey{Node: k, Hour: h})
			state[nh.Key()] = nh
			c.Hours = append(c.Hours, nh)
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		return nil, nil, complete, nil
	}
	p, err := Choose(pr.Topology, req, cands)
	if isNoFit(err) {
		return nil, nil, complete, nil
	}
	return p, state, complete, err
}

// occupy sets the map bits of the node-hours a placement attempt found or
// made stored that it had read as missing: created by its put, or refused
// because another writer had stored it (the map was behind: repaired
// here). A map write that keeps losing is left: the next create that
// takes the node as vacant finds it stored and sets the bit then.
//
// The hours' maps are written as the node-hours were, at once (c.each).
// They never cost a create its answer: once less than occupyReserve is
// left before the flow's deadline (a window of weeks on a slow local
// server: a 90-day window puts 2,160 node-hours), the remaining hours'
// maps are left behind, for the creates that find those nodes stored to
// repair.
func (c *Calendar) occupy(ctx context.Context, pr PoolResource, stored map[Hour][]int) {
	hours := make([]Hour, 0, len(stored))
	for h := range stored {
		hours = append(hours, h)
	}
	slices.Sort(hours) // a seeded simulation replays the same order
	deadline, bounded := ctx.Deadline()
	var skipped atomic.Int64
	_ = c.each(ctx, len(hours), func(i int) error {
		h := hours[i]
		if bounded && time.Until(deadline) < occupyReserve {
			skipped.Add(1)
			return nil
		}
		if err := c.store.Occupy(ctx, pr, h, stored[h]); err != nil {
			c.logger().Warn("occupancy map not written: the next create that finds the node stored repairs it",
				"pool", pr.PoolID, "resource", pr.Resource, "hour", h.String(), "nodes", len(stored[h]), "error", err)
		}
		return nil
	})
	if n := skipped.Load(); n > 0 {
		c.logger().Warn("occupancy maps left behind near the flow's deadline: the creates that find those nodes stored repair them",
			"pool", pr.PoolID, "resource", pr.Resource, "hours", n)
	}
}

// occupyReserve is the time before a flow's deadline after which its
// placement writes no more occupancy maps (the fence and the answer come
// first).
const occupyReserve = 2 * time.Second
