package capacity

import (
	"context"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Store is what the capacity service needs from storage. Every write is a
// single-item write on an item of bounded size — conditional wherever two
// writers could race; the few that are not write a value every writer
// agrees on (a tenant's copy of an immutable pool, a provisioned hour's
// marker, the owner's quota max). A multi-item change is a sequence of
// idempotent steps keyed by the reservation or pool it acts for, and the
// reconciler finishes or undoes what a crash left half done.
type Store interface {
	PoolStore
	QuotaStore
	CalendarStore
	ReservationStore
}

// PoolStore keeps pools (global ids) and each tenant's view of the pools
// owned by or offered to it.
type PoolStore interface {
	// ClaimPool writes p, due for completion at due, if its id is free.
	// If the id is taken it returns the stored pool and ErrExists.
	ClaimPool(ctx context.Context, p Pool, due time.Time) (Pool, error)
	// GetPool reads a pool by id (ErrNotFound).
	GetPool(ctx context.Context, poolID string) (Pool, error)
	// EnsureQuota creates a quota row with max unless it exists.
	EnsureQuota(ctx context.Context, k QuotaKey, max int64, now time.Time) error
	// ShowPool makes p visible to tenant (idempotent).
	ShowPool(ctx context.Context, tenant string, p Pool) error
	// PoolDue moves the pool's due marker to next (its creation is
	// complete; the reconciler provisions its hours ahead then) and, when
	// provisioned is not zero, records that every hour before it is
	// provisioned.
	PoolDue(ctx context.Context, poolID string, next time.Time, provisioned Hour) error
	// VisiblePool reads a pool owned by or offered to tenant (else ErrNotFound).
	VisiblePool(ctx context.Context, tenant, poolID string) (Pool, error)
	// ListPools lists the pools visible to tenant by id.
	ListPools(ctx context.Context, tenant string, page paging.Page) ([]Pool, map[string]string, error)
}

// QuotaStore keeps quota rows: max, used, free = max − used, and the
// admissions in flight on the row (a bounded map: a record lives from a
// charge until the count lives in the placed reservation, or until what a
// create wrote for a draft that ended unplaced is undone).
type QuotaStore interface {
	// SetQuotaMax sets max (creating the row with used 0) and returns the row.
	SetQuotaMax(ctx context.Context, k QuotaKey, max int64, now time.Time) (api.Quota, error)
	// GetQuota reads a row; a missing row is max 0, used 0 (it grants 0).
	GetQuota(ctx context.Context, k QuotaKey) (api.Quota, error)
	// ListQuotas lists tenant's rows, of one pool if poolID is not "".
	ListQuotas(ctx context.Context, tenant, poolID string, page paging.Page) ([]api.Quota, map[string]string, error)
	// Charge adds count for reservation id if free ≥ count, recording the
	// placement it is for (nil when the draft records it), and forgets the
	// charge records of settle (reservations seen placed since: their
	// counts live in them now) — one write, no read first. The row becomes
	// due at due (unless it already is), for the reconciler to settle what
	// no later charge does. A charge already recorded for id is not
	// repeated: its record is returned (Fresh false). QuotaExceeded (with
	// the row) when it does not fit or the row is missing; ErrBusy when
	// api.MaxInFlight records are on the row.
	Charge(ctx context.Context, k QuotaKey, id string, count int, p Placement, settle []string, due time.Time) (Charged, error)
	// Replace records another placement for id's charge in flight
	// (ErrStale when it is no longer in flight: voided, refunded or settled).
	Replace(ctx context.Context, k QuotaKey, id string, p Placement) error
	// Settle forgets the charge records of ids, whose reservations are
	// placed (the count stays in used).
	Settle(ctx context.Context, k QuotaKey, ids []string) error
	// Pending returns id's charge record, if any (in flight or voided).
	Pending(ctx context.Context, k QuotaKey, id string) (Charged, bool, error)
	// Void gives id's charge in flight back at once (used −= count: its
	// draft was released), keeping the record and the placement it names
	// for whoever undoes what the create wrote. Idempotent.
	Void(ctx context.Context, k QuotaKey, id string, count int) error
	// Refund forgets id's charge record, giving back its count unless it
	// was voided, once.
	Refund(ctx context.Context, k QuotaKey, id string, count int) error
	// Credit gives back a placed reservation's count, once: it leaves a
	// credit record (apart from the charge records) that CreditDone forgets.
	Credit(ctx context.Context, k QuotaKey, id string, count int) error
	// CreditDone forgets id's credit record.
	CreditDone(ctx context.Context, k QuotaKey, id string) error
	// Row reads a stored row with its records (false when missing).
	Row(ctx context.Context, k QuotaKey) (QuotaRow, bool, error)
	// QuotaDue makes the row due at next — or, with clear, not due any more
	// if no charge record is left on it (due at next if one is).
	QuotaDue(ctx context.Context, k QuotaKey, next time.Time, clear bool) error
}

// QuotaExceeded is ErrQuotaExceeded with the row that refused (max 0 when
// missing), for the numbers a caller needs to act.
type QuotaExceeded struct{ Quota api.Quota }

func (e QuotaExceeded) Error() string { return ErrQuotaExceeded.Error() }
func (e QuotaExceeded) Unwrap() error { return ErrQuotaExceeded }

// Charged is a charge record: its count, the placement it is for, and
// whether its quota was already given back (Voided).
type Charged struct {
	Count     int
	Placement Placement
	Voided    bool
	Fresh     bool // this call made the charge
}

// CalendarStore keeps the node-hour items of each (pool, resource): one
// item per node per UTC hour, ordered for candidates by how many devices
// are untouched and, for refusals, by how many no allocation holds for the
// whole hour. A node-hour is stored once something is placed on it, or
// when the reconciler provisions its hour ahead (every node of the hour,
// so whole nodes are found by the same ordered read); a missing one is
// empty.
type CalendarStore interface {
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
	// NodeHours reads node-hours by key, consistently; missing ones are
	// absent from the map.
	NodeHours(ctx context.Context, t PoolResource, keys []NodeHourKey) (map[NodeHourKey]NodeHour, error)
	// Hour calls fn with every stored node-hour of h, in node order.
	Hour(ctx context.Context, t PoolResource, h Hour, fn func(NodeHour) error) error
	// NodeRange calls fn with the stored node-hours of nodes first..last
	// (inclusive) of h, in node order.
	NodeRange(ctx context.Context, t PoolResource, h Hour, first, last int, fn func(NodeHour) error) error
	// Occupancy reads the occupancy maps of hours (consistently; a hour
	// with none has no node known stored).
	Occupancy(ctx context.Context, t PoolResource, hours []Hour) (map[Hour]Occupancy, error)
	// Occupy adds nodes to hour h's occupancy map (their node-hours are
	// stored): conditional on each word it changes, a word lost to another
	// writer read again and retried a few times (then an error; the map is
	// a hint the next create repairs, never what a placement's safety
	// rests on).
	Occupy(ctx context.Context, t PoolResource, h Hour, nodes []int) error
	// Provision stores every missing node-hour of h, then marks the hour
	// provisioned (idempotent); made is false if it already was.
	Provision(ctx context.Context, t PoolResource, h Hour) (made bool, err error)
	// Allocate adds id's entry to a node-hour read as nh, if the versions
	// of the devices it takes are still those of nh (ErrStale otherwise;
	// ErrCalendarFull when the hour holds MaxEntriesPerNodeHour); one read
	// as missing (nh.Stored false) is created, if it still is. Idempotent.
	Allocate(ctx context.Context, nh NodeHour, id string, e Entry) error
	// Free removes id's entries from the node-hours of keys (idempotent;
	// a node-hour without one is left alone), reading them first.
	Free(ctx context.Context, t PoolResource, keys []NodeHourKey, id string) error
	// Flag marks node-hour (node, h) off — no new placement on it, however
	// free (a node the fleet says is not eligible) — or, with off false,
	// lifts the mark, as generation gen of the node's flags wants it: a
	// node-hour a newer generation wrote is left alone, so a slow writer
	// never undoes a newer one (docs/fleet.md, Eligibility). It creates
	// the node-hour if it is missing. Idempotent, and it composes with
	// placements and frees (it moves the orders' counts by a fixed offset).
	Flag(ctx context.Context, t PoolResource, node int, h Hour, off bool, gen int64) error
}

// Scan is what an ordered read of an hour saw besides its items: More,
// more items qualify than were returned; Provisioned, every node of the
// hour is stored (a node missing from a complete read does not qualify).
type Scan struct {
	More        bool
	Provisioned bool
}

// NodeCount is a node and a count of its devices.
type NodeCount struct {
	Node  int
	Count int
}

// PoolResource names one resource of a pool and its layout.
type PoolResource struct {
	PoolID string
	Topology
}

// ReservationStore keeps reservations under their tenant's partition.
type ReservationStore interface {
	// PutDraft writes a new draft; if the id exists it returns the stored
	// reservation and ErrExists (the clientToken idempotency check).
	PutDraft(ctx context.Context, r Reservation) (Reservation, error)
	// GetReservation reads one of tenant's reservations (ErrNotFound).
	GetReservation(ctx context.Context, tenant, id string) (Reservation, error)
	// Reservations reads several of tenant's reservations, consistently;
	// missing ones are absent from the map.
	Reservations(ctx context.Context, tenant string, ids []string) (map[string]Reservation, error)
	// Transition writes to's state, reason, history, due and retention —
	// its devices only when to is placed: a writer never overwrites a
	// placement it did not make — if the stored state is still from, and
	// returns the reservation as that write left it (ErrStale otherwise).
	Transition(ctx context.Context, to Reservation, from api.ReservationState) (Reservation, error)
	// Amend writes to's binding-time fields — Bound, Move, MovedFrom,
	// Moves, NodeNoted, its devices and its history — if the stored
	// reservation is still in r's state with r's move in flight (ErrStale
	// otherwise), and returns it as written.
	Amend(ctx context.Context, r, to Reservation) (Reservation, error)
	// Disrupt appends a history entry {state: its state, reason:
	// disrupted, rolloutId} to a non-terminal reservation, once per rollout
	// (idempotent; nothing for a terminal or missing one).
	Disrupt(ctx context.Context, tenant, id, rolloutID string, at time.Time) error
	// SetPlan records on a draft the placement its create is about to
	// charge and write, when it is too large for the charge's record, if it
	// is still a draft (ErrStale otherwise).
	SetPlan(ctx context.Context, r Reservation, p Placement, nodeSize int) error
	// TakeOver moves a draft's lease from old to lease (ErrStale if another
	// flow took it or it is no longer a draft).
	TakeOver(ctx context.Context, r Reservation, old, lease time.Time) error
	// MarkCredited records that a terminal reservation's quota was given
	// back (idempotent).
	MarkCredited(ctx context.Context, r Reservation) error
	// ClaimDue moves a reservation's due marker from r.Due to until if the
	// stored state and due are still r's, and returns the stored item as
	// that write left it (ErrStale otherwise, ErrNotFound if it is gone):
	// how one reconciler pass at a time takes a due reservation.
	ClaimDue(ctx context.Context, r Reservation, until time.Time) (Reservation, error)
	// ClearDue removes the due marker if the stored state and due are
	// still r's (ErrStale otherwise).
	ClearDue(ctx context.Context, r Reservation) error
	// ListReservations lists tenant's reservations, newest first.
	ListReservations(ctx context.Context, tenant string, f ListFilter, page paging.Page) ([]Reservation, map[string]string, error)
}

// ListFilter narrows reservations.list.
type ListFilter struct {
	PoolID string               // "" for any
	State  api.ReservationState // "" for any
}

// Snapshot is everything the invariant checker compares.
type Snapshot struct {
	Pools        []Pool
	Quotas       []QuotaRow
	Reservations []Reservation
	NodeHours    []NodeHour
	// Maps are the hours' `#HOUR` items: occupancy maps, or provisioned.
	Maps []HourMap
	// Orphans are index entries whose item is gone (a local server killed
	// mid-write can leave them; DynamoDB does not).
	Orphans []string
}

// HourMap is one hour's occupancy map, of one resource of a pool.
type HourMap struct {
	PoolID, Resource string
	Hour             Hour
	Occupancy
}

// QuotaRow is a stored quota row with what it holds in flight.
type QuotaRow struct {
	api.Quota
	Free      int64
	Charging  map[string]Charged // admissions charged (or voided), not yet settled or refunded
	Crediting map[string]int     // credits given, not yet forgotten
	Due       time.Time          // when the reconciler looks at its records (zero: not due)
}

// Key returns the row's key.
func (q QuotaRow) Key() QuotaKey { return QuotaKeyOf(q.Quota) }

// SnapshotReader reads a Snapshot (a full read of the table: an operator's
// tool and the tests' oracle, never a request path).
type SnapshotReader interface {
	Snapshot(ctx context.Context) (Snapshot, error)
}
