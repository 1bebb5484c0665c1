package rollout

// Enumerating a rollout's nodes into progress items and walking them into waves.

import (
	"context"
	"errors"

	"github.com/bettercompute/control-plane/shared/api"
)

// enumerate writes a batch of the pools' nodes as pending (or updated
// when they run the version already, skipped when the release has no
// binary for their platform): the rollout's nodes are the managed nodes of
// its pools when it was created.
func (p *pass) enumerate(ctx context.Context) error {
	rec := p.rec
	rel, err := p.rc.Releases.Get(ctx, rec.Version)
	if err != nil {
		return err
	}
	platforms := map[string]bool{}
	for _, b := range rel.Binaries {
		platforms[b.Platform] = true
	}
	left := p.rc.batch()
	for left > 0 && rec.EnumPool < len(rec.Pools) {
		pool := rec.Pools[rec.EnumPool]
		nodes, after, err := p.rc.Store.PoolNodes(ctx, pool, left, rec.EnumAfter)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.CreatedAt.After(rec.CreatedAt) {
				continue // registered after the rollout was created
			}
			pr := Progress{NodeProgress: api.NodeProgress{PoolID: pool, NodeID: n.NodeID, Step: api.Pending, Previous: n.Running, UpdatedAt: p.now},
				RolloutID: rec.RolloutID, Order: OrderKey(rec.RolloutID, pool, n.NodeID), Resource: n.Resource, Index: n.Index, Platform: n.Platform}
			switch {
			case n.Running != nil && n.Running.Version == rec.Version:
				pr.Step, pr.Reason = api.Updated, ReasonRunning
			case !platforms[n.Platform]:
				pr.Step, pr.Reason = api.Skipped, api.ReasonNoBinary
			}
			if err := p.rc.Store.PutProgress(ctx, pr); err != nil {
				return err
			}
		}
		left -= len(nodes)
		rec.EnumAfter = after
		if after == "" {
			rec.EnumPool, rec.EnumAfter = rec.EnumPool+1, ""
		}
	}
	rec.Enumerated = rec.EnumPool >= len(rec.Pools)
	cur, err := p.rc.Store.UpdateRollout(ctx, rec)
	if errors.Is(err, ErrStale) {
		return nil
	}
	if err == nil {
		p.rec = cur
		err = p.rc.fault(FaultEnumerated)
	}
	return err
}

// walk reads the rollout's nodes in its order to find each wave's last
// order key (the waves are prefixes of the order).
func (p *pass) walk(ctx context.Context) error {
	rec := p.rec
	if rec.WalkCount == 0 && rec.WalkAfter == "" {
		// Sizes over the nodes actually taken.
		total := 0
		for _, st := range api.RolloutSteps {
			n, err := p.rc.Store.CountStep(ctx, rec.RolloutID, st)
			if err != nil {
				return err
			}
			total += n
		}
		sizes, _, err := WaveSizes(rec.Settings.Waves, total)
		if err != nil {
			sizes = make([]int, len(rec.Waves))
			for i, w := range rec.Waves {
				sizes[i] = min(w.Size, total)
			}
			sizes[len(sizes)-1] = total
		}
		for i := range rec.Waves {
			rec.Waves[i].Size = sizes[i]
		}
		rec.Boundaries = make([]string, len(rec.Waves))
		rec.Counts.Nodes = total
	}
	ps, after, err := p.rc.Store.ProgressInOrder(ctx, rec.RolloutID, p.rc.batch(), rec.WalkAfter)
	if err != nil {
		return err
	}
	for _, pr := range ps {
		for w, size := range rec.Waves {
			if rec.WalkCount < size.Size {
				rec.Boundaries[w] = pr.Order // the last seen within the wave so far
			}
		}
		rec.WalkCount++
	}
	rec.WalkAfter = after
	rec.Walked = after == ""
	cur, err := p.rc.Store.UpdateRollout(ctx, rec)
	if errors.Is(err, ErrStale) {
		return nil
	}
	if err == nil {
		p.rec = cur
		err = p.rc.fault(FaultWalked)
	}
	return err
}
