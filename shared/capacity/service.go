package capacity

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/conc"
)

// Service is the capacity module as a caller builds it: the store, the
// fleet, the clock and the hooks every flow shares. It holds no flow of
// its own: each is a type over the narrow part of the store it uses, built
// on the service by the method of its name —
//
//   - Pools (pools.create, pools.offer, pools.get, pools.list, pools.usage)
//     and Quotas (quotas.get, quotas.list);
//   - Admission (reservations.create: draft, decide, charge, place, fence);
//   - Reservations (reservations.get, reservations.list,
//     reservations.release);
//   - Bindings (binding a reservation through the fleet's nodes, moving it
//     off nodes that failed it, a node's adoption);
//
// and, under them, Placer (choosing devices), Calendar (writing and freeing
// node-hour entries), Fence (a reservation's transitions and what ending it
// gives back) and Charges (the quota rows' admissions in flight). Steps
// (reconcile.go) is the reconciler's part, built on a service too.
//
// The flows are built anew on each call, from the fields as they are then
// (a test may set Faults or Nodes between calls); what one process learns
// while it serves — contention, the resources' layouts, the charge records
// it may forget — lives here and is shared by all of them.
type Service struct {
	Store Store
	Now   func() time.Time
	// Logger receives what a caller never sees (a failed clean-up, …).
	Logger *slog.Logger
	// Faults is a test-only hook, nil in production: called after each
	// write of the create, release and reconcile flows with the point's
	// name; an error stops the flow there as a crash would.
	Faults func(point string) error
	// PlaceAttempts, when set, bounds a placement's attempts (0: it retries
	// lost races until the flow's deadline).
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

	placing placing
	// settles are charge records this process may forget on its next
	// charge of the same row (Charges.settleLater).
	settles settles
}

// Pools builds the pools' methods.
func (s *Service) Pools() *Pools { return &Pools{hooks: s.hooks(), store: s.Store} }

// Quotas builds the quotas' reads.
func (s *Service) Quotas() *Quotas { return &Quotas{store: s.Store} }

// Admission builds reservations.create's flow.
func (s *Service) Admission() *Admission {
	f := s.fence()
	return &Admission{hooks: s.hooks(), store: s.Store, placer: f.bindings.placer, calendar: f.calendar, fence: f,
		charges: s.charges(f), placing: &s.placing, attempts: s.PlaceAttempts, newID: s.NewID}
}

// Reservations builds the reservations' reads and their release.
func (s *Service) Reservations() *Reservations {
	f := s.fence()
	return &Reservations{hooks: s.hooks(), store: s.Store, fence: f, bindings: f.bindings}
}

// Bindings builds binding through the fleet's nodes (unmanaged nodes bind
// at once; Steps names their Binder).
func (s *Service) Bindings() *Bindings {
	cal := &Calendar{hooks: s.hooks(), store: s.Store}
	return &Bindings{hooks: s.hooks(), store: s.Store, nodes: s.Nodes, calendar: cal,
		placer: &Placer{hooks: s.hooks(), store: s.Store, nodes: s.Nodes, calendar: cal, placing: &s.placing, horizon: s.ProvisionHours}}
}

// fence builds the fence on the bindings it unbinds through.
func (s *Service) fence() *Fence {
	b := s.Bindings()
	return &Fence{hooks: s.hooks(), store: s.Store, calendar: b.calendar, bindings: b}
}

// charges builds the quota rows' admissions in flight on fence.
func (s *Service) charges(f *Fence) *Charges {
	return &Charges{hooks: s.hooks(), store: s.Store, fence: f, settles: &s.settles}
}

// hooks are what every flow shares: the clock, the logger, and the hooks
// of the tests and the simulation (Service's fields as a flow is built).
type hooks struct {
	clock  func() time.Time
	log    *slog.Logger
	faults func(point string) error
	serial bool
	sleep  func(ctx context.Context, d time.Duration) error
}

func (s *Service) hooks() hooks {
	return hooks{clock: s.Now, log: s.Logger, faults: s.Faults, serial: s.Serial, sleep: s.Sleep}
}

// placing is what one process learns as it places: how many placement
// writes lost a race, a moving average of them (contention: float64 bits)
// and the resources' layouts seen (immutable once a pool exists) — the
// last two steer candidate reads only.
type placing struct {
	retries    atomic.Int64
	contention atomic.Uint64
	topologies sync.Map // pool + "/" + resource → Topology
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
// (one at a time when serial).
func (h hooks) each(ctx context.Context, n int, fn func(i int) error) error {
	limit := 16
	if h.serial {
		limit = 1
	}
	return conc.Each(ctx, n, limit, fn)
}

func (h hooks) fault(point string) error {
	if h.faults == nil {
		return nil
	}
	return h.faults(point)
}

func (h hooks) now() time.Time {
	if h.clock == nil {
		return time.Now().UTC()
	}
	return h.clock().UTC()
}

func (h hooks) logger() *slog.Logger {
	if h.log == nil {
		return slog.Default()
	}
	return h.log
}

// pause waits the jittered backoff before placement attempt n (not a
// synchronization: racers that lost spread out before reading again).
func (h hooks) pause(ctx context.Context, attempt int) error {
	if h.sleep != nil {
		return h.sleep(ctx, backoff(attempt, rand.Int64N))
	}
	return conc.Sleep(ctx, backoff(attempt, rand.Int64N))
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
