package capacity

import (
	"context"
	"errors"
	"slices"
)

// Calendar is the node-hours as a flow writes them: a reservation's
// entries put into the node-hours of its window (conditional on the
// versions of the devices they take: a lost race is undone and answered,
// never left half written), freed again, and the hours' occupancy maps
// kept as the node-hours they name are stored. Which devices to take is
// the Placer's.
type Calendar struct {
	hooks
	store CalendarStore
}

// CalendarStore is what the calendar's writes need of the node-hour items
// of each (pool, resource): one item per node per UTC hour (see
// CandidateStore for the orders it is read in). A node-hour is stored once
// something is placed on it, or when the reconciler provisions its hour
// ahead; a missing one is empty.
type CalendarStore interface {
	// NodeHours reads node-hours by key, consistently; missing ones are
	// absent from the map.
	NodeHours(ctx context.Context, t PoolResource, keys []NodeHourKey) (map[NodeHourKey]NodeHour, error)
	// Allocate adds id's entry to a node-hour read as nh, if the versions
	// of the devices it takes are still those of nh (ErrStale otherwise;
	// ErrCalendarFull when the hour holds MaxEntriesPerNodeHour); one read
	// as missing (nh.Stored false) is created, if it still is. Idempotent.
	Allocate(ctx context.Context, nh NodeHour, id string, e Entry) error
	// Free removes id's entries from the node-hours of keys (idempotent;
	// a node-hour without one is left alone), reading them first.
	Free(ctx context.Context, t PoolResource, keys []NodeHourKey, id string) error
	// Occupy adds nodes to hour h's occupancy map (their node-hours are
	// stored): conditional on each word it changes, a word lost to another
	// writer read again and retried a few times (then an error; the map is
	// a hint the next create repairs, never what a placement's safety
	// rests on).
	Occupy(ctx context.Context, t PoolResource, h Hour, nodes []int) error
}

// covers reports whether state holds every node-hour p writes.
func covers(state nodeHours, p Placement, hours []Hour) bool {
	for _, nd := range p {
		for _, h := range hours {
			if _, ok := state[NodeHourKey{Node: nd.Node, Hour: h}]; !ok {
				return false
			}
		}
	}
	return true
}

// placementHours reads the node-hours a placement writes.
func (c *Calendar) placementHours(ctx context.Context, pr PoolResource, p Placement, hours []Hour) (nodeHours, error) {
	keys := make([]NodeHourKey, 0, len(p)*len(hours))
	for _, nd := range p {
		for _, h := range hours {
			keys = append(keys, NodeHourKey{Node: nd.Node, Hour: h})
		}
	}
	return c.nodeHours(ctx, pr, keys)
}

// nodeHours reads node-hours by key; a missing one is made up empty (pr must
// carry the resource's layout).
func (c *Calendar) nodeHours(ctx context.Context, pr PoolResource, keys []NodeHourKey) (nodeHours, error) {
	got, err := c.store.NodeHours(ctx, pr, keys)
	if err != nil {
		return nil, unavailable(err)
	}
	for _, k := range keys {
		if _, ok := got[k]; !ok {
			got[k] = EmptyNodeHour(pr, k)
		}
	}
	return got, nil
}

// fits reports whether p's devices are free for the window in state.
func fits(state nodeHours, p Placement, req Request, hours []Hour) bool {
	for _, nd := range p {
		for _, h := range hours {
			cur, ok := state[NodeHourKey{Node: nd.Node, Hour: h}]
			if !ok || nd.Mask&^cur.Free(req.Window, req.ID) != 0 {
				return false
			}
		}
	}
	return true
}

// write adds the entries of p; lost reports a write refused because the
// state moved or a node-hour is full (after undoing this attempt's
// successful writes).
func (c *Calendar) write(ctx context.Context, state nodeHours, p Placement, req Request, hours []Hour) (lost bool, err error) {
	lost, _, err = c.writeEntries(ctx, state, p, req, hours)
	return lost, err
}

// writeEntries is write that also names the nodes whose node-hours were
// full (MaxEntriesPerNodeHour entries).
func (c *Calendar) writeEntries(ctx context.Context, state nodeHours, p Placement, req Request, hours []Hour) (lost bool, full []int, err error) {
	type job struct {
		nh   NodeHour
		mask Mask
	}
	var jobs []job
	for _, nd := range p {
		for _, h := range hours {
			jobs = append(jobs, job{state[NodeHourKey{Node: nd.Node, Hour: h}], nd.Mask})
		}
	}
	done := make([]bool, len(jobs))
	errs := make([]error, len(jobs))
	_ = c.each(ctx, len(jobs), func(i int) error {
		errs[i] = c.store.Allocate(ctx, jobs[i].nh, req.ID, Entry{Mask: jobs[i].mask, Window: req.Window, Tenant: req.Tenant})
		done[i] = errs[i] == nil
		return nil
	})
	if made := madeStored(jobs, errs, func(j job) NodeHour { return j.nh }); len(made) > 0 {
		c.occupy(ctx, jobs[0].nh.Topology(), made)
	}
	var failed error
	for i, e := range errs {
		switch {
		case e == nil:
		case errors.Is(e, ErrCalendarFull):
			lost = true
			if !slices.Contains(full, jobs[i].nh.Node) {
				full = append(full, jobs[i].nh.Node)
			}
		case errors.Is(e, ErrStale):
			lost = true
		default:
			failed = e
		}
	}
	if !lost && failed == nil {
		return false, nil, nil
	}
	// Undo what this attempt wrote; if that fails, the charge's record
	// still covers it, and a repair frees it.
	var written []NodeHourKey
	for i, j := range jobs {
		if done[i] {
			written = append(written, j.nh.Key())
		}
	}
	var undo error
	if len(written) > 0 {
		undo = c.store.Free(ctx, jobs[0].nh.Topology(), written, req.ID)
	}
	if failed != nil || undo != nil {
		return false, nil, unavailable(errors.Join(failed, undo))
	}
	return true, full, nil
}

// madeStored is, by hour, the nodes of the jobs read as missing that are
// stored now: written by the job, or refused because another writer
// stored them first — what the hours' occupancy maps must learn.
func madeStored[J any](jobs []J, errs []error, nh func(J) NodeHour) map[Hour][]int {
	var out map[Hour][]int
	for i, j := range jobs {
		n := nh(j)
		if n.Stored || (errs[i] != nil && !errors.Is(errs[i], ErrStale) && !errors.Is(errs[i], ErrCalendarFull)) {
			continue
		}
		if out == nil {
			out = map[Hour][]int{}
		}
		out[n.Hour] = append(out[n.Hour], n.Node)
	}
	return out
}

// free removes r's entries of placement p from every node-hour of its
// window (a node-hour it never wrote to is left alone).
func (c *Calendar) free(ctx context.Context, r Reservation, p Placement) error {
	if len(p) == 0 {
		return nil
	}
	pr := PoolResource{PoolID: r.PoolID, Topology: Topology{Resource: r.Resource, NodeSize: r.Layout().NodeSize}}
	var keys []NodeHourKey
	for _, nd := range p {
		for _, h := range HoursOf(r.Window) {
			keys = append(keys, NodeHourKey{Node: nd.Node, Hour: h})
		}
	}
	if err := c.store.Free(ctx, pr, keys, r.ReservationID); err != nil {
		return unavailable(err)
	}
	return nil
}
