package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dsse"
)

// Service is the fleet API's behaviour: nodes, their heartbeats and their
// sweep.
type Service struct {
	Store    Store
	Pools    Pools
	Calendar Calendar
	Releases Releases
	Now      func() time.Time
	Logger   *slog.Logger
	// Interval is the idle heartbeat interval (default DefaultInterval);
	// a node is unreachable after UnreachableAfter of them.
	Interval time.Duration
	// ProvisionHours is the capacity module's provisioned horizon (default
	// capacity.ProvisionHours): an ineligible node's node-hours are flagged
	// that far ahead, and FlagMarginHours more.
	ProvisionHours int
	// SweepEvery is how often a managed pool's nodes are swept (default:
	// every pass).
	SweepEvery time.Duration
	// Serial runs the flag writes of one node one after another (the
	// simulation's hook).
	Serial bool

	keys      sync.Map // pool/node → cachedKey
	manifests sync.Map // version → Release (immutable once recorded)
	baselines sync.Map // pool → cachedBaseline
}

// cachedKey is a node's key as a function last read it.
type cachedKey struct {
	pins     *dsse.Pins
	keyID    string
	owner    string
	record   Record
	expireAt time.Time
}

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now().UTC()
	}
	return s.Now().UTC()
}

func (s *Service) interval() time.Duration {
	if s.Interval <= 0 {
		return DefaultInterval
	}
	return s.Interval
}

func (s *Service) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

func unavailable(err error) error {
	if e := apierr.As(err); e != nil {
		return e
	}
	return apierr.Dependency("dynamodb", err)
}

// ParseNodeID splits "<resource>-node-<k>".
func ParseNodeID(id string) (resource string, index int, ok bool) {
	i := strings.LastIndex(id, "-node-")
	if i <= 0 {
		return "", 0, false
	}
	k, err := strconv.Atoi(id[i+len("-node-"):])
	if err != nil || k < 0 || strconv.Itoa(k) != id[i+len("-node-"):] {
		return "", 0, false
	}
	return id[:i], k, true
}

// ownedPool reads a pool the tenant owns (NOT_FOUND otherwise: a tenant
// offered the pool sees none of its nodes).
func (s *Service) ownedPool(ctx context.Context, tenant, poolID string) (capacity.Pool, error) {
	p, err := s.Pools.GetPool(ctx, poolID)
	switch {
	case errors.Is(err, capacity.ErrNotFound):
		return p, poolNotFound(poolID)
	case err != nil:
		return p, unavailable(err)
	case !p.OwnedBy(tenant):
		return p, poolNotFound(poolID)
	}
	return p, nil
}

func poolNotFound(id string) error {
	return apierr.New(apierr.NotFound, "pool %q not found (or not owned by the tenant)", id)
}

func nodeNotFound(pool, id string) error {
	return apierr.New(apierr.NotFound, "node %q of pool %q is not registered", id, pool)
}

// nodeOf checks that id names a node of the pool.
func nodeOf(p capacity.Pool, id string) (capacity.Topology, int, error) {
	res, k, ok := ParseNodeID(id)
	if ok {
		if _, has := p.Resources[res]; has {
			t := p.Topology(res)
			if k < t.Nodes() {
				return t, k, nil
			}
		}
	}
	return capacity.Topology{}, 0, apierr.Invalid("constraint", "nodeId",
		"nodeId: %q is not a node of pool %q (nodes are <resource>-node-<k>, k from 0)", id, p.PoolID)
}

// Register records a node of a pool the tenant owns with its key and
// platform; the same registration again returns the stored node.
func (s *Service) Register(ctx context.Context, tenant, poolID, nodeID, publicKey, platform string) (Node, error) {
	p, err := s.ownedPool(ctx, tenant, poolID)
	if err != nil {
		return Node{}, err
	}
	t, k, err := nodeOf(p, nodeID)
	if err != nil {
		return Node{}, err
	}
	keys, err := dsse.ParsePEMBundle([]byte(publicKey))
	if err != nil || len(keys) != 1 {
		if err == nil {
			err = fmt.Errorf("%d keys, want one", len(keys))
		}
		return Node{}, apierr.Invalid("constraint", "publicKey", "publicKey: a PEM PUBLIC KEY (ECDSA P-256 or Ed25519): %v", err)
	}
	keyID, err := dsse.KeyID(keys[0])
	if err != nil {
		return Node{}, apierr.Invalid("constraint", "publicKey", "publicKey: %v", err)
	}
	pem, _ := dsse.MarshalPublicKeyPEM(keys[0])
	now := s.now()
	// The sweep first: a crash after the put still gets the node swept.
	if err := s.Store.EnsureSweep(ctx, poolID, now); err != nil {
		return Node{}, unavailable(err)
	}
	rec := Record{Node: Node{PoolID: poolID, NodeID: nodeID, Resource: t.Resource, Platform: platform, KeyID: keyID,
		State: Registered, CreatedAt: now.Truncate(time.Millisecond)}, Index: k, Owner: p.OwnerTenantID, PublicKey: string(pem), NodeSize: t.NodeSize}
	stored, err := s.Store.PutNode(ctx, rec)
	switch {
	case errors.Is(err, ErrExists):
		if stored.KeyID != keyID {
			return Node{}, apierr.New(apierr.Conflict, "node %q is registered with another key (%s)", nodeID, stored.KeyID).
				With("field", "publicKey").With("keyId", stored.KeyID)
		}
		if stored.Platform != platform {
			return Node{}, apierr.New(apierr.Conflict, "node %q is registered with platform %s", nodeID, stored.Platform).
				With("field", "platform").With("platform", stored.Platform)
		}
		rec = stored
	case err != nil:
		return Node{}, unavailable(err)
	default:
		rec = stored
	}
	// A registered node is managed, and not eligible until it reports
	// healthy: its node-hours are flagged before this answers.
	if rec, err = s.syncFlags(ctx, rec, t); err != nil {
		return Node{}, err
	}
	return rec.View(), nil
}

// Get returns one node of a pool the tenant owns.
func (s *Service) Get(ctx context.Context, tenant, poolID, nodeID string) (Node, error) {
	p, err := s.ownedPool(ctx, tenant, poolID)
	if err != nil {
		return Node{}, err
	}
	rec, _, err := s.record(ctx, p, nodeID)
	if err != nil {
		return Node{}, err
	}
	return rec.View(), nil
}

// record reads a node of pool p.
func (s *Service) record(ctx context.Context, p capacity.Pool, nodeID string) (Record, capacity.Topology, error) {
	t, k, err := nodeOf(p, nodeID)
	if err != nil {
		return Record{}, t, err
	}
	rec, err := s.Store.GetNode(ctx, p.PoolID, t.Resource, k)
	switch {
	case errors.Is(err, ErrNotFound):
		return Record{}, t, nodeNotFound(p.PoolID, nodeID)
	case err != nil:
		return Record{}, t, unavailable(err)
	}
	return rec, t, nil
}

// List lists a pool's registered nodes (of one state when state is not "").
func (s *Service) List(ctx context.Context, tenant, poolID string, state State, page capacity.Page) ([]Node, map[string]string, error) {
	if _, err := s.ownedPool(ctx, tenant, poolID); err != nil {
		return nil, nil, err
	}
	recs, next, err := s.Store.ListNodes(ctx, poolID, state, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	out := make([]Node, len(recs))
	for i, r := range recs {
		out[i] = r.View()
	}
	return out, next, nil
}

// Cordon sets the operator's cordon (idempotent): no new reservation is
// placed on the node once this answers; what it holds is untouched.
func (s *Service) Cordon(ctx context.Context, tenant, poolID, nodeID, reason string) (Node, error) {
	return s.setCordon(ctx, tenant, poolID, nodeID, ByOperator, &Cordon{By: ByOperator, Reason: reason})
}

// Uncordon lifts the operator's cordon (never a rollout's); idempotent.
func (s *Service) Uncordon(ctx context.Context, tenant, poolID, nodeID string) (Node, error) {
	return s.setCordon(ctx, tenant, poolID, nodeID, ByOperator, nil)
}

func (s *Service) setCordon(ctx context.Context, tenant, poolID, nodeID, by string, c *Cordon) (Node, error) {
	p, err := s.ownedPool(ctx, tenant, poolID)
	if err != nil {
		return Node{}, err
	}
	for attempt := 0; ; attempt++ {
		rec, t, err := s.record(ctx, p, nodeID)
		if err != nil {
			return Node{}, err
		}
		cur := rec.Operator
		if by == ByRollout {
			cur = rec.Rollout
		}
		if (cur == nil) != (c == nil) {
			if c != nil {
				c.At = s.now().Truncate(time.Millisecond)
			}
			rec, err = s.Store.SetCordon(ctx, rec, by, c)
			if errors.Is(err, ErrStale) && attempt < 4 {
				continue
			}
			if err != nil {
				return Node{}, unavailable(err)
			}
		}
		if rec, err = s.syncFlags(ctx, rec, t); err != nil {
			return Node{}, err
		}
		return rec.View(), nil
	}
}

// SetRolloutCordon sets or lifts a rollout's cordon on a node (the
// rollout reconciler's, issue-free of the tenant check).
func (s *Service) SetRolloutCordon(ctx context.Context, rec Record, c *Cordon) (Record, error) {
	p, err := s.Pools.GetPool(ctx, rec.PoolID)
	if err != nil {
		return rec, unavailable(err)
	}
	if (rec.Rollout == nil) != (c == nil) {
		if rec, err = s.Store.SetCordon(ctx, rec, ByRollout, c); err != nil {
			return rec, err
		}
	}
	return s.syncFlags(ctx, rec, p.Topology(rec.Resource))
}

// flagTarget is the hour through which (exclusive) an ineligible node's
// node-hours must be flagged now.
func (s *Service) flagTarget(now time.Time) capacity.Hour {
	h := s.ProvisionHours
	if h <= 0 {
		h = capacity.ProvisionHours
	}
	return capacity.HourOf(now) + capacity.Hour(h+FlagMarginHours)
}

// syncFlags makes the node's node-hours say what its record says: flagged
// from now through the horizon (and the margin) while it is not eligible,
// unflagged where they were once it is. Then it records what they say, if
// the node's eligibility did not change meanwhile (else the next call, or
// the sweep, does it again). Idempotent.
func (s *Service) syncFlags(ctx context.Context, rec Record, t capacity.Topology) (Record, error) {
	off, from, to, ok := s.flagSpan(rec)
	if !ok {
		return rec, nil
	}
	pr := capacity.PoolResource{PoolID: rec.PoolID, Topology: t}
	var hours []capacity.Hour
	for h := from; h < to; h++ {
		hours = append(hours, h)
	}
	if err := s.each(ctx, len(hours), func(i int) error {
		return s.Calendar.Flag(ctx, pr, rec.Index, hours[i], off)
	}); err != nil {
		return rec, unavailable(err)
	}
	err := s.Store.SetFlagged(ctx, rec, off, to)
	switch {
	case errors.Is(err, ErrStale):
		return rec, nil // its eligibility moved: whoever moved it syncs again
	case err != nil:
		return rec, unavailable(err)
	}
	rec.Flagged, rec.FlaggedTo = off, to
	if !off {
		rec.FlaggedTo = 0
	}
	return rec, nil
}

// flagSpan is what syncFlags would write for rec now: off or on, over
// the hours [from, to); ok false when nothing.
func (s *Service) flagSpan(rec Record) (off bool, from, to capacity.Hour, ok bool) {
	now := s.now()
	off = !rec.Eligible()
	from = capacity.HourOf(now)
	to = s.flagTarget(now)
	switch {
	case off && rec.Flagged && rec.FlaggedTo >= to-1:
		return off, from, to, false // flagged far enough ahead (the sweep extends it hourly)
	case off && rec.Flagged && rec.FlaggedTo > from:
		from = rec.FlaggedTo
	case !off && !rec.Flagged:
		return off, from, to, false
	case !off:
		to = rec.FlaggedTo
	}
	return off, from, to, true
}

// flagWorkers bounds one node's flag writes at once.
const flagWorkers = 16

// each runs fn for 0..n-1, flagWorkers at a time (one at a time when
// Serial), and returns the first error.
func (s *Service) each(ctx context.Context, n int, fn func(i int) error) error {
	if s.Serial || n <= 1 {
		for i := range n {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	jobs := make(chan int)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for range min(flagWorkers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				errs[i] = fn(i)
			}
		}()
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}
