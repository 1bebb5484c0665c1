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

// The life of a create's flow (see CreateReservation).
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

// CreateReservation runs docs/reference/reservations.md's create: validate → draft → decide once on the
// draft → choose devices → charge quota (recording the choice) → write the
// choice into the node-hours → placed. Nothing that depends on the pool
// happens before the decision, so a denied caller learns nothing about the
// tenant's pools. Every refusal after the draft leaves the reservation
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
func (s *Service) CreateReservation(ctx context.Context, req CreateRequest, decide Decide) (Reservation, error) {
	now := s.now()
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
	} else if s.NewID != nil {
		draft.ReservationID = s.NewID(now)
	} else {
		draft.ReservationID = ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
	}
	if err := validateWindow(req.Start != nil, window, now); err != nil {
		if req.ClientToken == "" {
			return Reservation{}, err
		}
		// A late retry of an earlier request: the first answer wins.
		stored, gerr := s.Store.GetReservation(ctx, req.TenantID, draft.ReservationID)
		if errors.Is(gerr, ErrNotFound) {
			return Reservation{}, err
		}
		if gerr != nil {
			return Reservation{}, unavailable(gerr)
		}
		return s.replay(ctx, draft, stored, decide)
	}
	ahead := s.readAhead(ctx, draft)
	stored, err := s.Store.PutDraft(ctx, draft)
	if errors.Is(err, ErrExists) {
		return s.replay(ctx, draft, stored, decide)
	}
	if err != nil {
		return Reservation{}, unavailable(err)
	}
	if err := s.fault(FaultDraft); err != nil {
		return Reservation{}, err
	}
	if err := decide(ctx, attributes(draft)); err != nil {
		return s.refused(ctx, draft, err)
	}
	return s.drive(context.WithValue(ctx, aheadKey{}, ahead), draft)
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
func (s *Service) readAhead(ctx context.Context, r Reservation) *ahead {
	a := &ahead{done: make(chan struct{}), req: requestOf(r)}
	if s.Serial {
		a.pr, a.cands, a.err = s.fastCandidates(ctx, r, &a.req)
		close(a.done)
		return a
	}
	// Not cancelled with the request: a refused or replayed request leaves
	// it to finish (one read) rather than abort it half sent.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FlowDeadline)
	go func() {
		defer close(a.done)
		defer cancel()
		a.pr, a.cands, a.err = s.fastCandidates(rctx, r, &a.req)
	}()
	return a
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
func (s *Service) replay(ctx context.Context, sent, stored Reservation, decide Decide) (Reservation, error) {
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
	now := s.now()
	switch {
	case stored.Stale(now):
		n, err := stored.Expire(now)
		if err != nil {
			return Reservation{}, err
		}
		return s.fence(ctx, n, api.Draft, FaultExpired)
	case now.Before(stored.Lease) || now.Sub(stored.CreatedAt) >= TakeOverUntil:
		return Reservation{}, apierr.New(apierr.Unavailable, "the first request with this clientToken is still being processed; retry").
			With("reservationId", stored.ReservationID)
	}
	lease := now.Add(TakeOverAfter)
	if err := s.Store.TakeOver(ctx, stored, stored.Lease, lease); errors.Is(err, ErrStale) {
		return Reservation{}, apierr.New(apierr.Unavailable, "the reservation is being processed; retry").
			With("reservationId", stored.ReservationID)
	} else if err != nil {
		return Reservation{}, unavailable(err).With("reservationId", stored.ReservationID)
	}
	stored.Lease = lease
	return s.drive(ctx, stored)
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
func (s *Service) refused(ctx context.Context, r Reservation, decision error) (Reservation, error) {
	e := apierr.As(decision)
	if e == nil || e.Code != apierr.PermissionDenied {
		if e == nil {
			e = apierr.Dependency("better-iam", decision)
		}
		s.handBack(ctx, r)
		return Reservation{}, e.With("reservationId", r.ReservationID)
	}
	d, err := r.Deny(s.now())
	if err != nil {
		return Reservation{}, err
	}
	// Fenced denied, or already moved on by another writer: either way this
	// caller was denied and learns nothing more.
	if _, err := s.fence(ctx, d, api.Draft, FaultDenied); err != nil {
		return Reservation{}, err
	}
	return Reservation{}, e.With("reservationId", r.ReservationID)
}

// drive admits an allowed draft this flow holds the lease of. A flow that
// fails half way (a dependency) hands its lease back on the way out, so
// the client's retry with the same token can take the draft over at once
// instead of after the lease.
func (s *Service) drive(ctx context.Context, r Reservation) (Reservation, error) {
	dctx, cancel := context.WithTimeout(ctx, r.Lease.Add(FlowDeadline-TakeOverAfter).Sub(s.now()))
	defer cancel()
	res, err := s.admit(dctx, r)
	if err == nil {
		return res, nil
	}
	e := apierr.As(err)
	if e == nil {
		e = apierr.Dependency("dynamodb", err)
	}
	if e.Code == apierr.Unavailable {
		s.handBack(ctx, r)
	}
	if _, ok := e.Details["reservationId"]; !ok {
		e = e.With("reservationId", r.ReservationID)
	}
	return res, e
}

// handBack lets a replay take over r's draft soon: this flow is done.
func (s *Service) handBack(ctx context.Context, r Reservation) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := s.Store.TakeOver(ctx, r, r.Lease, s.now().Add(LeaseHandBack)); err != nil && !errors.Is(err, ErrStale) {
		s.logger().Warn("hand back lease", "reservation", r.ReservationID, "error", err.Error())
	}
}

// admit chooses, charges, places and fences an allowed draft: for a count
// that fits a node and a window within one hour, the charge, one node-hour
// write and the fence. The charge record (or, for a placement of more than
// InlinePlacement nodes, the draft) names the placement before anything of
// it is written, so whoever undoes the reservation knows what to free.
func (s *Service) admit(ctx context.Context, r Reservation) (Reservation, error) {
	k := r.Quota()
	req := requestOf(r)
	pr, p, state, err := s.choose(ctx, r, req)
	over := func(res Reservation, err error) (Reservation, error) { return res, overPool(err, r, pr) }
	switch {
	case errors.Is(err, errInvalidPool), errors.Is(err, errInvalidRes):
		return s.admitInvalid(ctx, r, err)
	case isNoFit(err):
		// Quota is checked before capacity (docs/reference/reservations.md): a request that fits
		// neither is QUOTA_EXCEEDED.
		q, qerr := s.Store.GetQuota(ctx, k)
		if qerr != nil {
			return Reservation{}, unavailable(qerr)
		}
		if q.Used+int64(r.Count) > q.Max {
			return over(s.rejectQuota(ctx, r, q))
		}
		return over(s.reject(ctx, r, err.(NoFit).Reason, FaultRejectedCap))
	case err != nil:
		return Reservation{}, err
	}
	carried := false
	if r.State == api.Draft && len(r.Plan) > 0 {
		// An earlier flow recorded a large placement on the draft and may
		// have written part of it: carry that one on (it is what a repair
		// would undo).
		p, state, carried = r.PlanPlacement(), nil, true
	} else if err := s.record(ctx, r, pr, p); errors.Is(err, errReleased) {
		return s.yield(ctx, r, nil)
	} else if err != nil {
		return Reservation{}, err
	}
	ch, err := s.charge(ctx, k, r, inline(p))
	var qe QuotaExceeded
	switch {
	case errors.As(err, &qe):
		// A missing row also refuses: tell a pool the tenant cannot see
		// (or a resource it lacks) from a quota that does not fit.
		switch verr := s.visible(ctx, r); {
		case errors.Is(verr, errInvalidPool), errors.Is(verr, errInvalidRes):
			return s.admitInvalid(ctx, r, verr)
		case verr != nil:
			return Reservation{}, verr
		}
		return over(s.rejectQuota(ctx, r, qe.Quota))
	case err != nil:
		return Reservation{}, err
	}
	if ch.Voided {
		// Released while this flow was on its way here.
		return s.yield(ctx, r, nil)
	}
	if !ch.Fresh && len(ch.Placement) > 0 {
		// An earlier flow of this reservation charged for a placement of its
		// own: carry that one on (it is what a repair would undo).
		p, state, carried = ch.Placement, nil, true
	}
	if err := s.fault(FaultCharged); err != nil {
		return Reservation{}, err
	}
	p, err = s.allocate(ctx, r, req, pr, p, state, carried)
	switch {
	case isNoFit(err):
		return over(s.reject(ctx, r, err.(NoFit).Reason, FaultRejectedCap))
	case errors.Is(err, errReleased):
		// The draft was released (its charge voided) while this flow placed.
		return s.yield(ctx, r, nil)
	case errors.Is(err, errContended):
		// Lost races until the flow's deadline. Nothing of this attempt is
		// left written: give the charge back so the row's slot is free, and
		// let the client retry.
		if rerr := s.Store.Refund(ctx, k, r.ReservationID, r.Count); rerr != nil {
			s.logger().Warn("refund after contention", "reservation", r.ReservationID, "error", rerr.Error())
		}
		e := apierr.New(apierr.Unavailable, "placement stayed contended until the request's deadline; retry the request").
			With("dependency", "dynamodb")
		e.Cause = err
		return Reservation{}, e
	case err != nil:
		return Reservation{}, err
	}
	if err := s.fault(FaultAllocated); err != nil {
		return Reservation{}, err
	}
	placed, err := r.Place(p.Devices(pr.NodeSize), pr.NodeSize, s.now())
	if err != nil {
		return Reservation{}, err
	}
	cur, won, err := s.fenceWon(ctx, placed, api.Draft, FaultPlaced, p)
	if err != nil {
		return Reservation{}, err
	}
	if won {
		// The count now lives in the reservation: its charge record is
		// forgotten by this process's next charge on the row, or by the
		// reconciler (the row is due) — not by a write of its own here.
		s.settleLater(k, r.ReservationID)
	}
	return cur, answer(cur)
}

// charge is Store.Charge, settling what this process saw placed on the
// row. A row full of records in flight is cleaned up once (what it holds
// for reservations already placed is settled) before the charge answers
// UNAVAILABLE.
func (s *Service) charge(ctx context.Context, k QuotaKey, r Reservation, p Placement) (Charged, error) {
	for attempt := 0; ; attempt++ {
		settle := s.pendingSettles(k)
		ch, err := s.Store.Charge(ctx, k, r.ReservationID, r.Count, p, settle, s.now().Add(SettleAfter))
		switch {
		case err == nil:
			s.settled(k, settle)
			return ch, nil
		case errors.Is(err, ErrBusy) && attempt == 0:
			if _, cerr := s.settleRow(ctx, k); cerr != nil {
				return Charged{}, cerr
			}
		case errors.Is(err, ErrBusy):
			return Charged{}, apierr.New(apierr.Unavailable, "too many reservations of this quota are being admitted at once; retry")
		case apierr.As(err) != nil, errors.As(err, new(QuotaExceeded)):
			return Charged{}, err
		default:
			return Charged{}, unavailable(err)
		}
	}
}

// yield answers for a draft another writer ended while this flow admitted
// it (a release, seen as its charge voided or its plan refused): what the
// flow charged and wrote is undone, and the reservation answered as it is.
func (s *Service) yield(ctx context.Context, r Reservation, own Placement) (Reservation, error) {
	cur, err := s.lost(ctx, r, api.Draft, own, "create")
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
func (s *Service) admitInvalid(ctx context.Context, r Reservation, why error) (Reservation, error) {
	r.Invalid = "poolId"
	if errors.Is(why, errInvalidRes) {
		r.Invalid = "resource"
	}
	return s.reject(ctx, r, api.ReasonInvalid, FaultRejectedInvalid)
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
func (s *Service) record(ctx context.Context, r Reservation, pr PoolResource, p Placement) error {
	if len(p) <= InlinePlacement {
		return nil
	}
	switch err := s.Store.SetPlan(ctx, r, p, pr.NodeSize); {
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
func (s *Service) rejectQuota(ctx context.Context, r Reservation, q api.Quota) (Reservation, error) {
	cur, err := s.reject(ctx, r, api.ReasonQuota, FaultRejectedQuota)
	if e := apierr.As(err); e != nil && e.Code == apierr.QuotaExceeded {
		err = e.With("used", q.Used).With("max", q.Max)
	}
	return cur, err
}

// reject fences a draft rejected for reason; the fence gives back whatever
// its charge recorded.
func (s *Service) reject(ctx context.Context, r Reservation, reason, point string) (Reservation, error) {
	n, err := r.Reject(reason, s.now())
	if err != nil {
		return Reservation{}, err
	}
	cur, err := s.fence(ctx, n, api.Draft, point)
	if err != nil {
		return Reservation{}, err
	}
	return cur, answer(cur)
}
