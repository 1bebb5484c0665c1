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
func (a *Admission) allocate(ctx context.Context, r Reservation, req Request, pr PoolResource, p Placement, state nodeHours, carried bool) (Placement, error) {
	hours := HoursOf(r.Window)
	for attempt := 1; ; attempt++ {
		if err := a.mayRetry(ctx, r, attempt); err != nil {
			return nil, err
		}
		if !covers(state, p, hours) {
			var err error
			if state, err = a.calendar.placementHours(ctx, pr, p, hours); err != nil {
				return nil, err
			}
		}
		if !fits(state, p, req, hours) {
			// Taken since it was chosen (by a racing create, or while an
			// earlier flow of this reservation was down): choose again.
			a.placer.contended(true)
			if carried {
				if err := a.calendar.free(ctx, r, p); err != nil {
					return nil, err
				}
				carried = false
			}
			req.Attempt++
			var err error
			if p, state, err = a.rechoose(ctx, r, req, pr); err != nil {
				return nil, err
			}
			continue
		}
		if q, st, err := a.placer.eligible(ctx, r, req, pr, p, state); err != nil {
			return nil, err
		} else if !samePlacement(q, p) {
			// A chosen node is not eligible (read only for a window past the
			// fleet's flags): chose again without it; record it, then write.
			if carried {
				if err := a.calendar.free(ctx, r, p); err != nil {
					return nil, err
				}
				carried = false
			}
			if err := a.record(ctx, r, pr, q); err != nil {
				return nil, err
			}
			if err := a.store.Replace(ctx, r.Quota(), r.ReservationID, inline(q)); errors.Is(err, ErrStale) {
				return nil, errReleased
			} else if err != nil {
				return nil, unavailable(err)
			}
			p, state = q, st
			continue
		}
		lost, full, err := a.calendar.writeEntries(ctx, state, p, req, hours)
		if err != nil {
			return nil, err
		}
		if !lost {
			a.placer.contended(false)
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
			a.placer.contended(true)
			a.placing.retries.Add(1)
			if err := a.pause(ctx, attempt); err != nil {
				return nil, err
			}
		}
		req.Attempt++
		if p, state, err = a.rechoose(ctx, r, req, pr); err != nil {
			return nil, err
		}
	}
}

// mayRetry says whether a placement may make attempt n (nil) or must stop
// (errContended): at the flow's deadline less placeReserve — by the
// context and by the flow's lease on the service's clock — or past
// PlaceAttempts when that is set.
func (a *Admission) mayRetry(ctx context.Context, r Reservation, n int) error {
	switch {
	case n == 1:
		return nil
	case a.attempts > 0 && n > a.attempts:
		return errContended
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < placeReserve {
		return fmt.Errorf("%w: %w", errContended, context.DeadlineExceeded)
	}
	if !a.now().Before(r.Lease.Add(FlowDeadline - TakeOverAfter - placeReserve)) {
		return fmt.Errorf("%w: %w", errContended, context.DeadlineExceeded)
	}
	return nil
}

// rechoose reads the candidates again, chooses again and records the new
// placement on the charge (before anything of it is written).
func (a *Admission) rechoose(ctx context.Context, r Reservation, req Request, pr PoolResource) (Placement, nodeHours, error) {
	_, p, state, err := a.placer.choose(ctx, r, req)
	if err != nil {
		return nil, nil, err
	}
	// A large placement goes on the draft first; the charge's record then
	// names the new placement, or none (a repair reads the draft's devices),
	// never the one this attempt gave up.
	if err := a.record(ctx, r, pr, p); err != nil {
		return nil, nil, err
	}
	switch err := a.store.Replace(ctx, r.Quota(), r.ReservationID, inline(p)); {
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
