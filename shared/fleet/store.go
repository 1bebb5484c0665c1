package fleet

import (
	"context"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Store keeps node items: one per registered node, under its pool's
// partition, of bounded size (docs/fleet.md, Items). Every write is one
// conditional single-item write.
type Store interface {
	// PutNode writes a new node; if it exists it returns the stored one
	// and ErrExists.
	PutNode(ctx context.Context, r Record) (Record, error)
	// GetNode reads a node (ErrNotFound).
	GetNode(ctx context.Context, poolID, resource string, index int) (Record, error)
	// ListNodes lists a pool's nodes by resource and index, of one state
	// when state is not "".
	ListNodes(ctx context.Context, poolID string, state api.NodeState, page paging.Page) ([]Record, map[string]string, error)
	// PoolNodes calls fn with every node of a pool, page by page.
	PoolNodes(ctx context.Context, poolID string, fn func(Record) error) error
	// Heartbeat records an accepted report: its counter, time, running
	// release, install, health, the state it puts the node in and its
	// bindings' states, if the stored counter is below rep.Counter and
	// the key is still keyID. It returns the node as written; when the
	// condition failed, ErrStale with the node as it is now (read once, to
	// tell a replay or a new key from a node gone: ErrNotFound).
	Heartbeat(ctx context.Context, r Record, keyID string, rep api.Report, state api.NodeState, split *api.LogSplit, now time.Time) (Record, error)
	// SetCordon sets (c not nil) or lifts one of the node's two cordons
	// (by: ByOperator or ByRollout), if that cordon is still as r read it
	// (ErrStale otherwise), and returns the node as written.
	SetCordon(ctx context.Context, r Record, by string, c *api.Cordon) (Record, error)
	// ClaimFlags takes the next generation of the node's flags (one
	// write) and returns the node as it left it (ErrNotFound when gone).
	ClaimFlags(ctx context.Context, r Record) (Record, error)
	// SetFlagged records that generation gen's writer applied its flags
	// (flagged through to, exclusive, or none) and the out-of-service
	// index entry with them, if no newer generation was claimed — and,
	// lifting, if the node is still eligible (ErrStale otherwise), and
	// returns the node as the write left it.
	SetFlagged(ctx context.Context, r Record, gen int64, flagged bool, to capacity.Hour) (Record, error)
	// MarkUnreachable moves a node to unreachable (and out of service, in
	// the same write) if no report was accepted and no key replaced since
	// r was read (its counter and key are still r's); it returns the node
	// as written.
	MarkUnreachable(ctx context.Context, r Record) (Record, error)
	// DropEntry forgets a pending unbind the node reported done, if it is
	// still an unbind.
	DropEntry(ctx context.Context, r Record, reservationID string) error
	// SetAdopted records that the reservations the node held when it
	// registered were told to it.
	SetAdopted(ctx context.Context, r Record) error
	// SetTarget tells the node to run t (floor: the lowest sequence it may
	// install meanwhile) unless another rollout's target is set, or, t nil,
	// lifts rolloutID's target (ErrStale when the condition failed).
	SetTarget(ctx context.Context, r Record, rolloutID string, t *Target, floor int64) (Record, error)
	// CountOut counts the pool's nodes out of service (not eligible) as
	// their eligibility was last synced.
	CountOut(ctx context.Context, poolID string) (int, error)
	// Baseline reads the pool's baseline release (nil: none); SetBaseline
	// records it.
	Baseline(ctx context.Context, poolID string) (*Target, error)
	SetBaseline(ctx context.Context, poolID string, t Target) error
	// EnsureSweep makes the pool's fleet sweep due at due unless it
	// exists; ClaimSweep moves it from due to next (ErrStale if another
	// pass moved it first) and returns it.
	EnsureSweep(ctx context.Context, poolID string, due time.Time) error
	ClaimSweep(ctx context.Context, poolID string, due, next time.Time) (SweepState, error)
	// SetDisrupted records when the pool's mass silence began (nil: it
	// ended); Disrupted reads it (nil: none).
	SetDisrupted(ctx context.Context, poolID string, since *time.Time) error
	// SetResumed records when the sweep stopped holding a mass silence
	// (nil: clear it); SetDisrupted(nil) clears it too.
	SetResumed(ctx context.Context, poolID string, at *time.Time) error
	Disrupted(ctx context.Context, poolID string) (*time.Time, error)
}

// Rekeyer replaces a registered node's key (nodes.register with replace).
// It is apart from Store so that a Store wrapper that never re-keys (a
// simulation's) needs no method for it; the Service asks its Store for it.
type Rekeyer interface {
	// ReplaceKey sets the node's key and platform, restarts its counter
	// (the next report is accepted from 1) and moves it to registered and
	// out of service, in one write, if its key and platform are still r's
	// (ErrStale otherwise); entries, cordons and flags are left as they
	// are. It returns the node as written.
	ReplaceKey(ctx context.Context, r Record, keyID, publicKey, platform string) (Record, error)
}

// SweepState is a pool's sweep as claimed.
type SweepState struct {
	// DisruptedSince: the pool's managed nodes went silent together at
	// that time and the sweep holds their marking (nil: no disruption).
	DisruptedSince *time.Time
	// ResumedAt: when the hold of that disruption ended; the nodes still
	// silent get api.UnreachableAfter intervals from then before any is marked.
	ResumedAt *time.Time
}

// Adopter tells a node registering the reservations bound on it while it
// was unmanaged (capacity.Bindings.Adopt).
type Adopter interface {
	Adopt(ctx context.Context, t capacity.PoolResource, node int, at time.Time) error
}

// RolloutHolds tells whether a rollout still holds its nodes — is not
// finished (rollout.Holds): the sweep lifts a finished rollout's cordon or
// target from a node.
type RolloutHolds interface {
	Holds(ctx context.Context, rolloutID string) (bool, error)
	// Running reports whether the rollout may still tell its nodes a
	// target: it exists and is not terminal (a heartbeat tells a node its
	// target only then).
	Running(ctx context.Context, rolloutID string) (bool, error)
}

// Pools is what the fleet reads of the capacity module: the pools.
type Pools interface {
	GetPool(ctx context.Context, poolID string) (capacity.Pool, error)
}

// Calendar is where placement looks for candidates: the node-hours, which
// carry each node's eligibility flag (the fleet writes it; capacity's
// Placer reads it with the candidates).
type Calendar interface {
	Flag(ctx context.Context, t capacity.PoolResource, node int, h capacity.Hour, off bool, gen int64) error
}

// NodeRelease is a recorded release as a node is told it: what the fleet
// reads of the release domain (release.Release is the recorded release
// itself).
type NodeRelease struct {
	Version  string
	Sequence int64
	Digest   string
	Manifest []byte // the envelope as registered (nil: none stored)
	LogIndex *int64 // its entry in the release log (nil: not logged)
}

// Releases reads registered releases (ErrNotFound when a version is not
// recorded).
type Releases interface {
	Release(ctx context.Context, version string) (NodeRelease, error)
}
