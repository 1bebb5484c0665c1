package rollout

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// Fault points of a pass (Reconciler.Faults), after each write.
const (
	FaultEnumerated = "rollout.enumerated" // a batch of progress items written
	FaultWalked     = "rollout.walked"     // the waves' boundaries recorded
	FaultIntent     = "rollout.intent"     // the nodes to start recorded on the rollout
	FaultStarted    = "rollout.started"    // a node's progress moved to draining
	FaultCordoned   = "rollout.cordoned"   // its rollout cordon set
	FaultTargeted   = "rollout.targeted"   // a node told its target
	FaultStepped    = "rollout.stepped"    // a node's progress moved on
	FaultReleased   = "rollout.released"   // a node's target and cordon lifted
	FaultDecided    = "rollout.decided"    // the rollout's state or a wave changed
	FaultFinished   = "rollout.finished"   // its pools' claims released
)

// PassFaultPoints lists a pass's points.
var PassFaultPoints = []string{FaultEnumerated, FaultWalked, FaultIntent, FaultStarted, FaultCordoned, FaultTargeted,
	FaultStepped, FaultReleased, FaultDecided, FaultFinished}

// Nodes is the fleet as a rollout pass needs it.
type Nodes interface {
	GetNode(ctx context.Context, poolID, resource string, index int) (fleet.Record, error)
	SetTarget(ctx context.Context, r fleet.Record, rolloutID string, t *fleet.Target, floor int64) (fleet.Record, error)
	// OutOfService lists the pool's nodes out of service — not ready or
	// cordoned, as their records say (the out-of-service index) — by node
	// id, at most limit of them.
	OutOfService(ctx context.Context, poolID string, limit int) ([]string, error)
	SetBaseline(ctx context.Context, poolID string, t fleet.Target) error
	// Disrupted says since when the pool's nodes are silent together (a
	// mass silence the fleet sweep holds: docs/fleet.md), nil for none.
	Disrupted(ctx context.Context, poolID string) (*time.Time, error)
}

// Cordons sets and lifts a rollout's cordon on a node, with its placement
// flags (fleet.Service).
type Cordons interface {
	// SetRolloutCordonIn is SetRolloutCordon with the node's topology given
	// (the pass holds its pools: the fleet need not read the pool again).
	SetRolloutCordonIn(ctx context.Context, t capacity.Topology, rec fleet.Record, c *api.Cordon) (fleet.Record, error)
}

// Calendar is what draining reads and writes of the capacity module.
type Calendar interface {
	GetPool(ctx context.Context, poolID string) (capacity.Pool, error)
	NodeHours(ctx context.Context, t capacity.PoolResource, keys []capacity.NodeHourKey) (map[capacity.NodeHourKey]capacity.NodeHour, error)
	Disrupt(ctx context.Context, tenant, id, rolloutID string, at time.Time) error
}

// Reconciler is fleet.rollouts: each pass advances every non-terminal
// rollout by conditional single-item writes, with bounded work per pass
// (docs/rollouts.md, A pass).
type Reconciler struct {
	Store    RolloutStore
	Releases Releases
	Nodes    Nodes
	Cordons  Cordons
	Calendar Calendar
	Now      func() time.Time
	Logger   *slog.Logger
	// Table names the deployment in the transition metrics (BC_TABLE).
	Table string
	// Batch bounds the progress items a pass writes while enumerating
	// and reads while walking (default 2,000).
	Batch int
	// Faults is a test hook (nil in production): called after each write
	// with the point's name; an error stops the pass there as a crash.
	Faults func(point string) error
	// Serial reads the pools' out-of-service nodes one pool after another
	// (the deterministic simulations' mode); else up to 16 at once.
	Serial bool
}

func (rc *Reconciler) now() time.Time { return rc.Now().UTC() }

func (rc *Reconciler) fault(p string) error {
	if rc.Faults == nil {
		return nil
	}
	return rc.Faults(p)
}

func (rc *Reconciler) batch() int {
	if rc.Batch <= 0 {
		return 2000
	}
	return rc.Batch
}

// pass is one pass's view of one rollout.
type pass struct {
	rc        *Reconciler
	rec       Record
	now       time.Time
	pools     map[string]capacity.Pool
	disrupted map[string]bool // pool → in a mass silence (read once a pass)
	// inFlight: the rollout's nodes this pass knows to be out for it —
	// draining, installing, verifying or rolling back — as their progress
	// items say (listed, or started by this pass), less those it
	// concluded; unlisted: a list of them was cut at its bound, so some
	// are not known (docs/rollouts.md, maxUnavailable).
	inFlight map[string]bool
	unlisted bool
}

// Advance moves one rollout forward as far as it goes now (the
// reservation reconciler calls it for each rollout due).
func (rc *Reconciler) Advance(ctx context.Context, id string) error {
	rec, err := rc.Store.GetRollout(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	p := &pass{rc: rc, rec: rec, now: rc.now(), pools: map[string]capacity.Pool{}, disrupted: map[string]bool{}, inFlight: map[string]bool{}}
	return p.run(ctx)
}

func (p *pass) run(ctx context.Context) error {
	rec := p.rec
	switch {
	case rec.Finished:
		return nil
	case !rec.Listed:
		// A create that stopped before its claims were made and nobody
		// retried: after a while, undo its claims.
		if p.now.Sub(rec.CreatedAt) < api.StaleAfter {
			return nil
		}
		return p.abandon(ctx)
	case rec.State.Terminal():
		return p.finish(ctx)
	case !rec.Enumerated:
		return p.enumerate(ctx)
	case !rec.Walked:
		return p.walk(ctx)
	}
	if err := p.advanceActive(ctx); err != nil {
		return err
	}
	counts, err := p.counts(ctx)
	if err != nil {
		return err
	}
	switch p.rec.State {
	case api.Progressing:
		if counts.Failed > p.rec.Settings.MaxFailedNodes {
			// Failures exceed the limit: maxFailedNodes 0 aborts at the first.
			return p.decide(ctx, counts, func(r *Record) error {
				return r.abort(ReasonFailures, p.now, ReasonFailures)
			})
		}
		return p.waves(ctx, counts)
	case api.Aborting:
		return p.abort(ctx, counts)
	}
	return p.decide(ctx, counts, nil) // paused: counts only
}

// decide writes the rollout with fresh counts and fn's change, a move of
// its state (nothing if neither changed; a move the state machine has no
// edge for fails the pass). A lost race (pause, abort, another pass) ends the pass.
func (p *pass) decide(ctx context.Context, counts api.Counts, fn func(*Record) error) error {
	next := p.rec
	next.Counts = counts
	if fn != nil {
		if err := fn(&next); err != nil {
			return err
		}
	}
	if fn == nil && next.Counts == p.rec.Counts {
		return nil
	}
	cur, err := p.rc.Store.UpdateRollout(ctx, next)
	if errors.Is(err, ErrStale) {
		return nil
	}
	if err != nil {
		return err
	}
	logTransition(ctx, p.rc.Logger, p.rc.Table, p.rec.State, cur.Rollout, p.now)
	p.rec = cur
	return p.rc.fault(FaultDecided)
}

// counts counts the rollout's nodes by step (index queries).
func (p *pass) counts(ctx context.Context) (api.Counts, error) {
	var c api.Counts
	for _, st := range api.RolloutSteps {
		n, err := p.rc.Store.CountStep(ctx, p.rec.RolloutID, st)
		if err != nil {
			return c, err
		}
		switch st {
		case api.Pending:
			c.Pending = n
		case api.Draining:
			c.Draining = n
		case api.Installing:
			c.Installing = n
		case api.Verifying:
			c.Verifying = n
		case api.Updated:
			c.Updated = n
		case api.Failed:
			c.Failed = n
		case api.Skipped:
			c.Skipped = n
		}
		c.Nodes += n
	}
	return c, nil
}

// visits bounds the nodes of one step (or rollback state) a pass visits:
// every one in service's budget and some left over by crashes, at most
// MaxVisitPerPass (a pass's time, whatever maxUnavailable allows; the rest
// wait for the next pass).
func (p *pass) visits() int {
	return min(4*p.rec.Settings.MaxUnavailable+16, MaxVisitPerPass)
}
