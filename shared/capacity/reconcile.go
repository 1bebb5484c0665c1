package capacity

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bettercompute/control-plane/shared/metrics"
)

// Binder binds a reservation's devices to its tenant when its window
// starts (the node side of a reservation). Bind must be idempotent: the
// reconciler may call it again after a crash or on an overlapping pass.
type Binder interface {
	Bind(ctx context.Context, r Reservation) error
}

// FleetSweeper is the fleet's part of a pass (package fleet): a managed
// pool's nodes looked at — reports gone silent, eligibility flags, bindings
// done — and its sweep made due again.
type FleetSweeper interface {
	Sweep(ctx context.Context, poolID string, due, now time.Time) error
}

// RolloutAdvancer is fleet.rollouts' part of a pass (package rollout).
type RolloutAdvancer interface {
	Advance(ctx context.Context, rolloutID string) error
}

// BindAtOnce is the default Binder: devices are bound as soon as asked.
type BindAtOnce struct{}

// Bind implements Binder.
func (BindAtOnce) Bind(context.Context, Reservation) error { return nil }

// Reconcile fault points (see Service.Faults); a terminal fence is followed
// by "reconcile.credited" and "reconcile.unplaced".
const (
	FaultReconcileExpired  = "reconcile.expired"
	FaultReconcileBinding  = "reconcile.binding"
	FaultReconcileActive   = "reconcile.active"
	FaultReconcileReleased = "reconcile.released"
	FaultReconcileSwept    = "reconcile.swept"
)

// ReconcileFaultPoints lists every point of the reconcile flow.
var ReconcileFaultPoints = []string{
	FaultReconcileExpired, FaultReconcileBinding, FaultReconcileActive, FaultReconcileReleased,
	"reconcile.credited", "reconcile.unplaced", FaultReconcileSwept,
}

// ErrProvisionCut is what CalendarStore.Provision returns (wrapped) when it
// stopped starting puts because its context's deadline was near: the
// node-hours it put stay, the hour's marker is not written, and the next
// Provision of the hour puts only the node-hours still missing.
var ErrProvisionCut = errors.New("provisioning stopped before the deadline")

// pool completes a pool's creation if a crash cut it short, provisions its
// hours ahead and marks it due again at the start of the next hour (when
// the next hour enters the ProvisionHours ahead).
//
// Provisioning runs under the pass's stop time (lim.stopAt): a big pool
// (12,500 nodes × 72 hours for 100,000 devices) takes several passes, and
// each ends its part before the pass's deadline instead of at it — what
// it put is kept (ProvisionedTo moves to the hour in progress) and the
// pool stays due for the next pass. Its due work is provisioning only
// (st.ahead), which the pass's Lag does not count (docs/capacity.md,
// "Provisioning big pools"); an unfinished creation does.
func (rc *Reconciler) pool(ctx context.Context, p Pool, due, now time.Time, lim limits) (step, error) {
	s := rc.Service
	if now.Before(due) {
		return step{}, nil
	}
	st := step{ahead: true}
	if due.Equal(p.CreatedAt.Add(StaleAfter)) {
		// Still due from its claim: the create did not finish.
		st.ahead = false
		if err := s.completePool(ctx, p, now); err != nil {
			return st, err
		}
		st.repaired = true
	}
	horizon := rc.ProvisionHours
	if horizon <= 0 {
		horizon = ProvisionHours
	}
	pctx := ctx
	if !lim.stopAt.IsZero() {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, lim.stopAt)
		defer cancel()
	}
	hours, through, done, err := s.provisionPool(pctx, p, now, horizon, lim.budget)
	st.provisioned = hours
	switch {
	case err != nil && errors.Is(err, ErrProvisionCut) && ctx.Err() == nil:
		// Stopped before the pass's deadline, progress kept: not an error.
		st.cut = true
	case err != nil:
		return st, err
	}
	next := (HourOf(now) + 1).Start()
	if !done {
		next = now // the budget or the pass's time ran out: the next pass goes on
		if next.Equal(p.CreatedAt.Add(StaleAfter)) {
			// That due time says "creation unfinished" (above): not it.
			next = next.Add(time.Millisecond)
		}
	}
	if err := s.Store.PoolDue(ctx, p.PoolID, next, through); err != nil {
		return st, unavailable(err)
	}
	return st, nil
}

// quota settles a due quota row's charge records (settleRow) and moves its
// due marker: again in SettleAfter while records are left, none otherwise.
func (rc *Reconciler) quota(ctx context.Context, q QuotaRow, now time.Time) (step, error) {
	s := rc.Service
	left, err := s.settleRow(ctx, q.Key())
	if err != nil {
		return step{}, err
	}
	if err := s.Store.QuotaDue(ctx, q.Key(), now.Add(SettleAfter), left == 0); err != nil {
		return step{}, unavailable(err)
	}
	return step{settled: true}, nil
}

// Reconciler is capacity.reservations (docs/capacity.md, "The reconciler"): each pass finds due
// items through the sparse due index and moves each forward with
// conditional writes on the state it read, so overlapping and repeated
// passes are harmless.
type Reconciler struct {
	Service *Service
	Due     DueStore
	Binder  Binder // unmanaged nodes' binding (nil: BindAtOnce)
	// Fleet sweeps the managed pools' nodes when their sweep is due (nil:
	// none is).
	Fleet FleetSweeper
	// Rollouts advances the rollouts not yet finished: fleet.rollouts, in
	// the same pass (nil: none).
	Rollouts RolloutAdvancer
	// Workers bounds the items processed at once (default 16).
	Workers int
	// Margin: the pass stops taking work this long before the context's
	// deadline (default 10% of the time left, at most 5s).
	Margin time.Duration
	// ProvisionBudget bounds the node-hours one pass provisions (default
	// DefaultProvisionBudget); pools left over stay due for the next. The
	// pass's stop time bounds it too (see pool).
	ProvisionBudget int
	// ProvisionHours is how many hours ahead pools are kept provisioned
	// (default ProvisionHours).
	ProvisionHours int
	// Serial walks the shards and handles their items one at a time, in
	// order (the deterministic simulation's hook; false in production).
	Serial bool
}

// DefaultProvisionBudget: node-hours one pass provisions at most (about
// 15 s of writes at 16 at once on DynamoDB; an hour of the largest
// resource, 100,000 one-device nodes, is always started when budget is
// left). On a slower store the pass's deadline stops it first: what was
// put is kept and the next pass goes on.
const DefaultProvisionBudget = 50_000

// PassResult summarizes one pass.
type PassResult struct {
	Found       int            `json:"found"`
	Transitions map[string]int `json:"transitions"`  // by target state
	Repaired    int            `json:"repaired"`     // crash leftovers: stale drafts expired, pool creations completed
	Swept       int            `json:"swept"`        // terminal reservations' give-back re-run (routine)
	Settled     int            `json:"settled"`      // quota rows whose charge records were settled (routine)
	Provisioned int            `json:"provisioned"`  // hours ahead provisioned (every node-hour of a resource's hour stored)
	Fleet       int            `json:"fleet"`        // managed pools whose nodes were swept (routine)
	Told        int            `json:"told"`         // binds written to nodes, and reservations moved off failed nodes
	NodesMoved  int            `json:"nodesMoved"`   // reservations moved off failed nodes (moves completed)
	Cut         int            `json:"provisionCut"` // pools whose provisioning stopped at the pass's stop time (due again at once)
	Skipped     int            `json:"skipped"`      // not yet due, or another pass got there first
	Errors      int            `json:"errors"`
	Lag         time.Duration  `json:"-"` // now − oldest dueAt found (0 if none)
	Stopped     bool           `json:"stoppedEarly"`
	Took        time.Duration  `json:"-"`
}

// TransitionCount is the number of state transitions the pass made.
func (p PassResult) TransitionCount() int {
	n := 0
	for _, c := range p.Transitions {
		n += c
	}
	return n
}

// step is what handling one due item did: the transitions this pass made
// (by target state), a repair of what a crash left, or a sweep; gone when
// the index entry outlived its item (a GSI entry may, for a moment, in
// DynamoDB).
type step struct {
	moved       []string
	repaired    bool
	swept       bool
	settled     bool
	fleet       bool
	told        int // nodes told to bind, and moves made
	nodesMoved  int // moves completed off failed nodes (binding.go)
	gone        bool
	provisioned int
	// ahead: a pool whose only due work is provisioning its hours ahead
	// (not counted in the lag); cut: that provisioning stopped at the
	// pass's stop time.
	ahead bool
	cut   bool
}

// limits are what bounds one pass's provisioning: the node-hours left to
// provision and the time the pass stops taking work (zero: no deadline).
type limits struct {
	budget *atomic.Int64
	stopAt time.Time
}

// Pass runs one reconciler pass and logs its summary line. Each shard of
// the due index is streamed page by page into a bounded set of workers, so
// memory stays flat however many items are due.
func (rc *Reconciler) Pass(ctx context.Context) (PassResult, error) {
	s := rc.Service
	start := time.Now()
	now := s.now()
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
		budget.Store(DefaultProvisionBudget)
	}
	lim := limits{budget: &budget, stopAt: stopAt}
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
		res.add(s, r.step, r.due, r.err, &oldest)
	}
	res.finish(now, start, oldest)
	return res, scanErr
}

// serialPass is Pass with one item at a time, shard after shard.
func (rc *Reconciler) serialPass(ctx context.Context, now, start time.Time, lim limits) (PassResult, error) {
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
			res.add(rc.Service, st, d.Due, err, &oldest)
		}
	}
	res.finish(now, start, oldest)
	return res, scanErr
}

// add counts one handled item into the pass's result.
func (p *PassResult) add(s *Service, r step, due time.Time, err error, oldest *time.Time) {
	for _, k := range r.moved {
		p.Transitions[k]++
	}
	p.Provisioned += r.provisioned
	p.Told += r.told
	p.NodesMoved += r.nodesMoved
	if r.cut {
		p.Cut++
	}
	// Lag is the age of the oldest real work: an entry whose item is gone
	// is skipped and does not hold the metric up, nor do the fleet's
	// sweeps and rollouts (due every pass by design, from their start),
	// nor a pool whose only due work is provisioning ahead (creates never
	// wait for it: a node-hour not stored yet is made up empty).
	if !r.gone && !r.fleet && !r.ahead && (oldest.IsZero() || due.Before(*oldest)) {
		*oldest = due
	}
	switch {
	case r.gone:
		p.Skipped++
	case err != nil:
		p.Errors++
		s.logger().Warn("reconcile item", "error", err.Error())
	case r.repaired:
		p.Repaired++
	case r.swept:
		p.Swept++
	case r.settled:
		p.Settled++
	case r.fleet && err == nil:
		p.Fleet++
	case len(r.moved) == 0:
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

// handle moves one due item forward as far as it can go now.
func (rc *Reconciler) handle(ctx context.Context, d DueItem, now time.Time, lim limits) (step, error) {
	s := rc.Service
	if d.Pool != nil {
		return rc.pool(ctx, *d.Pool, d.Due, now, lim)
	}
	if d.Quota != nil {
		return rc.quota(ctx, *d.Quota, now)
	}
	if d.Rollout != "" {
		if rc.Rollouts == nil {
			return step{}, nil
		}
		return step{fleet: true}, rc.Rollouts.Advance(ctx, d.Rollout)
	}
	if d.FleetPool != "" {
		if rc.Fleet == nil {
			return step{}, nil
		}
		return step{fleet: true}, rc.Fleet.Sweep(ctx, d.FleetPool, d.Due, now)
	}
	r := *d.Reservation
	var st step
	// move makes one conditional transition; ok is false when it was not
	// this pass's to make (another pass, a release or a create got there).
	move := func(point string) func(Reservation, error) (bool, error) {
		return func(to Reservation, err error) (bool, error) {
			if err != nil {
				return false, err
			}
			_, won, err := s.fenceWon(ctx, to, r.State, point, nil)
			if errors.Is(err, errGone) {
				st.gone = true
				return false, nil
			}
			if won {
				st.moved = append(st.moved, string(to.State))
				r = to
			}
			return won && err == nil, err
		}
	}
	switch {
	case r.State == Draft:
		if !r.Stale(now) {
			return st, nil
		}
		// A draft this old is a create that died: a repair.
		ok, err := move(FaultReconcileExpired)(r.Expire(now))
		st.repaired = ok
		return st, err
	case r.State.Terminal():
		// One sweep after the fence finishes the give-back a crash may have
		// cut short. Every terminal reservation gets one and it normally
		// finds nothing left, so it is counted apart from repairs. Sweeps take turns (overlapping passes): each first
		// moves the due entry on, conditionally, and works from the item as
		// that write returns it.
		cur, err := s.Store.ClaimDue(ctx, r, now.Add(StaleAfter))
		switch {
		case errors.Is(err, ErrNotFound):
			st.gone = true
			return st, nil
		case errors.Is(err, ErrStale):
			return st, nil // another pass has it, or it moved on
		case err != nil:
			return st, unavailable(err)
		}
		if err := s.giveBack(ctx, cur, "reconcile"); err != nil {
			return st, err
		}
		if err := s.Store.ClearDue(ctx, cur); err != nil && !errors.Is(err, ErrStale) {
			return st, unavailable(err)
		}
		st.swept = true
		return st, s.fault(FaultReconcileSwept)
	case !now.Before(r.Window.End):
		// The window is over — also when it passed entirely while the
		// reconciler was down: straight to released. Its nodes are told to
		// unbind first (releaseUnbind).
		if err := s.releaseUnbind(ctx, r); err != nil {
			return st, err
		}
		_, err := move(FaultReconcileReleased)(r.Release(ReleasedByEnd, now))
		return st, err
	case r.State == Placed && !now.Before(r.Window.Start):
		if ok, err := move(FaultReconcileBinding)(r.StartBinding(now)); !ok {
			return st, err
		}
		fallthrough
	case r.State == Binding:
		// Until every node bound it, it stays binding and due: the next
		// pass goes on (a failed bind is retried, a failed node replaced).
		done, err := rc.bind(ctx, &r, now, &st)
		if errors.Is(err, errMoved) {
			return st, nil
		}
		if err != nil || !done {
			return st, err
		}
		_, err = move(FaultReconcileActive)(r.Activate(now))
		return st, err
	}
	return st, nil
}

// The metrics of a pass's summary line: the lag (milliseconds between the
// oldest due item's dueAt and the pass), the transitions it made, the
// repairs it did, the sweeps and the reservations moved off failed nodes,
// with the table as dimension. The CDK app alarms on and graphs these
// names.
const (
	MetricNamespace   = metrics.Namespace
	MetricLag         = "Lag"
	MetricTransitions = "transitioned"
	MetricRepaired    = "repaired"
	MetricSwept       = "swept"
	MetricNodesMoved  = "NodesMoved"
	DimensionTable    = metrics.DimensionTable
)

// PassMetrics is the EMF directive of a pass's summary line.
var PassMetrics = metrics.Directive{
	Dimensions: [][]string{{DimensionTable}},
	Metrics: []metrics.Metric{
		{Name: MetricLag, Unit: metrics.Milliseconds},
		{Name: MetricTransitions, Unit: metrics.Count},
		{Name: MetricRepaired, Unit: metrics.Count},
		{Name: MetricSwept, Unit: metrics.Count},
		{Name: MetricNodesMoved, Unit: metrics.Count},
	},
}

// Log writes the pass's summary as one line; in JSON (the Lambda's format)
// it is also a CloudWatch embedded-metric-format record of PassMetrics.
func (p PassResult) Log(ctx context.Context, logger *slog.Logger, table string) {
	lagMS := p.Lag.Milliseconds()
	level := slog.LevelInfo
	switch {
	case p.Errors > 0:
		level = slog.LevelWarn
	case p.Found == 0:
		// An idle pass is not news (the local gateway runs one every 5 s);
		// the lag alarm treats the missing point as not breaching.
		level = slog.LevelDebug
	}
	logger.LogAttrs(ctx, level, "reconcile pass",
		slog.Int("found", p.Found),
		slog.Any("transitions", p.Transitions),
		slog.Int(MetricTransitions, p.TransitionCount()),
		slog.Int(MetricRepaired, p.Repaired),
		slog.Int(MetricSwept, p.Swept),
		slog.Int("settled", p.Settled),
		slog.Int("fleet", p.Fleet),
		slog.Int("told", p.Told),
		slog.Int(MetricNodesMoved, p.NodesMoved),
		slog.Int("provisioned", p.Provisioned),
		slog.Int("provisionCut", p.Cut),
		slog.Int("skipped", p.Skipped),
		slog.Int("errors", p.Errors),
		slog.Bool("stoppedEarly", p.Stopped),
		slog.Float64("took_ms", float64(p.Took.Microseconds())/1000),
		slog.String(DimensionTable, table),
		slog.Int64(MetricLag, lagMS),
		metrics.Attr(time.Now(), PassMetrics),
	)
}
