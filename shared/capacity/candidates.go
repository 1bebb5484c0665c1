package capacity

import (
	"context"
	"errors"
	"maps"
	"math"

	"github.com/bettercompute/control-plane/shared/api"
)

// Placer chooses where a reservation's devices go: the fast path reads the
// fullest node-hours of one hour of the window that may fit (candidates),
// the search after it finds vacant nodes far ahead (occupancy.go), proves
// a refusal or reads every node-hour, and a window past the fleet's
// eligibility flags is kept off ineligible nodes. It reads only; the
// Calendar writes what it chose.
type Placer struct {
	hooks
	store    CandidateStore
	nodes    Eligibility // nil: every node unmanaged
	calendar *Calendar
	placing  *placing
	horizon  int // Service.ProvisionHours
}

// CandidateStore is what the choice reads. The node-hour items of each
// (pool, resource) are ordered for candidates by how many devices are
// untouched and, for refusals, by how many no allocation holds for the
// whole hour; each hour has an index item (its occupancy map, or
// provisioned). A node-hour is stored once something is placed on it, or
// when the reconciler provisions its hour ahead (every node of the hour,
// so whole nodes are found by the same ordered read); a missing one is
// empty.
type CandidateStore interface {
	// Candidates reads stored node-hours of hour h with at least
	// minUntouched untouched devices, fewest first (the fullest that may
	// fit), at most limit. from ∈ [0, 2^SpreadBits) is where the read
	// starts among the node-hours of the first such count (racing creates
	// then read different ones).
	Candidates(ctx context.Context, t PoolResource, h Hour, minUntouched, limit int, from uint32) ([]NodeHour, Scan, error)
	// Coverable reads how many devices of each stored node of hour h no
	// allocation holds for the whole hour, at least min, most first, at
	// most limit: what a refusal is proved with (no instant of the hour
	// has more devices free on that node).
	Coverable(ctx context.Context, t PoolResource, h Hour, min, limit int) ([]NodeCount, Scan, error)
	// Hour calls fn with every stored node-hour of h, in node order.
	Hour(ctx context.Context, t PoolResource, h Hour, fn func(NodeHour) error) error
	// Occupancy reads the occupancy maps of hours (consistently; a hour
	// with none has no node known stored).
	Occupancy(ctx context.Context, t PoolResource, hours []Hour) (map[Hour]Occupancy, error)
	// VisiblePool reads a pool owned by or offered to tenant (else
	// ErrNotFound), as PoolStore's.
	VisiblePool(ctx context.Context, tenant, poolID string) (Pool, error)
}

// Eligibility is what placement reads of the fleet's nodes (see NodeStore).
type Eligibility interface {
	NodeStates(ctx context.Context, t PoolResource, nodes []int, id string) (map[int]NodeState, error)
	Ineligible(ctx context.Context, t PoolResource) (map[int]bool, error)
}

// candidateLimit is how many node-hours the fast path reads: the fullest
// ones that may fit, so racing creates have ties to spread over, and few
// enough that the read stays within one or two read units.
const candidateLimit = 16

// verifyKeys bounds the other hours of a window the fast path reads for its
// candidates (one BatchGetItem): a long window verifies fewer candidates.
const verifyKeys = 100

// choose reads candidates and chooses a placement. The fast path reads the
// fullest stored node-hours of one hour of the window that may fit (one
// Query of the `fit` order) and, for a longer window, the same nodes' other
// hours (one BatchGetItem; an hour not stored is empty): its cost does not
// grow with the pool's size or how busy it is. When that finds nothing,
// the pool is checked (visible to the tenant, the resource in it) and the
// search decides (see search).
func (pl *Placer) choose(ctx context.Context, r Reservation, req Request) (PoolResource, Placement, nodeHours, error) {
	var pr PoolResource
	var cands []Candidate
	var err error
	if a, ok := ctx.Value(aheadKey{}).(*ahead); ok && req.Attempt == 0 && a.req.ID == req.ID {
		<-a.done
		pr, cands, err, req = a.pr, a.cands, a.err, a.req
	} else {
		pr, cands, err = pl.fastCandidates(ctx, r, &req)
	}
	if err != nil {
		return pr, nil, nil, err
	}
	if len(cands) > 0 {
		if p, err := Choose(pr.Topology, req, cands); err == nil {
			return pr, p, stateOf(cands), nil
		}
	}
	pool, err := pl.visiblePool(ctx, r)
	if err != nil {
		return pr, nil, nil, err
	}
	pr = PoolResource{PoolID: r.PoolID, Topology: pool.Topology(r.Resource)}
	pl.learn(pr)
	p, state, err := pl.search(ctx, pr, req)
	return pr, p, state, err
}

// nodeHours is node-hours as read (or, missing, made up empty), by key.
type nodeHours map[NodeHourKey]NodeHour

func stateOf(cands []Candidate) nodeHours {
	out := make(nodeHours, len(cands))
	for _, c := range cands {
		for _, nh := range c.Hours {
			out[nh.Key()] = nh
		}
	}
	return out
}

// queryHour is the hour of a window whose candidates the fast path reads:
// the first one the window covers whole (free throughout it is then
// necessary for a fit, not only sufficient), else its first.
func queryHour(w api.Window) Hour {
	for _, h := range HoursOf(w) {
		if h.CoveredBy(w) {
			return h
		}
	}
	return HourOf(w.Start)
}

// fastCandidates is choose's fast path: the candidates it read (none when
// it could not tell). It may set req.Spread (see spreadNow).
func (pl *Placer) fastCandidates(ctx context.Context, r Reservation, req *Request) (PoolResource, []Candidate, error) {
	pr := PoolResource{PoolID: r.PoolID, Topology: Topology{Resource: r.Resource}}
	h := queryHour(r.Window)
	minUntouched, from := req.Count, uint32(0)
	if req.Topology == api.AnyDevices {
		minUntouched = 1
	}
	known, haveTopology := pl.known(pr)
	if haveTopology && req.Topology == api.OnNodes && req.Count > known.NodeSize {
		pr.Topology = known
		first, err := pl.wholeNodes(ctx, pr, req, h)
		if err != nil {
			return pr, nil, err
		}
		cands, err := pl.withHours(ctx, pr, first, r.Window, pr.NodesFor(req.Count))
		return pr, cands, err
	}
	switch {
	case haveTopology && req.Topology == api.OnNodes && req.Count >= known.NodeSize:
		// Whole nodes: start the read at a point of the whole nodes' order
		// that depends on the reservation, so racing creates read (and
		// take) different ones.
		minUntouched, from = known.NodeSize, spreadFrom(req)
	case haveTopology && req.Topology == api.OnNodes && (req.Attempt > 0 || pl.spreadNow(req.ID)):
		// Lost a race, or racing creates are likely: read from a point of
		// the order that depends on the reservation and take any node that
		// fits; a fresh whole node when racing is likely (the fullest
		// partial ones are where racers collide).
		req.Spread, from = true, spreadFrom(req)
		if req.Attempt == 0 {
			minUntouched = known.NodeSize
		}
	}
	first, _, err := pl.store.Candidates(ctx, pr, h, min(minUntouched, api.MaxNodeSize), candidateLimit, from)
	if err != nil {
		return pr, nil, unavailable(err)
	}
	if len(first) == 0 && from > 0 {
		// Nothing from there on: read from the start.
		if first, _, err = pl.store.Candidates(ctx, pr, h, min(req.Count, api.MaxNodeSize), candidateLimit, 0); err != nil {
			return pr, nil, unavailable(err)
		}
	}
	if len(first) == 0 && !haveTopology && req.Topology == api.OnNodes && req.Count > 1 {
		// The layout is not known yet and no node has count untouched
		// devices: several whole nodes may still do; any node-hour tells.
		if first, _, err = pl.store.Candidates(ctx, pr, h, 1, 1, 0); err != nil {
			return pr, nil, unavailable(err)
		}
	}
	if len(first) == 0 {
		return pr, nil, nil
	}
	pr = first[0].Topology()
	pl.learn(pr)
	keep := 1
	if req.Topology == api.OnNodes && req.Count > pr.NodeSize {
		if first, err = pl.wholeNodes(ctx, pr, req, h); err != nil {
			return pr, nil, err
		}
		keep = pr.NodesFor(req.Count)
	}
	cands, err := pl.withHours(ctx, pr, first, r.Window, keep)
	return pr, cands, err
}

// wholeNodes reads as many untouched node-hours of h as a request of
// several whole nodes needs (and candidateLimit more), from the request's
// spread point, then from the start when that found too few.
func (pl *Placer) wholeNodes(ctx context.Context, pr PoolResource, req *Request, h Hour) ([]NodeHour, error) {
	want := pr.NodesFor(req.Count)
	first, _, err := pl.store.Candidates(ctx, pr, h, pr.NodeSize, want+candidateLimit, spreadFrom(req))
	if err == nil && len(first) < want {
		first, _, err = pl.store.Candidates(ctx, pr, h, pr.NodeSize, want+candidateLimit, 0)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return first, nil
}

// spreadFrom is where a request's candidate read starts in the order of
// equally untouched node-hours: a hash of the reservation and the attempt.
func spreadFrom(req *Request) uint32 {
	return tiebreak(req.ID, req.Attempt, -1) >> (32 - SpreadBits)
}

// withHours joins the other hours of a window to node-hours of one of its
// hours (an hour not stored is empty). A long window keeps fewer candidates
// (at least keep), so the read stays one BatchGetItem of verifyKeys.
func (pl *Placer) withHours(ctx context.Context, pr PoolResource, first []NodeHour, w api.Window, keep int) ([]Candidate, error) {
	hours := HoursOf(w)
	if others := len(hours) - 1; others > 0 {
		first = first[:min(len(first), max(keep, verifyKeys/others, 1))]
	}
	cands := make([]Candidate, len(first))
	var keys []NodeHourKey
	for i, nh := range first {
		cands[i] = Candidate{Node: nh.Node}
		for _, h := range hours {
			if h != nh.Hour {
				keys = append(keys, NodeHourKey{Node: nh.Node, Hour: h})
			}
		}
	}
	got := nodeHours{}
	if len(keys) > 0 {
		var err error
		if got, err = pl.calendar.nodeHours(ctx, pr, keys); err != nil {
			return nil, err
		}
	}
	for i, nh := range first {
		got[nh.Key()] = nh
		for _, h := range hours {
			cands[i].Hours = append(cands[i].Hours, got[NodeHourKey{Node: nh.Node, Hour: h}])
		}
	}
	return cands, nil
}

// search is the slow path, when the fast path found no fit. First, for
// hours nothing provisioned (beyond the provisioned horizon, where only
// what was placed is stored), it reads the hours' occupancy maps and takes
// a node no hour of the window has stored — a whole free node, found by
// one read at any utilisation (see vacant). Then it looks for a proof that
// nothing fits: an hour of the window (provisioned, or with every node
// stored) in which the nodes' devices not held for the whole hour by one
// reservation — more than any instant of the hour has free — cannot hold
// the request. That costs a query per hour tried (at most proofHoursMax),
// never more with the pool's size, and decides a refusal of a busy window.
// Last, it reads every stored node-hour of the window (nodes never stored
// are empty) and chooses over all of them: an exact answer, whose cost
// grows with the pool — a fit the fast path cannot see (a device free in a
// gap between others' reservations of the same hour, or a node stored in
// some hours of a long window and free throughout it), or a refusal that
// no hour proves.
func (pl *Placer) search(ctx context.Context, pr PoolResource, req Request) (Placement, nodeHours, error) {
	p, state, complete, err := pl.vacant(ctx, pr, req)
	if err != nil || p != nil {
		return p, state, err
	}
	if nf, err := pl.prove(ctx, pr, req, complete); err != nil || nf != nil {
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, *nf
	}
	all, err := pl.allCandidates(ctx, pr, req)
	if err != nil {
		return nil, nil, err
	}
	p, err = Choose(pr.Topology, req, all)
	return p, nil, err
}

// proofHours bounds the hours of a window prove reads at once, and
// proofHoursMax those it reads in all: a long window is refused by its
// first day or scanned.
const (
	proofHours    = 8
	proofHoursMax = 24
)

// prove looks for an hour of the window that rules the request out: in a
// provisioned hour (or one complete says every node is stored in), the
// want nodes with the most devices not held for the whole hour hold fewer
// than count. The reason is capacity when all nodes together hold fewer
// (else topology).
func (pl *Placer) prove(ctx context.Context, pr PoolResource, req Request, complete map[Hour]bool) (*NoFit, error) {
	want := 1
	switch {
	case req.Topology == api.AnyDevices:
		want = req.Count
	case req.Count > pr.NodeSize:
		want = pr.NodesFor(req.Count)
	}
	hours := HoursOf(req.Window)
	hours = hours[:min(len(hours), proofHoursMax)]
	for start := 0; start < len(hours); start += proofHours {
		batch := hours[start:min(start+proofHours, len(hours))]
		found := make([]*NoFit, len(batch))
		err := pl.each(ctx, len(batch), func(i int) error {
			nodes, scan, err := pl.store.Coverable(ctx, pr, batch[i], 1, max(want, req.Count))
			if err != nil {
				return unavailable(err)
			}
			if !scan.Provisioned && !complete[batch[i]] {
				return nil
			}
			top, all := 0, 0
			for j, n := range nodes {
				if j < want {
					top += n.Count
				}
				all += n.Count
			}
			if top >= req.Count {
				return nil
			}
			reason := api.ReasonTopology
			if all < req.Count && !scan.More {
				reason = api.ReasonCapacity
			}
			found[i] = &NoFit{Reason: reason}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, nf := range found {
			if nf != nil {
				return nf, nil
			}
		}
	}
	return nil, nil
}

// allCandidates reads every stored node-hour of the window, one hour at a
// time, keeping only each node's summary (memory grows with the nodes, not
// with the window); nodes never stored are empty.
func (pl *Placer) allCandidates(ctx context.Context, pr PoolResource, req Request) ([]Candidate, error) {
	sums := make([]Summary, pr.Nodes())
	for k := range sums {
		sums[k] = NewSummary(pr.Size(k))
	}
	for _, h := range HoursOf(req.Window) {
		err := pl.store.Hour(ctx, pr, h, func(nh NodeHour) error {
			if nh.Node < len(sums) {
				sums[nh.Node].Add(nh, req)
			}
			return nil
		})
		if err != nil {
			return nil, unavailable(err)
		}
	}
	out := make([]Candidate, len(sums))
	for k := range sums {
		out[k] = Candidate{Node: k, Summary: &sums[k]}
	}
	return out, nil
}

// visiblePool reads the pool as the draft's tenant sees it: errInvalidPool
// if it cannot, errInvalidRes if the resource is not in it.
func (pl *Placer) visiblePool(ctx context.Context, r Reservation) (Pool, error) {
	p, err := pl.store.VisiblePool(ctx, r.TenantID, r.PoolID)
	switch {
	case errors.Is(err, ErrNotFound):
		return Pool{}, errInvalidPool
	case err != nil:
		return Pool{}, unavailable(err)
	}
	if _, ok := p.Resources[r.Resource]; !ok {
		return Pool{}, errInvalidRes
	}
	return p, nil
}

// visible is visiblePool's verdict alone.
func (pl *Placer) visible(ctx context.Context, r Reservation) error {
	_, err := pl.visiblePool(ctx, r)
	return err
}

// eligible makes sure a placement whose window reaches past the
// hours the fleet's eligibility flags cover lands on eligible nodes only:
// it reads the chosen nodes (one BatchGetItem) and, when one is managed
// and not eligible, reads which of the resource's managed nodes are not
// (once) and chooses again without them. Within the flags' horizon the
// node-hours themselves keep ineligible nodes out (docs/fleet.md,
// Placement): nothing is read.
func (pl *Placer) eligible(ctx context.Context, r Reservation, req Request, pr PoolResource, p Placement, state nodeHours) (Placement, nodeHours, error) {
	if pl.nodes == nil || !r.Window.End.After(pl.flagHorizon().Start()) {
		return p, state, nil
	}
	states, err := pl.nodes.NodeStates(ctx, pr, nodesOf(p), "")
	if err != nil {
		return nil, nil, unavailable(err)
	}
	bad := false
	for _, ns := range states {
		bad = bad || !ns.Eligible()
	}
	if !bad {
		return p, state, nil
	}
	off, err := pl.nodes.Ineligible(ctx, pr)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	exclude := maps.Clone(req.Exclude)
	if exclude == nil {
		exclude = map[int]bool{}
	}
	for n := range off {
		exclude[n] = true
	}
	req.Exclude = exclude
	req.Attempt++
	if _, p, state, err = pl.choose(ctx, r, req); err != nil {
		return nil, nil, err
	}
	return p, state, nil
}

// flagHorizon is the first hour the fleet's eligibility flags may not
// cover: the provisioned horizon from now.
func (pl *Placer) flagHorizon() Hour {
	h := pl.horizon
	if h <= 0 {
		h = ProvisionHours
	}
	return HourOf(pl.now()) + Hour(h)
}

// Contention tuning (docs/capacity.md, "Placement under contention"): the
// moving average of lost placement writes weighs the last ~32 writes;
// a create reads from a fresh whole node instead of the fullest ones with
// probability spreadGain × that average, at most spreadMax.
const (
	contentionWindow = 32
	spreadGain       = 8
	spreadMax        = 0.75
)

// contended feeds one placement write's outcome into the moving average.
func (pl *Placer) contended(lost bool) {
	x := 0.0
	if lost {
		x = 1
	}
	for {
		old := pl.placing.contention.Load()
		avg := math.Float64frombits(old)
		if pl.placing.contention.CompareAndSwap(old, math.Float64bits(avg+(x-avg)/contentionWindow)) {
			return
		}
	}
}

// spreadNow reports whether a create (by its id's hash) should place away
// from the fullest nodes because this process has been losing races.
func (pl *Placer) spreadNow(id string) bool {
	p := min(spreadMax, spreadGain*math.Float64frombits(pl.placing.contention.Load()))
	return p > 0 && float64(tiebreak(id, 0, -2))/(1<<32) < p
}

// learn remembers a resource's layout; known recalls it.
func (pl *Placer) learn(pr PoolResource) {
	if pr.NodeSize > 0 && pr.Devices > 0 {
		pl.placing.topologies.Store(pr.PoolID+"/"+pr.Resource, pr.Topology)
	}
}

func (pl *Placer) known(pr PoolResource) (Topology, bool) {
	t, ok := pl.placing.topologies.Load(pr.PoolID + "/" + pr.Resource)
	if !ok {
		return Topology{}, false
	}
	return t.(Topology), true
}
