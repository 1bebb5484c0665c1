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
// it moves one due reservation (Reservation: expire, sweep, end, start),
// pool (Pool: finish its creation, provision its hours ahead) or quota row
// (Quota: settle its charge records) forward with conditional writes on
// the state it read, so overlapping and repeated passes are harmless
// (docs/capacity.md, "The reconciler"). It goes through the flows the
// service builds (Fence, Bindings, Charges, Pools) and writes the due
// markers itself (StepStore).
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

// Reservation moves one due reservation forward as far as it can go now,
// by its state: a draft past api.StaleAfter expires (expire), a terminal
// one is swept (sweep), one whose window is over is released (end), and
// one whose window started is bound through its nodes, then active
// (start). Each step is a conditional write on the state this pass read.
func (rc *Steps) Reservation(ctx context.Context, r Reservation, now time.Time) (Step, error) {
	rs := &reservationStep{store: rc.store(), fence: rc.fence(), r: r}
	var err error
	switch {
	case r.State == api.Draft:
		err = rs.expire(ctx, now)
	case r.State.Terminal():
		err = rs.sweep(ctx, now)
	case !now.Before(r.Window.End):
		err = rs.end(ctx, now)
	case r.State == api.Placed && !now.Before(r.Window.Start), r.State == api.Binding:
		err = rs.start(ctx, now)
	}
	return rs.st, err
}

// reservationStep is one pass's step of a due reservation: what it writes
// through, the reservation as its last transition left it, and what it did.
type reservationStep struct {
	store StepStore
	fence *Fence
	r     Reservation
	st    Step
}

// move makes one conditional transition from the state the step holds to
// to (as a state-machine method built it, or refused: err); ok is false
// when it was not this pass's to make (another pass, a release or a
// create got there).
func (rs *reservationStep) move(ctx context.Context, point string, to Reservation, err error) (ok bool, _ error) {
	if err != nil {
		return false, err
	}
	_, won, err := rs.fence.moveWon(ctx, to, rs.r.State, point, nil)
	if errors.Is(err, errGone) {
		rs.st.Gone = true
		return false, nil
	}
	if won {
		rs.st.Moved = append(rs.st.Moved, string(to.State))
		rs.r = to
	}
	return won && err == nil, err
}

// expire ends a draft this old: a create that died (a repair).
func (rs *reservationStep) expire(ctx context.Context, now time.Time) error {
	if !rs.r.Stale(now) {
		return nil
	}
	to, err := rs.r.Expire(now)
	ok, err := rs.move(ctx, FaultReconcileExpired, to, err)
	rs.st.Repaired = ok
	return err
}

// ScrubRetry is how soon a terminal reservation whose scrub on a node is
// not written (the node holds its maximum of pending entries) is swept
// again: each sweep tells the node again and frees what it can.
const ScrubRetry = 10 * time.Second

// sweep finishes, once after the fence, the give-back a crash may have
// cut short — and again every ScrubRetry while a scrub is owed. Every terminal reservation gets one and it normally finds
// nothing left, so it is counted apart from repairs. Sweeps take turns
// (overlapping passes): each first moves the due entry on, conditionally,
// and works from the item as that write returns it.
func (rs *reservationStep) sweep(ctx context.Context, now time.Time) error {
	cur, err := rs.store.ClaimDue(ctx, rs.r, now.Add(api.StaleAfter))
	switch {
	case errors.Is(err, ErrNotFound):
		rs.st.Gone = true
		return nil
	case errors.Is(err, ErrStale):
		return nil // another pass has it, or it moved on
	case err != nil:
		return unavailable(err)
	}
	untold, err := rs.fence.giveBack(ctx, cur, "reconcile")
	if err != nil {
		return err
	}
	if len(untold) > 0 {
		// A scrub still not written: due again, until it is.
		if _, err := rs.store.ClaimDue(ctx, cur, now.Add(ScrubRetry)); err != nil && !errors.Is(err, ErrStale) {
			return unavailable(err)
		}
		rs.st.Swept = true
		return nil
	}
	if err := rs.store.ClearDue(ctx, cur); err != nil && !errors.Is(err, ErrStale) {
		return unavailable(err)
	}
	rs.st.Swept = true
	return rs.fence.fault(FaultReconcileSwept)
}

// end releases a reservation whose window is over — also when it passed
// entirely while the reconciler was down. Its nodes are told to unbind
// first (releaseUnbind).
func (rs *reservationStep) end(ctx context.Context, now time.Time) error {
	if err := rs.fence.bindings.releaseUnbind(ctx, rs.r); err != nil {
		return err
	}
	to, err := rs.r.Release(api.ReleasedByEnd, now)
	_, err = rs.move(ctx, FaultReconcileReleased, to, err)
	return err
}

// start moves a placed reservation whose window started to binding, binds
// it through its nodes (Bindings.bind) and, once every node bound it, makes
// it active. Until then it stays binding and due: the next pass goes on (a
// failed bind is retried, a failed node replaced).
func (rs *reservationStep) start(ctx context.Context, now time.Time) error {
	if rs.r.State == api.Placed {
		to, err := rs.r.StartBinding(now)
		if ok, err := rs.move(ctx, FaultReconcileBinding, to, err); !ok {
			return err
		}
	}
	done, err := rs.fence.bindings.bind(ctx, &rs.r, now, &rs.st)
	if errors.Is(err, errMoved) {
		return nil
	}
	if err != nil || !done {
		return err
	}
	to, err := rs.r.Activate(now)
	_, err = rs.move(ctx, FaultReconcileActive, to, err)
	return err
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
