package rollout

// The node steps of a pass: drain (with its reservations), install, verify,
// conclude and release, each reading its node once (docs/rollouts.md).

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// node reads a progress item's node: nil when it is gone. The pass reads a
// node once per step and from then on keeps what its writes return.
func (p *pass) node(ctx context.Context, pr Progress) (*fleet.Record, error) {
	n, err := p.rc.Nodes.GetNode(ctx, pr.PoolID, pr.Resource, pr.Index)
	if errors.Is(err, fleet.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// kept is the node as a write returned it; a write that lost its
// condition (fleet.ErrStale: another writer moved the node) returns
// nothing to keep, so the node is read again — the next write must not
// be decided on what the lost one assumed.
func (p *pass) kept(ctx context.Context, pr Progress, got fleet.Record, err error) (*fleet.Record, error) {
	switch {
	case err == nil:
		return &got, nil
	case errors.Is(err, fleet.ErrStale):
		return p.node(ctx, pr)
	}
	return nil, err
}

// cordon sets or lifts the rollout's cordon on n, a progress item's node
// as last read or written (nil: gone), says whether it had to write, and
// returns the node as it is after.
func (p *pass) cordon(ctx context.Context, pr Progress, n *fleet.Record, on bool) (*fleet.Record, bool, error) {
	if n == nil {
		return nil, false, nil
	}
	var c *api.Cordon
	if on {
		if n.Rollout != nil && n.Rollout.RolloutID == p.rec.RolloutID {
			return n, false, nil
		}
		c = &api.Cordon{By: api.ByRollout, Reason: "rollout " + p.rec.RolloutID + " to " + p.rec.Version,
			RolloutID: p.rec.RolloutID, At: p.now.Truncate(time.Millisecond)}
	} else if n.Rollout == nil || n.Rollout.RolloutID != p.rec.RolloutID {
		return n, false, nil
	}
	pool, err := p.pool(ctx, pr.PoolID)
	if err != nil {
		return n, false, err
	}
	got, err := p.rc.Cordons.SetRolloutCordonIn(ctx, pool.Topology(pr.Resource), *n, c)
	if n, err = p.kept(ctx, pr, got, err); err != nil {
		return n, false, err
	}
	return n, true, p.rc.fault(FaultCordoned)
}

// pool is a pool of the rollout, read once a pass.
func (p *pass) pool(ctx context.Context, id string) (capacity.Pool, error) {
	if pool, ok := p.pools[id]; ok {
		return pool, nil
	}
	pool, err := p.rc.Calendar.GetPool(ctx, id)
	if err != nil {
		return capacity.Pool{}, err
	}
	p.pools[id] = pool
	return pool, nil
}

// advanceActive moves every node that is out of service for the rollout:
// draining ones install once their reservations allow (or are skipped,
// or forced), installing and verifying ones become updated or failed on
// their own reports (or silence past the deadline), rolling back ones
// finish their rollback. Their number is bounded by maxUnavailable.
func (p *pass) advanceActive(ctx context.Context) error {
	for _, st := range []api.RolloutStep{api.Draining, api.Installing, api.Verifying} {
		ps, err := p.rc.Store.ProgressByStep(ctx, p.rec.RolloutID, st, p.visits(), "")
		if err != nil {
			return err
		}
		p.listed(ps)
		for _, pr := range ps {
			var err error
			if st == api.Draining {
				err = p.drain(ctx, pr)
			} else {
				err = p.verify(ctx, pr)
			}
			if err != nil {
				return err
			}
		}
	}
	ps, err := p.rc.Store.ProgressByRollback(ctx, p.rec.RolloutID, RollbackInstalling, p.visits())
	if err != nil {
		return err
	}
	p.listed(ps)
	for _, pr := range ps {
		if err := p.verifyRollback(ctx, pr); err != nil {
			return err
		}
	}
	return nil
}

// listed records nodes in flight as one list of them read them (a list
// at its bound may leave some out).
func (p *pass) listed(ps []Progress) {
	for _, pr := range ps {
		p.inFlight[nodeKey(pr.PoolID, pr.NodeID)] = true
	}
	p.unlisted = p.unlisted || len(ps) >= p.visits()
}

// drain installs on a draining node once no non-terminal reservation on
// its devices overlaps [now, now + progressDeadline); past drain.waitSeconds
// it is skipped (busy) — or, forced, installs anyway and each overlapping
// reservation's history says disrupted.
func (p *pass) drain(ctx context.Context, pr Progress) error {
	deadline := time.Duration(p.rec.Settings.ProgressDeadlineSeconds) * time.Second
	if p.rec.State == api.Aborting {
		n, err := p.node(ctx, pr)
		if err != nil {
			return err
		}
		if n != nil && p.told(*n) {
			// Told the target (left by a pass of the order before v0.7's):
			// it counts as installing, and finishes or times out.
			return p.install(ctx, pr, api.Draining, deadline, n)
		}
		// Not installing yet: back where it was. A pass installing it now
		// wins the step (conclude's write is conditioned on draining), and
		// verify restores what the lift took from it.
		return p.conclude(ctx, pr, api.Draining, api.Skipped, ReasonNotStarted, n)
	}
	busy, err := p.overlapping(ctx, pr, api.Window{Start: p.now, End: p.now.Add(deadline)})
	if err != nil {
		return err
	}
	waited := p.now.Sub(pr.DrainedAt) >= time.Duration(p.rec.Settings.Drain.WaitSeconds)*time.Second
	n, err := p.node(ctx, pr)
	if err != nil {
		return err
	}
	if len(busy) > 0 && waited && p.rec.Settings.Drain.OnTimeout != api.OnTimeoutForce {
		return p.conclude(ctx, pr, api.Draining, api.Skipped, ReasonBusy, n)
	}
	// The cordon was set when the node started; this repairs a crash or a
	// conclusion cut short. A cordon written now is checked against the
	// calendar from the next pass on: a reservation admitted between the
	// read above and this write would be missed.
	n, set, err := p.cordon(ctx, pr, n, true)
	if err != nil || set {
		return err
	}
	if len(busy) > 0 {
		if !waited {
			return nil // wait for them
		}
		for id, tenant := range busy {
			if err := p.rc.Calendar.Disrupt(ctx, tenant, id, p.rec.RolloutID, p.now); err != nil {
				return err
			}
		}
	}
	return p.install(ctx, pr, api.Draining, deadline, n)
}

// overlapping lists the reservations (id → tenant) holding the node's
// devices in w: the entries of its node-hours of w's hours.
func (p *pass) overlapping(ctx context.Context, pr Progress, w api.Window) (map[string]string, error) {
	pool, err := p.pool(ctx, pr.PoolID)
	if err != nil {
		return nil, err
	}
	t := capacity.PoolResource{PoolID: pr.PoolID, Topology: pool.Topology(pr.Resource)}
	var keys []capacity.NodeHourKey
	for _, h := range capacity.HoursOf(w) {
		keys = append(keys, capacity.NodeHourKey{Node: pr.Index, Hour: h})
	}
	got, err := p.rc.Calendar.NodeHours(ctx, t, keys)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, nh := range got {
		for id, e := range nh.Entries {
			if e.Window.Overlaps(w) {
				out[id] = e.Tenant
			}
		}
	}
	return out, nil
}

// install moves a node's progress to installing, then tells the node its
// target. In that order: from the moment a node is told the target it
// counts as installing for every later decision (abort, rollback, counts),
// so only the pass whose step write won tells it, and a crash between the
// two leaves an installing node without its target, which verify tells
// again. The other order let a crash, or an aborting pass racing this one,
// conclude a node told the target as skipped (not_started): it installed
// and was never sent back.
// n is the node as the caller last read or wrote it (a progress write does
// not change it).
func (p *pass) install(ctx context.Context, pr Progress, from api.RolloutStep, deadline time.Duration, n *fleet.Record) error {
	next := pr
	next.Step, next.Deadline, next.UpdatedAt = api.Installing, p.now.Add(deadline), p.now
	if err := p.rc.Store.UpdateProgress(ctx, next, from, pr.Rollback); err != nil {
		if errors.Is(err, ErrStale) {
			return nil // another pass moved it on (installed or concluded): its step is that pass's
		}
		return err
	}
	if err := p.rc.fault(FaultStepped); err != nil {
		return err
	}
	if n == nil {
		return fleet.ErrNotFound
	}
	_, err := p.tell(ctx, next, *n)
	return err
}

// tell writes the rollout's target on an installing node, with the floor
// of the release it ran when the rollout took it, and returns the node as
// it is after.
func (p *pass) tell(ctx context.Context, pr Progress, n fleet.Record) (*fleet.Record, error) {
	floor := int64(0)
	if pr.Previous != nil {
		floor = pr.Previous.Sequence
	}
	t := &fleet.Target{Version: p.rec.Version, Sequence: p.rec.Sequence, RolloutID: p.rec.RolloutID}
	m, err := p.target(ctx, pr, n, t, floor)
	if err != nil {
		return m, err
	}
	return m, p.rc.fault(FaultTargeted)
}

// target writes (or, t nil, lifts) the rollout's target on n and returns
// the node as it is after.
func (p *pass) target(ctx context.Context, pr Progress, n fleet.Record, t *fleet.Target, floor int64) (*fleet.Record, error) {
	got, err := p.rc.Nodes.SetTarget(ctx, n, p.rec.RolloutID, t, floor)
	return p.kept(ctx, pr, got, err)
}

// told: the node holds this rollout's target (rolling forward).
func (p *pass) told(n fleet.Record) bool {
	return n.Target != nil && n.Target.RolloutID == p.rec.RolloutID && n.Target.Version == p.rec.Version
}

// verify moves an installing or verifying node on its last report: the
// target running and healthy → updated; an install reported failed, or
// the target running unhealthy → failed; nothing by the deadline → failed
// (silence is failure).
func (p *pass) verify(ctx context.Context, pr Progress) error {
	nr, err := p.rc.Nodes.GetNode(ctx, pr.PoolID, pr.Resource, pr.Index)
	if err != nil {
		return err
	}
	n := &nr
	runs := n.Running != nil && n.Running.Version == p.rec.Version
	switch {
	case n.Install != nil && n.Install.Version == p.rec.Version && n.Install.State == api.InstallFailed:
		reason := ReasonInstall
		if n.Install.Reason != nil {
			reason += ": " + *n.Install.Reason
		}
		return p.conclude(ctx, pr, pr.Step, api.Failed, clipReason(reason), n)
	case runs && n.State == api.Ready:
		return p.conclude(ctx, pr, pr.Step, api.Updated, "", n)
	case runs && n.State == api.Unhealthy:
		return p.conclude(ctx, pr, pr.Step, api.Failed, ReasonUnhealthy, n)
	case !p.now.Before(pr.Deadline):
		// Silence is failure — unless the pool's nodes went silent
		// together: the control plane's or the network's fault, not the
		// node's; it waits for the reports to return.
		if held, err := p.silenceHeld(ctx, pr.PoolID, *n, pr.Deadline); held || err != nil {
			return err
		}
		return p.conclude(ctx, pr, pr.Step, api.Failed, ReasonDeadline, n)
	case !p.told(*n) || n.Rollout == nil || n.Rollout.RolloutID != p.rec.RolloutID:
		// A crash between the step and the target, or an aborting pass's
		// lift racing the install: it counts as installing, so it is told
		// again and cordoned again (as verifyRollback repairs).
		if n, err = p.tell(ctx, pr, *n); err != nil {
			return err
		}
		_, _, err := p.cordon(ctx, pr, n, true)
		return err
	case pr.Step == api.Installing && (runs || (n.Install != nil && n.Install.Version == p.rec.Version && n.Install.State == api.InstallInstalled)):
		next := pr
		next.Step, next.UpdatedAt = api.Verifying, p.now
		if err := p.rc.Store.UpdateProgress(ctx, next, api.Installing, pr.Rollback); err != nil && !errors.Is(err, ErrStale) {
			return err
		}
		return p.rc.fault(FaultStepped)
	}
	return nil
}

// silenceHeld reports whether a node past its deadline waits instead of
// failing: its pool is in a mass silence (read once a pass), or the node
// is silent and the sweep has not judged its silence yet — in contact
// (ready or unhealthy) and not heard from since the deadline. Only the
// sweep tells a node's silence from its pool's (it counts the pool's late
// nodes), and it records the pool's disruption only once it has counted
// them: a sweep cut short, or not run yet, left a mass silence unrecorded,
// and its nodes were failed for their deadline (the fleet protocol
// simulation, seed 5). Such a node is failed once it reports (alive, not
// running the target) or the sweep marks it unreachable (its own
// silence), and waits while the sweep holds its pool's.
func (p *pass) silenceHeld(ctx context.Context, pool string, n fleet.Record, deadline time.Time) (bool, error) {
	if (n.State == api.Ready || n.State == api.Unhealthy) && (n.LastHeartbeatAt == nil || n.LastHeartbeatAt.Before(deadline)) {
		return true, nil
	}
	if d, ok := p.disrupted[pool]; ok {
		return d, nil
	}
	since, err := p.rc.Nodes.Disrupted(ctx, pool)
	if err != nil {
		return false, err
	}
	p.disrupted[pool] = since != nil
	return since != nil, nil
}

// MaxReason bounds a node's stored reason: "install: " and the 256
// characters a report's install reason may have, so no agent's reason is
// ever cut (a cut one ended mid-digest); a longer one ends in "…".
const MaxReason = len(ReasonInstall+": ") + 256

func clipReason(s string) string {
	if r := []rune(s); len(r) > MaxReason {
		return string(r[:MaxReason-1]) + "…"
	}
	return s
}

// conclude ends a node's part: its target and cordon lifted, then its
// step (a failed node stays out of placement while it is not ready). In
// that order, so a crash between leaves the step where it was and the
// next pass concludes again from the node's reports (which the lift does
// not change); the other order would leave a concluded node cordoned,
// which no pass visits again.
//
// n is the node as the caller read it (nil: gone).
func (p *pass) conclude(ctx context.Context, pr Progress, from, to api.RolloutStep, reason string, n *fleet.Record) error {
	next := pr
	next.Step, next.Reason, next.UpdatedAt = to, reason, p.now
	if to == api.Updated {
		next.Rollback = RollbackDue
	}
	if err := p.release(ctx, next, n); err != nil {
		return err
	}
	if err := p.rc.Store.UpdateProgress(ctx, next, from, pr.Rollback); err != nil {
		if errors.Is(err, ErrStale) {
			return nil
		}
		return err
	}
	delete(p.inFlight, nodeKey(pr.PoolID, pr.NodeID))
	return p.rc.fault(FaultStepped)
}

// release lifts the rollout's target and cordon from n, a node as the
// caller read it (nil: gone).
func (p *pass) release(ctx context.Context, pr Progress, n *fleet.Record) error {
	if n == nil {
		return nil
	}
	if n.Target != nil && n.Target.RolloutID == p.rec.RolloutID {
		var err error
		if n, err = p.target(ctx, pr, *n, nil, 0); err != nil {
			return err
		}
	}
	if err := p.rc.fault(FaultReleased); err != nil {
		return err
	}
	_, _, err := p.cordon(ctx, pr, n, false)
	return err
}
