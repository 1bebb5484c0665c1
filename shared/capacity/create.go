package capacity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// Admission is reservations.create's flow: a protocol of named steps —
// draft, decide, charge, place, fence — each a call on a narrow store
// (Create, then admit). A crash between two steps leaves what the next
// replay of the request or the reconciler finishes or undoes.
type Admission struct {
	hooks
	store    AdmissionStore
	placer   *Placer
	calendar *Calendar
	fence    *Fence
	charges  *Charges
	placing  *placing
	attempts int                        // Service.PlaceAttempts
	newID    func(now time.Time) string // Service.NewID
}

// AdmissionStore is what admission writes besides the charge, the
// node-hours and the fence: the draft and its lease, a large placement
// recorded on it, and the quota row's record of a charge in flight.
type AdmissionStore interface {
	// PutDraft writes a new draft; if the id exists it returns the stored
	// reservation and ErrExists (the clientToken idempotency check).
	PutDraft(ctx context.Context, r Reservation) (Reservation, error)
	// GetReservation reads one of tenant's reservations (ErrNotFound).
	GetReservation(ctx context.Context, tenant, id string) (Reservation, error)
	// TakeOver moves a draft's lease from old to lease (ErrStale if another
	// flow took it or it is no longer a draft).
	TakeOver(ctx context.Context, r Reservation, old, lease time.Time) error
	// SetPlan records on a draft the placement its create is about to
	// charge and write, when it is too large for the charge's record, if it
	// is still a draft (ErrStale otherwise).
	SetPlan(ctx context.Context, r Reservation, p Placement, nodeSize int) error
	// GetQuota reads a row; a missing row is max 0, used 0 (as QuotaStore's).
	GetQuota(ctx context.Context, k QuotaKey) (api.Quota, error)
	// Replace records another placement for id's charge in flight
	// (ErrStale when it is no longer in flight: voided, refunded or settled).
	Replace(ctx context.Context, k QuotaKey, id string, p Placement) error
	// Refund forgets id's charge record, giving back its count unless it
	// was voided, once (as ChargeStore's).
	Refund(ctx context.Context, k QuotaKey, id string, count int) error
}

// PlaceRetries is how many placement writes lost a race since start (in
// this process: every flow built on the same Service).
func (a *Admission) PlaceRetries() int64 { return a.placing.retries.Load() }

// CreateRequest is a parsed reservations.create input.
type CreateRequest struct {
	TenantID    string
	PoolID      string
	Resource    string
	Count       int
	Topology    string     // OnNodes (also for ""), AnyDevices
	Start       *time.Time // nil: now
	End         time.Time
	ClientToken string // "" for none
	Principal   string // who asks: tokens are scoped to it
}

// Quota names the row the request charges.
func (r CreateRequest) Quota() QuotaKey { return QuotaKey{r.TenantID, r.PoolID, r.Resource} }

// Decide asks Better IAM once on the draft with the request as attributes:
// nil (allow), PERMISSION_DENIED, or UNAVAILABLE.
type Decide func(ctx context.Context, attributes map[string]any) error

// The life of a create's flow (see Admission.Create).
const (
	// FlowDeadline: the flow that wrote a draft stops writing for it this
	// long after (its context ends then).
	FlowDeadline = 10 * time.Second
	// TakeOverAfter: a replay of the same request may drive a draft whose
	// flow is past its deadline (the lease: with margin for a write still
	// in transit)…
	TakeOverAfter = 15 * time.Second
	// LeaseHandBack: a flow that gave up lets a replay take over this soon.
	LeaseHandBack = 2 * time.Second
	// TakeOverUntil: …up to this age, so that its own deadline falls well
	// before api.StaleAfter, when the reconciler may expire the draft.
	TakeOverUntil = 90 * time.Second
	// InlinePlacement: a placement of at most this many nodes is recorded
	// with the charge on the quota row; a larger one on the draft first.
	InlinePlacement = 8
)

var (
	// errGone: the reservation a step acts for no longer exists (TTL, or
	// an index entry that outlived its item).
	errGone = errors.New("capacity: reservation is gone")
	// errReleased: the draft a create flow admits was ended by another
	// writer (its charge voided, its plan refused).
	errReleased = errors.New("capacity: the draft was released")
	// errContended: a placement still lost races at the flow's deadline
	// (wrapping context.DeadlineExceeded), or past Service.PlaceAttempts;
	// nothing of it is left written.
	errContended   = errors.New("capacity: placement is contended")
	errInvalidPool = errors.New("capacity: pool not visible")
	errInvalidRes  = errors.New("capacity: resource not in the pool")
)

// Create is reservations.create (docs/reference/reservations.md):
// validate → draft → decide once on the draft → choose devices (Placer) →
// charge quota, recording the choice (Charges) → write the choice into the
// node-hours (allocate, place.go) → placed (the fence). Nothing that
// depends on the pool happens before the decision, so a denied caller
// learns nothing about the tenant's pools. Every refusal after the draft leaves the reservation
// terminal and carries details.reservationId.
//
// One flow at a time drives a draft: the one that wrote it, until its
// lease (FlowDeadline), or a replay of the same request that takes the
// lease over after TakeOverAfter. A replay during a live lease answers
// UNAVAILABLE (retry): two flows charging one reservation could charge it
// twice once the first has settled.
//
// Happy path, for a count that fits a node and a window within one UTC
// hour: 5 DynamoDB round trips, 4 one after another — the draft and, at
// the same time, the candidates query (read ahead; dropped unread when the
// request is refused or replayed, so the decision still comes before
// anything the caller could learn about the pool), the charge, the
// node-hour write and the fence. The charge record is forgotten later
// (settleLater), not by a write of this call.
func (a *Admission) Create(ctx context.Context, req CreateRequest, decide Decide) (Reservation, error) {
	now := a.now()
	if req.Count < 1 || req.Count > api.MaxCount {
		return Reservation{}, apierr.Invalid("constraint", "count", "count must be 1..%d", api.MaxCount)
	}
	switch req.Topology {
	case "":
		req.Topology = api.OnNodes
	case api.OnNodes, api.AnyDevices:
	default:
		return Reservation{}, apierr.Invalid("constraint", "topology", "topology must be %q or %q", api.OnNodes, api.AnyDevices)
	}
	start := now
	if req.Start != nil {
		start = req.Start.UTC()
	}
	// Windows have millisecond precision, as node-hour entries store them:
	// a window is exactly what its devices are held for.
	window := api.Window{Start: start.Truncate(time.Millisecond), End: req.End.UTC().Truncate(time.Millisecond)}
	if req.Start != nil { // what does not depend on the time is refused before any read
		if err := windowShape(window); err != nil {
			return Reservation{}, err
		}
	}
	draft := Reservation{
		Reservation: api.Reservation{
			TenantID:  req.TenantID,
			PoolID:    req.PoolID,
			Resource:  req.Resource,
			Count:     req.Count,
			Window:    window,
			Topology:  req.Topology,
			State:     api.Draft,
			DeviceIDs: []string{},
			NodeIDs:   []string{},
			CreatedAt: now,
			UpdatedAt: now,
			History:   []api.Event{{State: api.Draft, At: now}},
		},
		Request:     Fingerprint(req.PoolID, req.Resource, req.Count, req.Topology, req.Start, req.End),
		ClientToken: req.ClientToken,
		Principal:   req.Principal,
		Due:         now.Add(api.StaleAfter),
		Lease:       now.Add(TakeOverAfter),
	}
	if req.ClientToken != "" {
		draft.ReservationID = TokenID(req.TenantID, req.Principal, req.ClientToken)
	} else if a.newID != nil {
		draft.ReservationID = a.newID(now)
	} else {
		draft.ReservationID = ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
	}
	if err := validateWindow(req.Start != nil, window, now); err != nil {
		if req.ClientToken == "" {
			return Reservation{}, err
		}
		// A late retry of an earlier request: the first answer wins.
		stored, gerr := a.store.GetReservation(ctx, req.TenantID, draft.ReservationID)
		if errors.Is(gerr, ErrNotFound) {
			return Reservation{}, err
		}
		if gerr != nil {
			return Reservation{}, unavailable(gerr)
		}
		return a.replay(ctx, draft, stored, decide)
	}
	ahead := a.readAhead(ctx, draft)
	stored, err := a.store.PutDraft(ctx, draft)
	if errors.Is(err, ErrExists) {
		return a.replay(ctx, draft, stored, decide)
	}
	if err != nil {
		return Reservation{}, unavailable(err)
	}
	if err := a.fault(FaultDraft); err != nil {
		return Reservation{}, err
	}
	if err := decide(ctx, attributes(draft)); err != nil {
		return a.refused(ctx, draft, err)
	}
	return a.drive(context.WithValue(ctx, aheadKey{}, ahead), draft)
}

// ahead is a candidate read started beside the draft's write.
type ahead struct {
	done  chan struct{}
	pr    PoolResource
	req   Request
	cands []Candidate
	err   error
}

type aheadKey struct{}

// readAhead starts the fast path's candidate read for a new draft (Serial:
// reads it now).
func (a *Admission) readAhead(ctx context.Context, r Reservation) *ahead {
	read := &ahead{done: make(chan struct{}), req: requestOf(r)}
	if a.serial {
		read.pr, read.cands, read.err = a.placer.fastCandidates(ctx, r, &read.req)
		close(read.done)
		return read
	}
	// Not cancelled with the request: a refused or replayed request leaves
	// it to finish (one read) rather than abort it half sent.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FlowDeadline)
	go func() {
		defer close(read.done)
		defer cancel()
		read.pr, read.cands, read.err = a.placer.fastCandidates(rctx, r, &read.req)
	}()
	return read
}

// requestOf is the placement request of a draft.
func requestOf(r Reservation) Request {
	return Request{ID: r.ReservationID, Tenant: r.TenantID, Count: r.Count, Topology: r.Topology, Window: r.Window}
}

// validateWindow applies the window rules of reservations.create at now.
func validateWindow(startSent bool, w api.Window, now time.Time) error {
	switch {
	case startSent && w.Start.Before(now.Add(-api.MaxStartSkew)):
		return apierr.Invalid("constraint", "window.start", "window.start may be at most %v in the past", api.MaxStartSkew).
			With("rule", "start_in_past")
	case w.Start.After(now.Add(api.MaxLeadTime)):
		return apierr.Invalid("constraint", "window.start", "window.start may be at most 365 days ahead").
			With("rule", "start_too_far_ahead")
	case !startSent && !w.End.After(w.Start):
		return apierr.Invalid("constraint", "window.end", "window.end is in the past (window.start defaults to now)").
			With("rule", "end_in_past")
	}
	return windowShape(w)
}

// windowShape: end after start, at most 90 days.
func windowShape(w api.Window) error {
	switch {
	case !w.End.After(w.Start):
		return apierr.Invalid("constraint", "window.end", "window.end must be after window.start").With("rule", "end_before_start")
	case w.End.Sub(w.Start) > api.MaxWindow:
		return apierr.Invalid("constraint", "window.end", "a window lasts at most 90 days").With("rule", "window_too_long")
	}
	return nil
}

// attributes is the request as Better IAM sees it on the draft.
func attributes(r Reservation) map[string]any {
	a := map[string]any{
		"tenantId": r.TenantID, "reservationId": r.ReservationID, "poolId": r.PoolID,
		"resource": r.Resource, "count": r.Count, "topology": r.Topology,
		"window": map[string]any{"start": r.Window.Start.Format(time.RFC3339Nano), "end": r.Window.End.Format(time.RFC3339Nano)},
	}
	if r.ClientToken != "" {
		a["clientToken"] = r.ClientToken
	}
	return a
}

// replay answers a request whose id (clientToken) is already stored: the
// same request gets the first answer, another request is CONFLICT. A draft
// still driven by its flow answers UNAVAILABLE; one whose flow is past its
// deadline is taken over and driven on by this call; a stale one is
// expired.
func (a *Admission) replay(ctx context.Context, sent, stored Reservation, decide Decide) (Reservation, error) {
	if stored.Request != sent.Request {
		return Reservation{}, apierr.New(apierr.Conflict, "clientToken was used for another request").With("field", "clientToken")
	}
	// This call is authorized like any other, on the stored request.
	if err := decide(ctx, attributes(stored)); err != nil {
		if stored.State == api.Denied {
			return Reservation{}, answer(stored)
		}
		return Reservation{}, err
	}
	if stored.State != api.Draft {
		return stored, answer(stored)
	}
	now := a.now()
	switch {
	case stored.Stale(now):
		n, err := stored.Expire(now)
		if err != nil {
			return Reservation{}, err
		}
		return a.fence.move(ctx, n, api.Draft, FaultExpired)
	case now.Before(stored.Lease) || now.Sub(stored.CreatedAt) >= TakeOverUntil:
		return Reservation{}, apierr.New(apierr.Unavailable, "the first request with this clientToken is still being processed; retry").
			With("reservationId", stored.ReservationID)
	}
	lease := now.Add(TakeOverAfter)
	if err := a.store.TakeOver(ctx, stored, stored.Lease, lease); errors.Is(err, ErrStale) {
		return Reservation{}, apierr.New(apierr.Unavailable, "the reservation is being processed; retry").
			With("reservationId", stored.ReservationID)
	} else if err != nil {
		return Reservation{}, unavailable(err).With("reservationId", stored.ReservationID)
	}
	stored.Lease = lease
	return a.drive(ctx, stored)
}

// answer is the API outcome of a stored reservation: its refusal, or nil.
func answer(r Reservation) error {
	var e *apierr.Error
	switch {
	case r.State == api.Denied:
		e = apierr.New(apierr.PermissionDenied, "the reservation was denied")
	case r.State == api.Rejected && r.Reason == api.ReasonQuota:
		e = apierr.New(apierr.QuotaExceeded, "the reservation does not fit the quota").With("requested", r.Count)
	case r.State == api.Rejected && r.Reason == api.ReasonInvalid && r.Invalid == "resource":
		e = errNoResource(r.PoolID, r.Resource)
	case r.State == api.Rejected && r.Reason == api.ReasonInvalid:
		e = errPoolNotFound(r.PoolID)
	case r.State == api.Rejected:
		e = apierr.New(apierr.CapacityExhausted, "%s", noFitMessage(r.Reason)).With("reason", r.Reason)
	default:
		return nil
	}
	return e.With("reservationId", r.ReservationID)
}

// overPool says so when the count is larger than the pool's devices of
// the resource: no window, smaller load or higher quota ever fits it.
func overPool(err error, r Reservation, pr PoolResource) error {
	e := apierr.As(err)
	if e == nil || pr.Devices == 0 || r.Count <= pr.Devices || (e.Code != apierr.QuotaExceeded && e.Code != apierr.CapacityExhausted) {
		return err
	}
	e.Message += fmt.Sprintf(" (the pool has %d %s devices: a count of %d never fits)", pr.Devices, pr.Resource, r.Count)
	return e.With("poolDevices", pr.Devices)
}

func noFitMessage(reason string) string {
	if reason == api.ReasonTopology {
		return "devices are free, but not on few enough nodes for the topology; try topology \"any\" or another window"
	}
	return "no set of free devices fits the window"
}

// refused handles a decision that was not allow.
func (a *Admission) refused(ctx context.Context, r Reservation, decision error) (Reservation, error) {
	e := apierr.As(decision)
	if e == nil || e.Code != apierr.PermissionDenied {
		if e == nil {
			e = apierr.Dependency("better-iam", decision)
		}
		a.handBack(ctx, r)
		return Reservation{}, e.With("reservationId", r.ReservationID)
	}
	d, err := r.Deny(a.now())
	if err != nil {
		return Reservation{}, err
	}
	// Fenced denied, or already moved on by another writer: either way this
	// caller was denied and learns nothing more.
	if _, err := a.fence.move(ctx, d, api.Draft, FaultDenied); err != nil {
		return Reservation{}, err
	}
	return Reservation{}, e.With("reservationId", r.ReservationID)
}

// drive admits an allowed draft this flow holds the lease of. A flow that
// fails half way (a dependency) hands its lease back on the way out, so
// the client's retry with the same token can take the draft over at once
// instead of after the lease.
func (a *Admission) drive(ctx context.Context, r Reservation) (Reservation, error) {
	dctx, cancel := context.WithTimeout(ctx, r.Lease.Add(FlowDeadline-TakeOverAfter).Sub(a.now()))
	defer cancel()
	res, err := a.admit(dctx, r)
	if err == nil {
		return res, nil
	}
	e := apierr.As(err)
	if e == nil {
		e = apierr.Dependency("dynamodb", err)
	}
	if e.Code == apierr.Unavailable {
		a.handBack(ctx, r)
	}
	if _, ok := e.Details["reservationId"]; !ok {
		e = e.With("reservationId", r.ReservationID)
	}
	return res, e
}

// handBack lets a replay take over r's draft soon: this flow is done.
func (a *Admission) handBack(ctx context.Context, r Reservation) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := a.store.TakeOver(ctx, r, r.Lease, a.now().Add(LeaseHandBack)); err != nil && !errors.Is(err, ErrStale) {
		a.logger().Warn("hand back lease", "reservation", r.ReservationID, "error", err.Error())
	}
}

// admit chooses, charges, places and fences an allowed draft: for a count
// that fits a node and a window within one hour, the charge, one node-hour
// write and the fence. The charge record (or, for a placement of more than
// InlinePlacement nodes, the draft) names the placement before anything of
// it is written, so whoever undoes the reservation knows what to free.
func (a *Admission) admit(ctx context.Context, r Reservation) (Reservation, error) {
	k := r.Quota()
	req := requestOf(r)
	pr, p, state, err := a.placer.choose(ctx, r, req)
	over := func(res Reservation, err error) (Reservation, error) { return res, overPool(err, r, pr) }
	switch {
	case errors.Is(err, errInvalidPool), errors.Is(err, errInvalidRes):
		return a.admitInvalid(ctx, r, err)
	case isNoFit(err):
		// Quota is checked before capacity (docs/reference/reservations.md): a request that fits
		// neither is QUOTA_EXCEEDED.
		q, qerr := a.store.GetQuota(ctx, k)
		if qerr != nil {
			return Reservation{}, unavailable(qerr)
		}
		if q.Used+int64(r.Count) > q.Max {
			return over(a.rejectQuota(ctx, r, q))
		}
		return over(a.reject(ctx, r, err.(NoFit).Reason, FaultRejectedCap))
	case err != nil:
		return Reservation{}, err
	}
	carried := false
	if r.State == api.Draft && len(r.Plan) > 0 {
		// An earlier flow recorded a large placement on the draft and may
		// have written part of it: carry that one on (it is what a repair
		// would undo).
		p, state, carried = r.PlanPlacement(), nil, true
	} else if err := a.record(ctx, r, pr, p); errors.Is(err, errReleased) {
		return a.yield(ctx, r, nil)
	} else if err != nil {
		return Reservation{}, err
	}
	ch, err := a.charges.charge(ctx, k, r, inline(p))
	var qe QuotaExceeded
	switch {
	case errors.As(err, &qe):
		// A missing row also refuses: tell a pool the tenant cannot see
		// (or a resource it lacks) from a quota that does not fit.
		switch verr := a.placer.visible(ctx, r); {
		case errors.Is(verr, errInvalidPool), errors.Is(verr, errInvalidRes):
			return a.admitInvalid(ctx, r, verr)
		case verr != nil:
			return Reservation{}, verr
		}
		return over(a.rejectQuota(ctx, r, qe.Quota))
	case err != nil:
		return Reservation{}, err
	}
	if ch.Voided {
		// Released while this flow was on its way here.
		return a.yield(ctx, r, nil)
	}
	if !ch.Fresh && len(ch.Placement) > 0 {
		// An earlier flow of this reservation charged for a placement of its
		// own: carry that one on (it is what a repair would undo).
		p, state, carried = ch.Placement, nil, true
	}
	if err := a.fault(FaultCharged); err != nil {
		return Reservation{}, err
	}
	p, err = a.allocate(ctx, r, req, pr, p, state, carried)
	switch {
	case isNoFit(err):
		return over(a.reject(ctx, r, err.(NoFit).Reason, FaultRejectedCap))
	case errors.Is(err, errReleased):
		// The draft was released (its charge voided) while this flow placed.
		return a.yield(ctx, r, nil)
	case errors.Is(err, errContended):
		// Lost races until the flow's deadline. Nothing of this attempt is
		// left written: give the charge back so the row's slot is free, and
		// let the client retry.
		if rerr := a.store.Refund(ctx, k, r.ReservationID, r.Count); rerr != nil {
			a.logger().Warn("refund after contention", "reservation", r.ReservationID, "error", rerr.Error())
		}
		e := apierr.New(apierr.Unavailable, "placement stayed contended until the request's deadline; retry the request").
			With("dependency", "dynamodb")
		e.Cause = err
		return Reservation{}, e
	case err != nil:
		return Reservation{}, err
	}
	if err := a.fault(FaultAllocated); err != nil {
		return Reservation{}, err
	}
	placed, err := r.Place(p.Devices(pr.NodeSize), pr.NodeSize, a.now())
	if err != nil {
		return Reservation{}, err
	}
	cur, won, err := a.fence.moveWon(ctx, placed, api.Draft, FaultPlaced, p)
	if err != nil {
		return Reservation{}, err
	}
	if won {
		// The count now lives in the reservation: its charge record is
		// forgotten by this process's next charge on the row, or by the
		// reconciler (the row is due) — not by a write of its own here.
		a.charges.settleLater(k, r.ReservationID)
	}
	return cur, answer(cur)
}

// yield answers for a draft another writer ended while this flow admitted
// it (a release, seen as its charge voided or its plan refused): what the
// flow charged and wrote is undone, and the reservation answered as it is.
func (a *Admission) yield(ctx context.Context, r Reservation, own Placement) (Reservation, error) {
	cur, err := a.fence.lost(ctx, r, api.Draft, own, "create")
	switch {
	case errors.Is(err, errGone):
		return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", r.ReservationID)
	case err != nil:
		return Reservation{}, err
	case cur.State == api.Draft:
		return Reservation{}, apierr.New(apierr.Unavailable, "reservation %q is changing; retry", r.ReservationID)
	}
	return cur, answer(cur)
}

// admitInvalid rejects a draft whose pool the tenant cannot see
// (NOT_FOUND) or whose resource the pool lacks (INVALID_INPUT).
func (a *Admission) admitInvalid(ctx context.Context, r Reservation, why error) (Reservation, error) {
	r.Invalid = "poolId"
	if errors.Is(why, errInvalidRes) {
		r.Invalid = "resource"
	}
	return a.reject(ctx, r, api.ReasonInvalid, FaultRejectedInvalid)
}

// inline is the part of a placement recorded on the quota row.
func inline(p Placement) Placement {
	if len(p) > InlinePlacement {
		return nil
	}
	return p
}

// record makes a placement too large for the quota row's record durable on
// the draft, before anything is charged or written for it. ErrStale (the
// draft moved on: released, expired) answers as the stored reservation.
func (a *Admission) record(ctx context.Context, r Reservation, pr PoolResource, p Placement) error {
	if len(p) <= InlinePlacement {
		return nil
	}
	switch err := a.store.SetPlan(ctx, r, p, pr.NodeSize); {
	case errors.Is(err, ErrStale):
		return errReleased
	case err != nil:
		return unavailable(err)
	}
	return nil
}

func isNoFit(err error) bool {
	var nf NoFit
	return errors.As(err, &nf)
}

// rejectQuota refuses a draft over quota, with the numbers (docs/reference/README.md, errors).
func (a *Admission) rejectQuota(ctx context.Context, r Reservation, q api.Quota) (Reservation, error) {
	cur, err := a.reject(ctx, r, api.ReasonQuota, FaultRejectedQuota)
	if e := apierr.As(err); e != nil && e.Code == apierr.QuotaExceeded {
		err = e.With("used", q.Used).With("max", q.Max)
	}
	return cur, err
}

// reject fences a draft rejected for reason; the fence gives back whatever
// its charge recorded.
func (a *Admission) reject(ctx context.Context, r Reservation, reason, point string) (Reservation, error) {
	n, err := r.Reject(reason, a.now())
	if err != nil {
		return Reservation{}, err
	}
	cur, err := a.fence.move(ctx, n, api.Draft, point)
	if err != nil {
		return Reservation{}, err
	}
	return cur, answer(cur)
}
