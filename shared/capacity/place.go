package capacity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// placeReserve is the part of a flow's time a placement never spends on
// retries: what is left undoes its writes and refunds its charge, so a
// create that stops at its deadline leaves nothing for the reconciler.
const placeReserve = time.Second

// allocate writes placement p into its node-hours. A write lost to a racing
// create (the versions of its devices moved) undoes this attempt's other
// writes, reads again, chooses again and records the new choice on the
// charge before writing it: what is written is always covered by the
// charge's record, which is what a repair undoes. A placement carried over
// from an earlier flow (which may have written part of it, its success
// hidden by an error) that no longer fits is freed before it is replaced.
//
// Lost races are retried until the placement is written or a genuine answer
// exists (nothing fits: NoFit), never for a fixed number of times: every
// lost write is another create's won one, so the state it reads again has
// moved on. Only the flow's deadline (less placeReserve) — or
// PlaceAttempts, when set — ends the retries with errContended. A node-hour
// holding MaxEntriesPerNodeHour entries is no race: it refuses this
// reservation whatever its devices say, so its node stops being a candidate
// (as a full node) and the choice is made again without it.
func (s *Service) allocate(ctx context.Context, r Reservation, req Request, pr PoolResource, p Placement, state nodeHours, carried bool) (Placement, error) {
	hours := HoursOf(r.Window)
	for attempt := 1; ; attempt++ {
		if err := s.mayRetry(ctx, r, attempt); err != nil {
			return nil, err
		}
		if !covers(state, p, hours) {
			var err error
			if state, err = s.placementHours(ctx, pr, p, hours); err != nil {
				return nil, err
			}
		}
		if !fits(state, p, req, hours) {
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
		if q, st, err := s.eligiblePlacement(ctx, r, req, pr, p, state); err != nil {
			return nil, err
		} else if !samePlacement(q, p) {
			// A chosen node is not eligible (read only for a window past the
			// fleet's flags): chose again without it; record it, then write.
			if carried {
				if err := s.free(ctx, r, p); err != nil {
					return nil, err
				}
				carried = false
			}
			if err := s.record(ctx, r, pr, q); err != nil {
				return nil, err
			}
			if err := s.Store.Replace(ctx, r.Quota(), r.ReservationID, inline(q)); errors.Is(err, ErrStale) {
				return nil, errReleased
			} else if err != nil {
				return nil, unavailable(err)
			}
			p, state = q, st
			continue
		}
		lost, full, err := s.writeEntries(ctx, state, p, req, hours)
		if err != nil {
			return nil, err
		}
		if !lost {
			s.contended(false)
			return p, nil
		}
		if len(full) > 0 {
			// Not a race: these nodes cannot take another entry this hour.
			req.Exclude = maps.Clone(req.Exclude)
			if req.Exclude == nil {
				req.Exclude = map[int]bool{}
			}
			for _, n := range full {
				req.Exclude[n] = true
			}
		} else {
			s.contended(true)
			s.placeRetries.Add(1)
			if err := s.pause(ctx, attempt); err != nil {
				return nil, err
			}
		}
		req.Attempt++
		if p, state, err = s.rechoose(ctx, r, req, pr); err != nil {
			return nil, err
		}
	}
}

// mayRetry says whether a placement may make attempt n (nil) or must stop
// (errContended): at the flow's deadline less placeReserve — by the
// context and by the flow's lease on the service's clock — or past
// PlaceAttempts when that is set.
func (s *Service) mayRetry(ctx context.Context, r Reservation, n int) error {
	switch {
	case n == 1:
		return nil
	case s.PlaceAttempts > 0 && n > s.PlaceAttempts:
		return errContended
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < placeReserve {
		return fmt.Errorf("%w: %w", errContended, context.DeadlineExceeded)
	}
	if !s.now().Before(r.Lease.Add(FlowDeadline - TakeOverAfter - placeReserve)) {
		return fmt.Errorf("%w: %w", errContended, context.DeadlineExceeded)
	}
	return nil
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
func (s *Service) placementHours(ctx context.Context, pr PoolResource, p Placement, hours []Hour) (nodeHours, error) {
	keys := make([]NodeHourKey, 0, len(p)*len(hours))
	for _, nd := range p {
		for _, h := range hours {
			keys = append(keys, NodeHourKey{Node: nd.Node, Hour: h})
		}
	}
	return s.nodeHours(ctx, pr, keys)
}

// nodeHours reads node-hours by key; a missing one is made up empty (pr must
// carry the resource's layout).
func (s *Service) nodeHours(ctx context.Context, pr PoolResource, keys []NodeHourKey) (nodeHours, error) {
	got, err := s.Store.NodeHours(ctx, pr, keys)
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
func (s *Service) write(ctx context.Context, state nodeHours, p Placement, req Request, hours []Hour) (lost bool, err error) {
	lost, _, err = s.writeEntries(ctx, state, p, req, hours)
	return lost, err
}

// writeEntries is write that also names the nodes whose node-hours were
// full (MaxEntriesPerNodeHour entries).
func (s *Service) writeEntries(ctx context.Context, state nodeHours, p Placement, req Request, hours []Hour) (lost bool, full []int, err error) {
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
	_ = s.each(ctx, len(jobs), func(i int) error {
		errs[i] = s.Store.Allocate(ctx, jobs[i].nh, req.ID, Entry{Mask: jobs[i].mask, Window: req.Window, Tenant: req.Tenant})
		done[i] = errs[i] == nil
		return nil
	})
	if made := madeStored(jobs, errs, func(j job) NodeHour { return j.nh }); len(made) > 0 {
		s.occupy(ctx, jobs[0].nh.Topology(), made)
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
		undo = s.Store.Free(ctx, jobs[0].nh.Topology(), written, req.ID)
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

// rechoose reads the candidates again, chooses again and records the new
// placement on the charge (before anything of it is written).
func (s *Service) rechoose(ctx context.Context, r Reservation, req Request, pr PoolResource) (Placement, nodeHours, error) {
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
	switch err := s.Store.Replace(ctx, r.Quota(), r.ReservationID, inline(p)); {
	case errors.Is(err, ErrStale):
		return nil, nil, errReleased // voided: the draft was released
	case err != nil:
		return nil, nil, unavailable(err)
	}
	return p, state, nil
}

// samePlacement reports whether two placements take the same devices.
func samePlacement(a, b Placement) bool {
	return slices.Equal(a, b)
}
