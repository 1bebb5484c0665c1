package capacity

import (
	"context"
	"time"
)

// Store is what the capacity service needs from storage. Every write is a
// single-item conditional write (SPEC §5): a multi-item change is a
// sequence of idempotent steps keyed by the reservation or pool it acts for,
// and the reconciler finishes or undoes what a crash left half done.
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
	// EnsureCalendar creates the empty calendar of (pool, resource) unless it exists.
	EnsureCalendar(ctx context.Context, poolID, resource string) error
	// EnsureQuota creates a quota row with max unless it exists.
	EnsureQuota(ctx context.Context, k QuotaKey, max int64, now time.Time) error
	// ShowPool makes p visible to tenant (idempotent).
	ShowPool(ctx context.Context, tenant string, p Pool) error
	// PoolReady clears the pool's due marker: its creation is complete.
	PoolReady(ctx context.Context, poolID string) error
	// VisiblePool reads a pool owned by or offered to tenant (else ErrNotFound).
	VisiblePool(ctx context.Context, tenant, poolID string) (Pool, error)
	// ListPools lists the pools visible to tenant by id.
	ListPools(ctx context.Context, tenant string, page Page) ([]Pool, map[string]string, error)
}

// QuotaStore keeps quota rows: max, used, free = max − used and holds.
type QuotaStore interface {
	// SetQuotaMax sets max (creating the row with used 0) and returns the row.
	SetQuotaMax(ctx context.Context, k QuotaKey, max int64, now time.Time) (Quota, error)
	// GetQuota reads a row; a missing row is max 0, used 0 (it grants 0).
	GetQuota(ctx context.Context, k QuotaKey) (Quota, error)
	// ListQuotas lists tenant's rows, of one pool if poolID is not "".
	ListQuotas(ctx context.Context, tenant, poolID string, page Page) ([]Quota, map[string]string, error)
	// Charge adds a hold of count for reservation id if free ≥ count, in one
	// round trip with no read first. Idempotent: an existing hold is success.
	// ErrQuotaExceeded when it does not fit (or the row is missing).
	Charge(ctx context.Context, k QuotaKey, id string, count int) error
	// Credit removes reservation id's hold, if any (idempotent).
	Credit(ctx context.Context, k QuotaKey, id string, count int) error
}

// CalendarStore keeps one calendar per (pool, resource).
type CalendarStore interface {
	// Calendar reads it consistently (Version 0 when none is stored).
	Calendar(ctx context.Context, poolID, resource string) (Calendar, error)
	// Place adds id's alloc if the stored version is still cal.Version
	// (ErrStale otherwise).
	Place(ctx context.Context, cal Calendar, id string, a Alloc) error
	// Unplace removes id's alloc, if any (idempotent).
	Unplace(ctx context.Context, poolID, resource, id string) error
}

// ReservationStore keeps reservations under their tenant's partition.
type ReservationStore interface {
	// Admission reads, in one round trip, the pool as tenant sees it
	// (ErrNotFound unless owned or offered) and the resource's calendar.
	Admission(ctx context.Context, tenant, poolID, resource string) (Pool, Calendar, error)
	// PutDraft writes a new draft; if the id exists it returns the stored
	// reservation and ErrExists (the clientToken idempotency check).
	PutDraft(ctx context.Context, r Reservation) (Reservation, error)
	// GetReservation reads one of tenant's reservations (ErrNotFound).
	GetReservation(ctx context.Context, tenant, id string) (Reservation, error)
	// Transition writes to (state, reason, devices, due, …) if the stored
	// state is still from (ErrStale otherwise).
	Transition(ctx context.Context, to Reservation, from State) error
	// ClearDue removes the due marker if the stored state is still r.State.
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

// DueItem is one due item: a reservation, or a pool whose creation is not
// marked complete.
type DueItem struct {
	Due         time.Time
	Reservation *Reservation
	Pool        *Pool
}

// Snapshot is everything the invariant checker compares.
type Snapshot struct {
	Quotas       []QuotaRow
	Reservations []Reservation
	Calendars    []Calendar
}

// SnapshotReader reads a Snapshot (a full read of the table: an operator's
// tool and the tests' oracle, never a request path).
type SnapshotReader interface {
	Snapshot(ctx context.Context) (Snapshot, error)
}
