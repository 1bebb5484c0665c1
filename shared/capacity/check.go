package capacity

import (
	"context"
	"fmt"
	"slices"
	"sort"
)

// Violation is one broken invariant.
type Violation struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Detail  string `json:"detail"`
}

func (v Violation) String() string { return v.Kind + " " + v.Subject + ": " + v.Detail }

// Check reads the whole table and reports every broken invariant of SPEC
// §4.4 (none: nil). Run it when no request or pass is in flight: a draft
// being admitted holds quota and devices legitimately for a moment.
func Check(ctx context.Context, r SnapshotReader) ([]Violation, error) {
	snap, err := r.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return CheckSnapshot(snap), nil
}

// CheckSnapshot is Check on a snapshot already read:
//   - per quota row, used = Σ holds, free = max − used, used ≥ 0;
//   - every hold is a placed/binding/active reservation of that row with
//     that count, and every such reservation holds exactly once (so used =
//     Σ counts of the tenant's non-terminal reservations);
//   - every calendar alloc is such a reservation with the same devices and
//     window, and every such reservation has its alloc;
//   - no device is held by two allocs with overlapping windows;
//   - so no terminal reservation (or stale draft) holds quota or devices.
func CheckSnapshot(s Snapshot) []Violation {
	var out []Violation
	add := func(kind, subject, format string, args ...any) {
		out = append(out, Violation{kind, subject, fmt.Sprintf(format, args...)})
	}
	type rkey struct{ tenant, id string }
	res := make(map[rkey]Reservation, len(s.Reservations))
	for _, r := range s.Reservations {
		res[rkey{r.TenantID, r.ReservationID}] = r
	}
	held := map[rkey]bool{}
	for _, q := range s.Quotas {
		subject := q.Key().String()
		var sum int64
		for id, n := range q.Holds {
			sum += n
			r, ok := res[rkey{q.TenantID, id}]
			switch {
			case !ok:
				add("orphan_hold", subject, "holds %d for unknown reservation %s", n, id)
				continue
			case r.Quota() != q.Key():
				add("hold_row", subject, "reservation %s charges %s", id, r.Quota())
			case !r.State.Holding():
				add("hold_state", subject, "reservation %s is %s and still holds %d", id, r.State, n)
			case int64(r.Count) != n:
				add("hold_count", subject, "reservation %s holds %d, count is %d", id, n, r.Count)
			}
			held[rkey{q.TenantID, id}] = true
		}
		if sum != q.Used {
			add("used", subject, "used is %d, the holds sum to %d", q.Used, sum)
		}
		if q.Free != q.Max-q.Used {
			add("free", subject, "free is %d, max − used is %d", q.Free, q.Max-q.Used)
		}
		if q.Used < 0 {
			add("used", subject, "used is negative (%d)", q.Used)
		}
	}
	placed := map[rkey]bool{}
	for _, c := range s.Calendars {
		subject := c.PoolID + "/" + c.Resource
		for id, a := range c.Allocs {
			r, ok := res[rkey{a.TenantID, id}]
			switch {
			case !ok:
				add("orphan_alloc", subject, "devices %v held for unknown reservation %s", a.Devices, id)
				continue
			case r.PoolID != c.PoolID || r.Resource != c.Resource:
				add("alloc_calendar", subject, "reservation %s belongs to %s/%s", id, r.PoolID, r.Resource)
			case !r.State.Holding():
				add("alloc_state", subject, "reservation %s is %s and still holds devices %v", id, r.State, a.Devices)
			case !slices.Equal(DeviceIDs(c.Resource, a.Devices), r.DeviceIDs):
				add("alloc_devices", subject, "reservation %s holds %v, records %v", id, DeviceIDs(c.Resource, a.Devices), r.DeviceIDs)
			case !a.Window.Start.Equal(r.Window.Start) || !a.Window.End.Equal(r.Window.End):
				add("alloc_window", subject, "reservation %s alloc window differs", id)
			}
			placed[rkey{a.TenantID, id}] = true
		}
		for _, pair := range c.Conflicts() {
			add("double_booked", subject, "reservations %s and %s hold a device in overlapping windows", pair[0], pair[1])
		}
	}
	for k, r := range res {
		if !r.State.Holding() {
			continue
		}
		if !held[k] {
			add("missing_hold", r.Quota().String(), "reservation %s is %s but holds no quota", r.ReservationID, r.State)
		}
		if !placed[k] {
			add("missing_alloc", r.PoolID+"/"+r.Resource, "reservation %s is %s but holds no devices", r.ReservationID, r.State)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Subject+out[i].Detail < out[j].Subject+out[j].Detail
	})
	return out
}
