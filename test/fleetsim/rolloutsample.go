package fleetsim

// The rollout simulation's view of the reconciler: a pass every second,
// each metered and labelled by the rollout's phase at its start, then
// every node record of the pools sampled (how many are out of service,
// which targets each was given); and what the runs read of those samples.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/meter"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// passRec is one reconciler pass as the simulation saw it.
type passRec struct {
	start, end time.Time
	usage      meter.Usage
	errs       int
	label      string // phase at its start
	waveSize   int
	active     int
	out        int // nodes of the pools out of service after it
}

// startReconciler passes every second, each pass metered; after it, every
// node record of the pools is sampled.
func (sim *rolloutRun) startReconciler() {
	sim.rstore, sim.fstore = sim.h.st.App.RolloutStore(), sim.h.st.App.FleetStore()
	sim.reconciling = make(chan struct{})
	go sim.reconcile(sim.ctx)
}

func (sim *rolloutRun) reconcile(ctx context.Context) {
	defer close(sim.reconciling)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pr := sim.pass(ctx)
		if ctx.Err() != nil {
			pr.errs = 0 // cut off by the end of the simulation
			sim.mu.Lock()
			sim.passes = append(sim.passes, pr) // the last pass (it may have ended a run)
			sim.mu.Unlock()
			return
		}
		sim.sample(ctx, &pr)
		sim.mu.Lock()
		sim.passes = append(sim.passes, pr)
		sim.mu.Unlock()
	}
}

// pass is one metered reconciler pass, labelled by the rollout's phase at
// its start.
func (sim *rolloutRun) pass(ctx context.Context) passRec {
	sim.mu.Lock()
	id := sim.current
	sim.mu.Unlock()
	pr := passRec{label: "idle"}
	if id != "" {
		if rec, err := sim.rstore.GetRollout(ctx, id); err == nil {
			pr.label, pr.waveSize = phase(rec)
			pr.active = rec.Counts.Draining + rec.Counts.Installing + rec.Counts.Verifying
		}
	}
	m := &meter.Meter{}
	pr.start = time.Now()
	pres, err := sim.h.st.App.Reconciler().Pass(meter.With(ctx, m))
	pr.end = time.Now()
	pr.usage, pr.errs = m.Usage(), pres.Errors
	if err != nil {
		pr.errs++
	}
	return pr
}

// sample reads every node record of the pools after a pass: how many are
// out of service, and which targets each was given.
func (sim *rolloutRun) sample(ctx context.Context, pr *passRec) {
	for _, pool := range sim.pools {
		_ = sim.fstore.PoolNodes(ctx, pool, func(r fleet.Record) error {
			if !r.Eligible() {
				pr.out++
			}
			if r.Target != nil {
				k := pool + "/" + r.NodeID
				sim.mu.Lock()
				if sim.targeted[k] == nil {
					sim.targeted[k] = map[string]bool{}
				}
				sim.targeted[k][r.Target.Version] = true
				sim.mu.Unlock()
			}
			return nil
		})
	}
}

func (sim *rolloutRun) passCount() int { sim.mu.Lock(); defer sim.mu.Unlock(); return len(sim.passes) }

// window is the passes that started in [from, to]: first index, last
// index, peak out of service.
func (sim *rolloutRun) window(from, to time.Time) (int, int, int) {
	sim.mu.Lock()
	defer sim.mu.Unlock()
	first, last, peak := -1, -1, 0
	for i, p := range sim.passes {
		if p.start.Before(from) || p.start.After(to) {
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
		peak = max(peak, p.out)
	}
	return first, last, peak
}

// phase is a rollout's phase at a pass's start and its current wave's size.
func phase(rec rollout.Record) (string, int) {
	run := "B"
	if rec.Version == "2.0.0" {
		run = "A"
	}
	switch {
	case rec.State.Terminal():
		return run + " " + string(rec.State), 0
	case rec.State == api.Aborting:
		return run + " aborting", 0
	case !rec.Enumerated:
		return run + " enumerate", 0
	case !rec.Walked:
		return run + " walk", 0
	}
	for i, w := range rec.Waves {
		if w.FinishedAt == nil {
			if w.StartedAt == nil {
				return run + " bake", w.Size
			}
			return fmt.Sprintf("%s wave %d", run, i+1), w.Size
		}
	}
	return run + " done", 0
}

// passOf is the index of the pass running at t (-1: none).
func passOf(ps []passRec, t time.Time, mu *sync.Mutex) int {
	mu.Lock()
	defer mu.Unlock()
	for i, p := range ps {
		if !t.Before(p.start.Add(-time.Millisecond)) && !t.After(p.end) {
			return i
		}
	}
	return -1
}

// groups sums the passes by phase, in the order phases came.
func groups(ps []passRec, from time.Time) []PassGroup {
	var out []PassGroup
	idx := map[string]int{}
	for _, p := range ps {
		label := p.label
		if label == "idle" && p.start.After(from) {
			label = "between runs"
		}
		i, ok := idx[label]
		if !ok {
			i = len(out)
			idx[label] = i
			out = append(out, PassGroup{Label: label, WaveSize: p.waveSize})
		}
		g := &out[i]
		ms := float64(p.end.Sub(p.start).Microseconds()) / 1000
		g.Passes++
		g.MeanMS += ms
		g.MaxMS = max(g.MaxMS, ms)
		g.Calls += float64(p.usage.Calls)
		g.RCU += p.usage.RCU
		g.WCU += p.usage.WCU
		g.MaxCalls = max(g.MaxCalls, p.usage.Calls)
		g.Active = max(g.Active, p.active)
	}
	for i := range out {
		n := float64(out[i].Passes)
		out[i].MeanMS, out[i].Calls, out[i].RCU, out[i].WCU = out[i].MeanMS/n, out[i].Calls/n, out[i].RCU/n, out[i].WCU/n
	}
	return out
}
