package capacity

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/conc"
)

// Availability answers pools.availability: when a reservation of a count
// of devices, spread as a topology, for a window of whole hours could be
// placed, its start between two times (docs/capacity.md, "When can I get
// it?"). It reads what admission already keeps per UTC hour — the `fit`
// order of the hour's node-hours and the hour's occupancy map — and
// nothing that grows with the pool's reservations: per hour of the span
// (the starts searched and the last one's window) one bounded query of the
// hour's emptiest node-hours, and the maps of the hours not provisioned,
// 100 to a call. So its calls and read units follow the hours searched and
// the window's length, never the pool's size or utilisation.
type Availability struct {
	Store AvailabilityStore
	// Nodes tells which of a pool's nodes placement skips (nil: no fleet,
	// every node unmanaged and eligible).
	Nodes OutOfServiceStore
	Now   func() time.Time
	// ProvisionHours is how far ahead the reconciler provisions — and so
	// how far the fleet's eligibility flags reach into node-hours (default
	// ProvisionHours).
	ProvisionHours int
	// PerHour is how many node-hours each hour's read takes (0: the nodes a
	// placement needs and emptiestExtra more); OutOfServiceRead, how many
	// out-of-service nodes are read (0: maxOutOfService); DeepenShare, the
	// share of the span's hours read again for undecided starts, one in
	// DeepenShare (0: deepenShare). Tests shrink the first two to make the
	// search undecided, and read every hour again to make it decide.
	PerHour, OutOfServiceRead, DeepenShare int
}

// AvailabilityStore is what the search reads: the pool as the tenant sees
// it, the tenant's quota row, and per hour the emptiest node-hours (the
// `fit` order read from the top) and the occupancy map. Reads only.
type AvailabilityStore interface {
	// VisiblePool reads a pool owned by or offered to tenant (else ErrNotFound).
	VisiblePool(ctx context.Context, tenant, poolID string) (Pool, error)
	// GetQuota reads a row; a missing row is max 0, used 0.
	GetQuota(ctx context.Context, k QuotaKey) (api.Quota, error)
	// Emptiest reads the stored node-hours of hour h with at least minFree
	// untouched devices, the most untouched first (equally untouched ones
	// in the fixed scramble's order, the same in every hour), at most
	// limit: one consistent Query of the `fit` order from the top. Scan
	// says whether more qualify and whether the hour is provisioned.
	// Node-hours the fleet keeps placements off are not among them.
	Emptiest(ctx context.Context, t PoolResource, h Hour, minFree, limit int) ([]NodeFree, Scan, error)
	// HourMaps reads the occupancy maps of hours (consistently; a hour
	// with none has no node known stored).
	HourMaps(ctx context.Context, t PoolResource, hours []Hour) (map[Hour]Occupancy, error)
}

// OutOfServiceStore lists the managed nodes of a resource that placement
// skips: cordoned (by an operator or a rollout), or not ready — unhealthy,
// unreachable, registered but never heard from. A node that became ready
// again may be listed until the reconciler's next pass lifts it, as
// placement waits for that pass too.
type OutOfServiceStore interface {
	// OutOfService reads at most limit of them; complete is false when
	// more are out than were read.
	OutOfServiceNodes(ctx context.Context, t PoolResource, limit int) (out map[int]bool, complete bool, err error)
}

// NodeFree is one stored node-hour as the search reads it: the devices no
// allocation of the hour touches — for a window covering the whole hour,
// exactly the devices free for it — and whether the hour holds its
// maximum of reservations (a create then places nothing more there).
type NodeFree struct {
	Node int
	Free Mask
	Full bool
}

// AvailabilityQuery is pools.availability's request.
type AvailabilityQuery struct {
	TenantID, PoolID, Resource string
	Count, Hours               int
	Topology                   string     // "" is api.OnNodes
	From, To                   *time.Time // nil: now, from + api.DefaultAvailabilitySpan
	Limit                      int        // 0 is api.DefaultOfferings
}

// Search tuning (docs/capacity.md, "When can I get it?"): each hour's read
// of its emptiest node-hours takes the nodes the request needs and
// emptiestExtra more — enough for a node free throughout a window to be
// seen in every hour of it, while one read stays one or two read units.
// maxOutOfService bounds the out-of-service nodes read; past it, hours the
// fleet's flags do not reach are left undecided (partial).
const (
	emptiestExtra   = 32
	maxOutOfService = 1000
	availWorkers    = 16
)

// Ask answers one request.
func (a *Availability) Ask(ctx context.Context, q AvailabilityQuery) (api.Availability, error) {
	now := a.now()
	topo, limit, from, to, err := parseAvailability(q, now)
	if err != nil {
		return api.Availability{}, err
	}
	p, err := a.Store.VisiblePool(ctx, q.TenantID, q.PoolID)
	switch {
	case errors.Is(err, ErrNotFound):
		return api.Availability{}, errPoolNotFound(q.PoolID)
	case err != nil:
		return api.Availability{}, unavailable(err)
	}
	if _, ok := p.Resources[q.Resource]; !ok {
		return api.Availability{}, errNoResource(q.PoolID, q.Resource)
	}
	pr := PoolResource{PoolID: p.PoolID, Topology: p.Topology(q.Resource)}
	// The starts: whole hours from from (the current hour when from is
	// now: it is booked from now) through to, none past the lead limit.
	first := HourOf(from)
	if from.After(now) && !first.Start().Equal(from) {
		first++
	}
	last := HourOf(minTime(to, now.Add(api.MaxLeadTime)))
	ans := api.Availability{PoolID: p.PoolID, Resource: q.Resource, Count: q.Count, Hours: q.Hours, Topology: topo,
		From: from, To: to, Offerings: []api.Offering{}}

	s := newAvailSearch(pr.Topology, q.Count, topo, q.Hours, limit)
	var quota api.Quota
	var out map[int]bool
	outComplete := true
	var reads []hourRead
	var qErr, oErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		quota, qErr = a.Store.GetQuota(ctx, QuotaKey{q.TenantID, p.PoolID, q.Resource})
	}()
	go func() {
		defer wg.Done()
		if a.Nodes != nil {
			out, outComplete, oErr = a.Nodes.OutOfServiceNodes(ctx, pr, cmp.Or(a.OutOfServiceRead, maxOutOfService))
		}
	}()
	if last >= first && s.possible() {
		reads, err = a.readHours(ctx, pr, s, first, last+Hour(q.Hours)-1)
	}
	wg.Wait()
	for _, e := range []error{qErr, oErr, err} {
		if e != nil {
			return api.Availability{}, unavailable(e)
		}
	}
	ans.Quota = api.QuotaFit{Max: quota.Max, Used: quota.Used, Fits: quota.Max-quota.Used >= int64(q.Count)}
	if reads == nil {
		return ans, nil
	}
	// Past the hours the fleet's eligibility flags reach, only the
	// out-of-service list keeps skipped nodes out: incomplete, no node
	// there is known eligible.
	if !outComplete {
		flagged := HourOf(now) + Hour(a.provisionHours())
		for i := range reads {
			reads[i].unsure = first+Hour(i) >= flagged
		}
	}
	starts := int(last-first) + 1
	offers, undecided := s.run(reads, out, starts)
	// Undecided starts whose hours were read for whole free nodes only:
	// those hours read again down to the request's need, earliest first,
	// and the starts decided again — until none is left to read or the
	// budget (a share of the span's hours) is spent. Deciding one may move
	// the last offering, and with it the starts that count.
	share := cmp.Or(a.DeepenShare, deepenShare)
	budget := (len(reads) + share - 1) / share
	for len(undecided) > 0 && budget > 0 {
		n, err := a.deepen(ctx, pr, s, first, reads, undecided, budget)
		if err != nil {
			return api.Availability{}, unavailable(err)
		}
		if n == 0 {
			break
		}
		budget -= n
		offers, undecided = s.run(reads, out, starts)
	}
	for _, o := range offers {
		ans.Offerings = append(ans.Offerings, api.Offering{EarliestStart: (first + Hour(o.first)).Start(),
			LatestStart: (first + Hour(o.last)).Start(), Nodes: o.nodes})
	}
	ans.Partial = len(undecided) > 0
	return ans, nil
}

// readHours reads hours first..last: their occupancy maps (100 to a
// BatchGetItem: provisioned, or which nodes are stored), then each hour's
// emptiest node-hours, at most availWorkers queries at once. A provisioned
// hour is read down to the request's need; one that is not, for whole free
// nodes only: there the free nodes are the ones its map leaves out, and
// the stored ones partly booked — what a busy pool holds and an empty one
// does not — are read only if a start needs them (deepen).
func (a *Availability) readHours(ctx context.Context, pr PoolResource, s *availSearch, first, last Hour) ([]hourRead, error) {
	hours := make([]Hour, last-first+1)
	for i := range hours {
		hours[i] = first + Hour(i)
	}
	occ, err := a.Store.HourMaps(ctx, pr, hours)
	if err != nil {
		return nil, err
	}
	reads := make([]hourRead, len(hours))
	for i, h := range hours {
		reads[i] = hourRead{provisioned: occ[h].Provisioned, stored: storedBits(occ[h], pr.Nodes())}
	}
	err = conc.Each(ctx, len(reads), availWorkers, func(i int) error {
		floor := s.need
		if !reads[i].provisioned {
			floor = max(s.need, pr.NodeSize)
		}
		return a.readHour(ctx, pr, s, hours[i], floor, &reads[i])
	})
	return reads, err
}

// readHour reads one hour's emptiest node-hours with at least floor
// untouched devices into r.
func (a *Availability) readHour(ctx context.Context, pr PoolResource, s *availSearch, h Hour, floor int, r *hourRead) error {
	nodes, scan, err := a.Store.Emptiest(ctx, pr, h, floor, cmp.Or(a.PerHour, s.want+emptiestExtra))
	r.nodes, r.more, r.floor = nodes, scan.More, floor
	r.provisioned = r.provisioned || scan.Provisioned
	return err
}

// deepenShare bounds the hours read again for undecided starts: a sixth
// of the span, so a search makes at most that many more calls than the
// span's hours.
const deepenShare = 6

// deepen reads again, down to the request's need, the hours of undecided
// starts that were read for whole free nodes only, earliest start first,
// at most budget of them, and returns how many it read.
func (a *Availability) deepen(ctx context.Context, pr PoolResource, s *availSearch, first Hour, reads []hourRead, undecided []int, budget int) (int, error) {
	var hours []int
	seen := map[int]bool{}
	for _, st := range undecided {
		for i := st; i < st+s.hours && len(hours) < budget; i++ {
			if !seen[i] && reads[i].floor > s.need && !reads[i].provisioned {
				seen[i] = true
				hours = append(hours, i)
			}
		}
	}
	err := conc.Each(ctx, len(hours), availWorkers, func(j int) error {
		i := hours[j]
		return a.readHour(ctx, pr, s, first+Hour(i), s.need, &reads[i])
	})
	return len(hours), err
}

// parseAvailability checks q's shape and fills its defaults: the topology,
// the limit, and the starts' bounds (from: now or later).
func parseAvailability(q AvailabilityQuery, now time.Time) (topo string, limit int, from, to time.Time, err error) {
	topo = cmp.Or(q.Topology, api.OnNodes)
	switch {
	case topo != api.OnNodes && topo != api.AnyDevices:
		err = apierr.Invalid("constraint", "topology", "topology must be %q or %q", api.OnNodes, api.AnyDevices)
	case q.Count < 1 || q.Count > api.MaxCount:
		err = apierr.Invalid("constraint", "count", "count must be 1..%d", api.MaxCount)
	case q.Hours < 1 || q.Hours > api.MaxAvailabilityHours:
		err = apierr.Invalid("constraint", "hours", "hours must be 1..%d", api.MaxAvailabilityHours)
	case q.Limit < 0 || q.Limit > api.MaxOfferings:
		err = apierr.Invalid("constraint", "limit", "limit must be 1..%d", api.MaxOfferings)
	}
	if err != nil {
		return
	}
	limit, from = cmp.Or(q.Limit, api.DefaultOfferings), now
	if q.From != nil && q.From.After(now) {
		from = q.From.UTC()
	}
	to = from.Add(api.DefaultAvailabilitySpan)
	if q.To != nil {
		to = q.To.UTC()
	}
	switch {
	case from.After(now.Add(api.MaxLeadTime)):
		err = apierr.Invalid("constraint", "from", "from may be at most %d days ahead (a window starts at most that far ahead)", api.MaxLeadDays)
	case to.Before(from):
		err = apierr.Invalid("constraint", "to", "to is before from (a from in the past counts as now)")
	case to.Sub(from) > api.MaxAvailabilitySpan:
		err = apierr.Invalid("constraint", "to", "to may be at most %d days after from", int(api.MaxAvailabilitySpan/(24*time.Hour)))
	}
	return
}

func (a *Availability) now() time.Time {
	if a.Now == nil {
		return time.Now().UTC()
	}
	return a.Now().UTC()
}

func (a *Availability) provisionHours() int {
	if a.ProvisionHours > 0 {
		return a.ProvisionHours
	}
	return ProvisionHours
}
