// Package reconcile is the reconciler's room: one pass finds the due
// items through the sparse due index, hands each to the domain whose item
// it is — capacity's reservations, pools and quota rows, the fleet's
// sweeps, the rollouts — under a bounded set of workers, a provisioning
// budget and the invocation's deadline, then runs the release log's step,
// and sums up what they did. The domains own their steps; this package
// owns only the loop. Arrows run down: of the domains it imports only
// capacity (its steps, capacity.Steps, and the items' types); the fleet's
// sweep, a rollout's advance, the release log's step and the due index are
// interfaces it defines (FleetSweeper, RolloutAdvancer, ReleaseLog,
// DueStore) and the wiring fills (shared/app/modules). No domain imports it.
package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bettercompute/control-plane/shared/capacity"
)

// FleetSweeper is the fleet's step (fleet.Service): a managed pool's nodes
// looked at — reports gone silent, eligibility flags, bindings done — and
// its sweep made due again.
type FleetSweeper interface {
	Sweep(ctx context.Context, poolID string, due, now time.Time) error
}

// RolloutAdvancer is fleet.rollouts' step (rollout.Reconciler).
type RolloutAdvancer interface {
	Advance(ctx context.Context, rolloutID string) error
}

// Reconciler runs passes: the due index walked shard by shard, each item
// handed to its domain's step.
type Reconciler struct {
	Due DueStore
	// Capacity steps reservations, pools and quota rows
	// (capacity.reservations).
	Capacity *capacity.Steps
	// Fleet sweeps the managed pools' nodes when their sweep is due (nil:
	// none is).
	Fleet FleetSweeper
	// Rollouts advances the rollouts not yet finished: fleet.rollouts, in
	// the same pass (nil: none).
	Rollouts RolloutAdvancer
	// Log is the release log's step, run after the items (nil: none — a
	// deployment without a log key).
	Log ReleaseLog
	// Logger takes the pass's per-item warnings (nil: the capacity
	// service's logger).
	Logger *slog.Logger
	// Workers bounds the items processed at once (default 16).
	Workers int
	// Margin: the pass stops taking work this long before the context's
	// deadline (default 10% of the time left, at most 5s).
	Margin time.Duration
	// ProvisionBudget bounds the node-hours one pass provisions (default
	// capacity.DefaultProvisionBudget); pools left over stay due for the
	// next. The pass's stop time bounds it too (capacity.Steps.Pool).
	ProvisionBudget int
	// Serial walks the shards and handles their items one at a time, in
	// order (the deterministic simulation's hook; false in production).
	Serial bool
}

// DueStore is how the reconciler finds work: a sparse index on the time
// something is due, split over Shards partitions.
type DueStore interface {
	Shards() int
	// Due calls fn for every item of shard due at or before now, oldest
	// first, streaming page by page; fn returning false stops the walk.
	Due(ctx context.Context, shard int, now time.Time, fn func(DueItem) bool) error
}

// DueItem is one due item: a reservation, a pool (whose creation is not
// marked complete, or whose hours ahead are due to be provisioned), or a
// quota row with charge records to settle.
type DueItem struct {
	Due         time.Time
	Reservation *capacity.Reservation
	Pool        *capacity.Pool
	Quota       *capacity.QuotaRow
	// FleetPool names a pool whose nodes are due for the fleet's sweep
	// (Reconciler.Fleet).
	FleetPool string
	// Rollout names a rollout not yet finished (Reconciler.Rollouts).
	Rollout string
}

// PassResult summarizes one pass.
type PassResult struct {
	Found          int            `json:"found"`
	Transitions    map[string]int `json:"transitions"`  // by target state
	Repaired       int            `json:"repaired"`     // crash leftovers: stale drafts expired, pool creations completed
	Swept          int            `json:"swept"`        // terminal reservations' give-back re-run (routine)
	Settled        int            `json:"settled"`      // quota rows whose charge records were settled (routine)
	Provisioned    int            `json:"provisioned"`  // hours ahead provisioned (every node-hour of a resource's hour stored)
	Fleet          int            `json:"fleet"`        // managed pools whose nodes were swept (routine)
	Told           int            `json:"told"`         // binds written to nodes, and reservations moved off failed nodes
	NodesMoved     int            `json:"nodesMoved"`   // reservations moved off failed nodes (moves completed)
	Cut            int            `json:"provisionCut"` // pools whose provisioning stopped at the pass's stop time (due again at once)
	Skipped        int            `json:"skipped"`      // not yet due, or another pass got there first
	Errors         int            `json:"errors"`
	LogFinished    int            `json:"logSettled"`     // (its JSON name kept from when finishing was called settling) the release log's step (Reconciler.Log): 1 when it finished a registration a crash left (or signed the checkpoint up to the head)
	LogAuditFailed int            `json:"logAuditFailed"` // 1 when the log's audit found the stored tree disagreeing with its signed checkpoint
	LogSize        int64          `json:"logSize"`        // the audited checkpoint's size
	Lag            time.Duration  `json:"-"`              // now − oldest dueAt found (0 if none)
	Stopped        bool           `json:"stoppedEarly"`
	Took           time.Duration  `json:"-"`
}

// TransitionCount is the number of state transitions the pass made.
func (p PassResult) TransitionCount() int {
	n := 0
	for _, c := range p.Transitions {
		n += c
	}
	return n
}

// Pass runs one reconciler pass and logs its summary line. Each shard of
// the due index is streamed page by page into a bounded set of workers, so
// memory stays flat however many items are due; then the release log's
// step runs (Log), bounded by LogStepTimeout.
func (rc *Reconciler) Pass(ctx context.Context) (PassResult, error) {
	start := time.Now()
	now := rc.Capacity.Now()
	res := PassResult{Transitions: map[string]int{}}
	stopAt := time.Time{}
	if dl, ok := ctx.Deadline(); ok {
		margin := rc.Margin
		if margin <= 0 {
			margin = min(time.Until(dl)/10, 5*time.Second)
		}
		stopAt = dl.Add(-margin)
	}
	late := func() bool { return !stopAt.IsZero() && time.Now().After(stopAt) }
	var budget atomic.Int64
	budget.Store(int64(rc.ProvisionBudget))
	if rc.ProvisionBudget <= 0 {
		budget.Store(capacity.DefaultProvisionBudget)
	}
	lim := capacity.Limits{Budget: &budget, StopAt: stopAt}
	if rc.Serial {
		return rc.serialPass(ctx, now, start, lim)
	}
	workers := rc.Workers
	if workers <= 0 {
		workers = 16
	}
	type result struct {
		step
		due time.Time
		err error
	}
	var mu sync.Mutex
	var oldest time.Time
	items := make(chan DueItem, workers)
	results := make(chan result, workers)
	var producers, consumers sync.WaitGroup
	var scanErr error
	for shard := 0; shard < rc.Due.Shards(); shard++ {
		producers.Add(1)
		go func() {
			defer producers.Done()
			err := rc.Due.Due(ctx, shard, now, func(d DueItem) bool {
				if late() || ctx.Err() != nil {
					mu.Lock()
					res.Stopped = true
					mu.Unlock()
					return false
				}
				mu.Lock()
				res.Found++
				mu.Unlock()
				items <- d
				return true
			})
			if err != nil {
				mu.Lock()
				scanErr = errors.Join(scanErr, err)
				mu.Unlock()
			}
		}()
	}
	for w := 0; w < workers; w++ {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for d := range items {
				st, err := rc.handle(ctx, d, now, lim)
				results <- result{st, d.Due, err}
			}
		}()
	}
	go func() { producers.Wait(); close(items); consumers.Wait(); close(results) }()
	for r := range results {
		res.add(rc.logger(), r.step, r.due, r.err, &oldest)
	}
	rc.releaseLog(ctx, &res)
	res.finish(now, start, oldest)
	return res, scanErr
}

// serialPass is Pass with one item at a time, shard after shard.
func (rc *Reconciler) serialPass(ctx context.Context, now, start time.Time, lim capacity.Limits) (PassResult, error) {
	res := PassResult{Transitions: map[string]int{}}
	var oldest time.Time
	var scanErr error
	for shard := 0; shard < rc.Due.Shards(); shard++ {
		var due []DueItem
		if err := rc.Due.Due(ctx, shard, now, func(d DueItem) bool { due = append(due, d); return true }); err != nil {
			scanErr = errors.Join(scanErr, err)
		}
		for _, d := range due {
			res.Found++
			st, err := rc.handle(ctx, d, now, lim)
			res.add(rc.logger(), st, d.Due, err, &oldest)
		}
	}
	rc.releaseLog(ctx, &res)
	res.finish(now, start, oldest)
	return res, scanErr
}

// add counts one handled item into the pass's result.
func (p *PassResult) add(log *slog.Logger, r step, due time.Time, err error, oldest *time.Time) {
	for _, k := range r.Moved {
		p.Transitions[k]++
	}
	p.Provisioned += r.Provisioned
	p.Told += r.Told
	p.NodesMoved += r.NodesMoved
	if r.Cut {
		p.Cut++
	}
	// Lag is the age of the oldest real work: an entry whose item is gone
	// is skipped and does not hold the metric up, nor do the fleet's
	// sweeps and rollouts (due every pass by design, from their start),
	// nor a pool whose only due work is provisioning ahead (creates never
	// wait for it: a node-hour not stored yet is made up empty).
	if !r.Gone && !r.fleet && !r.Ahead && (oldest.IsZero() || due.Before(*oldest)) {
		*oldest = due
	}
	switch {
	case r.Gone:
		p.Skipped++
	case err != nil:
		p.Errors++
		log.Warn("reconcile item", "error", err.Error())
	case r.Repaired:
		p.Repaired++
	case r.Swept:
		p.Swept++
	case r.Settled:
		p.Settled++
	case r.fleet && err == nil:
		p.Fleet++
	case len(r.Moved) == 0:
		p.Skipped++
	}
}

// finish sets the pass's lag and duration.
func (p *PassResult) finish(now, start, oldest time.Time) {
	if !oldest.IsZero() && now.After(oldest) {
		p.Lag = now.Sub(oldest)
	}
	p.Took = time.Since(start)
}

// step is what handling one due item did: capacity's step, or a fleet
// sweep or rollout advance (fleet).
type step struct {
	capacity.Step
	fleet bool
}

// handle hands one due item to its domain's step.
func (rc *Reconciler) handle(ctx context.Context, d DueItem, now time.Time, lim capacity.Limits) (step, error) {
	switch {
	case d.Pool != nil:
		st, err := rc.Capacity.Pool(ctx, *d.Pool, d.Due, now, lim)
		return step{Step: st}, err
	case d.Quota != nil:
		st, err := rc.Capacity.Quota(ctx, *d.Quota, now)
		return step{Step: st}, err
	case d.Rollout != "":
		if rc.Rollouts == nil {
			return step{}, nil
		}
		return step{fleet: true}, rc.Rollouts.Advance(ctx, d.Rollout)
	case d.FleetPool != "":
		if rc.Fleet == nil {
			return step{}, nil
		}
		return step{fleet: true}, rc.Fleet.Sweep(ctx, d.FleetPool, d.Due, now)
	case d.Reservation != nil:
		st, err := rc.Capacity.Reservation(ctx, *d.Reservation, now)
		return step{Step: st}, err
	}
	return step{}, nil
}

func (rc *Reconciler) logger() *slog.Logger {
	switch {
	case rc.Logger != nil:
		return rc.Logger
	case rc.Capacity != nil && rc.Capacity.Service != nil && rc.Capacity.Service.Logger != nil:
		return rc.Capacity.Service.Logger
	}
	return slog.Default()
}
