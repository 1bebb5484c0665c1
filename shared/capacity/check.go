package capacity

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/bettercompute/control-plane/shared/api"
)

// Violation is one broken invariant.
type Violation struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Detail  string `json:"detail"`
}

func (v Violation) String() string { return v.Kind + " " + v.Subject + ": " + v.Detail }

// Check reads the whole table and reports every broken invariant of
// docs/capacity.md (none: nil). Run it when no request or pass is in flight and the
// reconciler has swept what was fenced (a draft being admitted holds quota
// and devices legitimately for a moment).
func Check(ctx context.Context, r SnapshotReader) ([]Violation, error) {
	snap, err := r.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return CheckSnapshot(snap), nil
}

// CheckSnapshot is Check on a snapshot already read:
//   - per quota row, used = Σ counts of its placed/binding/active
//     reservations, free = max − used, used ≥ 0; a charge record left
//     unsettled belongs to such a reservation, with its count; no credit
//     record is left;
//   - a placed reservation that ended was credited;
//   - a reservation whose scrub is owed on some node (Unscrubbed) is
//     terminal and due: the reconciler retries the scrub until written;
//   - every node-hour entry is a placed/binding/active reservation's, with
//     its window and its devices on that node (or those of a move in
//     flight), or a terminal one's on a node whose scrub of it is owed
//     (Unscrubbed), and every live reservation has its entry on each of
//     its nodes in each hour of its window;
//   - no device is held by two entries with overlapping windows;
//   - a node-hour's untouched count and entry count match its entries;
//   - no index entry outlives its item;
//   - an occupancy map names only nodes whose node-hour is stored;
//   - topology "node" is honoured: a count that fits a node on one node,
//     a larger one on ⌈count / nodeSize⌉ nodes; every reservation holds
//     exactly count devices of its pool.
func CheckSnapshot(s Snapshot) []Violation {
	var out []Violation
	add := func(kind, subject, format string, args ...any) {
		out = append(out, Violation{kind, subject, fmt.Sprintf(format, args...)})
	}
	pools := map[string]Pool{}
	for _, p := range s.Pools {
		pools[p.PoolID] = p
	}
	res := make(map[string]Reservation, len(s.Reservations))
	usedBy := map[QuotaKey]int64{}
	for _, r := range s.Reservations {
		res[r.ReservationID] = r
		subject := r.PoolID + "/" + r.Resource + "/" + r.ReservationID
		if r.State.Holding() {
			usedBy[r.Quota()] += int64(r.Count)
			checkTopology(r, pools[r.PoolID], subject, add)
		}
		if r.State.Terminal() && r.WasPlaced() && !r.Credited {
			add("uncredited", subject, "%s after placed, its quota not given back", r.State)
		}
		if len(r.Unscrubbed) > 0 && (!r.State.Terminal() || r.Due.IsZero()) {
			add("scrub_due", subject, "%s, its scrub owed on %v and it is not a terminal reservation due for the reconciler to retry it", r.State,
				r.Unscrubbed)
		}
	}
	for _, q := range s.Quotas {
		subject := q.Key().String()
		if want := usedBy[q.Key()]; q.Used != want {
			add("used", subject, "used is %d, its placed/binding/active reservations count %d", q.Used, want)
		}
		if q.Free != q.Max-q.Used {
			add("free", subject, "free is %d, max − used is %d", q.Free, q.Max-q.Used)
		}
		if q.Used < 0 {
			add("used", subject, "used is negative (%d)", q.Used)
		}
		for id, c := range q.Charging {
			r, ok := res[id]
			switch {
			case !ok:
				add("orphan_charge", subject, "charge of %d for unknown reservation %s", c.Count, id)
			case c.Voided:
				add("charge_state", subject, "reservation %s is %s and its voided charge of %d is still recorded", id, r.State, c.Count)
			case !r.State.Holding():
				add("charge_state", subject, "reservation %s is %s and still has a charge of %d", id, r.State, c.Count)
			case r.Count != c.Count:
				add("charge_count", subject, "reservation %s charged %d, count is %d", id, c.Count, r.Count)
			}
		}
		if len(q.Charging) > 0 && q.Due.IsZero() {
			add("charge_due", subject, "%d charge records and the row is not due for the reconciler to settle them", len(q.Charging))
		}
		for id, n := range q.Crediting {
			add("credit_record", subject, "credit of %d for %s left on the row", n, id)
		}
	}
	type want struct {
		id   string
		node int
		hour Hour
	}
	seen := map[want]bool{}
	for _, nh := range s.NodeHours {
		subject := fmt.Sprintf("%s/%s/node-%d/%s", nh.Pool, nh.Resource, nh.Node, nh.Hour)
		for id, e := range nh.Entries {
			r, ok := res[id]
			switch {
			case !ok:
				add("orphan_entry", subject, "devices %b held for unknown reservation %s", e.Mask, id)
				continue
			case r.PoolID != nh.Pool || r.Resource != nh.Resource:
				add("entry_pool", subject, "reservation %s belongs to %s/%s", id, r.PoolID, r.Resource)
			case !r.State.Holding() && !slices.Contains(r.Unscrubbed, nh.Node):
				add("entry_state", subject, "reservation %s is %s and still holds devices %b (its scrub is owed on %v only)", id, r.State, e.Mask,
					r.Unscrubbed)
			case !e.Window.Start.Equal(r.Window.Start) || !e.Window.End.Equal(r.Window.End):
				add("entry_window", subject, "reservation %s: entry window differs", id)
			case !e.Window.Overlaps(nh.Hour.Window()):
				add("entry_window", subject, "reservation %s: its window does not overlap the hour", id)
			}
			if m := maskOn(r, nh.Node); e.Mask != m && !movingOn(r, nh.Node, e.Mask) {
				add("entry_devices", subject, "reservation %s holds %b here, records %b", id, e.Mask, m)
			}
			seen[want{id, nh.Node, nh.Hour}] = true
		}
		for _, pair := range nh.Conflicts() {
			add("double_booked", subject, "reservations %s and %s hold a device in overlapping windows", pair[0], pair[1])
		}
		if u := nh.Size - nh.Touched().Count(); nh.Untouched != u {
			add("untouched", subject, "untouched is %d, its entries leave %d", nh.Untouched, u)
		}
		if nh.TouchedMask != nh.Touched() {
			add("untouched", subject, "the touched mask is %b, its entries touch %b", nh.TouchedMask, nh.Touched())
		}
		if len(nh.Entries) > MaxEntriesPerNodeHour {
			add("entries", subject, "%d entries, at most %d", len(nh.Entries), MaxEntriesPerNodeHour)
		}
		if p, ok := pools[nh.Pool]; ok {
			if t := p.Topology(nh.Resource); nh.NodeSize != t.NodeSize || nh.Size != t.Size(nh.Node) {
				add("node_size", subject, "size %d of %d, the pool says %d of %d", nh.Size, nh.NodeSize, t.Size(nh.Node), t.NodeSize)
			}
		}
	}
	for _, r := range s.Reservations {
		if !r.State.Holding() {
			continue
		}
		for _, nd := range r.Placement() {
			for _, h := range HoursOf(r.Window) {
				if !seen[want{r.ReservationID, nd.Node, h}] {
					add("missing_entry", r.PoolID+"/"+r.Resource, "reservation %s is %s but node %d holds nothing for it in hour %s", r.ReservationID, r.State, nd.Node, h)
				}
			}
		}
	}
	stored := map[NodeHourKey]map[[2]string]bool{}
	for _, nh := range s.NodeHours {
		k := nh.Key()
		if stored[k] == nil {
			stored[k] = map[[2]string]bool{}
		}
		stored[k][[2]string{nh.Pool, nh.Resource}] = true
	}
	for _, m := range s.Maps {
		if m.Provisioned {
			continue // every node stored; the words no longer matter
		}
		for j, w := range m.Words {
			for b := range OccWordBits {
				node := j*OccWordBits + b
				if w&(1<<uint(b)) != 0 && !stored[NodeHourKey{Node: node, Hour: m.Hour}][[2]string{m.PoolID, m.Resource}] {
					add("occupancy", fmt.Sprintf("%s/%s/node-%d/%s", m.PoolID, m.Resource, node, m.Hour),
						"the hour's occupancy map says stored, no node-hour is (the node would never be offered as vacant)")
				}
			}
		}
	}
	for _, o := range s.Orphans {
		add("index_orphan", o, "an index entry whose item is gone (a local server stopped mid-write; DynamoDB never leaves one)")
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Subject+out[i].Detail < out[j].Subject+out[j].Detail
	})
	return out
}

// maskOn is the mask of r's devices on node k.
func maskOn(r Reservation, k int) Mask { return maskIn(r.Placement(), k) }

// movingOn: m is r's devices on node k of a move in flight — those it
// moves onto (Move), or those it moved off and has not freed (MovedFrom:
// a scrub there not written yet keeps them).
func movingOn(r Reservation, k int, m Mask) bool {
	return m != 0 && (maskIn(PlacementOf(r.Layout(), r.Move), k) == m || maskIn(PlacementOf(r.Layout(), r.MovedFrom), k) == m)
}

func maskIn(p Placement, k int) Mask {
	for _, nd := range p {
		if nd.Node == k {
			return nd.Mask
		}
	}
	return 0
}

// checkTopology: count devices of the pool, on as many nodes as the
// topology allows.
func checkTopology(r Reservation, p Pool, subject string, add func(kind, subject, format string, args ...any)) {
	t := p.Topology(r.Resource)
	if len(r.Devices) != r.Count || slices.ContainsFunc(r.Devices, func(n int) bool { return n < 0 || (t.Devices > 0 && n >= t.Devices) }) {
		add("device_count", subject, "holds %d devices %v for a count of %d", len(r.Devices), r.Devices, r.Count)
	}
	if r.Topology != api.OnNodes || t.NodeSize == 0 {
		return
	}
	if nodes, want := len(r.Placement()), t.NodesFor(r.Count); nodes != want {
		add("topology", subject, "count %d on %d nodes, topology node wants %d", r.Count, nodes, want)
	}
}
