package capacity

import (
	"hash/fnv"
	"slices"
	"sort"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Candidate is one node and its state over a window: either its node-hours
// (Hours, one per hour of the window, as read) or, when the exact path reads
// a whole pool without keeping its node-hours, a Summary.
type Candidate struct {
	Node    int
	Hours   []NodeHour
	Summary *Summary
}

// Summary is a node's state over one request's window, boiled down.
type Summary struct {
	Size      int
	Free      Mask // free during all of the window
	Untouched Mask // used by no allocation in any of the window's hours
}

// summary is c's Summary for req (computed from Hours when not given).
func (c Candidate) summary(req Request) Summary {
	if c.Summary != nil {
		return *c.Summary
	}
	if len(c.Hours) == 0 {
		return Summary{}
	}
	s := Summary{Size: c.Hours[0].Size, Free: ^Mask(0), Untouched: ^Mask(0)}
	for _, h := range c.Hours {
		s.Add(h, req)
	}
	return s
}

// Add narrows s by one more hour of the window.
func (s *Summary) Add(d NodeHour, req Request) {
	s.Free &= d.Free(req.Window, req.ID)
	s.Untouched &= Full(d.Size) &^ d.Touched()
}

// NewSummary is the summary of a node of size devices before any hour is
// added: everything free.
func NewSummary(size int) Summary {
	return Summary{Size: size, Free: Full(size), Untouched: Full(size)}
}

// NoFit is why no placement was found: ReasonCapacity (not enough free
// devices) or ReasonTopology (enough, but not on few enough nodes).
type NoFit struct{ Reason string }

func (e NoFit) Error() string { return "capacity: no placement fits (" + e.Reason + ")" }

// Request is what a placement must satisfy.
type Request struct {
	ID       string // the reservation (its own allocations do not count as busy)
	Tenant   string // who holds it (recorded with its entries)
	Count    int
	Topology string // OnNodes or AnyDevices
	Window   api.Window
	// Attempt counts placements this create already lost to racing
	// creates; Spread asks for any node that fits rather than the fullest
	// (after a lost race, or when racing creates are expected): see
	// docs/capacity.md, "Placement under contention".
	Attempt int
	Spread  bool
	// Exclude are nodes the placement must not use (a move off them, or
	// found not eligible).
	Exclude map[int]bool
}

// Choose places req on the candidates (docs/capacity.md, "Placement"):
//
//   - topology "node", count ≤ nodeSize: best fit — the node with the
//     fewest free devices that still holds count (the fullest that fits),
//     so whole nodes stay whole; among those, the one more used at other
//     times of the window's hours; with req.Spread, any node that fits;
//   - topology "node", a larger count: ⌈count / nodeSize⌉ nodes — whole free
//     nodes and, for the remainder, the fullest node that holds it;
//   - topology "any": the fullest nodes first until count is reached.
//
// Within a node, devices are taken as an aligned block of the next power
// of two (a pair, a quad, …: how NVLink switches group devices, and two
// creates racing for one node then collide only on the same block), those
// some allocation of the window's hours already uses first (to keep untouched devices
// whole), lowest first.
//
// Among equally good nodes and blocks the choice is a hash of the
// reservation, the attempt and the node: a retry on the same state chooses
// the same, while racing creates spread over the ties instead of all
// taking the first.
//
// NoFit is exact only when cands holds every node of the resource.
func Choose(t Topology, req Request, cands []Candidate) (Placement, error) {
	type node struct {
		Summary
		Node  int
		n     int
		order uint32
	}
	nodes := make([]node, 0, len(cands))
	total := 0
	for _, c := range cands {
		if req.Exclude[c.Node] {
			continue
		}
		s := c.summary(req)
		if n := s.Free.Count(); n > 0 {
			nodes = append(nodes, node{s, c.Node, n, tiebreak(req.ID, req.Attempt, c.Node)})
			total += n
		}
	}
	if total < req.Count {
		return nil, NoFit{api.ReasonCapacity}
	}
	// Fullest first; then those more used at other times of the window's
	// hours (keeping wholly unused nodes for long reservations); ties
	// spread by the hash.
	sort.Slice(nodes, func(i, j int) bool {
		a, b := nodes[i], nodes[j]
		if a.n != b.n {
			return a.n < b.n
		}
		if ua, ub := a.Untouched.Count(), b.Untouched.Count(); ua != ub {
			return ua < ub
		}
		return a.order < b.order
	})
	take := func(n node, count int) NodeDevices {
		return NodeDevices{Node: n.Node, Mask: takeBlock(n.Summary, count, n.order)}
	}
	var p Placement
	switch {
	case req.Topology == api.AnyDevices:
		left := req.Count
		for _, n := range nodes {
			if left == 0 {
				break
			}
			nd := take(n, min(left, n.n))
			p, left = append(p, nd), left-nd.Mask.Count()
		}
	case req.Count <= t.NodeSize:
		fits := slices.IndexFunc(nodes, func(n node) bool { return n.n >= req.Count })
		if fits < 0 {
			return nil, NoFit{api.ReasonTopology}
		}
		i := fits
		if req.Spread {
			// Any node that fits, by the hash (the order sorts ties only).
			best := uint32(0)
			for j := fits; j < len(nodes); j++ {
				if h := tiebreak(req.ID, req.Attempt+1, nodes[j].Node); j == fits || h < best {
					i, best = j, h
				}
			}
		}
		p = Placement{take(nodes[i], req.Count)}
	default:
		want := t.NodesFor(req.Count)
		rem := req.Count - (want-1)*t.NodeSize
		var whole []node
		for _, n := range nodes {
			if n.n == t.NodeSize {
				whole = append(whole, n)
			}
		}
		if len(whole) >= want-1 {
			// The remainder goes to the fullest node that holds it and is
			// not among the whole nodes taken (the last ones in order).
			used := map[int]bool{}
			for _, n := range whole[len(whole)-(want-1):] {
				p, used[n.Node] = append(p, take(n, t.NodeSize)), true
			}
			i := slices.IndexFunc(nodes, func(n node) bool { return n.n >= rem && !used[n.Node] })
			if i >= 0 {
				p = append(p, take(nodes[i], rem))
				break
			}
			p = nil
		}
		// Else: the want nodes with the most free devices, if they hold it.
		if len(nodes) < want {
			return nil, NoFit{api.ReasonTopology}
		}
		most := nodes[len(nodes)-want:]
		sum := 0
		for _, n := range most {
			sum += n.n
		}
		if sum < req.Count {
			return nil, NoFit{api.ReasonTopology}
		}
		left := req.Count
		for i := len(most) - 1; i >= 0; i-- {
			nd := take(most[i], min(left, most[i].n))
			p, left = append(p, nd), left-nd.Mask.Count()
		}
	}
	sort.Slice(p, func(i, j int) bool { return p[i].Node < p[j].Node })
	return p, nil
}

// takeBlock picks count of a node's free devices: within one free aligned
// block of the next power of two if there is one (the block with the most
// devices already used in those hours, ties by h), else wherever they are free;
// devices already used in those hours first, lowest first.
func takeBlock(s Summary, count int, h uint32) Mask {
	pick := func(within Mask) Mask {
		touched := within &^ s.Untouched
		m := touched.Lowest(count)
		return m | (within &^ m).Lowest(count-m.Count())
	}
	b := 1
	for b < count {
		b <<= 1
	}
	if b > s.Size {
		return pick(s.Free)
	}
	var blocks []Mask
	most := -1
	for start := 0; start+b <= s.Size; start += b {
		blk := Full(b) << uint(start)
		if s.Free&blk != blk {
			continue
		}
		switch used := (blk &^ s.Untouched).Count(); {
		case used > most:
			blocks, most = []Mask{blk}, used
		case used == most:
			blocks = append(blocks, blk)
		}
	}
	if len(blocks) == 0 {
		return pick(s.Free)
	}
	return pick(blocks[int(h>>8)%len(blocks)])
}

func tiebreak(id string, attempt, node int) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	h.Write([]byte{byte(attempt), byte(node), byte(node >> 8), byte(node >> 16), byte(node >> 24)})
	return h.Sum32()
}

// backoff is the jittered wait before placement attempt n (n ≥ 1): it
// grows from 2 ms to at most 64 ms so racers spread out without stalling.
func backoff(n int, jitter func(int64) int64) time.Duration {
	ceil := int64(2) << min(n, 5) // 4, 8, … 64 ms
	return time.Duration(ceil/2+jitter(ceil/2+1)) * time.Millisecond
}
