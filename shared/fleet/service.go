package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Service is the fleet API's behaviour: nodes, their heartbeats and their
// sweep.
type Service struct {
	Store    Store
	Pools    Pools
	Calendar Calendar
	Releases Releases
	// Log is the release log a release is told with (nil: releases are
	// told without log evidence — tests of other parts only).
	Log Log
	// Rollouts says whether a rollout still holds a node it cordoned or
	// targeted (nil: never asked).
	Rollouts RolloutHolds
	// Table names the deployment in the sweep's metrics (BC_TABLE).
	Table string
	// Adopter binds what a newly managed node holds (nil: nothing to tell).
	Adopter Adopter
	Now     func() time.Time
	Logger  *slog.Logger
	// Interval is the idle heartbeat interval (default api.DefaultInterval);
	// a node is unreachable after api.UnreachableAfter of them.
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

	keys       sync.Map // pool/node → cachedKey
	manifests  sync.Map // version → NodeRelease (immutable once recorded)
	noBaseline sync.Map // pool → time.Time: until then the pool is taken to have no baseline
	roots      sync.Map // log size → tlog.Hash: the tree's root at that size (immutable)
	cp         atomic.Pointer[cachedCheckpoint]
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
		return api.DefaultInterval
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

// poolNotFound and nodeNotFound say, in details.field, which of the
// request's ids names what is missing. A pool the tenant does not own is
// one answer whether it exists or not.
func poolNotFound(id string) error {
	return apierr.New(apierr.NotFound, "pool %q not found (or not owned by the tenant)", id).With("field", "poolId")
}

func nodeNotFound(pool, id string) error {
	return apierr.New(apierr.NotFound, "node %q of pool %q is not registered", id, pool).With("field", "nodeId")
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
// platform; the same registration again returns the stored node, another
// key or platform is CONFLICT.
func (s *Service) Register(ctx context.Context, tenant, poolID, nodeID, publicKey, platform string) (api.Node, error) {
	return s.register(ctx, tenant, poolID, nodeID, publicKey, platform, false)
}

// Replace is Register with replace: true — a registered node's key and
// platform are replaced (a host re-imaged, a key lost): it keeps its
// reservations, bindings and cordon, its counter restarts, and it is
// registered, out of placement, until a heartbeat under the new key.
func (s *Service) Replace(ctx context.Context, tenant, poolID, nodeID, publicKey, platform string) (api.Node, error) {
	return s.register(ctx, tenant, poolID, nodeID, publicKey, platform, true)
}

func (s *Service) register(ctx context.Context, tenant, poolID, nodeID, publicKey, platform string, replace bool) (api.Node, error) {
	p, err := s.ownedPool(ctx, tenant, poolID)
	if err != nil {
		return api.Node{}, err
	}
	t, k, err := nodeOf(p, nodeID)
	if err != nil {
		return api.Node{}, err
	}
	keys, err := dsse.ParsePEMBundle([]byte(publicKey))
	if err != nil || len(keys) != 1 {
		if err == nil {
			err = fmt.Errorf("%d keys, want one", len(keys))
		}
		return api.Node{}, apierr.Invalid("constraint", "publicKey", "publicKey: a PEM PUBLIC KEY (ECDSA P-256 or Ed25519): %v", err)
	}
	keyID, err := dsse.KeyID(keys[0])
	if err != nil {
		return api.Node{}, apierr.Invalid("constraint", "publicKey", "publicKey: %v", err)
	}
	pem, _ := dsse.MarshalPublicKeyPEM(keys[0])
	now := s.now()
	// The sweep first: a crash after the put still gets the node swept.
	if err := s.Store.EnsureSweep(ctx, poolID, now); err != nil {
		return api.Node{}, unavailable(err)
	}
	rec := Record{Node: api.Node{PoolID: poolID, NodeID: nodeID, Resource: t.Resource, Platform: platform, KeyID: keyID,
		State: api.Registered, CreatedAt: now.Truncate(time.Millisecond)}, Index: k, Owner: p.OwnerTenantID, PublicKey: string(pem), NodeSize: t.NodeSize}
	stored, err := s.Store.PutNode(ctx, rec)
	switch {
	case errors.Is(err, ErrExists) && replace:
		if rec, err = s.replaceKey(ctx, stored, keyID, string(pem), platform); err != nil {
			return api.Node{}, err
		}
	case errors.Is(err, ErrExists):
		if stored.KeyID != keyID {
			return api.Node{}, apierr.New(apierr.Conflict, "node %q is registered with another key (%s); to hand it to this key, register it with replace: true "+
				"(bcctl nodes register --replace)", nodeID, stored.KeyID).
				With("field", "publicKey").With("keyId", stored.KeyID)
		}
		if stored.Platform != platform {
			return api.Node{}, apierr.New(apierr.Conflict, "node %q is registered with platform %s; to change it, register it with replace: true "+
				"(bcctl nodes register --replace)", nodeID, stored.Platform).
				With("field", "platform").With("platform", stored.Platform)
		}
		rec = stored
	case err != nil:
		return api.Node{}, unavailable(err)
	default:
		rec = stored
	}
	// A registered node is managed, and not eligible until it reports
	// healthy (a replaced one, under its new key): its node-hours are
	// flagged before this answers, as a heartbeat that takes a node out of
	// ready flags them.
	if rec, err = s.syncFlags(ctx, rec, t); err != nil {
		return api.Node{}, err
	}
	if rec, err = s.adopt(ctx, rec, t); err != nil {
		return api.Node{}, err
	}
	return rec.View(), nil
}

// replaceKey gives a registered node the key and platform (Rekeyer), one
// conditional write against the key and platform read: a retry, or a
// racing replace to the same key, finds them there and is a replay — it
// does not restart the counter of a node that heartbeated meanwhile.
func (s *Service) replaceKey(ctx context.Context, rec Record, keyID, pem, platform string) (Record, error) {
	rk, ok := s.Store.(Rekeyer)
	if !ok {
		return rec, apierr.New(apierr.Internal, "fleet: the node store cannot replace keys")
	}
	for attempt := 0; rec.KeyID != keyID || rec.Platform != platform; attempt++ {
		cur, err := rk.ReplaceKey(ctx, rec, keyID, pem, platform)
		switch {
		case err == nil:
			s.keys.Delete(rec.PoolID + "/" + rec.NodeID)
			return cur, nil
		case errors.Is(err, ErrStale) && attempt < maxSyncAttempts:
			// Replaced meanwhile (or deregistered): compare again.
			cur, err := s.Store.GetNode(ctx, rec.PoolID, rec.Resource, rec.Index)
			switch {
			case errors.Is(err, ErrNotFound):
				return rec, nodeNotFound(rec.PoolID, rec.NodeID)
			case err != nil:
				return rec, unavailable(err)
			}
			rec = cur
		default:
			return rec, unavailable(err)
		}
	}
	return rec, nil
}

// adopt tells a node that just became managed the reservations it holds
// (Adopter), once; the sweep repeats it for a node whose registration
// was cut short.
func (s *Service) adopt(ctx context.Context, rec Record, t capacity.Topology) (Record, error) {
	if rec.Adopted || s.Adopter == nil {
		return rec, nil
	}
	// What it held when it registered: reservations that ended since
	// (the sweep finishing a register cut short) are told to unbind.
	if err := s.Adopter.Adopt(ctx, capacity.PoolResource{PoolID: rec.PoolID, Topology: t}, rec.Index, rec.CreatedAt); err != nil {
		return rec, unavailable(err)
	}
	if err := s.Store.SetAdopted(ctx, rec); err != nil {
		return rec, unavailable(err)
	}
	rec.Adopted = true
	return rec, nil
}

// Get returns one node of a pool the tenant owns.
func (s *Service) Get(ctx context.Context, tenant, poolID, nodeID string) (api.Node, error) {
	p, err := s.ownedPool(ctx, tenant, poolID)
	if err != nil {
		return api.Node{}, err
	}
	rec, _, err := s.record(ctx, p, nodeID)
	if err != nil {
		return api.Node{}, err
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
func (s *Service) List(ctx context.Context, tenant, poolID string, state api.NodeState, page paging.Page) ([]api.Node, map[string]string, error) {
	if _, err := s.ownedPool(ctx, tenant, poolID); err != nil {
		return nil, nil, err
	}
	recs, next, err := s.Store.ListNodes(ctx, poolID, state, page)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	out := make([]api.Node, len(recs))
	for i, r := range recs {
		out[i] = r.View()
	}
	return out, next, nil
}

// Cordon sets the operator's cordon (idempotent): no new reservation is
// placed on the node once this answers; what it holds is untouched.
func (s *Service) Cordon(ctx context.Context, tenant, poolID, nodeID, reason string) (api.Node, error) {
	return s.setCordon(ctx, tenant, poolID, nodeID, api.ByOperator, &api.Cordon{By: api.ByOperator, Reason: reason})
}

// Uncordon lifts the operator's cordon (never a rollout's); idempotent.
func (s *Service) Uncordon(ctx context.Context, tenant, poolID, nodeID string) (api.Node, error) {
	return s.setCordon(ctx, tenant, poolID, nodeID, api.ByOperator, nil)
}

func (s *Service) setCordon(ctx context.Context, tenant, poolID, nodeID, by string, c *api.Cordon) (api.Node, error) {
	p, err := s.ownedPool(ctx, tenant, poolID)
	if err != nil {
		return api.Node{}, err
	}
	for attempt := 0; ; attempt++ {
		rec, t, err := s.record(ctx, p, nodeID)
		if err != nil {
			return api.Node{}, err
		}
		cur := rec.Operator
		if by == api.ByRollout {
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
				return api.Node{}, unavailable(err)
			}
		}
		if rec, err = s.syncFlags(ctx, rec, t); err != nil {
			return api.Node{}, err
		}
		return rec.View(), nil
	}
}

// SetRolloutCordon sets or lifts a rollout's cordon on a node (the
// rollout reconciler's, issue-free of the tenant check).
func (s *Service) SetRolloutCordon(ctx context.Context, rec Record, c *api.Cordon) (Record, error) {
	p, err := s.Pools.GetPool(ctx, rec.PoolID)
	if err != nil {
		return rec, unavailable(err)
	}
	return s.SetRolloutCordonIn(ctx, p.Topology(rec.Resource), rec, c)
}

// SetRolloutCordonIn is SetRolloutCordon for a caller that holds the
// node's topology (a rollout pass reads each pool once).
func (s *Service) SetRolloutCordonIn(ctx context.Context, t capacity.Topology, rec Record, c *api.Cordon) (Record, error) {
	if (rec.Rollout == nil) != (c == nil) {
		var err error
		if rec, err = s.Store.SetCordon(ctx, rec, api.ByRollout, c); err != nil {
			return rec, err
		}
	}
	return s.syncFlags(ctx, rec, t)
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

// InSync reports whether the node's flags and out-of-service entry are
// what its record wants now (Record.FlagsInSync).
func (s *Service) InSync(rec Record) bool { return rec.FlagsInSync(s.flagTarget(s.now())) }

// maxSyncAttempts bounds one caller's tries to bring a node's flags in
// line when other writers keep moving it; what is left, the sweep repairs.
const maxSyncAttempts = 4

// syncFlags makes the node's node-hours and its out-of-service entry say
// what its record says (docs/fleet.md, Eligibility), level-triggered: it
// compares what the record wants with what the last writer applied and
// never trusts a "done" bit. A writer claims the next generation (one
// write, returning the node as it is now: what it wants is read from
// that), writes each hour with it — an hour a newer generation wrote is
// left alone, so a slow writer never undoes a newer one — then records
// what it applied unless a newer writer claimed meanwhile. A writer that
// loses re-reads and tries again; past maxSyncAttempts the node is left
// out of sync and the sweep, comparing the same way, repairs it.
func (s *Service) syncFlags(ctx context.Context, rec Record, t capacity.Topology) (Record, error) {
	pr := capacity.PoolResource{PoolID: rec.PoolID, Topology: t}
	for range maxSyncAttempts {
		if s.InSync(rec) {
			return rec, nil
		}
		prev := rec
		cur, err := s.Store.ClaimFlags(ctx, rec)
		switch {
		case errors.Is(err, ErrNotFound):
			return rec, nil
		case err != nil:
			return rec, unavailable(err)
		}
		rec = cur
		off, from, to := s.flagSpan(prev, rec)
		hours := make([]capacity.Hour, 0, int(to-from))
		for h := from; h < to; h++ {
			hours = append(hours, h)
		}
		if err := s.each(ctx, len(hours), func(i int) error {
			return s.Calendar.Flag(ctx, pr, rec.Index, hours[i], off, rec.Gen)
		}); err != nil {
			return rec, unavailable(err)
		}
		// The node as this write left it — its entries included: a release
		// may have unbound one while the flags were written (a heartbeat
		// answered from the copy claimed before told the node to bind a
		// released reservation: the fleet protocol simulation, seed 36).
		switch cur, err := s.Store.SetFlagged(ctx, rec, rec.Gen, off, to); {
		case errors.Is(err, ErrStale):
			// Moved or claimed meanwhile: read it again and compare.
			if rec, err = s.Store.GetNode(ctx, rec.PoolID, rec.Resource, rec.Index); errors.Is(err, ErrNotFound) {
				return rec, nil
			} else if err != nil {
				return rec, unavailable(err)
			}
			continue
		case err != nil:
			return rec, unavailable(err)
		default:
			return cur, nil
		}
	}
	return rec, nil
}

// flagSpan is what a writer that claimed cur (read as prev just before)
// writes: off or on, over the hours [from, to). Marking: from now through
// the target — only the hours past what was applied when the last claim
// before this one is the one that applied, and applied the same (the
// hourly extension); lifting: every hour any writer may have marked.
func (s *Service) flagSpan(prev, cur Record) (off bool, from, to capacity.Hour) {
	now := s.now()
	off = !cur.Eligible()
	from, to = capacity.HourOf(now), s.flagTarget(now)
	trusted := prev.FlagGen == prev.Gen && prev.Gen == cur.Gen-1 && prev.Flagged == off
	switch {
	case off && trusted && prev.FlaggedTo > from:
		from = min(prev.FlaggedTo, to)
	case !off:
		to = max(to, cur.FlaggedTo)
	}
	return off, from, to
}

// flagWrites is how many node-hour writes bringing rec in sync costs now.
func (s *Service) flagWrites(rec Record) int {
	if s.InSync(rec) {
		return 0
	}
	next := rec
	next.Gen++
	_, from, to := s.flagSpan(rec, next)
	return int(to - from)
}

// flagWorkers bounds one node's flag writes at once.
const flagWorkers = 16

// each runs fn for 0..n-1, flagWorkers at a time (one at a time when
// Serial), and returns their errors joined (conc.Each).
func (s *Service) each(ctx context.Context, n int, fn func(i int) error) error {
	limit := flagWorkers
	if s.Serial {
		limit = 1
	}
	return conc.Each(ctx, n, limit, fn)
}
