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
	s := rc.Service
	if now.Before(due) {
		return Step{}, nil
	}
	st := Step{Ahead: true}
	if due.Equal(p.CreatedAt.Add(api.StaleAfter)) {
		// Still due from its claim: the create did not finish.
		st.Ahead = false
		if err := s.completePool(ctx, p, now); err != nil {
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
	hours, through, done, err := s.provisionPool(pctx, p, now, horizon, lim.Budget)
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
	if err := s.Store.PoolDue(ctx, p.PoolID, next, through); err != nil {
		return st, unavailable(err)
	}
	return st, nil
}

// Quota settles a due quota row's charge records (settleRow) and moves its
// due marker: again in SettleAfter while records are left, none otherwise.
func (rc *Steps) Quota(ctx context.Context, q QuotaRow, now time.Time) (Step, error) {
	s := rc.Service
	left, err := s.settleRow(ctx, q.Key())
	if err != nil {
		return Step{}, err
	}
	if err := s.Store.QuotaDue(ctx, q.Key(), now.Add(SettleAfter), left == 0); err != nil {
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
	s := rc.Service
	var st Step
	// move makes one conditional transition; ok is false when it was not
	// this pass's to make (another pass, a release or a create got there).
	move := func(point string) func(Reservation, error) (bool, error) {
		return func(to Reservation, err error) (bool, error) {
			if err != nil {
				return false, err
			}
			_, won, err := s.fenceWon(ctx, to, r.State, point, nil)
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
		cur, err := s.Store.ClaimDue(ctx, r, now.Add(api.StaleAfter))
		switch {
		case errors.Is(err, ErrNotFound):
			st.Gone = true
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
		st.Swept = true
		return st, s.fault(FaultReconcileSwept)
	case !now.Before(r.Window.End):
		// The window is over — also when it passed entirely while the
		// reconciler was down: straight to released. Its nodes are told to
		// unbind first (releaseUnbind).
		if err := s.releaseUnbind(ctx, r); err != nil {
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

// Now is the pass's clock: the service's (a test's or a simulation's
// injected clock).
func (rc *Steps) Now() time.Time { return rc.Service.now() }
