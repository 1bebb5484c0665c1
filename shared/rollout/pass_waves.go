package rollout

// Waves and starts: which wave is current, when it is done, and which
// nodes a pass may start within maxUnavailable.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// current is the first wave not finished (-1: all are).
func (r Record) current() int {
	for i, w := range r.Waves {
		if w.FinishedAt == nil {
			return i
		}
	}
	return -1
}

// inWave: order key k belongs to wave w or one before it.
func (r Record) inWave(k string, w int) bool {
	return w >= 0 && w < len(r.Boundaries) && r.Boundaries[w] != "" && k <= r.Boundaries[w]
}

// waves starts the current wave (after the bake), starts its pending
// nodes under maxUnavailable, finishes it when its nodes are done, and
// completes the rollout after the last.
func (p *pass) waves(ctx context.Context, counts api.Counts) error {
	rec := p.rec
	cur := rec.current()
	if cur < 0 {
		return p.decide(ctx, counts, func(r *Record) error {
			return r.move(api.Completed, p.now, "")
		})
	}
	w := rec.Waves[cur]
	if w.StartedAt == nil {
		if cur > 0 && p.now.Before(rec.Waves[cur-1].FinishedAt.Add(time.Duration(rec.Settings.BakeSeconds)*time.Second)) {
			return p.decide(ctx, counts, nil) // baking
		}
		if err := p.decide(ctx, counts, func(r *Record) error {
			r.markWave(cur, false, p.now)
			return nil
		}); err != nil || p.rec.Waves[cur].StartedAt == nil {
			return err
		}
		rec = p.rec
	}
	if err := p.start(ctx, cur, func(limit int) ([]Progress, error) {
		ps, err := p.rc.Store.ProgressByStep(ctx, rec.RolloutID, api.Pending, limit, "")
		out := ps[:0]
		for _, pr := range ps {
			if rec.inWave(pr.Order, cur) {
				out = append(out, pr)
			}
		}
		return out, err
	}, p.startNode); err != nil {
		return err
	}
	done, err := p.waveDone(ctx, cur)
	if err != nil || !done {
		if err == nil {
			err = p.decide(ctx, counts, nil)
		}
		return err
	}
	return p.decide(ctx, counts, func(r *Record) error {
		r.markWave(cur, true, p.now)
		return nil
	})
}

// markWave records wave w started (or, done, finished) at at, on a copy of
// the waves: the pass's own record changes only once the write lands (a
// lost write must not leave the wave looking started).
func (r *Record) markWave(w int, done bool, at time.Time) {
	r.Waves = slices.Clone(r.Waves)
	t := at.Truncate(time.Millisecond)
	if done {
		r.Waves[w].FinishedAt = &t
	} else {
		r.Waves[w].StartedAt = &t
	}
	r.add(api.Progressing, at, waveEvent(w, done))
}

func waveEvent(w int, done bool) string {
	s := "wave-" + itoa(w+1)
	if done {
		s += "-done"
	}
	return s
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// waveDone: no node of the wave (or one before it) is pending or active.
func (p *pass) waveDone(ctx context.Context, w int) (bool, error) {
	for _, st := range []api.RolloutStep{api.Pending, api.Draining, api.Installing, api.Verifying} {
		ps, err := p.rc.Store.ProgressByStep(ctx, p.rec.RolloutID, st, 1, "")
		if err != nil {
			return false, err
		}
		if len(ps) > 0 && p.rec.inWave(ps[0].Order, w) {
			return false, nil
		}
	}
	return true, nil
}

// errNoRoom ends a pass's starts: one more node out would take the
// rollout's pools to more than maxUnavailable out of service.
var errNoRoom = errors.New("rollout: no room under maxUnavailable")

// nodeKey names a node of the rollout's pools (in inFlight and the
// out-of-service sets).
func nodeKey(pool, node string) string { return pool + "/" + node }

// outOfService is every node of the rollout's pools out of service now:
// those the pools' out-of-service index lists when it is read here (not
// ready — registered and never heard from included — or cordoned by
// anyone), and those the rollout has out for itself (inFlight: a start's
// progress write says so before its cordon does, and a cordon lost to a
// race is still the rollout's to set again). Each pool's index is read up
// to maxUnavailable + len(inFlight) + 1 entries: enough to tell whether a
// node fits.
func (p *pass) outOfService(ctx context.Context) (map[string]bool, error) {
	limit := p.rec.Settings.MaxUnavailable + len(p.inFlight) + 1
	lists := make([][]string, len(p.rec.Pools))
	at := 16
	if p.rc.Serial {
		at = 1
	}
	if err := conc.Each(ctx, len(p.rec.Pools), at, func(i int) error {
		var err error
		lists[i], err = p.rc.Nodes.OutOfService(ctx, p.rec.Pools[i], limit)
		return err
	}); err != nil {
		return nil, err
	}
	out := maps.Clone(p.inFlight)
	for i, pool := range p.rec.Pools {
		for _, n := range lists[i] {
			out[nodeKey(pool, n)] = true
		}
	}
	return out, nil
}

// fits says whether pr may go out of service now: fewer than
// maxUnavailable other nodes of the rollout's pools are (errNoRoom
// otherwise). Read at each start, right before its write: a budget read
// once a step was spent on nodes that went out between two starts (a
// report, an operator's cordon after the intent). A pass that could not
// list all its in-flight nodes starts none.
func (p *pass) fits(ctx context.Context, pr Progress) error {
	if p.unlisted {
		return errNoRoom
	}
	out, err := p.outOfService(ctx)
	if err != nil {
		return err
	}
	delete(out, nodeKey(pr.PoolID, pr.NodeID))
	if len(out) >= p.rec.Settings.MaxUnavailable {
		return errNoRoom
	}
	return nil
}

// start starts nodes while they fit under maxUnavailable: it records
// them on the rollout (the intent: a pause waits for it to clear, and it
// makes concurrent passes start nodes one at a time), starts each — each
// start reads what is out of service again (fits) — and clears it. The
// candidates are at most the room the first read leaves.
func (p *pass) start(ctx context.Context, _ int, candidates func(limit int) ([]Progress, error), startOne func(context.Context, Progress) error) error {
	if p.rec.Intent != nil && p.now.Sub(p.rec.Intent.At) < IntentStale {
		return nil // another pass is starting nodes
	}
	if p.unlisted {
		return nil
	}
	out, err := p.outOfService(ctx)
	if err != nil {
		return err
	}
	room := p.rec.Settings.MaxUnavailable - len(out)
	if room <= 0 {
		return nil
	}
	ps, err := candidates(min(room, MaxStartPerPass))
	if err != nil || len(ps) == 0 {
		return err
	}
	next := p.rec
	next.Intent = &Intent{At: p.now, Nodes: len(ps)}
	cur, err := p.rc.Store.UpdateRollout(ctx, next)
	if errors.Is(err, ErrStale) {
		return nil // paused, aborted or another pass: read again next pass
	}
	if err != nil {
		return err
	}
	p.rec = cur
	if err := p.rc.fault(FaultIntent); err != nil {
		return err
	}
	for _, pr := range ps {
		err := startOne(ctx, pr)
		if errors.Is(err, errNoRoom) {
			break
		}
		if err != nil {
			return err
		}
	}
	return p.clearIntent(ctx, *p.rec.Intent)
}

// clearIntentAttempts bounds the re-reads of a pass whose intent clear
// keeps losing to other writers: past them, the error says so and the
// intent lapses after IntentStale.
const clearIntentAttempts = 4

// clearIntent removes the pass's intent. A write lost to another writer
// (another pass's counts, a pause's or an abort's write) is not dropped:
// the rollout is read again and the intent cleared there while it is
// still this pass's — left, it would hold every pass's starts (and make
// every pause wait) for IntentStale. The pass's own record stays the one
// it held when the clear lands on a copy read again: its later writes
// lose to the other writer's, as they did before.
func (p *pass) clearIntent(ctx context.Context, mine Intent) error {
	rec := p.rec
	for attempt := 1; ; attempt++ {
		next := rec
		next.Intent = nil
		cur, err := p.rc.Store.UpdateRollout(ctx, next)
		switch {
		case err == nil:
			if attempt == 1 {
				p.rec = cur
			}
			return nil
		case !errors.Is(err, ErrStale):
			return err
		case attempt == clearIntentAttempts:
			return fmt.Errorf("rollout %s: the pass's intent lost %d clears to other writers; it lapses after %s: %w", rec.RolloutID,
				attempt, IntentStale, err)
		}
		if rec, err = p.rc.Store.GetRollout(ctx, rec.RolloutID); err != nil {
			return err
		}
		if rec.Intent == nil || !rec.Intent.At.Equal(mine.At) || rec.Intent.Nodes != mine.Nodes {
			return nil // cleared, or another pass's now
		}
	}
}

// startNode moves a pending node to draining and cordons it. A node that
// ran nothing when it was enumerated may have taken its pool's baseline
// since: the release it runs now is the one a rollback sends it back to
// (and its floor).
func (p *pass) startNode(ctx context.Context, pr Progress) error {
	next := pr
	var n *fleet.Record // the node as read here, cordoned below without a second read
	if pr.Previous == nil {
		var err error
		if n, err = p.node(ctx, pr); err != nil {
			return err
		}
		if n != nil && n.Running != nil && n.Running.Version != p.rec.Version {
			running := *n.Running
			next.Previous = &running
		}
	}
	if err := p.fits(ctx, pr); err != nil {
		return err
	}
	next.Step, next.DrainedAt, next.UpdatedAt = api.Draining, p.now, p.now
	at := p.now.Truncate(time.Millisecond)
	next.StartedAt = &at
	if err := p.rc.Store.UpdateProgress(ctx, next, api.Pending, ""); err != nil {
		if errors.Is(err, ErrStale) {
			return nil
		}
		return err
	}
	p.inFlight[nodeKey(pr.PoolID, pr.NodeID)] = true
	if err := p.rc.fault(FaultStarted); err != nil {
		return err
	}
	if pr.Previous != nil {
		var err error
		if n, err = p.node(ctx, pr); err != nil {
			return err
		}
	}
	_, _, err := p.cordon(ctx, pr, n, true)
	return err
}
