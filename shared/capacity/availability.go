package capacity

import (
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
	// Occupancy reads the occupancy maps of hours (consistently; a hour
	// with none has no node known stored).
	Occupancy(ctx context.Context, t PoolResource, hours []Hour) (map[Hour]Occupancy, error)
}

// OutOfServiceStore lists the managed nodes of a resource that placement
// skips: cordoned (by an operator or a rollout), or not ready — unhealthy,
// unreachable, registered but never heard from. A node that became ready
// again may be listed until the reconciler's next pass lifts it, as
// placement waits for that pass too.
type OutOfServiceStore interface {
	// OutOfService reads at most limit of them; complete is false when
	// more are out than were read.
	OutOfService(ctx context.Context, t PoolResource, limit int) (out map[int]bool, complete bool, err error)
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
	topo := q.Topology
	switch topo {
	case "":
		topo = api.OnNodes
	case api.OnNodes, api.AnyDevices:
	default:
		return api.Availability{}, apierr.Invalid("constraint", "topology", "topology must be %q or %q", api.OnNodes, api.AnyDevices)
	}
	switch {
	case q.Count < 1 || q.Count > api.MaxCount:
		return api.Availability{}, apierr.Invalid("constraint", "count", "count must be 1..%d", api.MaxCount)
	case q.Hours < 1 || q.Hours > api.MaxAvailabilityHours:
		return api.Availability{}, apierr.Invalid("constraint", "hours", "hours must be 1..%d", api.MaxAvailabilityHours)
	case q.Limit < 0 || q.Limit > api.MaxOfferings:
		return api.Availability{}, apierr.Invalid("constraint", "limit", "limit must be 1..%d", api.MaxOfferings)
	}
	limit := q.Limit
	if limit == 0 {
		limit = api.DefaultOfferings
	}
	from := now
	if q.From != nil && q.From.After(now) {
		from = q.From.UTC()
	}
	if from.After(now.Add(api.MaxLeadTime)) {
		return api.Availability{}, apierr.Invalid("constraint", "from", "from may be at most %d days ahead (a window starts at most that far ahead)", api.MaxLeadDays)
	}
	to := from.Add(api.DefaultAvailabilitySpan)
	if q.To != nil {
		to = q.To.UTC()
	}
	switch {
	case to.Before(from):
		return api.Availability{}, apierr.Invalid("constraint", "to", "to is before from")
	case to.Sub(from) > api.MaxAvailabilitySpan:
		return api.Availability{}, apierr.Invalid("constraint", "to", "to may be at most %d days after from", int(api.MaxAvailabilitySpan/(24*time.Hour)))
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
			out, outComplete, oErr = a.Nodes.OutOfService(ctx, pr, maxOutOfService)
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
	offers, partial := s.run(reads, out, int(last-first)+1)
	for _, o := range offers {
		ans.Offerings = append(ans.Offerings, api.Offering{EarliestStart: (first + Hour(o.first)).Start(),
			LatestStart: (first + Hour(o.last)).Start(), Nodes: o.nodes})
	}
	ans.Partial = partial
	return ans, nil
}

// readHours reads hours first..last: each hour's emptiest node-hours, at
// most availWorkers queries at once, then the occupancy maps of those not
// provisioned (100 to a BatchGetItem).
func (a *Availability) readHours(ctx context.Context, pr PoolResource, s *availSearch, first, last Hour) ([]hourRead, error) {
	reads := make([]hourRead, last-first+1)
	err := conc.Each(ctx, len(reads), availWorkers, func(i int) error {
		nodes, scan, err := a.Store.Emptiest(ctx, pr, first+Hour(i), s.need, s.readLimit())
		reads[i] = hourRead{nodes: nodes, more: scan.More, provisioned: scan.Provisioned}
		return err
	})
	if err != nil {
		return nil, err
	}
	var maps []Hour
	for i, r := range reads {
		if !r.provisioned {
			maps = append(maps, first+Hour(i))
		}
	}
	if len(maps) == 0 {
		return reads, nil
	}
	occ, err := a.Store.Occupancy(ctx, pr, maps)
	if err != nil {
		return nil, err
	}
	for _, h := range maps {
		o := occ[h]
		reads[h-first].occ = o
		// A map can say provisioned where the query did not (the marker
		// written in between): every node is stored then.
		reads[h-first].provisioned = o.Provisioned
	}
	return reads, nil
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
