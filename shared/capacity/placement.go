package capacity

import (
	"hash/fnv"
	"slices"
	"sort"
	"time"
)

// Candidate is one node and its state on every day a window overlaps.
type Candidate struct {
	Node int
	Days []NodeDay
}

// Free is the mask of the node's devices free during all of w (ignoring
// allocations of reservation id itself).
func (c Candidate) Free(w Window, id string) Mask {
	free := ^Mask(0)
	for _, d := range c.Days {
		free &= d.Free(w, id)
	}
	if len(c.Days) == 0 {
		return 0
	}
	return free
}

// untouched is the mask of devices no allocation uses on any of the days.
func (c Candidate) untouched() Mask {
	m := ^Mask(0)
	for _, d := range c.Days {
		m &= Full(d.Size) &^ d.Touched()
	}
	return m
}

// NoFit is why no placement was found: ReasonCapacity (not enough free
// devices) or ReasonTopology (enough, but not on few enough nodes).
type NoFit struct{ Reason string }

func (e NoFit) Error() string { return "capacity: no placement fits (" + e.Reason + ")" }

// Request is what a placement must satisfy.
type Request struct {
	ID       string // the reservation (its own allocations do not count as busy)
	Count    int
	Topology string // OnNodes or AnyDevices
	Window   Window
}

// Choose places req on the candidates, best fit (SPEC §4.4):
//
//   - topology "node", count ≤ nodeSize: the node with the fewest free
//     devices that still holds count (the fullest that fits), so whole
//     nodes stay whole;
//   - topology "node", a larger count: ⌈count / nodeSize⌉ nodes — whole free
//     nodes and, for the remainder, the fullest node that holds it;
//   - topology "any": the fullest nodes first until count is reached.
//
// Within a node, devices some allocation of the day already uses are taken
// before untouched ones (again to keep whole devices whole), lowest first.
// Among equally good nodes the choice is a hash of the reservation and the
// node: a retry on the same state chooses the same, while racing creates
// spread over the ties instead of all taking the first.
//
// NoFit is exact only when cands holds every node of the resource.
func Choose(t Topology, req Request, cands []Candidate) (Placement, error) {
	type node struct {
		Candidate
		free  Mask
		n     int
		order uint32
	}
	nodes := make([]node, 0, len(cands))
	total := 0
	for _, c := range cands {
		free := c.Free(req.Window, req.ID)
		if n := free.Count(); n > 0 {
			nodes = append(nodes, node{c, free, n, tiebreak(req.ID, c.Node)})
			total += n
		}
	}
	if total < req.Count {
		return nil, NoFit{ReasonCapacity}
	}
	// Fullest first; ties spread by the hash.
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].n != nodes[j].n {
			return nodes[i].n < nodes[j].n
		}
		return nodes[i].order < nodes[j].order
	})
	take := func(n node, count int) NodeDevices {
		// Devices already used that day first, then untouched, lowest first.
		touched := n.free &^ n.untouched()
		m := touched.Lowest(count)
		m |= (n.free &^ m).Lowest(count - m.Count())
		return NodeDevices{Node: n.Node, Mask: m}
	}
	var p Placement
	switch {
	case req.Topology == AnyDevices:
		left := req.Count
		for _, n := range nodes {
			if left == 0 {
				break
			}
			nd := take(n, min(left, n.n))
			p, left = append(p, nd), left-nd.Mask.Count()
		}
	case req.Count <= t.NodeSize:
		i := slices.IndexFunc(nodes, func(n node) bool { return n.n >= req.Count })
		if i < 0 {
			return nil, NoFit{ReasonTopology}
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
			return nil, NoFit{ReasonTopology}
		}
		most := nodes[len(nodes)-want:]
		sum := 0
		for _, n := range most {
			sum += n.n
		}
		if sum < req.Count {
			return nil, NoFit{ReasonTopology}
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

func tiebreak(id string, node int) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	h.Write([]byte{byte(node), byte(node >> 8), byte(node >> 16), byte(node >> 24)})
	return h.Sum32()
}

// backoff is the jittered wait before placement attempt n (n ≥ 1): it
// grows from 2 ms to at most 64 ms so racers spread out without stalling.
func backoff(n int, jitter func(int64) int64) time.Duration {
	ceil := int64(2) << min(n, 5) // 4, 8, … 64 ms
	return time.Duration(ceil/2+jitter(ceil/2+1)) * time.Millisecond
}
