package rollout

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// Fault points of a pass (Reconciler.Faults), after each write.
const (
	FaultEnumerated = "rollout.enumerated" // a batch of progress items written
	FaultWalked     = "rollout.walked"     // the waves' boundaries recorded
	FaultIntent     = "rollout.intent"     // the nodes to start recorded on the rollout
	FaultStarted    = "rollout.started"    // a node's progress moved to draining
	FaultCordoned   = "rollout.cordoned"   // its rollout cordon set
	FaultTargeted   = "rollout.targeted"   // a node told its target
	FaultStepped    = "rollout.stepped"    // a node's progress moved on
	FaultReleased   = "rollout.released"   // a node's target and cordon lifted
	FaultDecided    = "rollout.decided"    // the rollout's state or a wave changed
	FaultFinished   = "rollout.finished"   // its pools' claims released
)

// PassFaultPoints lists a pass's points.
var PassFaultPoints = []string{FaultEnumerated, FaultWalked, FaultIntent, FaultStarted, FaultCordoned, FaultTargeted,
	FaultStepped, FaultReleased, FaultDecided, FaultFinished}

// Nodes is the fleet as a rollout pass needs it.
type Nodes interface {
	GetNode(ctx context.Context, poolID, resource string, index int) (fleet.Record, error)
	SetTarget(ctx context.Context, r fleet.Record, rolloutID string, t *fleet.Target, floor int64) (fleet.Record, error)
	CountOut(ctx context.Context, poolID string) (int, error)
	SetBaseline(ctx context.Context, poolID string, t fleet.Target) error
	// Disrupted says since when the pool's nodes are silent together (a
	// mass silence the fleet sweep holds: docs/fleet.md), nil for none.
	Disrupted(ctx context.Context, poolID string) (*time.Time, error)
}

// Cordons sets and lifts a rollout's cordon on a node, with its placement
// flags (fleet.Service).
type Cordons interface {
	// SetRolloutCordonIn is SetRolloutCordon with the node's topology given
	// (the pass holds its pools: the fleet need not read the pool again).
	SetRolloutCordonIn(ctx context.Context, t capacity.Topology, rec fleet.Record, c *fleet.Cordon) (fleet.Record, error)
}

// Calendar is what draining reads and writes of the capacity module.
type Calendar interface {
	GetPool(ctx context.Context, poolID string) (capacity.Pool, error)
	NodeHours(ctx context.Context, t capacity.PoolResource, keys []capacity.NodeHourKey) (map[capacity.NodeHourKey]capacity.NodeHour, error)
	Disrupt(ctx context.Context, tenant, id, rolloutID string, at time.Time) error
}

// Reconciler is fleet.rollouts: each pass advances every non-terminal
// rollout by conditional single-item writes, with bounded work per pass
// (docs/rollouts.md, A pass).
type Reconciler struct {
	Store    RolloutStore
	Releases Store
	Nodes    Nodes
	Cordons  Cordons
	Calendar Calendar
	Now      func() time.Time
	Logger   *slog.Logger
	// Table names the deployment in the transition metrics (BC_TABLE).
	Table string
	// Batch bounds the progress items a pass writes while enumerating
	// and reads while walking (default 2,000).
	Batch int
	// Faults is a test hook (nil in production): called after each write
	// with the point's name; an error stops the pass there as a crash.
	Faults func(point string) error
}

func (rc *Reconciler) now() time.Time { return rc.Now().UTC() }

func (rc *Reconciler) fault(p string) error {
	if rc.Faults == nil {
		return nil
	}
	return rc.Faults(p)
}

func (rc *Reconciler) batch() int {
	if rc.Batch <= 0 {
		return 2000
	}
	return rc.Batch
}

// pass is one pass's view of one rollout.
type pass struct {
	rc        *Reconciler
	rec       Record
	now       time.Time
	pools     map[string]capacity.Pool
	disrupted map[string]bool // pool → in a mass silence (read once a pass)
}

// Advance moves one rollout forward as far as it goes now (the
// reservation reconciler calls it for each rollout due).
func (rc *Reconciler) Advance(ctx context.Context, id string) error {
	rec, err := rc.Store.GetRollout(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	p := &pass{rc: rc, rec: rec, now: rc.now(), pools: map[string]capacity.Pool{}, disrupted: map[string]bool{}}
	return p.run(ctx)
}

func (p *pass) run(ctx context.Context) error {
	rec := p.rec
	switch {
	case rec.Finished:
		return nil
	case !rec.Listed:
		// A create that stopped before its claims were made and nobody
		// retried: after a while, undo its claims.
		if p.now.Sub(rec.CreatedAt) < capacity.StaleAfter {
			return nil
		}
		return p.abandon(ctx)
	case rec.State.Terminal():
		return p.finish(ctx)
	case !rec.Enumerated:
		return p.enumerate(ctx)
	case !rec.Walked:
		return p.walk(ctx)
	}
	if err := p.advanceActive(ctx); err != nil {
		return err
	}
	counts, err := p.counts(ctx)
	if err != nil {
		return err
	}
	switch p.rec.State {
	case Progressing:
		if counts.Failed > p.rec.Settings.MaxFailedNodes {
			// Failures exceed the limit: maxFailedNodes 0 aborts at the first.
			return p.decide(ctx, counts, func(r *Record) {
				r.State, r.Reason = Aborting, ReasonFailures
				r.add(Aborting, p.now, ReasonFailures)
			})
		}
		return p.waves(ctx, counts)
	case Aborting:
		return p.abort(ctx, counts)
	}
	return p.decide(ctx, counts, nil) // paused: counts only
}

// decide writes the rollout with fresh counts and fn's change (nothing if
// neither changed). A lost race (pause, abort, another pass) ends the pass.
func (p *pass) decide(ctx context.Context, counts Counts, fn func(*Record)) error {
	next := p.rec
	next.Counts = counts
	if fn != nil {
		fn(&next)
	}
	if fn == nil && next.Counts == p.rec.Counts {
		return nil
	}
	cur, err := p.rc.Store.UpdateRollout(ctx, next)
	if errors.Is(err, ErrStale) {
		return nil
	}
	if err != nil {
		return err
	}
	logTransition(ctx, p.rc.Logger, p.rc.Table, p.rec.State, cur.Rollout, p.now)
	p.rec = cur
	return p.rc.fault(FaultDecided)
}

// counts counts the rollout's nodes by step (index queries).
func (p *pass) counts(ctx context.Context) (Counts, error) {
	var c Counts
	for _, st := range Steps {
		n, err := p.rc.Store.CountStep(ctx, p.rec.RolloutID, st)
		if err != nil {
			return c, err
		}
		switch st {
		case Pending:
			c.Pending = n
		case Draining:
			c.Draining = n
		case Installing:
			c.Installing = n
		case Verifying:
			c.Verifying = n
		case Updated:
			c.Updated = n
		case Failed:
			c.Failed = n
		case Skipped:
			c.Skipped = n
		}
		c.Nodes += n
	}
	return c, nil
}

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
			pr := Progress{NodeProgress: NodeProgress{PoolID: pool, NodeID: n.NodeID, Step: Pending, Previous: n.Running, UpdatedAt: p.now},
				RolloutID: rec.RolloutID, Order: OrderKey(rec.RolloutID, pool, n.NodeID), Resource: n.Resource, Index: n.Index, Platform: n.Platform}
			switch {
			case n.Running != nil && n.Running.Version == rec.Version:
				pr.Step, pr.Reason = Updated, ReasonRunning
			case !platforms[n.Platform]:
				pr.Step, pr.Reason = Skipped, ReasonNoBinary
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
		for _, st := range Steps {
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
func (p *pass) waves(ctx context.Context, counts Counts) error {
	rec := p.rec
	cur := rec.current()
	if cur < 0 {
		return p.decide(ctx, counts, func(r *Record) {
			r.State = Completed
			r.add(Completed, p.now, "")
		})
	}
	w := rec.Waves[cur]
	if w.StartedAt == nil {
		if cur > 0 && p.now.Before(rec.Waves[cur-1].FinishedAt.Add(time.Duration(rec.Settings.BakeSeconds)*time.Second)) {
			return p.decide(ctx, counts, nil) // baking
		}
		if err := p.decide(ctx, counts, func(r *Record) {
			at := p.now.Truncate(time.Millisecond)
			r.Waves[cur].StartedAt = &at
			r.add(Progressing, p.now, waveEvent(cur, false))
		}); err != nil || p.rec.Waves[cur].StartedAt == nil {
			return err
		}
		rec = p.rec
	}
	if err := p.start(ctx, cur, func(limit int) ([]Progress, error) {
		ps, err := p.rc.Store.ProgressByStep(ctx, rec.RolloutID, Pending, limit, "")
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
	return p.decide(ctx, counts, func(r *Record) {
		at := p.now.Truncate(time.Millisecond)
		r.Waves[cur].FinishedAt = &at
		r.add(Progressing, p.now, waveEvent(cur, true))
	})
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
	for _, st := range []Step{Pending, Draining, Installing, Verifying} {
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
	next.Step, next.DrainedAt, next.UpdatedAt = Draining, p.now, p.now
	at := p.now.Truncate(time.Millisecond)
	next.StartedAt = &at
	if err := p.rc.Store.UpdateProgress(ctx, next, Pending, ""); err != nil {
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
	var c *fleet.Cordon
	if on {
		if n.Rollout != nil && n.Rollout.RolloutID == p.rec.RolloutID {
			return n, false, nil
		}
		c = &fleet.Cordon{By: fleet.ByRollout, Reason: "rollout " + p.rec.RolloutID + " to " + p.rec.Version,
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

// visits bounds the nodes of one step (or rollback state) a pass visits:
// every one in service's budget and some left over by crashes, at most
// MaxVisitPerPass (a pass's time, whatever maxUnavailable allows; the rest
// wait for the next pass).
func (p *pass) visits() int {
	return min(4*p.rec.Settings.MaxUnavailable+16, MaxVisitPerPass)
}

// advanceActive moves every node that is out of service for the rollout:
// draining ones install once their reservations allow (or are skipped,
// or forced), installing and verifying ones become updated or failed on
// their own reports (or silence past the deadline), rolling back ones
// finish their rollback. Their number is bounded by maxUnavailable.
func (p *pass) advanceActive(ctx context.Context) error {
	for _, st := range []Step{Draining, Installing, Verifying} {
		ps, err := p.rc.Store.ProgressByStep(ctx, p.rec.RolloutID, st, p.visits(), "")
		if err != nil {
			return err
		}
		for _, pr := range ps {
			var err error
			if st == Draining {
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
	for _, pr := range ps {
		if err := p.verifyRollback(ctx, pr); err != nil {
			return err
		}
	}
	return nil
}

// drain installs on a draining node once no non-terminal reservation on
// its devices overlaps [now, now + progressDeadline); past drain.waitSeconds
// it is skipped (busy) — or, forced, installs anyway and each overlapping
// reservation's history says disrupted.
func (p *pass) drain(ctx context.Context, pr Progress) error {
	deadline := time.Duration(p.rec.Settings.ProgressDeadlineSeconds) * time.Second
	if p.rec.State == Aborting {
		n, err := p.node(ctx, pr)
		if err != nil {
			return err
		}
		if n != nil && p.told(*n) {
			// Told the target (left by a pass of the order before v0.7's):
			// it counts as installing, and finishes or times out.
			return p.install(ctx, pr, Draining, deadline, n)
		}
		// Not installing yet: back where it was. A pass installing it now
		// wins the step (conclude's write is conditioned on draining), and
		// verify restores what the lift took from it.
		return p.conclude(ctx, pr, Draining, Skipped, ReasonNotStarted, n)
	}
	busy, err := p.overlapping(ctx, pr, capacity.Window{Start: p.now, End: p.now.Add(deadline)})
	if err != nil {
		return err
	}
	waited := p.now.Sub(pr.DrainedAt) >= time.Duration(p.rec.Settings.Drain.WaitSeconds)*time.Second
	n, err := p.node(ctx, pr)
	if err != nil {
		return err
	}
	if len(busy) > 0 && waited && p.rec.Settings.Drain.OnTimeout != OnTimeoutForce {
		return p.conclude(ctx, pr, Draining, Skipped, ReasonBusy, n)
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
	return p.install(ctx, pr, Draining, deadline, n)
}

// overlapping lists the reservations (id → tenant) holding the node's
// devices in w: the entries of its node-hours of w's hours.
func (p *pass) overlapping(ctx context.Context, pr Progress, w capacity.Window) (map[string]string, error) {
	pool, err := p.pool(ctx, pr.PoolID)
	if err != nil {
		return nil, err
	}
	t := capacity.PoolResource{PoolID: pr.PoolID, Topology: pool.Topology(pr.Resource)}
	var keys []capacity.NodeHourKey
	for _, h := range w.Hours() {
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
func (p *pass) install(ctx context.Context, pr Progress, from Step, deadline time.Duration, n *fleet.Record) error {
	next := pr
	next.Step, next.Deadline, next.UpdatedAt = Installing, p.now.Add(deadline), p.now
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
	case n.Install != nil && n.Install.Version == p.rec.Version && n.Install.State == fleet.InstallFailed:
		reason := ReasonInstall
		if n.Install.Reason != nil {
			reason += ": " + *n.Install.Reason
		}
		return p.conclude(ctx, pr, pr.Step, Failed, clipReason(reason), n)
	case runs && n.State == fleet.Ready:
		return p.conclude(ctx, pr, pr.Step, Updated, "", n)
	case runs && n.State == fleet.Unhealthy:
		return p.conclude(ctx, pr, pr.Step, Failed, ReasonUnhealthy, n)
	case !p.now.Before(pr.Deadline):
		// Silence is failure — unless the pool's nodes went silent
		// together: the control plane's or the network's fault, not the
		// node's; it waits for the reports to return.
		if held, err := p.silenceHeld(ctx, pr.PoolID); held || err != nil {
			return err
		}
		return p.conclude(ctx, pr, pr.Step, Failed, ReasonDeadline, n)
	case !p.told(*n) || n.Rollout == nil || n.Rollout.RolloutID != p.rec.RolloutID:
		// A crash between the step and the target, or an aborting pass's
		// lift racing the install: it counts as installing, so it is told
		// again and cordoned again (as verifyRollback repairs).
		if n, err = p.tell(ctx, pr, *n); err != nil {
			return err
		}
		_, _, err := p.cordon(ctx, pr, n, true)
		return err
	case pr.Step == Installing && (runs || (n.Install != nil && n.Install.Version == p.rec.Version && n.Install.State == fleet.InstallInstalled)):
		next := pr
		next.Step, next.UpdatedAt = Verifying, p.now
		if err := p.rc.Store.UpdateProgress(ctx, next, Installing, pr.Rollback); err != nil && !errors.Is(err, ErrStale) {
			return err
		}
		return p.rc.fault(FaultStepped)
	}
	return nil
}

// silenceHeld reports whether the pool is in a mass silence (read once a
// pass).
func (p *pass) silenceHeld(ctx context.Context, pool string) (bool, error) {
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
func (p *pass) conclude(ctx context.Context, pr Progress, from, to Step, reason string, n *fleet.Record) error {
	next := pr
	next.Step, next.Reason, next.UpdatedAt = to, reason, p.now
	if to == Updated {
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

// abort: draining nodes go back (advanceActive); installing and verifying
// ones finish or time out; then, with rollbackOnAbort, every updated node
// is sent back to the release it ran before, under maxUnavailable.
func (p *pass) abort(ctx context.Context, counts Counts) error {
	if counts.Draining+counts.Installing+counts.Verifying > 0 {
		return p.decide(ctx, counts, nil)
	}
	if !p.rec.Settings.RollbackOnAbort {
		return p.decide(ctx, counts, func(r *Record) {
			r.State = Aborted
			r.add(Aborted, p.now, r.Reason)
		})
	}
	// Nodes it updated not yet sent back, by the rollout's order (nodes
	// that ran the version before the rollout are not moved).
	due, err := p.rc.Store.ProgressByRollback(ctx, p.rec.RolloutID, RollbackDue, p.visits())
	if err != nil {
		return err
	}
	inFlight, err := p.rc.Store.ProgressByRollback(ctx, p.rec.RolloutID, RollbackInstalling, 1)
	if err != nil {
		return err
	}
	if len(due) == 0 && len(inFlight) == 0 {
		return p.decide(ctx, counts, func(r *Record) {
			r.State = RolledBack
			r.add(RolledBack, p.now, r.Reason)
		})
	}
	if err := p.start(ctx, -1, func(limit int) ([]Progress, error) {
		return due[:min(limit, len(due))], nil
	}, p.rollback); err != nil {
		return err
	}
	return p.decide(ctx, counts, nil)
}

// rollback sends an updated node back to the release it ran before.
func (p *pass) rollback(ctx context.Context, pr Progress) error {
	next := pr
	if pr.Previous == nil {
		next.Rollback, next.Reason, next.UpdatedAt = RollbackDone, ReasonNoPrevious, p.now
		err := p.rc.Store.UpdateProgress(ctx, next, Updated, RollbackDue)
		if errors.Is(err, ErrStale) {
			err = nil
		}
		return err
	}
	next.Rollback, next.UpdatedAt = RollbackInstalling, p.now
	next.Deadline = p.now.Add(time.Duration(p.rec.Settings.ProgressDeadlineSeconds) * time.Second)
	if err := p.rc.Store.UpdateProgress(ctx, next, Updated, RollbackDue); err != nil {
		if errors.Is(err, ErrStale) {
			return nil
		}
		return err
	}
	if err := p.rc.fault(FaultStarted); err != nil {
		return err
	}
	n, err := p.node(ctx, pr)
	if err != nil {
		return err
	}
	if n, _, err = p.cordon(ctx, next, n, true); err != nil {
		return err
	}
	if n == nil {
		return fleet.ErrNotFound
	}
	t := &fleet.Target{Version: pr.Previous.Version, Sequence: pr.Previous.Sequence, RolloutID: p.rec.RolloutID}
	if _, err := p.target(ctx, pr, *n, t, pr.Previous.Sequence); err != nil {
		return err
	}
	return p.rc.fault(FaultTargeted)
}

// verifyRollback ends a node's rollback on its report: the previous
// release running and healthy → done; the install failed, unhealthy or
// silent past the deadline → failed.
func (p *pass) verifyRollback(ctx context.Context, pr Progress) error {
	if pr.Previous == nil {
		return nil
	}
	nr, err := p.rc.Nodes.GetNode(ctx, pr.PoolID, pr.Resource, pr.Index)
	if err != nil {
		return err
	}
	n := &nr
	runs := n.Running != nil && n.Running.Version == pr.Previous.Version
	to := ""
	switch {
	case runs && n.State == fleet.Ready:
		to = RollbackDone
	case n.Install != nil && n.Install.Version == pr.Previous.Version && n.Install.State == fleet.InstallFailed,
		runs && n.State == fleet.Unhealthy:
		to = RollbackFailed
	case !p.now.Before(pr.Deadline):
		if held, err := p.silenceHeld(ctx, pr.PoolID); held || err != nil {
			return err // a mass silence: not the node's failure
		}
		to = RollbackFailed
	case n.Target == nil || n.Target.RolloutID != p.rec.RolloutID:
		// The target was not written yet (a crash after the step): again.
		t := &fleet.Target{Version: pr.Previous.Version, Sequence: pr.Previous.Sequence, RolloutID: p.rec.RolloutID}
		if n, err = p.target(ctx, pr, *n, t, pr.Previous.Sequence); err != nil {
			return err
		}
		_, _, err := p.cordon(ctx, pr, n, true)
		return err
	default:
		return nil
	}
	// Lifted before the step is written, as in conclude.
	next := pr
	next.Rollback, next.UpdatedAt = to, p.now
	if err := p.release(ctx, next, n); err != nil {
		return err
	}
	if err := p.rc.Store.UpdateProgress(ctx, next, Updated, RollbackInstalling); err != nil {
		if errors.Is(err, ErrStale) {
			return nil
		}
		return err
	}
	return p.rc.fault(FaultStepped)
}

// abandon finishes a create that stopped before its claims were made.
// Marked finished first, conditioned on Ver, and only then its claims
// released: a create whose final write (listed) races this either wins,
// and this write fails and leaves its claims alone, or loses and answers
// UNAVAILABLE (Rollouts.claim), so a create never answers a rollout this
// abandoned. A crash between leaves claims of a finished, unlisted
// rollout, which the next create of those pools takes over.
func (p *pass) abandon(ctx context.Context) error {
	rec := p.rec
	rec.Finished, rec.Due, rec.Reason = true, time.Time{}, ReasonAbandoned
	cur, err := p.rc.Store.UpdateRollout(ctx, rec)
	if errors.Is(err, ErrStale) {
		return nil // listed (or retried) meanwhile: the next pass reads it again
	}
	if err != nil {
		return err
	}
	p.rec = cur
	for _, pool := range rec.Pools {
		if err := p.rc.Store.ReleasePool(ctx, pool, rec.RolloutID); err != nil {
			return err
		}
	}
	return p.rc.fault(FaultFinished)
}

// finish ends a terminal rollout: (completed) its version becomes the
// baseline of each of its pools in which at least one node was updated;
// its pools' claims are released; it is due no more.
func (p *pass) finish(ctx context.Context) error {
	rec := p.rec
	if rec.State == Completed {
		updated, err := p.rc.Store.PoolsUpdated(ctx, rec.RolloutID, rec.Pools)
		if err != nil {
			return err
		}
		for _, pool := range rec.Pools {
			if !updated[pool] {
				continue // every node skipped or failed: the pool's baseline stays
			}
			if err := p.rc.Nodes.SetBaseline(ctx, pool, fleet.Target{Version: rec.Version, Sequence: rec.Sequence, RolloutID: rec.RolloutID}); err != nil {
				return err
			}
		}
	}
	for _, pool := range rec.Pools {
		if err := p.rc.Store.ReleasePool(ctx, pool, rec.RolloutID); err != nil {
			return err
		}
	}
	if err := p.rc.fault(FaultFinished); err != nil {
		return err
	}
	rec.Finished, rec.Due = true, time.Time{}
	_, err := p.rc.Store.UpdateRollout(ctx, rec)
	if errors.Is(err, ErrStale) {
		return nil
	}
	return err
}
