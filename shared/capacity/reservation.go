package capacity

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Reservation is a tenant's claim on devices of one pool for a window: the
// API's view, and what the API does not show.
type Reservation struct {
	api.Reservation
	// Devices are the indexes n of "<resource>-<n>" it holds (set when it is
	// placed, never before) and NodeSize the resource's node size: what
	// DeviceIDs and NodeIDs are made from.
	Devices  []int `json:"-"`
	NodeSize int   `json:"-"`
	// Plan is, on a draft, the placement its create is about to charge and
	// write when it spans more nodes than the charge's record holds: what
	// a repair frees. Never shown: the draft holds none of it.
	Plan []int `json:"-"`
	// Credited: the quota a placed reservation held was given back (set
	// after the credit, so a sweep never credits twice).
	Credited bool `json:"-"`

	// Binding through managed nodes (docs/fleet.md): Bound are the nodes
	// told to bind it (recorded before they are told, so its end tells
	// them to unbind); Move the devices it is being moved onto, MovedFrom
	// those it was moved off and not yet freed (a move in flight, what a
	// give-back frees too); Moves how often it moved; NodeNoted that its
	// history says a node failed it since. Amended counts the writes of
	// those fields (Amend): each is conditioned on the count it read, so a
	// writer holding an old copy never overwrites the nodes another one
	// told to bind it.
	Bound     []int `json:"-"`
	Move      []int `json:"-"`
	MovedFrom []int `json:"-"`
	Moves     int   `json:"-"`
	NodeNoted bool  `json:"-"`
	Amended   int64 `json:"-"`
	// Unscrubbed are, on a terminal reservation, the nodes whose scrub of
	// it is not written yet (the node held its maximum of pending
	// entries): its devices there stay its own until it is, and it stays
	// due (docs/fleet.md, Binding).
	Unscrubbed []int `json:"-"`

	// Request is the fingerprint of the request as sent (clientToken
	// replays compare it); ClientToken the token, if any; Principal who
	// created it (tokens are scoped to it).
	Request     string `json:"-"`
	ClientToken string `json:"-"`
	Principal   string `json:"-"`
	// Invalid names the request field an allowed draft was refused on
	// ("poolId": NOT_FOUND, "resource": INVALID_INPUT), so a replay gets the
	// same answer.
	Invalid string `json:"-"`
	// Lease is until when the flow that owns the draft may write for it;
	// a replay takes a draft over only after it (see CreateReservation).
	Lease time.Time `json:"-"`
	// Due is when the reconciler must look at it next (zero: never). It is
	// what the sparse due index is keyed by.
	Due time.Time `json:"-"`
}

// Quota names the row the reservation charges.
func (r Reservation) Quota() QuotaKey { return QuotaKey{r.TenantID, r.PoolID, r.Resource} }

// Layout is the reservation's resource topology as far as it knows it.
func (r Reservation) Layout() Topology {
	return Topology{Resource: r.Resource, NodeSize: max(r.NodeSize, 1), Devices: api.MaxDevicesPerResource}
}

// Placement is where its devices are (empty until placed).
func (r Reservation) Placement() Placement { return PlacementOf(r.Layout(), r.Devices) }

// PlanPlacement is the placement its draft records (see Plan).
func (r Reservation) PlanPlacement() Placement { return PlacementOf(r.Layout(), r.Plan) }

// WasPlaced reports whether it ever held its devices (and so its quota was
// charged for good, not only by a create in flight).
func (r Reservation) WasPlaced() bool {
	for _, e := range r.History {
		if e.State == api.Placed {
			return true
		}
	}
	return false
}

// WithIDs renders DeviceIDs and NodeIDs from Devices and NodeSize.
func (r Reservation) WithIDs() Reservation {
	r.DeviceIDs, r.NodeIDs = []string{}, []string{}
	t := r.Layout()
	for _, n := range r.Devices {
		r.DeviceIDs = append(r.DeviceIDs, DeviceID(r.Resource, n))
		if id := NodeID(r.Resource, t.NodeOf(n)); len(r.NodeIDs) == 0 || r.NodeIDs[len(r.NodeIDs)-1] != id {
			r.NodeIDs = append(r.NodeIDs, id)
		}
	}
	return r
}

// Stale reports whether a draft has waited for an outcome too long.
func (r Reservation) Stale(now time.Time) bool {
	return r.State == api.Draft && !now.Before(r.CreatedAt.Add(api.StaleAfter))
}

// ExpiresAt is when storage may delete the reservation (zero: kept while
// it is not terminal): denied ones after api.DeniedRetention, rejected and
// expired ones after api.Retention, released ones after api.ReleasedRetention
// (docs/reference/reservations.md), each from when it became terminal.
func (r Reservation) ExpiresAt() time.Time {
	switch r.State {
	case api.Denied:
		return r.UpdatedAt.Add(api.DeniedRetention)
	case api.Rejected, api.Expired:
		return r.UpdatedAt.Add(api.Retention)
	case api.Released:
		return r.UpdatedAt.Add(api.ReleasedRetention)
	}
	return time.Time{}
}

func (r Reservation) move(to api.ReservationState, now time.Time) (Reservation, error) {
	if r.State.Terminal() {
		return r, ErrTerminal
	}
	if !r.State.CanMoveTo(to) {
		if r.State != api.Draft && (to == api.Denied || to == api.Rejected || to == api.Expired) {
			return r, ErrNotDraft
		}
		return r, fmt.Errorf("%w: %s → %s", ErrTransition, r.State, to)
	}
	r.State, r.UpdatedAt = to, now.UTC()
	r.History = append(append([]api.Event(nil), r.History...), api.Event{State: to, At: r.UpdatedAt})
	switch to {
	case api.Placed:
		r.Due = r.Window.Start
	case api.Binding:
		r.Due = now
	case api.Active:
		r.Due = r.Window.End
	default: // terminal: one more look after api.StaleAfter, for in-flight writers
		r.Due = now.Add(api.StaleAfter)
	}
	return r, nil
}

// Deny: Better IAM said no to the draft.
func (r Reservation) Deny(now time.Time) (Reservation, error) { return r.move(api.Denied, now) }

// Reject: the quota (ReasonQuota) or the devices (ReasonCapacity,
// ReasonTopology) did not fit, or the pool or resource was not there
// (ReasonInvalid).
func (r Reservation) Reject(reason string, now time.Time) (Reservation, error) {
	n, err := r.move(api.Rejected, now)
	if err == nil {
		n.Reason, n.History[len(n.History)-1].Reason = reason, reason
	}
	return n, err
}

// Expire fences a draft that waited for an outcome too long.
func (r Reservation) Expire(now time.Time) (Reservation, error) {
	n, err := r.move(api.Expired, now)
	if err == nil {
		n.Reason, n.History[len(n.History)-1].Reason = api.ReasonStale, api.ReasonStale
	}
	return n, err
}

// Place records the devices (indexes, and the resource's node size) a
// charged draft was placed on.
func (r Reservation) Place(devices []int, nodeSize int, now time.Time) (Reservation, error) {
	n, err := r.move(api.Placed, now)
	if err == nil {
		n.Devices, n.NodeSize = devices, nodeSize
		n = n.WithIDs()
	}
	return n, err
}

// StartBinding: the window started; the devices are being bound.
func (r Reservation) StartBinding(now time.Time) (Reservation, error) {
	return r.move(api.Binding, now)
}

// Activate: the devices are bound.
func (r Reservation) Activate(now time.Time) (Reservation, error) { return r.move(api.Active, now) }

// Release ends a non-terminal reservation (by the tenant, or at window end).
func (r Reservation) Release(by string, now time.Time) (Reservation, error) {
	n, err := r.move(api.Released, now)
	if err == nil {
		n.ReleasedBy = by
	}
	return n, err
}

// Fingerprint is the identity of a create request as sent: pool, resource,
// count, topology and window (an omitted start stays omitted).
func Fingerprint(poolID, resource string, count int, topology string, start *time.Time, end time.Time) string {
	s := "-"
	if start != nil {
		s = strconv.FormatInt(start.UnixNano(), 10)
	}
	sum := sha256.Sum256([]byte(poolID + "\x00" + resource + "\x00" + strconv.Itoa(count) + "\x00" + topology + "\x00" + s + "\x00" + strconv.FormatInt(end.UnixNano(), 10)))
	return hex.EncodeToString(sum[:16])
}

var crockford = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// TokenID derives a reservation id from a clientToken, scoped to the tenant
// and the principal (no other principal can claim or block a
// token), so the conditional put of the draft is the idempotency check. It
// has the shape of a ULID (26 Crockford base32 characters) but is not
// time-ordered: lists order by createdAt, never by id.
func TokenID(tenant, principal, token string) string {
	sum := sha256.Sum256([]byte("bc-reservation\x00" + tenant + "\x00" + principal + "\x00" + token))
	return crockford.EncodeToString(sum[:17])[:26]
}
