package capacity

import (
	"math/bits"

	"github.com/bettercompute/control-plane/shared/api"
)

// The availability search over what it read (docs/capacity.md, "When can
// I get it?"). Per hour of the span and node, what the reads say:
//
//   - known free: the node-hour is among the hour's emptiest read (its
//     untouched devices, the ones free for any window covering the hour),
//     or the hour is not provisioned and its map names no node-hour of the
//     node (nothing was ever placed there: every device free);
//   - dead: the node is out of service, its node-hour is full, or it is
//     stored and not among the emptiest while the read saw every one with
//     enough untouched devices (fewer, or kept off by the fleet);
//   - unknown: stored, not among the emptiest, and more qualified than
//     were read.
//
// A start s is offered when the nodes known free in every hour of
// [s, s + hours) — their free devices intersected over those hours, as a
// reservation holds the same devices throughout — place the request as
// reservations.create places it: one node with count free, ⌈count /
// nodeSize⌉ nodes whose most free hold count, or count devices anywhere.
// It is refused (decided) when even every node with no dead hour in the
// window, the unknown ones counted as wholly free, cannot; otherwise it is
// undecided: left out, and the answer is partial.
//
// The sweep walks the hours once with a bitset of the known nodes and one
// of those not dead, and turns every run of consecutive hours a node
// spends in either into the starts whose windows fit in the run: its cost
// is the hours times the pool's nodes / 64 words, plus the runs — memory
// the nodes and the starts, never the hours times the nodes.

// hourRead is what the search read of one hour of the span.
type hourRead struct {
	provisioned bool       // every node-hour of the hour is stored
	stored      nodeBits   // not provisioned: the nodes with a node-hour stored (nil: none)
	nodes       []NodeFree // the emptiest stored node-hours, most untouched first
	floor       int        // the fewest untouched devices a node-hour read had to have
	more        bool       // more qualified than were read
	unsure      bool       // no node is known eligible (out-of-service list cut short)
}

// availSearch is one request's search.
type availSearch struct {
	t        Topology
	count    int
	topology string
	hours    int
	limit    int
	// need is the fewest devices a node must have free to take part in a
	// placement (count on one node; under node, for a larger count, what
	// is left for the last of ⌈count/nodeSize⌉ nodes after the others'
	// nodeSize; 1 under any); want is how many nodes a placement takes at
	// least.
	need, want int
}

// availOffer is a range of starts (indexes from the first start) and the
// nodes a placement at its first takes.
type availOffer struct{ first, last, nodes int }

func newAvailSearch(t Topology, count int, topology string, hours, limit int) *availSearch {
	s := &availSearch{t: t, count: count, topology: topology, hours: hours, limit: limit, need: count, want: 1}
	switch {
	case topology == api.AnyDevices:
		s.need, s.want = 1, t.NodesFor(count)
	case count > t.NodeSize:
		s.want = t.NodesFor(count)
		s.need = count - (s.want-1)*t.NodeSize
	}
	return s
}

// possible reports whether the pool's shape admits the request at all
// (else nothing is read: no start is ever offered, and that is decided).
func (s *availSearch) possible() bool {
	return s.count <= s.t.Devices && (s.topology == api.AnyDevices || s.want <= s.t.Nodes())
}

// nodeBits is a set of nodes, 64 to a word.
type nodeBits []uint64

func (b nodeBits) set(k int)      { b[k>>6] |= 1 << uint(k&63) }
func (b nodeBits) has(k int) bool { return b[k>>6]&(1<<uint(k&63)) != 0 }

// each calls fn with every node in a but not in b.
func eachOf(a, b nodeBits, fn func(k int)) {
	for j, w := range a {
		for w &^= b[j]; w != 0; w &= w - 1 {
			fn(j<<6 | bits.TrailingZeros64(w))
		}
	}
}

// storedBits is an occupancy map as a set of n nodes (nil when it names
// none): what the search keeps of an hour's map.
func storedBits(o Occupancy, n int) nodeBits {
	if len(o.Words) == 0 {
		return nil
	}
	b := make(nodeBits, (n+63)/64)
	for j, w := range o.Words {
		b.orOccWord(j, w)
	}
	return b
}

// orOccWord adds a map word (OccWordBits nodes from node j·OccWordBits).
func (b nodeBits) orOccWord(j int, w uint64) {
	off := j * OccWordBits
	i, sh := off>>6, uint(off&63)
	if i >= len(b) {
		return
	}
	b[i] |= w << sh
	if sh+OccWordBits > 64 && i+1 < len(b) {
		b[i+1] |= w >> (64 - sh)
	}
}

// run searches starts starts (indexes 0..starts-1 of reads) and returns
// the offerings, earliest first, at most s.limit, and the starts left
// undecided before the last of them (or before the end, with fewer).
func (s *availSearch) run(reads []hourRead, out map[int]bool, starts int) ([]availOffer, []int) {
	n, size := s.t.Nodes(), s.t.NodeSize
	words := (n + 63) / 64
	valid := make(nodeBits, words)
	for k := range n {
		valid.set(k)
	}
	outBits := make(nodeBits, words)
	for k := range out {
		if k >= 0 && k < n {
			outBits.set(k)
		}
	}
	// Per start: hist[v] counts the nodes known free throughout its window
	// with v devices free throughout; pot the nodes dead in none of its
	// hours. Difference arrays while the runs come in.
	hist := make([][]int32, size+1)
	for v := range hist {
		hist[v] = make([]int32, starts+1)
	}
	pot := make([]int32, starts+1)
	addRange := func(a []int32, from, to int) { a[from]++; a[to+1]-- }
	lists := make([]map[int]NodeFree, len(reads)) // by hour, made when a run needs masks
	listAt := func(i int) map[int]NodeFree {
		if lists[i] == nil {
			lists[i] = make(map[int]NodeFree, len(reads[i].nodes))
			for _, nf := range reads[i].nodes {
				lists[i][nf.Node] = nf
			}
		}
		return lists[i]
	}
	H := s.hours
	// known: node k was known free in hours r0..r1-1; partial: with a
	// node-hour not wholly untouched among them.
	known := func(k, r0, r1 int, partial bool) {
		last := min(r1-H, starts-1)
		if last < r0 {
			return
		}
		if !partial {
			addRange(hist[s.t.Size(k)], r0, last)
			return
		}
		full := Full(s.t.Size(k))
		masks := make([]Mask, last+H-r0)
		for j := range masks {
			masks[j] = full
			if nf, ok := listAt(r0 + j)[k]; ok {
				masks[j] = nf.Free
			}
		}
		for j, m := range slidingAnd(masks, H) {
			addRange(hist[m.Count()], r0+j, r0+j)
		}
	}
	notDead := func(k, p0, p1 int) {
		if last := min(p1-H, starts-1); last >= p0 {
			addRange(pot, p0, last)
		}
	}

	kStart, pStart, partial := make([]int32, n), make([]int32, n), make([]int32, n)
	prevK, prevND := make(nodeBits, words), make(nodeBits, words)
	K, ND := make(nodeBits, words), make(nodeBits, words)
	listed, full, vacant := make(nodeBits, words), make(nodeBits, words), make(nodeBits, words)
	for i := 0; i <= len(reads); i++ {
		clear(K)
		clear(ND)
		if i < len(reads) {
			r := reads[i]
			clear(listed)
			clear(full)
			clear(vacant)
			for _, nf := range r.nodes {
				switch {
				case nf.Node < 0 || nf.Node >= n:
				case nf.Full:
					full.set(nf.Node)
				default:
					listed.set(nf.Node)
				}
			}
			if !r.provisioned {
				for j := range vacant {
					vacant[j] = valid[j]
					if r.stored != nil {
						vacant[j] &^= r.stored[j]
					}
				}
			}
			for j := range K {
				if !r.unsure {
					K[j] = (listed[j] | vacant[j]&^full[j]) &^ outBits[j]
				}
				dead := outBits[j] | full[j]
				if !r.more && r.floor <= s.need {
					dead |= valid[j] &^ (listed[j] | vacant[j] | full[j])
				}
				ND[j] = valid[j] &^ dead
			}
		}
		eachOf(prevK, K, func(k int) { known(k, int(kStart[k]), i, partial[k] > 0) })
		eachOf(K, prevK, func(k int) { kStart[k], partial[k] = int32(i), 0 })
		eachOf(prevND, ND, func(k int) { notDead(k, int(pStart[k]), i) })
		eachOf(ND, prevND, func(k int) { pStart[k] = int32(i) })
		if i < len(reads) {
			for _, nf := range reads[i].nodes {
				if nf.Node >= 0 && nf.Node < n && K.has(nf.Node) && nf.Free != Full(s.t.Size(nf.Node)) {
					partial[nf.Node]++
				}
			}
		}
		prevK, K = K, prevK
		prevND, ND = ND, prevND
	}

	counts := make([]int32, size+1)
	var offers []availOffer
	var undecided []int
	open, nodes := -1, 0
	var sum, potN int32
	running := make([]int32, size+1)
	for st := 0; st < starts; st++ {
		sum = 0
		for v := range counts {
			running[v] += hist[v][st]
			counts[v] = running[v]
			sum += counts[v]
		}
		potN += pot[st]
		fits := s.fits(counts, 0)
		if fits {
			if open < 0 {
				open, nodes = st, s.nodesAt(counts)
			}
			continue
		}
		if unknown := int(potN - sum); unknown > 0 && s.fits(counts, unknown) {
			undecided = append(undecided, st)
		}
		if open >= 0 {
			offers = append(offers, availOffer{open, st - 1, nodes})
			open = -1
			if len(offers) == s.limit {
				return offers, undecided
			}
		}
	}
	if open >= 0 {
		offers = append(offers, availOffer{open, starts - 1, nodes})
	}
	return offers, undecided
}

// fits reports whether nodes with counts[v] nodes of v free devices each,
// and unknown more that may each have a whole node's, place the request:
// one node with count free (node, count ≤ nodeSize); want nodes whose most
// free hold count (node, larger); count devices anywhere (any).
func (s *availSearch) fits(counts []int32, unknown int) bool {
	size := len(counts) - 1
	switch {
	case s.topology == api.AnyDevices:
		total := unknown * size
		for v, c := range counts {
			total += v * int(c)
			if total >= s.count {
				return true
			}
		}
		return total >= s.count
	case s.count <= s.t.NodeSize:
		if unknown > 0 {
			return true
		}
		for v := s.count; v <= size; v++ {
			if counts[v] > 0 {
				return true
			}
		}
		return false
	}
	left, sum := s.want, 0
	take := min(left, unknown)
	sum, left = take*size, left-take
	for v := size; v > 0 && left > 0; v-- {
		take := min(left, int(counts[v]))
		sum, left = sum+take*v, left-take
	}
	return sum >= s.count
}

// nodesAt is how many nodes a placement at a start with these counts
// takes: under node, one or ⌈count/nodeSize⌉; under any, as a create
// takes them — the fullest nodes first — among the nodes the search knows.
func (s *availSearch) nodesAt(counts []int32) int {
	if s.topology != api.AnyDevices {
		return s.want
	}
	left, nodes := s.count, 0
	for v := 1; v < len(counts) && left > 0; v++ {
		take := min(int(counts[v]), (left+v-1)/v)
		nodes, left = nodes+take, left-take*v
	}
	return nodes
}

// slidingAnd is the AND of every run of w consecutive masks (len(m)-w+1
// of them), in O(len(m)): the runs are split at multiples of w, each
// window is a suffix of one block and a prefix of the next.
func slidingAnd(m []Mask, w int) []Mask {
	if len(m) < w {
		return nil
	}
	pre, suf := make([]Mask, len(m)), make([]Mask, len(m))
	for i := range m {
		if i%w == 0 {
			pre[i] = m[i]
		} else {
			pre[i] = pre[i-1] & m[i]
		}
	}
	for i := len(m) - 1; i >= 0; i-- {
		if i == len(m)-1 || (i+1)%w == 0 {
			suf[i] = m[i]
		} else {
			suf[i] = suf[i+1] & m[i]
		}
	}
	out := make([]Mask, len(m)-w+1)
	for st := range out {
		if st%w == 0 {
			out[st] = suf[st]
		} else {
			out[st] = suf[st] & pre[st+w-1]
		}
	}
	return out
}
