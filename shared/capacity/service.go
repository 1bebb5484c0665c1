package capacity

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Service is the capacity API's behaviour: pools, quotas and reservations.
type Service struct {
	Store Store
	Now   func() time.Time
	// Logger receives what a caller never sees (a failed clean-up, …).
	Logger *slog.Logger
	// Faults is a test-only hook, nil in production: called after each
	// write of the create, release and reconcile flows with the point's
	// name; an error stops the flow there as a crash would.
	Faults func(point string) error
	// PlaceAttempts bounds the optimistic placement retries (default 16).
	PlaceAttempts int
	// Nodes is the fleet (nil: every node unmanaged, as in v0.5).
	Nodes NodeStore
	// ProvisionHours is how far ahead node-hours are provisioned, and so
	// flagged for ineligible nodes (default ProvisionHours).
	ProvisionHours int

	// Hooks of the deterministic simulation (zero in production; see
	// sim_test.go). Serial runs a flow's own concurrent steps — the
	// candidates read ahead, writes to several node-hours — one after
	// another, so each store call is a point the simulation interleaves
	// flows at; Sleep replaces the backoff's timer; NewID makes the id of a
	// create without a clientToken (default a ULID).
	Serial bool
	Sleep  func(ctx context.Context, d time.Duration) error
	NewID  func(now time.Time) string

	placeRetries atomic.Int64
	// contention is a moving average of placement writes lost to racing
	// creates (float64 bits); topologies caches resource layouts seen
	// (immutable once a pool exists): both steer candidate reads only.
	contention atomic.Uint64
	topologies sync.Map // pool + "/" + resource → Topology
	// settles are charge records this process may forget on its next
	// charge of the same row (settleLater).
	settles settles
}

// Fault points (see Service.Faults and docs/capacity.md). A terminal
// fence is followed by "<flow>.unplaced" and "<flow>.credited", flow being
// the first part of the fence's point ("create", "release", "reconcile").
const (
	FaultPoolClaimed     = "pool.claimed"
	FaultDraft           = "create.draft"
	FaultDenied          = "create.denied"
	FaultCharged         = "create.charged"
	FaultRejectedQuota   = "create.rejected-quota"
	FaultRejectedCap     = "create.rejected-capacity"
	FaultRejectedInvalid = "create.rejected-invalid"
	FaultAllocated       = "create.allocated"
	FaultPlaced          = "create.placed"
	FaultExpired         = "create.expired" // a replay fenced its stale draft
	FaultFenced          = "release.fenced"
)

// FaultPoints lists every point of the create and release flows, in flow
// order (the crash matrix walks it).
var FaultPoints = []string{
	FaultDraft, FaultDenied, FaultRejectedInvalid, FaultCharged, FaultRejectedQuota, FaultRejectedCap,
	"create.unplaced", "create.credited", FaultAllocated, FaultPlaced,
	FaultFenced, "release.unplaced", "release.credited",
}

// flowOf is the flow a fault point belongs to ("create" of "create.draft").
func flowOf(point string) string {
	flow, _, _ := strings.Cut(point, ".")
	return flow
}

// each runs fn(0..n-1), 16 at a time, and joins their errors.
// (one at a time when Serial).
func (s *Service) each(ctx context.Context, n int, fn func(i int) error) error {
	limit := 16
	if s.Serial {
		limit = 1
	}
	return conc.Each(ctx, n, limit, fn)
}

func (s *Service) fault(point string) error {
	if s.Faults == nil {
		return nil
	}
	return s.Faults(point)
}

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now().UTC()
	}
	return s.Now().UTC()
}

func (s *Service) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// PlaceRetries is how many placement writes lost a race since start.
func (s *Service) PlaceRetries() int64 { return s.placeRetries.Load() }

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
func (s *Service) contended(lost bool) {
	x := 0.0
	if lost {
		x = 1
	}
	for {
		old := s.contention.Load()
		avg := math.Float64frombits(old)
		if s.contention.CompareAndSwap(old, math.Float64bits(avg+(x-avg)/contentionWindow)) {
			return
		}
	}
}

// spreadNow reports whether a create (by its id's hash) should place away
// from the fullest nodes because this process has been losing races.
func (s *Service) spreadNow(id string) bool {
	p := min(spreadMax, spreadGain*math.Float64frombits(s.contention.Load()))
	return p > 0 && float64(tiebreak(id, 0, -2))/(1<<32) < p
}

// learn remembers a resource's layout; known recalls it.
func (s *Service) learn(pr PoolResource) {
	if pr.NodeSize > 0 && pr.Devices > 0 {
		s.topologies.Store(pr.PoolID+"/"+pr.Resource, pr.Topology)
	}
}

func (s *Service) known(pr PoolResource) (Topology, bool) {
	t, ok := s.topologies.Load(pr.PoolID + "/" + pr.Resource)
	if !ok {
		return Topology{}, false
	}
	return t.(Topology), true
}

// errPoolNotFound answers for a pool the tenant cannot see (or that does
// not exist: the two are not told apart).
func errPoolNotFound(id string) *apierr.Error {
	return apierr.New(apierr.NotFound, "pool %q not found", id)
}

// errNoResource answers for a resource the pool does not have.
func errNoResource(pool, resource string) *apierr.Error {
	return apierr.Invalid("unknown_resource", "resource", "pool %q has no resource %q", pool, resource)
}

// unavailable maps a store error that is not a domain sentinel.
func unavailable(err error) *apierr.Error {
	if e := apierr.As(err); e != nil {
		return e
	}
	return apierr.Dependency("dynamodb", err)
}

// CreatePool creates a pool and its owner's quota rows (max = device
// count). The same request again returns the stored pool; the id owned by
// another tenant or defined otherwise is CONFLICT. nodeSize defaults to
// api.DefaultNodeSize for a resource it does not name.
//
// Protocol: (1) claim the global id with the pool item, marked due; (2) the
// owner's quota rows, each created only if missing; (3) the owner's view;
// (4) move the due mark to now. A crash anywhere leaves the pool due: a
// retry of the request or the reconciler runs 2–4 again. The pool stays in
// the due index for good: the reconciler provisions its hours ahead
// (ProvisionHours) and marks it due again at the next hour.
func (s *Service) CreatePool(ctx context.Context, tenant, poolID string, resources, nodeSize map[string]int) (Pool, error) {
	for r, n := range nodeSize {
		if _, ok := resources[r]; !ok {
			return Pool{}, apierr.Invalid("unknown_resource", "nodeSize."+r, "nodeSize names %q, which is not among the resources", r)
		}
		if n < 1 || n > api.MaxNodeSize {
			return Pool{}, apierr.Invalid("constraint", "nodeSize."+r, "a node holds 1..%d devices", api.MaxNodeSize)
		}
	}
	p := NewPool(poolID, tenant, resources, nodeSize, s.now())
	stored, err := s.Store.ClaimPool(ctx, p, p.CreatedAt.Add(api.StaleAfter))
	switch {
	case errors.Is(err, ErrExists):
		if !stored.OwnedBy(tenant) {
			return Pool{}, apierr.New(apierr.Conflict, "pool id %q is taken", poolID).With("field", "poolId")
		}
		if !stored.SameDefinition(p) {
			return Pool{}, apierr.New(apierr.Conflict, "pool %q exists with another definition", poolID).With("field", "resources")
		}
		p = stored
	case err != nil:
		return Pool{}, unavailable(err)
	}
	if err := s.fault(FaultPoolClaimed); err != nil {
		return Pool{}, err
	}
	if err := s.completePool(ctx, p, s.now()); err != nil {
		return Pool{}, err
	}
	return p.WithDevices(), nil
}

// completePool runs steps 2–4 of CreatePool, leaving the pool due at next;
// every step is idempotent.
func (s *Service) completePool(ctx context.Context, p Pool, next time.Time) error {
	names := p.ResourceNames()
	err := s.each(ctx, len(names), func(i int) error {
		r := names[i]
		return s.Store.EnsureQuota(ctx, QuotaKey{p.OwnerTenantID, p.PoolID, r}, int64(p.Resources[r]), p.CreatedAt)
	})
	if err != nil {
		return unavailable(err)
	}
	if err := s.Store.ShowPool(ctx, p.OwnerTenantID, p); err != nil {
		return unavailable(err)
	}
	if err := s.Store.PoolDue(ctx, p.PoolID, next, 0); err != nil {
		return unavailable(err)
	}
	return nil
}

// ProvisionHours is how many hours, the current one first, the reconciler
// keeps provisioned for every pool: every node-hour stored, so candidate
// reads find whole nodes too (docs/capacity.md). Hours further ahead are
// stored node by node as reservations are placed on them.
const ProvisionHours = 72

// provisionPool provisions the hours ahead of p from now's hour while the
// pass's budget of node-hours lasts (an hour is started only with budget
// left); through is the first hour not provisioned yet, done false when
// the budget ran out first (the pool stays due, for the next pass).
func (s *Service) provisionPool(ctx context.Context, p Pool, now time.Time, horizon int, budget *atomic.Int64) (hours int, through Hour, done bool, err error) {
	from, to := max(p.ProvisionedTo, HourOf(now)), HourOf(now)+Hour(horizon)
	for h := from; h < to; h++ {
		for _, name := range p.ResourceNames() {
			if budget.Load() <= 0 {
				return hours, h, false, nil
			}
			pr := PoolResource{PoolID: p.PoolID, Topology: p.Topology(name)}
			made, err := s.Store.Provision(ctx, pr, h)
			if err != nil {
				return hours, h, false, unavailable(err)
			}
			if made {
				hours++
				budget.Add(-int64(pr.Nodes()))
			}
		}
	}
	return hours, max(from, to), true, nil
}

// OfferPool sets toTenant's quota max on one resource of a pool tenant owns.
// Protocol: (1) show the pool to toTenant, (2) set the row's max — a crash
// between leaves the pool visible with a missing row, which grants 0.
func (s *Service) OfferPool(ctx context.Context, tenant, poolID, toTenant, resource string, max int64) (api.Quota, error) {
	p, err := s.Store.GetPool(ctx, poolID)
	if errors.Is(err, ErrNotFound) || (err == nil && !p.OwnedBy(tenant)) {
		return api.Quota{}, errPoolNotFound(poolID)
	}
	if err != nil {
		return api.Quota{}, unavailable(err)
	}
	if _, ok := p.Resources[resource]; !ok {
		return api.Quota{}, errNoResource(poolID, resource)
	}
	if max < 0 || max > api.MaxQuota {
		return api.Quota{}, apierr.Invalid("constraint", "max", "max must be 0..%d", api.MaxQuota)
	}
	if err := s.Store.ShowPool(ctx, toTenant, p); err != nil {
		return api.Quota{}, unavailable(err)
	}
	q, err := s.Store.SetQuotaMax(ctx, QuotaKey{toTenant, poolID, resource}, max, s.now())
	if err != nil {
		return api.Quota{}, unavailable(err)
	}
	return q, nil
}

// GetPool returns a pool owned by or offered to tenant.
func (s *Service) GetPool(ctx context.Context, tenant, poolID string) (Pool, error) {
	p, err := s.Store.VisiblePool(ctx, tenant, poolID)
	if errors.Is(err, ErrNotFound) {
		return Pool{}, errPoolNotFound(poolID)
	}
	if err != nil {
		return Pool{}, unavailable(err)
	}
	return p.WithDevices(), nil
}

// ListPools lists the pools owned by or offered to tenant, by id.
func (s *Service) ListPools(ctx context.Context, tenant string, page paging.Page) ([]Pool, map[string]string, error) {
	ps, next, err := s.Store.ListPools(ctx, tenant, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	for i := range ps {
		ps[i] = ps[i].WithDevices()
	}
	return ps, next, nil
}

// GetQuota returns a quota row; a missing row is max 0, used 0.
func (s *Service) GetQuota(ctx context.Context, k QuotaKey) (api.Quota, error) {
	q, err := s.Store.GetQuota(ctx, k)
	if err != nil {
		return api.Quota{}, unavailable(err)
	}
	return q, nil
}

// ListQuotas lists tenant's quota rows (of one pool when poolID != "").
func (s *Service) ListQuotas(ctx context.Context, tenant, poolID string, page paging.Page) ([]api.Quota, map[string]string, error) {
	qs, next, err := s.Store.ListQuotas(ctx, tenant, poolID, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	return qs, next, nil
}

// pause waits the jittered backoff before placement attempt n (not a
// synchronization: racers that lost spread out before reading again).
func (s *Service) pause(ctx context.Context, attempt int) error {
	if s.Sleep != nil {
		return s.Sleep(ctx, backoff(attempt, rand.Int64N))
	}
	return conc.Sleep(ctx, backoff(attempt, rand.Int64N))
}
