package capacity

import (
	"context"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Store is the whole of what the capacity module needs from storage: the
// union of the narrow stores its flows use, each defined beside the flow
// (PoolStore, QuotaStore, AdmissionStore, ChargeStore, CandidateStore,
// CalendarStore, FenceStore, ReservationStore, BindingStore, StepStore).
// Every write is a single-item write on an item of bounded size —
// conditional wherever two writers could race; the few that are not write
// a value every writer agrees on (a tenant's copy of an immutable pool, a
// provisioned hour's marker, the owner's quota max). A multi-item change is
// a sequence of idempotent steps keyed by the reservation or pool it acts
// for, and the reconciler finishes or undoes what a crash left half done.
type Store interface {
	PoolStore
	QuotaStore
	AdmissionStore
	ChargeStore
	CandidateStore
	CalendarStore
	FenceStore
	ReservationStore
	BindingStore
	StepStore
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
