package rollout

import (
	"context"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Record is a rollout as stored: the Rollout, and how far the reconciler
// got with it. Every write of it is conditioned on Ver (optimistic), so a
// pass, a pause and an abort never interleave inside one decision.
type Record struct {
	api.Rollout
	Ver         int64
	Digest      string // the release's manifest digest
	Request     string // the fingerprint of the create as sent (clientToken replays)
	ClientToken string
	Listed      bool // its pools are claimed: lists show it
	// Enumeration: pools[EnumPool] is being read after EnumAfter; once
	// Enumerated, the order is walked (WalkAfter, WalkCount) to find each
	// wave's last order key (Boundaries); Walked, the waves run.
	EnumPool   int
	EnumAfter  string
	Enumerated bool
	WalkAfter  string
	WalkCount  int
	Boundaries []string
	Walked     bool
	// Intent is the nodes a pass is starting (nil: none): a pause waits
	// for it to clear, so no node starts after a pause answered.
	Intent *Intent
	// Finished: the pools' claims are released and (completed) the
	// baselines set.
	Finished bool
	Due      time.Time
}

// Intent is what a pass is starting: how many nodes (at most
// MaxStartPerPass), since when.
type Intent struct {
	Nodes int
	At    time.Time
}

// Progress is one node of a rollout as stored.
type Progress struct {
	api.NodeProgress
	RolloutID string
	Order     string // OrderKey
	Resource  string
	Index     int
	Platform  string
	// DrainedAt is when draining started; Deadline when the node must
	// report the target (or, rolling back, the previous release) running.
	DrainedAt time.Time
	Deadline  time.Time
}

// Key names a progress item within its rollout.
func (p Progress) Key() string { return p.Order + "#" + p.PoolID + "#" + p.NodeID }

// Store keeps rollouts, their pool claims and their nodes' progress
// (docs/rollouts.md, Items). Every write is one conditional single-item
// write.
type RolloutStore interface {
	// CreateRollout writes a new rollout (due at r.Due); if its id exists
	// it returns the stored one and ErrExists.
	CreateRollout(ctx context.Context, r Record) (Record, error)
	// GetRollout reads one (ErrNotFound).
	GetRollout(ctx context.Context, id string) (Record, error)
	// UpdateRollout writes r if the stored Ver is still r.Ver, and returns
	// it as written (Ver + 1); ErrStale otherwise.
	UpdateRollout(ctx context.Context, r Record) (Record, error)
	// ListRollouts lists listed rollouts newest first, of one state when
	// state is not "".
	ListRollouts(ctx context.Context, state api.RolloutState, page paging.Page) ([]Record, map[string]string, error)
	// ClaimPool claims a pool for rollout id; holder is the other rollout
	// holding it ("" when the claim is this one's).
	ClaimPool(ctx context.Context, poolID, id string) (holder string, err error)
	// ReleasePool lifts id's claim (idempotent).
	ReleasePool(ctx context.Context, poolID, id string) error
	// PutProgress writes a node's progress unless it exists.
	// GetProgress reads one node's progress (ErrNotFound).
	GetProgress(ctx context.Context, id, poolID, nodeID string) (Progress, error)
	PutProgress(ctx context.Context, p Progress) error
	// UpdateProgress writes p if the stored step and rollback are still
	// from and fromRollback (ErrStale otherwise).
	UpdateProgress(ctx context.Context, p Progress, from api.RolloutStep, fromRollback string) error
	// ProgressByStep lists a rollout's nodes in one step, in the rollout's
	// order, after the key after, at most limit.
	ProgressByStep(ctx context.Context, id string, step api.RolloutStep, limit int, after string) ([]Progress, error)
	// ProgressByRollback lists the nodes in a rollback state.
	ProgressByRollback(ctx context.Context, id, rollback string, limit int) ([]Progress, error)
	// ProgressInOrder lists a rollout's nodes in its order, after the key
	// after (the walk and rollouts.nodes).
	ProgressInOrder(ctx context.Context, id string, limit int, after string) ([]Progress, string, error)
	// CountStep counts a rollout's nodes in one step (an index query).
	CountStep(ctx context.Context, id string, step api.RolloutStep) (int, error)
	// PoolNodes lists a pool's nodes after the key after (enumeration).
	PoolNodes(ctx context.Context, poolID string, limit int, after string) ([]fleet.Record, string, error)
	// CountPoolNodes counts a pool's registered nodes created at or before
	// t, and those of them whose platform is one of platforms.
	CountPoolNodes(ctx context.Context, poolID string, t time.Time, platforms map[string]bool) (nodes, withBinary int, err error)
	// PoolsUpdated names the pools of want in which at least one of the
	// rollout's nodes is updated.
	PoolsUpdated(ctx context.Context, id string, want []string) (map[string]bool, error)
}
