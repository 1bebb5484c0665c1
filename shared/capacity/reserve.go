package capacity

import (
	"context"
	"errors"
	"time"

	"github.com/oklog/ulid/v2"

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
	// before StaleAfter, when the reconciler may expire the draft.
	TakeOverUntil = 90 * time.Second
	// InlinePlacement: a placement of at most this many nodes is recorded
	// with the charge on the quota row; a larger one on the draft first.
	InlinePlacement = 8
)

var (
	// errGone: the reservation a step acts for no longer exists (TTL, or
	// an index entry that outlived its item).
	errGone        = errors.New("capacity: reservation is gone")
	errInvalidPool = errors.New("capacity: pool not visible")
	errInvalidRes  = errors.New("capacity: resource not in the pool")
)

// CreateReservation runs SPEC §4.4: validate → draft → decide once on the
// draft → choose devices → charge quota (recording the choice) → write the
// choice into the node-days → placed → settle the charge. Nothing that
// depends on the pool happens before the decision, so a denied caller
// learns nothing about the tenant's pools. Every refusal after the draft
// leaves the reservation terminal and carries details.reservationId.
//
// One flow at a time drives a draft: the one that wrote it, until its
// lease (FlowDeadline), or a replay of the same request that takes the
// lease over after TakeOverAfter. A replay during a live lease answers
// UNAVAILABLE (retry): two flows charging one reservation could charge it
// twice once the first has settled.
//
// Happy path, for a count that fits a node and a window within one UTC day:
// 6 DynamoDB round trips, 5 one after another — the draft and, at the same
// time, the candidates query (read ahead; dropped unread when the request
// is refused or replayed, so the decision still comes before anything the
// caller could learn about the pool), the charge, the node-day write, the
// fence and the settle.
func (s *Service) CreateReservation(ctx context.Context, req CreateRequest, decide Decide) (Reservation, error) {
	now := s.now()
	if req.Count < 1 || req.Count > MaxCount {
		return Reservation{}, apierr.Invalid("constraint", "count", "count must be 1..%d", MaxCount)
	}
	switch req.Topology {
	case "":
		req.Topology = OnNodes
	case OnNodes, AnyDevices:
	default:
		return Reservation{}, apierr.Invalid("constraint", "topology", "topology must be %q or %q", OnNodes, AnyDevices)
	}
	start := now
	if req.Start != nil {
		start = req.Start.UTC()
	}
	// Windows have millisecond precision, as node-day entries store them:
	// a window is exactly what its devices are held for.
	window := Window{Start: start.Truncate(time.Millisecond), End: req.End.UTC().Truncate(time.Millisecond)}
	if req.Start != nil { // what does not depend on the time is refused before any read
		if err := windowShape(window); err != nil {
			return Reservation{}, err
		}
	}
	draft := Reservation{
		TenantID: req.TenantID, PoolID: req.PoolID, Resource: req.Resource, Count: req.Count,
		Window: window, Topology: req.Topology, State: Draft, DeviceIDs: []string{}, NodeIDs: []string{},
		CreatedAt: now, UpdatedAt: now, History: []Event{{State: Draft, At: now}},
		Request:     Fingerprint(req.PoolID, req.Resource, req.Count, req.Topology, req.Start, req.End),
		ClientToken: req.ClientToken, Principal: req.Principal, Due: now.Add(StaleAfter), Lease: now.Add(TakeOverAfter),
	}
	if req.ClientToken != "" {
		draft.ReservationID = TokenID(req.TenantID, req.Principal, req.ClientToken)
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

// readAhead starts the fast path's candidate read for a new draft.
func (s *Service) readAhead(ctx context.Context, r Reservation) *ahead {
	a := &ahead{done: make(chan struct{}), req: requestOf(r)}
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
	return Request{ID: r.ReservationID, Count: r.Count, Topology: r.Topology, Window: r.Window}
}

// validateWindow applies SPEC §4.4/§9's window rules at now.
func validateWindow(startSent bool, w Window, now time.Time) error {
	switch {
	case startSent && w.Start.Before(now.Add(-MaxStartSkew)):
		return apierr.Invalid("constraint", "window.start", "window.start may be at most %v in the past", MaxStartSkew).
			With("rule", "start_in_past")
	case w.Start.After(now.Add(MaxLeadTime)):
		return apierr.Invalid("constraint", "window.start", "window.start may be at most 365 days ahead").
			With("rule", "start_too_far_ahead")
	case !startSent && !w.End.After(w.Start):
		return apierr.Invalid("constraint", "window.end", "window.end is in the past (window.start defaults to now)").
			With("rule", "end_in_past")
	}
	return windowShape(w)
}

// windowShape: end after start, at most 90 days.
func windowShape(w Window) error {
	switch {
	case !w.End.After(w.Start):
		return apierr.Invalid("constraint", "window.end", "window.end must be after window.start").With("rule", "end_before_start")
	case w.End.Sub(w.Start) > MaxWindow:
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
		if stored.State == Denied {
			return Reservation{}, answer(stored)
		}
		return Reservation{}, err
	}
	if stored.State != Draft {
		return stored, answer(stored)
	}
	now := s.now()
	switch {
	case stored.Stale(now):
		n, err := stored.Expire(now)
		if err != nil {
			return Reservation{}, err
		}
		return s.fence(ctx, n, Draft, FaultExpired)
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
	case r.State == Denied:
		e = apierr.New(apierr.PermissionDenied, "the reservation was denied")
	case r.State == Rejected && r.Reason == ReasonQuota:
		e = apierr.New(apierr.QuotaExceeded, "the reservation does not fit the quota").With("requested", r.Count)
	case r.State == Rejected && r.Reason == ReasonInvalid && r.Invalid == "resource":
		e = errNoResource(r.PoolID, r.Resource)
	case r.State == Rejected && r.Reason == ReasonInvalid:
		e = errPoolNotFound(r.PoolID)
	case r.State == Rejected:
		e = apierr.New(apierr.CapacityExhausted, "%s", noFitMessage(r.Reason)).With("reason", r.Reason)
	default:
		return nil
	}
	return e.With("reservationId", r.ReservationID)
}

func noFitMessage(reason string) string {
	if reason == ReasonTopology {
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
	if _, err := s.fence(ctx, d, Draft, FaultDenied); err != nil {
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

// admit chooses, charges, places and fences an allowed draft.
func (s *Service) admit(ctx context.Context, r Reservation) (Reservation, error) {
	k := r.Quota()
	req := requestOf(r)
	pr, p, state, err := s.choose(ctx, r, req)
	switch {
	case errors.Is(err, errInvalidPool), errors.Is(err, errInvalidRes):
		return s.admitInvalid(ctx, r, err)
	case isNoFit(err):
		// Quota is checked before capacity (SPEC §9): a request that fits
		// neither is QUOTA_EXCEEDED.
		q, qerr := s.Store.GetQuota(ctx, k)
		if qerr != nil {
			return Reservation{}, unavailable(qerr)
		}
		if q.Used+int64(r.Count) > q.Max {
			return s.rejectQuota(ctx, r, q)
		}
		return s.reject(ctx, r, err.(NoFit).Reason, FaultRejectedCap)
	case err != nil:
		return Reservation{}, err
	}
	carried := false
	if r.State == Draft && len(r.Devices) > 0 {
		// An earlier flow recorded a large placement on the draft and may
		// have written part of it: carry that one on (it is what a repair
		// would undo).
		p, state, carried = r.Placement(), nil, true
	} else if err := s.record(ctx, r, pr, p); err != nil {
		return Reservation{}, err
	}
	ch, err := s.Store.Charge(ctx, k, r.ReservationID, r.Count, inline(p))
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
		return s.rejectQuota(ctx, r, qe.Quota)
	case errors.Is(err, ErrBusy):
		return Reservation{}, apierr.New(apierr.Unavailable, "too many reservations of this quota are being admitted at once; retry")
	case err != nil:
		return Reservation{}, unavailable(err)
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
		return s.reject(ctx, r, err.(NoFit).Reason, FaultRejectedCap)
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
	cur, err := s.fence(ctx, placed, Draft, FaultPlaced)
	if err != nil {
		return Reservation{}, err
	}
	if cur.State == Placed && cur.ReservationID == placed.ReservationID {
		// The count now lives in the reservation: forget the charge record.
		// A failure is only logged: a lingering record is consumed by the
		// credit, and the reconciler settles it when the window starts.
		if err := s.Store.Settle(ctx, k, r.ReservationID); err != nil {
			s.logger().Warn("settle charge", "reservation", r.ReservationID, "error", err.Error())
		}
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
	return s.reject(ctx, r, ReasonInvalid, FaultRejectedInvalid)
}

// inline is the part of a placement recorded on the quota row.
func inline(p Placement) Placement {
	if len(p) > InlinePlacement {
		return nil
	}
	return p
}

// record makes a placement too large for the quota row's record durable on
// the draft, before anything is charged or written for it.
func (s *Service) record(ctx context.Context, r Reservation, pr PoolResource, p Placement) error {
	if len(p) <= InlinePlacement {
		return nil
	}
	r.Devices, r.NodeSize = p.Devices(pr.NodeSize), pr.NodeSize
	if err := s.Store.Transition(ctx, r, Draft); err != nil {
		return unavailable(err)
	}
	return nil
}

func isNoFit(err error) bool {
	var nf NoFit
	return errors.As(err, &nf)
}

// rejectQuota refuses a draft over quota, with the numbers (SPEC §2).
func (s *Service) rejectQuota(ctx context.Context, r Reservation, q Quota) (Reservation, error) {
	cur, err := s.reject(ctx, r, ReasonQuota, FaultRejectedQuota)
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
	cur, err := s.fence(ctx, n, Draft, point)
	if err != nil {
		return Reservation{}, err
	}
	return cur, answer(cur)
}

// fence writes to if the stored state is still from. It returns the
// reservation as it now is: to, or — when another writer moved it first —
// the stored one. The writer whose fence moved a reservation to a terminal
// state gives back what it holds; a create flow that finds its draft
// already terminal gives back what it wrote itself.
func (s *Service) fence(ctx context.Context, to Reservation, from State, point string) (Reservation, error) {
	cur, _, err := s.fenceWon(ctx, to, from, point)
	if errors.Is(err, errGone) {
		return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", to.ReservationID)
	}
	return cur, err
}

// fenceWon is fence that also says whether this call made the transition.
func (s *Service) fenceWon(ctx context.Context, to Reservation, from State, point string) (Reservation, bool, error) {
	flow := flowOf(point)
	err := s.Store.Transition(ctx, to, from)
	if errors.Is(err, ErrStale) {
		cur, gerr := s.Store.GetReservation(ctx, to.TenantID, to.ReservationID)
		if errors.Is(gerr, ErrNotFound) {
			return Reservation{}, false, errGone
		}
		if gerr != nil {
			return Reservation{}, false, unavailable(gerr)
		}
		if from == Draft && cur.State.Terminal() && !cur.WasPlaced() {
			// A create (or replay) that lost its fence to a release, a
			// refusal or an expiry: what it charged and wrote is its own to
			// give back (idempotent; the sweep does it if this crashes).
			if err := s.refund(ctx, cur, flow); err != nil {
				return Reservation{}, false, err
			}
		}
		return cur, false, nil
	}
	if err != nil {
		return Reservation{}, false, unavailable(err)
	}
	if ferr := s.fault(point); ferr != nil {
		return Reservation{}, true, ferr
	}
	if to.State.Terminal() {
		if err := s.giveBack(ctx, to, flow); err != nil {
			return Reservation{}, true, err
		}
	}
	return to, true, nil
}

// giveBack returns what a terminal reservation holds. Only the writer that
// fenced it terminal calls it — or, after StaleAfter, the one sweep that
// holds its due entry — so a placed reservation is credited exactly once:
// a credit record on the quota row covers retries of the credit write, and
// the reservation is marked credited before that record is forgotten.
func (s *Service) giveBack(ctx context.Context, r Reservation, flow string) error {
	if !r.WasPlaced() {
		return s.refund(ctx, r, flow)
	}
	if err := s.free(ctx, r, r.Placement()); err != nil {
		return err
	}
	if err := s.fault(flow + ".unplaced"); err != nil {
		return err
	}
	if !r.Credited {
		if err := s.Store.Credit(ctx, r.Quota(), r.ReservationID, r.Count); err != nil {
			return unavailable(err)
		}
		if err := s.fault(flow + ".credited"); err != nil {
			return err
		}
		if err := s.Store.MarkCredited(ctx, r); err != nil && !errors.Is(err, ErrStale) {
			return unavailable(err)
		}
	}
	if err := s.Store.CreditDone(ctx, r.Quota(), r.ReservationID); err != nil {
		return unavailable(err)
	}
	return nil
}

// refund undoes what a draft that never got placed may hold: the devices of
// the placement its charge recorded, then the charge (used −= count and the
// record go in one conditional write, so it happens once whoever calls it).
func (s *Service) refund(ctx context.Context, r Reservation, flow string) error {
	k := r.Quota()
	ch, ok, err := s.Store.Pending(ctx, k, r.ReservationID)
	if err != nil {
		return unavailable(err)
	}
	if !ok {
		return nil
	}
	p := ch.Placement
	if len(p) == 0 && len(r.Devices) > 0 {
		p = r.Placement() // a large placement was recorded on the draft
	}
	if err := s.free(ctx, r, p); err != nil {
		return err
	}
	if err := s.fault(flow + ".unplaced"); err != nil {
		return err
	}
	if err := s.Store.Refund(ctx, k, r.ReservationID, ch.Count); err != nil {
		return unavailable(err)
	}
	return s.fault(flow + ".credited")
}

// free removes r's entries of placement p from every node-day of its window.
func (s *Service) free(ctx context.Context, r Reservation, p Placement) error {
	if len(p) == 0 {
		return nil
	}
	pr := PoolResource{PoolID: r.PoolID, Topology: Topology{Resource: r.Resource, NodeSize: r.Layout().NodeSize}}
	var keys []NodeDayKey
	for _, nd := range p {
		for _, d := range r.Window.Days() {
			keys = append(keys, NodeDayKey{Node: nd.Node, Day: d})
		}
	}
	return s.each(ctx, len(keys), func(i int) error {
		if err := s.Store.Free(ctx, pr, keys[i], r.ReservationID); err != nil {
			return unavailable(err)
		}
		return nil
	})
}

// GetReservation returns one of tenant's reservations.
func (s *Service) GetReservation(ctx context.Context, tenant, id string) (Reservation, error) {
	r, err := s.Store.GetReservation(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", id)
	}
	if err != nil {
		return Reservation{}, unavailable(err)
	}
	return r, nil
}

// ListReservations lists tenant's reservations, newest first.
func (s *Service) ListReservations(ctx context.Context, tenant string, f ListFilter, page Page) ([]Reservation, map[string]string, error) {
	rs, next, err := s.Store.ListReservations(ctx, tenant, f, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	return rs, next, nil
}

// ReleaseTimeout bounds a release's writes (its fence makes it the one that
// gives back; the sweep after StaleAfter finishes what it could not).
const ReleaseTimeout = 20 * time.Second

// ReleaseReservation moves a non-terminal reservation to released (by the
// tenant) — the fence — then frees its devices and credits its quota
// before answering. A terminal reservation is returned unchanged. Releasing
// a draft whose create is still in flight leaves the give-back to that
// create (it finds the fence) or to the sweep.
func (s *Service) ReleaseReservation(ctx context.Context, tenant, id string) (Reservation, error) {
	ctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
	defer cancel()
	for attempt := 0; attempt < 8; attempt++ {
		r, err := s.GetReservation(ctx, tenant, id)
		if err != nil {
			return Reservation{}, err
		}
		if r.State.Terminal() {
			return r, nil
		}
		n, err := r.Release(ReleasedByTenant, s.now())
		if err != nil {
			return Reservation{}, err
		}
		if r.State == Draft {
			// Not given back here: a create may still be writing for it.
			cur, err := s.releaseDraft(ctx, n)
			if err != nil || cur.State.Terminal() {
				return cur, err
			}
			continue
		}
		cur, err := s.fence(ctx, n, r.State, FaultFenced)
		if err != nil {
			return Reservation{}, err
		}
		if cur.State.Terminal() {
			return cur, nil
		}
		// The state moved under us (placed → binding, …): again.
	}
	return Reservation{}, apierr.New(apierr.Unavailable, "reservation %q is changing; retry", id)
}

// releaseDraft fences a draft released without giving anything back.
func (s *Service) releaseDraft(ctx context.Context, n Reservation) (Reservation, error) {
	err := s.Store.Transition(ctx, n, Draft)
	if errors.Is(err, ErrStale) {
		return s.GetReservation(ctx, n.TenantID, n.ReservationID)
	}
	if err != nil {
		return Reservation{}, unavailable(err)
	}
	return n, s.fault(FaultFenced)
}

// Placement attempts: how many node-day writes a create may lose to racing
// creates before it answers UNAVAILABLE (never CAPACITY_EXHAUSTED: devices
// may well be free).
const defaultPlaceAttempts = 16

// candidateLimit is how many node-days the fast path reads: the fullest
// ones that may fit, so racing creates have ties to spread over, and few
// enough that the read stays within one or two read units.
const candidateLimit = 16

// choose reads candidates and chooses a placement. The fast path reads the
// fullest stored node-days of the window's first day that may fit (one
// Query) and, for a longer window, the same nodes' other days (one
// BatchGetItem; a day not stored is empty). When that finds nothing, the
// pool is checked (visible to the tenant, the resource in it) and every
// stored node-day of the window is read, nodes never stored counting as
// empty: an exact answer, whose cost grows with the pool — only on the way
// to a refusal, to a fit the fast path cannot see (a device free in a gap
// between others' reservations of the same day), or to the first
// placement on a day that is neither provisioned nor used yet.
func (s *Service) choose(ctx context.Context, r Reservation, req Request) (PoolResource, Placement, nodeDays, error) {
	var pr PoolResource
	var cands []Candidate
	var err error
	if a, ok := ctx.Value(aheadKey{}).(*ahead); ok && req.Attempt == 0 && a.req.ID == req.ID {
		<-a.done
		pr, cands, err, req = a.pr, a.cands, a.err, a.req
	} else {
		pr, cands, err = s.fastCandidates(ctx, r, &req)
	}
	if err != nil {
		return pr, nil, nil, err
	}
	if len(cands) > 0 {
		if p, err := Choose(pr.Topology, req, cands); err == nil {
			return pr, p, stateOf(cands), nil
		}
	}
	pool, err := s.visiblePool(ctx, r)
	if err != nil {
		return pr, nil, nil, err
	}
	pr = PoolResource{PoolID: r.PoolID, Topology: pool.Topology(r.Resource)}
	s.learn(pr)
	all, err := s.allCandidates(ctx, pr, req)
	if err != nil {
		return pr, nil, nil, err
	}
	p, err := Choose(pr.Topology, req, all)
	return pr, p, nil, err
}

// nodeDays is node-days as read (or, missing, made up empty), by (node, day).
type nodeDays map[NodeDayKey]NodeDay

func stateOf(cands []Candidate) nodeDays {
	out := make(nodeDays, len(cands))
	for _, c := range cands {
		for _, nd := range c.Days {
			out[NodeDayKey{Node: nd.Node, Day: nd.Day}] = nd
		}
	}
	return out
}

// fastCandidates is choose's fast path: the candidates it read (none when
// it could not tell). It may set req.Spread (see spreadNow).
func (s *Service) fastCandidates(ctx context.Context, r Reservation, req *Request) (PoolResource, []Candidate, error) {
	pr := PoolResource{PoolID: r.PoolID, Topology: Topology{Resource: r.Resource}}
	days := r.Window.Days()
	minUntouched, from := req.Count, uint32(0)
	if req.Topology == AnyDevices {
		minUntouched = 1
	}
	known, haveTopology := s.known(pr)
	if haveTopology && req.Topology == OnNodes && req.Count > known.NodeSize {
		pr.Topology = known
		first, err := s.wholeNodes(ctx, pr, req, days[0])
		if err != nil {
			return pr, nil, err
		}
		cands, err := s.withDays(ctx, pr, first, days)
		return pr, cands, err
	}
	switch {
	case haveTopology && req.Topology == OnNodes && req.Count >= known.NodeSize:
		// Whole nodes: start the read at a point of the whole nodes' order
		// that depends on the reservation, so racing creates read (and
		// take) different ones.
		minUntouched, from = known.NodeSize, spreadFrom(req)
	case haveTopology && req.Topology == OnNodes && (req.Attempt > 0 || s.spreadNow(req.ID)):
		// Lost a race, or racing creates are likely: read from a point of
		// the order that depends on the reservation and take any node that
		// fits; a fresh whole node when racing is likely (the fullest
		// partial ones are where racers collide).
		req.Spread, from = true, spreadFrom(req)
		if req.Attempt == 0 {
			minUntouched = known.NodeSize
		}
	}
	first, _, err := s.Store.Candidates(ctx, pr, days[0], min(minUntouched, MaxNodeSize), candidateLimit, from)
	if err != nil {
		return pr, nil, unavailable(err)
	}
	if len(first) == 0 && from > 0 {
		// Nothing from there on: read from the start.
		if first, _, err = s.Store.Candidates(ctx, pr, days[0], min(req.Count, MaxNodeSize), candidateLimit, 0); err != nil {
			return pr, nil, unavailable(err)
		}
	}
	if len(first) == 0 && !haveTopology && req.Topology == OnNodes && req.Count > 1 {
		// The layout is not known yet and no node has count untouched
		// devices: several whole nodes may still do; any node-day tells.
		if first, _, err = s.Store.Candidates(ctx, pr, days[0], 1, 1, 0); err != nil {
			return pr, nil, unavailable(err)
		}
	}
	if len(first) == 0 {
		return pr, nil, nil
	}
	pr = first[0].Topology()
	s.learn(pr)
	if req.Topology == OnNodes && req.Count > pr.NodeSize {
		if first, err = s.wholeNodes(ctx, pr, req, days[0]); err != nil {
			return pr, nil, err
		}
	}
	cands, err := s.withDays(ctx, pr, first, days)
	return pr, cands, err
}

// wholeNodes reads as many untouched node-days of day as a request of
// several whole nodes needs (and candidateLimit more), from the request's
// spread point, then from the start when that found too few.
func (s *Service) wholeNodes(ctx context.Context, pr PoolResource, req *Request, day Day) ([]NodeDay, error) {
	want := pr.NodesFor(req.Count)
	first, _, err := s.Store.Candidates(ctx, pr, day, pr.NodeSize, want+candidateLimit, spreadFrom(req))
	if err == nil && len(first) < want {
		first, _, err = s.Store.Candidates(ctx, pr, day, pr.NodeSize, want+candidateLimit, 0)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return first, nil
}

// spreadFrom is where a request's candidate read starts in the order of
// equally untouched node-days: a hash of the reservation and the attempt.
func spreadFrom(req *Request) uint32 {
	return tiebreak(req.ID, req.Attempt, -1) >> 12
}

// withDays joins the other days of a window to first-day node-days (a day
// not stored is empty).
func (s *Service) withDays(ctx context.Context, pr PoolResource, first []NodeDay, days []Day) ([]Candidate, error) {
	cands := make([]Candidate, len(first))
	var keys []NodeDayKey
	for i, nd := range first {
		cands[i] = Candidate{Node: nd.Node, Days: []NodeDay{nd}}
		for _, d := range days[1:] {
			keys = append(keys, NodeDayKey{Node: nd.Node, Day: d})
		}
	}
	if len(keys) == 0 {
		return cands, nil
	}
	got, err := s.nodeDays(ctx, pr, keys)
	if err != nil {
		return nil, err
	}
	for i := range cands {
		for _, d := range days[1:] {
			cands[i].Days = append(cands[i].Days, got[NodeDayKey{Node: cands[i].Node, Day: d}])
		}
	}
	return cands, nil
}

// allCandidates reads every stored node-day of the window, one day at a
// time, keeping only each node's summary (memory grows with the nodes, not
// with the window); nodes never stored are empty.
func (s *Service) allCandidates(ctx context.Context, pr PoolResource, req Request) ([]Candidate, error) {
	sums := make([]Summary, pr.Nodes())
	for k := range sums {
		sums[k] = NewSummary(pr.Size(k))
	}
	for _, d := range req.Window.Days() {
		err := s.Store.Day(ctx, pr, d, func(nd NodeDay) error {
			if nd.Node < len(sums) {
				sums[nd.Node].Add(nd, req)
			}
			return nil
		})
		if err != nil {
			return nil, unavailable(err)
		}
	}
	out := make([]Candidate, len(sums))
	for k := range sums {
		out[k] = Candidate{Node: k, Summary: &sums[k]}
	}
	return out, nil
}

// visiblePool reads the pool as the draft's tenant sees it: errInvalidPool
// if it cannot, errInvalidRes if the resource is not in it.
func (s *Service) visiblePool(ctx context.Context, r Reservation) (Pool, error) {
	p, err := s.Store.VisiblePool(ctx, r.TenantID, r.PoolID)
	switch {
	case errors.Is(err, ErrNotFound):
		return Pool{}, errInvalidPool
	case err != nil:
		return Pool{}, unavailable(err)
	}
	if _, ok := p.Resources[r.Resource]; !ok {
		return Pool{}, errInvalidRes
	}
	return p, nil
}

// visible is visiblePool's verdict alone.
func (s *Service) visible(ctx context.Context, r Reservation) error {
	_, err := s.visiblePool(ctx, r)
	return err
}

// allocate writes placement p into its node-days. A write lost to a racing
// create (the versions of its devices moved) undoes this attempt's other
// writes, reads again, chooses again and records the new choice on the
// charge before writing it: what is written is always covered by the
// charge's record, which is what a repair undoes. A placement carried over
// from an earlier flow (which may have written part of it, its success
// hidden by an error) that no longer fits is freed before it is replaced.
func (s *Service) allocate(ctx context.Context, r Reservation, req Request, pr PoolResource, p Placement, state nodeDays, carried bool) (Placement, error) {
	attempts := s.PlaceAttempts
	if attempts <= 0 {
		attempts = defaultPlaceAttempts
	}
	days := r.Window.Days()
	for attempt := 1; ; attempt++ {
		if !covers(state, p, days) {
			var err error
			if state, err = s.placementDays(ctx, pr, p, days); err != nil {
				return nil, err
			}
		}
		if !fits(state, p, req, days) {
			// Taken since it was chosen (by a racing create, or while an
			// earlier flow of this reservation was down): choose again.
			s.contended(true)
			if carried {
				if err := s.free(ctx, r, p); err != nil {
					return nil, err
				}
				carried = false
			}
			req.Attempt++
			var err error
			if p, state, err = s.rechoose(ctx, r, req, pr); err != nil {
				return nil, err
			}
			continue
		}
		lost, err := s.write(ctx, state, p, req, days)
		if err != nil {
			return nil, err
		}
		s.contended(lost)
		if !lost {
			return p, nil
		}
		s.placeRetries.Add(1)
		if attempt >= attempts {
			return nil, apierr.New(apierr.Unavailable, "placement is contended; retry the request")
		}
		if err := s.pause(ctx, attempt); err != nil {
			return nil, err
		}
		req.Attempt++
		if p, state, err = s.rechoose(ctx, r, req, pr); err != nil {
			return nil, err
		}
	}
}

// covers reports whether state holds every node-day p writes.
func covers(state nodeDays, p Placement, days []Day) bool {
	for _, nd := range p {
		for _, d := range days {
			if _, ok := state[NodeDayKey{Node: nd.Node, Day: d}]; !ok {
				return false
			}
		}
	}
	return true
}

// placementDays reads the node-days a placement writes.
func (s *Service) placementDays(ctx context.Context, pr PoolResource, p Placement, days []Day) (nodeDays, error) {
	keys := make([]NodeDayKey, 0, len(p)*len(days))
	for _, nd := range p {
		for _, d := range days {
			keys = append(keys, NodeDayKey{Node: nd.Node, Day: d})
		}
	}
	return s.nodeDays(ctx, pr, keys)
}

// nodeDays reads node-days by key; a missing one is made up empty (pr must
// carry the resource's layout).
func (s *Service) nodeDays(ctx context.Context, pr PoolResource, keys []NodeDayKey) (nodeDays, error) {
	got, err := s.Store.NodeDays(ctx, pr, keys)
	if err != nil {
		return nil, unavailable(err)
	}
	for _, k := range keys {
		if _, ok := got[k]; !ok {
			got[k] = EmptyNodeDay(pr, k)
		}
	}
	return got, nil
}

// fits reports whether p's devices are free for the window in state.
func fits(state nodeDays, p Placement, req Request, days []Day) bool {
	for _, nd := range p {
		for _, d := range days {
			cur, ok := state[NodeDayKey{Node: nd.Node, Day: d}]
			if !ok || nd.Mask&^cur.Free(req.Window, req.ID) != 0 {
				return false
			}
		}
	}
	return true
}

// write adds the entries of p; lost reports a write refused because the
// state moved (after undoing this attempt's successful writes).
func (s *Service) write(ctx context.Context, state nodeDays, p Placement, req Request, days []Day) (lost bool, err error) {
	type job struct {
		nd   NodeDay
		mask Mask
	}
	var jobs []job
	for _, nd := range p {
		for _, d := range days {
			jobs = append(jobs, job{state[NodeDayKey{Node: nd.Node, Day: d}], nd.Mask})
		}
	}
	done := make([]bool, len(jobs))
	errs := make([]error, len(jobs))
	_ = s.each(ctx, len(jobs), func(i int) error {
		errs[i] = s.Store.Allocate(ctx, jobs[i].nd, req.ID, Entry{Mask: jobs[i].mask, Window: req.Window})
		done[i] = errs[i] == nil
		return nil
	})
	var failed error
	for _, e := range errs {
		switch {
		case e == nil:
		case errors.Is(e, ErrStale), errors.Is(e, ErrCalendarFull):
			lost = true
		default:
			failed = e
		}
	}
	if !lost && failed == nil {
		return false, nil
	}
	// Undo what this attempt wrote; if that fails, the charge's record
	// still covers it, and a repair frees it.
	undo := s.each(ctx, len(jobs), func(i int) error {
		if !done[i] {
			return nil
		}
		return s.Store.Free(ctx, jobs[i].nd.Topology(), NodeDayKey{Node: jobs[i].nd.Node, Day: jobs[i].nd.Day}, req.ID)
	})
	if failed != nil || undo != nil {
		return false, unavailable(errors.Join(failed, undo))
	}
	return true, nil
}

// rechoose reads the candidates again, chooses again and records the new
// placement on the charge (before anything of it is written).
func (s *Service) rechoose(ctx context.Context, r Reservation, req Request, pr PoolResource) (Placement, nodeDays, error) {
	_, p, state, err := s.choose(ctx, r, req)
	if err != nil {
		return nil, nil, err
	}
	// A large placement goes on the draft first; the charge's record then
	// names the new placement, or none (a repair reads the draft's devices),
	// never the one this attempt gave up.
	if err := s.record(ctx, r, pr, p); err != nil {
		return nil, nil, err
	}
	if err := s.Store.Replace(ctx, r.Quota(), r.ReservationID, inline(p)); err != nil {
		return nil, nil, unavailable(err)
	}
	return p, state, nil
}
