package capacity

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Binder binds a reservation's devices to its tenant when its window
// starts (the node side of a reservation). Bind must be idempotent: the
// reconciler may call it again after a crash or on an overlapping pass.
type Binder interface {
	Bind(ctx context.Context, r Reservation) error
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

// Pool completes a pool's creation if a crash cut it short, provisions its
// hours ahead and marks it due again at the start of the next hour (when
// the next hour enters the ProvisionHours ahead).
//
// Provisioning runs under the pass's stop time (lim.StopAt): a big pool
// (12,500 nodes × 72 hours for 100,000 devices) takes several passes, and
// each ends its part before the pass's deadline instead of at it — what
// it put is kept (ProvisionedTo moves to the hour in progress) and the
// pool stays due for the next pass. Its due work is provisioning only
// (st.Ahead), which the pass's Lag does not count (docs/capacity.md,
// "Provisioning big pools"); an unfinished creation does.
func (rc *Steps) Pool(ctx context.Context, p Pool, due, now time.Time, lim Limits) (Step, error) {
	store := rc.store()
	if now.Before(due) {
		return Step{}, nil
	}
	st := Step{Ahead: true}
	if due.Equal(p.CreatedAt.Add(api.StaleAfter)) {
		// Still due from its claim: the create did not finish.
		st.Ahead = false
		if err := rc.Service.Pools().complete(ctx, p, now); err != nil {
			return st, err
		}
		st.Repaired = true
	}
	horizon := rc.ProvisionHours
	if horizon <= 0 {
		horizon = ProvisionHours
	}
	pctx := ctx
	if !lim.StopAt.IsZero() {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, lim.StopAt)
		defer cancel()
	}
	hours, through, done, err := provision(pctx, store, p, now, horizon, lim.Budget)
	st.Provisioned = hours
	switch {
	case err != nil && errors.Is(err, ErrProvisionCut) && ctx.Err() == nil:
		// Stopped before the pass's deadline, progress kept: not an error.
		st.Cut = true
	case err != nil:
		return st, err
	}
	next := (HourOf(now) + 1).Start()
	if !done {
		next = now // the budget or the pass's time ran out: the next pass goes on
		if next.Equal(p.CreatedAt.Add(api.StaleAfter)) {
			// That due time says "creation unfinished" (above): not it.
			next = next.Add(time.Millisecond)
		}
	}
	if err := store.PoolDue(ctx, p.PoolID, next, through); err != nil {
		return st, unavailable(err)
	}
	return st, nil
}

// Quota settles a due quota row's charge records (settleRow) and moves its
// due marker: again in SettleAfter while records are left, none otherwise.
func (rc *Steps) Quota(ctx context.Context, q QuotaRow, now time.Time) (Step, error) {
	left, err := rc.Service.charges(rc.fence()).settleRow(ctx, q.Key())
	if err != nil {
		return Step{}, err
	}
	if err := rc.store().QuotaDue(ctx, q.Key(), now.Add(SettleAfter), left == 0); err != nil {
		return Step{}, unavailable(err)
	}
	return Step{Settled: true}, nil
}

// Steps is capacity.reservations' part of a reconciler pass (package
// reconcile owns the pass: the due index, workers, budgets, the deadline):
// it moves one due reservation, pool or quota row forward with
// conditional writes on the state it read, so overlapping and repeated
// passes are harmless (docs/capacity.md, "The reconciler").
type Steps struct {
	Service *Service
	Binder  Binder // unmanaged nodes' binding (nil: BindAtOnce)
	// ProvisionHours is how many hours ahead pools are kept provisioned
	// (default ProvisionHours).
	ProvisionHours int
}

// StepStore is what the steps write besides the flows they go through:
// the due markers of reservations, pools and quota rows, and the
// node-hours a pool's hours ahead are provisioned with.
type StepStore interface {
	// ClaimDue moves a reservation's due marker from r.Due to until if the
	// stored state and due are still r's, and returns the stored item as
	// that write left it (ErrStale otherwise, ErrNotFound if it is gone):
	// how one reconciler pass at a time takes a due reservation (as
	// ReservationStore's).
	ClaimDue(ctx context.Context, r Reservation, until time.Time) (Reservation, error)
	// ClearDue removes the due marker if the stored state and due are
	// still r's (ErrStale otherwise).
	ClearDue(ctx context.Context, r Reservation) error
	// PoolDue moves the pool's due marker to next (as PoolStore's) and,
	// when provisioned is not zero, records that every hour before it is
	// provisioned.
	PoolDue(ctx context.Context, poolID string, next time.Time, provisioned Hour) error
	// QuotaDue makes the row due at next — or, with clear, not due any more
	// if no charge record is left on it (due at next if one is).
	QuotaDue(ctx context.Context, k QuotaKey, next time.Time, clear bool) error
	// Provision stores every missing node-hour of h, then marks the hour
	// provisioned (idempotent); made is false if it already was.
	Provision(ctx context.Context, t PoolResource, h Hour) (made bool, err error)
}

// store is the part of the service's store the steps write themselves.
func (rc *Steps) store() StepStore { return rc.Service.Store }

// fence builds the fence and the bindings a reservation's step goes
// through (unmanaged nodes bind through rc.Binder).
func (rc *Steps) fence() *Fence {
	f := rc.Service.fence()
	f.bindings.binder = rc.Binder
	return f
}

// ProvisionHours is how many hours, the current one first, the reconciler
// keeps provisioned for every pool: every node-hour stored, so candidate
// reads find whole nodes too (docs/capacity.md). Hours further ahead are
// stored node by node as reservations are placed on them.
const ProvisionHours = 72

// DefaultProvisionBudget: node-hours one pass provisions at most (about
// 15 s of writes at 16 at once on DynamoDB; an hour of the largest
// resource, 100,000 one-device nodes, is always started when budget is
// left). On a slower store the pass's deadline stops it first: what was
// put is kept and the next pass goes on.
const DefaultProvisionBudget = 50_000

// Step is what handling one due item did: the transitions this pass made
// (by target state), a repair of what a crash left, or a sweep; Gone when
// the index entry outlived its item (a GSI entry may, for a moment, in
// DynamoDB).
type Step struct {
	Moved       []string
	Repaired    bool
	Swept       bool
	Settled     bool
	Told        int // nodes told to bind, and moves made
	NodesMoved  int // moves completed off failed nodes (binding.go)
	Gone        bool
	Provisioned int
	// Ahead: a pool whose only due work is provisioning its hours ahead
	// (not counted in the lag); Cut: that provisioning stopped at the
	// pass's stop time.
	Ahead bool
	Cut   bool
}

// Limits bound one pass's provisioning: the node-hours left to provision
// (shared by the pass's workers) and the time the pass stops taking work
// (zero: no deadline).
type Limits struct {
	Budget *atomic.Int64
	StopAt time.Time
}

// Reservation moves one due reservation forward as far as it can go now.
func (rc *Steps) Reservation(ctx context.Context, r Reservation, now time.Time) (Step, error) {
	store, f := rc.store(), rc.fence()
	var st Step
	// move makes one conditional transition; ok is false when it was not
	// this pass's to make (another pass, a release or a create got there).
	move := func(point string) func(Reservation, error) (bool, error) {
		return func(to Reservation, err error) (bool, error) {
			if err != nil {
				return false, err
			}
			_, won, err := f.moveWon(ctx, to, r.State, point, nil)
			if errors.Is(err, errGone) {
				st.Gone = true
				return false, nil
			}
			if won {
				st.Moved = append(st.Moved, string(to.State))
				r = to
			}
			return won && err == nil, err
		}
	}
	switch {
	case r.State == api.Draft:
		if !r.Stale(now) {
			return st, nil
		}
		// A draft this old is a create that died: a repair.
		ok, err := move(FaultReconcileExpired)(r.Expire(now))
		st.Repaired = ok
		return st, err
	case r.State.Terminal():
		// One sweep after the fence finishes the give-back a crash may have
		// cut short. Every terminal reservation gets one and it normally
		// finds nothing left, so it is counted apart from repairs. Sweeps take turns (overlapping passes): each first
		// moves the due entry on, conditionally, and works from the item as
		// that write returns it.
		cur, err := store.ClaimDue(ctx, r, now.Add(api.StaleAfter))
		switch {
		case errors.Is(err, ErrNotFound):
			st.Gone = true
			return st, nil
		case errors.Is(err, ErrStale):
			return st, nil // another pass has it, or it moved on
		case err != nil:
			return st, unavailable(err)
		}
		if err := f.giveBack(ctx, cur, "reconcile"); err != nil {
			return st, err
		}
		if err := store.ClearDue(ctx, cur); err != nil && !errors.Is(err, ErrStale) {
			return st, unavailable(err)
		}
		st.Swept = true
		return st, f.fault(FaultReconcileSwept)
	case !now.Before(r.Window.End):
		// The window is over — also when it passed entirely while the
		// reconciler was down: straight to released. Its nodes are told to
		// unbind first (releaseUnbind).
		if err := f.bindings.releaseUnbind(ctx, r); err != nil {
			return st, err
		}
		_, err := move(FaultReconcileReleased)(r.Release(api.ReleasedByEnd, now))
		return st, err
	case r.State == api.Placed && !now.Before(r.Window.Start):
		if ok, err := move(FaultReconcileBinding)(r.StartBinding(now)); !ok {
			return st, err
		}
		fallthrough
	case r.State == api.Binding:
		// Until every node bound it, it stays binding and due: the next
		// pass goes on (a failed bind is retried, a failed node replaced).
		done, err := f.bindings.bind(ctx, &r, now, &st)
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

// Now is the pass's clock: the service's (a test's or a simulation's
// injected clock).
func (rc *Steps) Now() time.Time { return rc.Service.hooks().now() }

// provision provisions the hours ahead of p from now's hour while the
// pass's budget of node-hours lasts (an hour is started only with budget
// left); through is the first hour not provisioned yet, done false when
// the budget ran out first (the pool stays due, for the next pass).
func provision(ctx context.Context, store StepStore, p Pool, now time.Time, horizon int, budget *atomic.Int64) (hours int, through Hour, done bool, err error) {
	from, to := max(p.ProvisionedTo, HourOf(now)), HourOf(now)+Hour(horizon)
	for h := from; h < to; h++ {
		for _, name := range p.ResourceNames() {
			if budget.Load() <= 0 {
				return hours, h, false, nil
			}
			pr := PoolResource{PoolID: p.PoolID, Topology: p.Topology(name)}
			made, err := store.Provision(ctx, pr, h)
			if err != nil {
				return hours, h, false, unavailable(err)
			}
			if made {
				hours++
				budget.Add(-int64(pr.Nodes()))
			}
		}
	}
	return hours, max(from, to), true, nil
}
