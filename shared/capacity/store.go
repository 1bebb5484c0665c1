package capacity

import (
	"context"
	"time"
)

// Store is what the capacity service needs from storage. Every write is a
// single-item conditional write (SPEC §5) on an item of bounded size: a
// multi-item change is a sequence of idempotent steps keyed by the
// reservation or pool it acts for, and the reconciler finishes or undoes
// what a crash left half done.
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
	// PoolDue moves the pool's due marker to next: its creation is
	// complete, and the reconciler provisions its days ahead then.
	PoolDue(ctx context.Context, poolID string, next time.Time) error
	// VisiblePool reads a pool owned by or offered to tenant (else ErrNotFound).
	VisiblePool(ctx context.Context, tenant, poolID string) (Pool, error)
	// ListPools lists the pools visible to tenant by id.
	ListPools(ctx context.Context, tenant string, page Page) ([]Pool, map[string]string, error)
}

// QuotaStore keeps quota rows: max, used, free = max − used, and the
// admissions in flight on the row (a bounded map, emptied as each settles).
type QuotaStore interface {
	// SetQuotaMax sets max (creating the row with used 0) and returns the row.
	SetQuotaMax(ctx context.Context, k QuotaKey, max int64, now time.Time) (Quota, error)
	// GetQuota reads a row; a missing row is max 0, used 0 (it grants 0).
	GetQuota(ctx context.Context, k QuotaKey) (Quota, error)
	// ListQuotas lists tenant's rows, of one pool if poolID is not "".
	ListQuotas(ctx context.Context, tenant, poolID string, page Page) ([]Quota, map[string]string, error)
	// Charge adds count for reservation id if free ≥ count, recording the
	// placement it is for in the same write, in one round trip with no
	// read first. A charge already recorded for id is not repeated: its
	// placement is returned (fresh false). ErrQuotaExceeded (with the row)
	// when it does not fit or the row is missing; ErrBusy when too many
	// admissions are in flight on the row.
	Charge(ctx context.Context, k QuotaKey, id string, count int, p Placement) (Charged, error)
	// Replace records another placement for id's charge in flight.
	Replace(ctx context.Context, k QuotaKey, id string, p Placement) error
	// Settle forgets id's charge in flight once the reservation records it
	// (placed): the count stays in used.
	Settle(ctx context.Context, k QuotaKey, id string) error
	// Pending returns id's charge in flight, if any.
	Pending(ctx context.Context, k QuotaKey, id string) (Charged, bool, error)
	// Refund reverses id's charge in flight (a draft that ends unplaced),
	// if there is one: used −= count and the record goes, in one write.
	Refund(ctx context.Context, k QuotaKey, id string, count int) error
	// Credit gives back a placed reservation's count, once: it leaves a
	// credit record that CreditDone forgets.
	Credit(ctx context.Context, k QuotaKey, id string, count int) error
	// CreditDone forgets id's credit record.
	CreditDone(ctx context.Context, k QuotaKey, id string) error
}

// QuotaExceeded is ErrQuotaExceeded with the row that refused (max 0 when
// missing), for the numbers a caller needs to act.
type QuotaExceeded struct{ Quota Quota }

func (e QuotaExceeded) Error() string { return ErrQuotaExceeded.Error() }
func (e QuotaExceeded) Unwrap() error { return ErrQuotaExceeded }

// Charged is a charge in flight: its count and the placement it is for.
type Charged struct {
	Count     int
	Placement Placement
	Fresh     bool // this call made the charge
}

// CalendarStore keeps the node-day items of each (pool, resource): one
// item per node per UTC day, ordered for candidates by how many devices
// are untouched. A node-day is stored once something is placed on it, or
// when the reconciler provisions its day ahead (every node of the day, so
// whole nodes are found by the same ordered read); a missing one is empty.
type CalendarStore interface {
	// Candidates reads stored node-days of day with at least minUntouched
	// untouched devices, fewest first (the fullest that may fit), at most
	// limit. from ∈ [0, 2^20) rotates where the read starts among the
	// node-days of the first such count (racing creates then read
	// different ones). ok is true when the read saw the whole day: the day
	// is provisioned, or limit node-days were found.
	Candidates(ctx context.Context, t PoolResource, day Day, minUntouched, limit int, from uint32) (nds []NodeDay, ok bool, err error)
	// NodeDays reads node-days by (node, day), consistently; missing ones
	// are absent from the map.
	NodeDays(ctx context.Context, t PoolResource, keys []NodeDayKey) (map[NodeDayKey]NodeDay, error)
	// Day calls fn with every stored node-day of a day, in node order.
	Day(ctx context.Context, t PoolResource, day Day, fn func(NodeDay) error) error
	// NodeRange calls fn with the stored node-days of nodes first..last
	// (inclusive) of a day, in node order.
	NodeRange(ctx context.Context, t PoolResource, day Day, first, last int, fn func(NodeDay) error) error
	// Provision stores every missing node-day of day, then marks the day
	// provisioned (idempotent); made is false if it already was.
	Provision(ctx context.Context, t PoolResource, day Day) (made bool, err error)
	// Allocate adds id's entry to a node-day read as nd, if the versions
	// of the devices it takes are still those of nd (ErrStale otherwise;
	// ErrCalendarFull when the day holds MaxEntriesPerNodeDay); one read
	// as missing (nd.Stored false) is created, if it still is. Idempotent.
	Allocate(ctx context.Context, nd NodeDay, id string, e Entry) error
	// Free removes id's entry from a node-day (idempotent), reading it first.
	Free(ctx context.Context, t PoolResource, key NodeDayKey, id string) error
}

// PoolResource names one resource of a pool and its layout.
type PoolResource struct {
	PoolID string
	Topology
}

// NodeDayKey names a node-day.
type NodeDayKey struct {
	Node int
	Day  Day
}

// ReservationStore keeps reservations under their tenant's partition.
type ReservationStore interface {
	// PutDraft writes a new draft; if the id exists it returns the stored
	// reservation and ErrExists (the clientToken idempotency check).
	PutDraft(ctx context.Context, r Reservation) (Reservation, error)
	// GetReservation reads one of tenant's reservations (ErrNotFound).
	GetReservation(ctx context.Context, tenant, id string) (Reservation, error)
	// Transition writes to (state, reason, devices, history, due, …) if
	// the stored state is still from (ErrStale otherwise).
	Transition(ctx context.Context, to Reservation, from State) error
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
	ListReservations(ctx context.Context, tenant string, f ListFilter, page Page) ([]Reservation, map[string]string, error)
}

// ListFilter narrows reservations.list.
type ListFilter struct {
	PoolID string // "" for any
	State  State  // "" for any
}

// DueStore is how the reconciler finds work: a sparse index on the time
// something is due, split over Shards partitions.
type DueStore interface {
	Shards() int
	// Due calls fn for every item of shard due at or before now, oldest
	// first, streaming page by page; fn returning false stops the walk.
	Due(ctx context.Context, shard int, now time.Time, fn func(DueItem) bool) error
}

// DueItem is one due item: a reservation, or a pool (whose creation is not
// marked complete, or whose days ahead are due to be provisioned).
type DueItem struct {
	Due         time.Time
	Reservation *Reservation
	Pool        *Pool
}

// Snapshot is everything the invariant checker compares.
type Snapshot struct {
	Pools        []Pool
	Quotas       []QuotaRow
	Reservations []Reservation
	NodeDays     []NodeDay
}

// QuotaRow is a stored quota row with what it holds in flight.
type QuotaRow struct {
	Quota
	Free      int64
	Charging  map[string]Charged // admissions charged, not yet settled
	Crediting map[string]int     // credits given, not yet forgotten
}

// SnapshotReader reads a Snapshot (a full read of the table: an operator's
// tool and the tests' oracle, never a request path).
type SnapshotReader interface {
	Snapshot(ctx context.Context) (Snapshot, error)
}
