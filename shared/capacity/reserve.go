package capacity

import (
	"context"
	"errors"
	"strings"
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

var (
	// errGone: the reservation a step acts for no longer exists (TTL, or
	// an index entry that outlived its item).
	errGone       = errors.New("capacity: reservation is gone")
	errNoFit      = errors.New("capacity: no devices fit the window")
	errContention = errors.New("capacity: placement lost too many races")
)

// CreateReservation runs SPEC §4.4: validate → draft → decide once on the
// draft → check the pool and resource → charge quota → place → placed.
// Nothing that depends on the pool happens before the decision, so a denied
// caller learns nothing about the tenant's pools. Every refusal after the
// draft leaves the reservation terminal and carries details.reservationId.
//
// Writes, in order (each followed by a fault point): the draft (conditional
// put: new id, which is also the clientToken check); on deny the fence
// `denied`; the charge (hold keyed by the id); the calendar alloc; the fence
// `placed`. A refusal fences first (`rejected`) and then credits/unplaces,
// so a twin flow of the same id that is still running finds the fence and
// cleans up after itself.
func (s *Service) CreateReservation(ctx context.Context, req CreateRequest, decide Decide) (Reservation, error) {
	now := s.now()
	if req.Count < 1 || req.Count > MaxCount {
		return Reservation{}, apierr.Invalid("constraint", "count", "count must be 1..%d", MaxCount)
	}
	start := now
	if req.Start != nil {
		start = req.Start.UTC()
	}
	window := Window{Start: start, End: req.End.UTC()}
	if req.Start != nil { // what does not depend on the time is refused before any read
		if err := windowShape(window); err != nil {
			return Reservation{}, err
		}
	}
	draft := Reservation{
		TenantID: req.TenantID, PoolID: req.PoolID, Resource: req.Resource, Count: req.Count,
		Window: window, State: Draft, DeviceIDs: []string{}, CreatedAt: now, UpdatedAt: now,
		Request:     Fingerprint(req.PoolID, req.Resource, req.Count, req.Start, req.End),
		ClientToken: req.ClientToken, Principal: req.Principal, Due: now.Add(StaleAfter),
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
	return s.admitDraft(ctx, draft)
}

// admitDraft checks an allowed draft's pool and resource, then charges and
// places it. A pool the tenant cannot see is NOT_FOUND and a resource the
// pool lacks INVALID_INPUT; either way the draft is rejected (invalid).
func (s *Service) admitDraft(ctx context.Context, r Reservation) (Reservation, error) {
	pool, cal, err := s.Store.Admission(ctx, r.TenantID, r.PoolID, r.Resource)
	switch {
	case errors.Is(err, ErrNotFound):
		r.Invalid = "poolId"
		return s.reject(ctx, r, ReasonInvalid, FaultRejectedInvalid)
	case err != nil:
		return Reservation{}, unavailable(err).With("reservationId", r.ReservationID)
	}
	if _, ok := pool.Resources[r.Resource]; !ok {
		r.Invalid = "resource"
		return s.reject(ctx, r, ReasonInvalid, FaultRejectedInvalid)
	}
	return s.admit(ctx, r, pool, cal)
}

// validateWindow applies SPEC §4.4/§9's window rules at now.
func validateWindow(startSent bool, w Window, now time.Time) error {
	switch {
	case startSent && w.Start.Before(now.Add(-MaxStartSkew)):
		return apierr.Invalid("constraint", "window.start", "window.start may be at most %v in the past", MaxStartSkew)
	case w.Start.After(now.Add(MaxLeadTime)):
		return apierr.Invalid("constraint", "window.start", "window.start may be at most 365 days ahead")
	}
	return windowShape(w)
}

// windowShape: end after start, at most 90 days.
func windowShape(w Window) error {
	switch {
	case !w.End.After(w.Start):
		return apierr.Invalid("constraint", "window.end", "window.end must be after window.start")
	case w.End.Sub(w.Start) > MaxWindow:
		return apierr.Invalid("constraint", "window.end", "a window lasts at most 90 days")
	}
	return nil
}

// attributes is the request as Better IAM sees it on the draft.
func attributes(r Reservation) map[string]any {
	a := map[string]any{
		"tenantId": r.TenantID, "reservationId": r.ReservationID, "poolId": r.PoolID,
		"resource": r.Resource, "count": r.Count,
		"window": map[string]any{"start": r.Window.Start.Format(time.RFC3339Nano), "end": r.Window.End.Format(time.RFC3339Nano)},
	}
	if r.ClientToken != "" {
		a["clientToken"] = r.ClientToken
	}
	return a
}

// replay answers a request whose id (clientToken) is already stored: the
// same request gets the first answer (a draft still in flight is driven on,
// idempotently, by this call too); another request is CONFLICT.
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
	if stored.Stale(s.now()) {
		return s.expire(ctx, stored)
	}
	return s.admitDraft(ctx, stored)
}

// answer is the API outcome of a stored reservation: its refusal, or nil.
func answer(r Reservation) error {
	var e *apierr.Error
	switch {
	case r.State == Denied:
		e = apierr.New(apierr.PermissionDenied, "the reservation was denied")
	case r.State == Rejected && r.Reason == ReasonQuota:
		e = apierr.New(apierr.QuotaExceeded, "the reservation does not fit the quota")
	case r.State == Rejected && r.Reason == ReasonInvalid && r.Invalid == "resource":
		e = apierr.Invalid("unknown_resource", "resource", "pool %q has no resource %q", r.PoolID, r.Resource)
	case r.State == Rejected && r.Reason == ReasonInvalid:
		e = apierr.New(apierr.NotFound, "pool %q not found", r.PoolID)
	case r.State == Rejected:
		e = apierr.New(apierr.CapacityExhausted, "no set of free devices fits the window")
	default:
		return nil
	}
	return e.With("reservationId", r.ReservationID)
}

// refused handles a decision that was not allow.
func (s *Service) refused(ctx context.Context, r Reservation, decision error) (Reservation, error) {
	e := apierr.As(decision)
	if e == nil || e.Code != apierr.PermissionDenied {
		if e == nil {
			e = apierr.Dependency("better-iam", decision)
		}
		return Reservation{}, e.With("reservationId", r.ReservationID)
	}
	d, err := r.Deny(s.now())
	if err != nil {
		return Reservation{}, err
	}
	// Fenced denied, or already moved on by a twin call: either way this
	// caller was denied and learns nothing more.
	if _, err := s.fence(ctx, d, Draft, FaultDenied); err != nil {
		return Reservation{}, err
	}
	return Reservation{}, e.With("reservationId", r.ReservationID)
}

// admit charges and places an allowed draft.
func (s *Service) admit(ctx context.Context, r Reservation, pool Pool, cal Calendar) (Reservation, error) {
	withID := func(err error) error {
		if e := apierr.As(err); e != nil {
			return e.With("reservationId", r.ReservationID)
		}
		return apierr.Dependency("dynamodb", err).With("reservationId", r.ReservationID)
	}
	err := s.Store.Charge(ctx, r.Quota(), r.ReservationID, r.Count)
	if errors.Is(err, ErrQuotaExceeded) {
		return s.reject(ctx, r, ReasonQuota, FaultRejectedQuota)
	}
	if err != nil {
		return Reservation{}, withID(err)
	}
	if err := s.fault(FaultCharged); err != nil {
		return Reservation{}, err
	}
	devices, err := s.place(ctx, r, pool.Resources[r.Resource], cal)
	switch {
	case errors.Is(err, errNoFit):
		return s.reject(ctx, r, ReasonCapacity, FaultRejectedCap)
	case errors.Is(err, errContention):
		// Not CAPACITY_EXHAUSTED: devices may well be free. The charged
		// draft stays as it is (a twin call of the same clientToken may
		// share its hold): a retry finishes it, or the reconciler expires
		// it and gives the charge back.
		return Reservation{}, apierr.New(apierr.Unavailable, "placement is contended; retry the request").With("reservationId", r.ReservationID)
	case err != nil:
		return Reservation{}, withID(err)
	}
	if err := s.fault(FaultAllocated); err != nil {
		return Reservation{}, err
	}
	p, err := r.Place(DeviceIDs(r.Resource, devices), s.now())
	if err != nil {
		return Reservation{}, err
	}
	cur, err := s.fence(ctx, p, Draft, FaultPlaced)
	if err != nil {
		return Reservation{}, withID(err)
	}
	return cur, answer(cur)
}

// reject fences a draft rejected for reason, then gives back what it holds.
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
// the stored one. Whenever the result is terminal its holds are given back
// (idempotent), so a flow that lost the fence cleans up after itself.
func (s *Service) fence(ctx context.Context, to Reservation, from State, point string) (Reservation, error) {
	cur, _, err := s.fenceWon(ctx, to, from, point)
	if errors.Is(err, errGone) {
		return Reservation{}, apierr.New(apierr.NotFound, "reservation %q not found", to.ReservationID)
	}
	return cur, err
}

// fenceWon is fence that also says whether this call made the transition.
func (s *Service) fenceWon(ctx context.Context, to Reservation, from State, point string) (Reservation, bool, error) {
	flow, _, _ := strings.Cut(point, ".")
	cur, won := to, true
	err := s.Store.Transition(ctx, to, from)
	if errors.Is(err, ErrStale) {
		won = false
		cur, err = s.Store.GetReservation(ctx, to.TenantID, to.ReservationID)
		if errors.Is(err, ErrNotFound) {
			return Reservation{}, false, errGone
		}
		if err != nil {
			return Reservation{}, false, unavailable(err)
		}
	} else if err != nil {
		return Reservation{}, false, unavailable(err)
	} else if ferr := s.fault(point); ferr != nil {
		return Reservation{}, true, ferr
	}
	if cur.State.Terminal() {
		if err := s.giveBack(ctx, cur, flow); err != nil {
			return Reservation{}, won, err
		}
	}
	return cur, won, nil
}

// giveBack credits the quota and frees the devices of a terminal
// reservation; both steps are idempotent conditional writes. flow names the
// fault points ("<flow>.credited", "<flow>.unplaced").
func (s *Service) giveBack(ctx context.Context, r Reservation, flow string) error {
	if err := s.Store.Credit(ctx, r.Quota(), r.ReservationID, r.Count); err != nil {
		return unavailable(err)
	}
	if err := s.fault(flow + ".credited"); err != nil {
		return err
	}
	if err := s.Store.Unplace(ctx, r.PoolID, r.Resource, r.ReservationID); err != nil {
		return unavailable(err)
	}
	return s.fault(flow + ".unplaced")
}

// expire fences a stale draft and gives back whatever it holds.
func (s *Service) expire(ctx context.Context, r Reservation) (Reservation, error) {
	n, err := r.Expire(s.now())
	if err != nil {
		return Reservation{}, err
	}
	return s.fence(ctx, n, Draft, FaultExpired)
}

// place allocates devices on the calendar: choose on the calendar read,
// write if its version is unchanged, else read again and retry with
// jittered backoff. It answers errNoFit only from a calendar it read, never
// because a race was lost.
func (s *Service) place(ctx context.Context, r Reservation, size int, cal Calendar) ([]int, error) {
	attempts := s.PlaceAttempts
	if attempts <= 0 {
		attempts = 64
	}
	for attempt := 1; ; attempt++ {
		if a, ok := cal.Allocs[r.ReservationID]; ok {
			return a.Devices, nil // a twin flow (or an earlier try) placed it
		}
		devices, ok := cal.Choose(size, r.Count, r.Window)
		if !ok {
			return nil, errNoFit
		}
		err := s.Store.Place(ctx, cal, r.ReservationID, Alloc{TenantID: r.TenantID, Devices: devices, Window: r.Window})
		if err == nil {
			return devices, nil
		}
		if !errors.Is(err, ErrStale) {
			return nil, err
		}
		s.placeRetries.Add(1)
		if attempt >= attempts {
			return nil, errContention
		}
		if err := s.pause(ctx, attempt); err != nil {
			return nil, err
		}
		if cal, err = s.Store.Calendar(ctx, r.PoolID, r.Resource); err != nil {
			return nil, err
		}
	}
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

// ReleaseReservation moves a non-terminal reservation to released (by the
// tenant) — the fence — then credits and unplaces before answering. A
// terminal reservation is returned unchanged (its leftovers, if a crash left
// any, are given back first).
func (s *Service) ReleaseReservation(ctx context.Context, tenant, id string) (Reservation, error) {
	for attempt := 0; attempt < 8; attempt++ {
		r, err := s.GetReservation(ctx, tenant, id)
		if err != nil {
			return Reservation{}, err
		}
		if r.State.Terminal() {
			if !r.Due.IsZero() { // not swept yet: make sure nothing is held
				if err := s.giveBack(ctx, r, "release"); err != nil {
					return Reservation{}, err
				}
			}
			return r, nil
		}
		n, err := r.Release(ReleasedByTenant, s.now())
		if err != nil {
			return Reservation{}, err
		}
		cur, err := s.fence(ctx, n, r.State, FaultFenced)
		if err != nil {
			return Reservation{}, err
		}
		if cur.State.Terminal() {
			return cur, nil
		}
		// The state moved under us (draft → placed, placed → binding, …): again.
	}
	return Reservation{}, apierr.New(apierr.Unavailable, "reservation %q is changing; retry", id)
}
