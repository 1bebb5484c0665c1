package rollout

// Waves and starts: which wave is current, when it is done, and how many
// nodes a pass may start within maxUnavailable.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
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

// budget is how many more nodes may go out of service: maxUnavailable
// less the nodes of the rollout's pools that are out already (not ready
// or cordoned, as their placement flags last said).
func (p *pass) budget(ctx context.Context) (int, error) {
	out := 0
	for _, pool := range p.rec.Pools {
		n, err := p.rc.Nodes.CountOut(ctx, pool)
		if err != nil {
			return 0, err
		}
		out += n
	}
	return p.rec.Settings.MaxUnavailable - out, nil
}

// start starts up to the budget of nodes: it records them on the rollout
// (the intent: a pause waits for it to clear, and it makes concurrent
// passes start nodes one at a time), starts each, and clears it.
func (p *pass) start(ctx context.Context, _ int, candidates func(limit int) ([]Progress, error), startOne func(context.Context, Progress) error) error {
	if p.rec.Intent != nil && p.now.Sub(p.rec.Intent.At) < IntentStale {
		return nil // another pass is starting nodes
	}
	room, err := p.budget(ctx)
	if err != nil || room <= 0 {
		return err
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
		if err := startOne(ctx, pr); err != nil {
			return err
		}
	}
	next = p.rec
	next.Intent = nil
	if cur, err = p.rc.Store.UpdateRollout(ctx, next); err == nil {
		p.rec = cur
	} else if !errors.Is(err, ErrStale) {
		return err
	}
	return nil
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
	next.Step, next.DrainedAt, next.UpdatedAt = api.Draining, p.now, p.now
	at := p.now.Truncate(time.Millisecond)
	next.StartedAt = &at
	if err := p.rc.Store.UpdateProgress(ctx, next, api.Pending, ""); err != nil {
		if errors.Is(err, ErrStale) {
			return nil
		}
		return err
	}
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
