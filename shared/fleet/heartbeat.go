package fleet

import (
	"context"
	"crypto"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// report is what Open expects of a node report's envelope.
var report = dsse.Want{PayloadType: api.ReportPayloadType, Field: "report", KeyNoun: "the node's registered key"}

// Heartbeat verifies a node's signed report, records it (one conditional
// write: the counter strictly rising, the key still the one verified
// under) and answers what the node should do. Warm, it reads nothing: the
// node's key is cached for api.KeyCacheTTL and release manifests for good
// (they never change); cold, it reads the node once, and a release the
// node is told once per function.
func (s *Service) Heartbeat(ctx context.Context, tenant, poolID, nodeID string, envelope []byte) (api.HeartbeatResult, error) {
	now := s.now()
	var kept *cachedKey // the key as the lost write's store read it (a retry reads nothing more)
	for attempt := 0; ; attempt++ {
		k, err := s.nodeKey(ctx, poolID, nodeID, kept)
		if errors.Is(err, ErrNotFound) {
			return api.HeartbeatResult{}, s.missing(ctx, tenant, poolID, nodeID)
		} else if err != nil {
			return api.HeartbeatResult{}, err
		}
		if k.owner != tenant {
			// As for a pool the tenant does not own: whether it exists is
			// not told.
			return api.HeartbeatResult{}, poolNotFound(poolID)
		}
		rep, err := s.open(k, envelope, poolID, nodeID, now)
		if err != nil {
			return api.HeartbeatResult{}, err
		}
		split := s.witness(ctx, rep.Log, now)
		rec, err := s.Store.Heartbeat(ctx, k.record, k.keyID, rep, StateOf(rep), split, now)
		switch {
		case errors.Is(err, ErrNotFound):
			s.keys.Delete(poolID + "/" + nodeID)
			return api.HeartbeatResult{}, s.missing(ctx, tenant, poolID, nodeID)
		case errors.Is(err, ErrStale):
			// rec is the node as it is now: a replay, or a key the cache
			// did not have yet.
			cur, gerr := s.cacheKey(rec, poolID, nodeID)
			if gerr != nil {
				return api.HeartbeatResult{}, gerr
			}
			if cur.keyID != k.keyID && attempt == 0 {
				kept = &cur
				continue // the cached key is not the node's: verify again under its key
			}
			return api.HeartbeatResult{}, apierr.New(apierr.Conflict,
				"report.payload.counter: %d is not above the last accepted counter %d (a replay)", rep.Counter, cur.record.Counter).
				With("reason", api.ReasonReplay).With("field", "report.payload.counter").With("latestCounter", cur.record.Counter)
		case err != nil:
			return api.HeartbeatResult{}, unavailable(err)
		}
		if !rec.Eligible() && !s.InSync(rec) {
			// A report that takes the node out of ready: out of placement
			// before this answers (the write above already counted it out
			// of service). Paid on the transition only; a node that turns
			// ready waits for the sweep.
			p, err := s.Pools.GetPool(ctx, poolID)
			if err != nil {
				return api.HeartbeatResult{}, unavailable(err)
			}
			if rec, err = s.syncFlags(ctx, rec, p.Topology(rec.Resource)); err != nil {
				return api.HeartbeatResult{}, err
			}
		}
		if split != nil {
			s.logger().Error("heartbeat: split view: the node reports a release log checkpoint the log never had; no release is offered to it",
				"pool", poolID, "node", nodeID, "size", split.Size, "root", split.Root)
		}
		return s.answer(ctx, rec), nil
	}
}

// nodeKey is the node's key: kept when the caller holds it as just read,
// else from the cache unless it expired, else read.
func (s *Service) nodeKey(ctx context.Context, poolID, nodeID string, kept *cachedKey) (cachedKey, error) {
	if kept != nil {
		return *kept, nil
	}
	if v, ok := s.keys.Load(poolID + "/" + nodeID); ok {
		if k := v.(cachedKey); s.now().Before(k.expireAt) {
			return k, nil
		}
	}
	k, _, err := s.readKey(ctx, poolID, nodeID)
	return k, err
}

// missing is the NOT_FOUND of a heartbeat whose node could not be read:
// the pool's when the tenant does not own it (whether it exists, or is
// another tenant's, is not told — as for every nodes method), else the
// node's. An error path only: the heartbeat's own path never reads the
// pool.
func (s *Service) missing(ctx context.Context, tenant, poolID, nodeID string) error {
	if _, err := s.ownedPool(ctx, tenant, poolID); err != nil {
		return err
	}
	return nodeNotFound(poolID, nodeID)
}

// readKey reads the node and caches its key (ErrNotFound when the node is
// not registered).
func (s *Service) readKey(ctx context.Context, poolID, nodeID string) (cachedKey, Record, error) {
	res, idx, ok := ParseNodeID(nodeID)
	if !ok {
		return cachedKey{}, Record{}, ErrNotFound
	}
	rec, err := s.Store.GetNode(ctx, poolID, res, idx)
	switch {
	case errors.Is(err, ErrNotFound):
		return cachedKey{}, Record{}, ErrNotFound
	case err != nil:
		return cachedKey{}, Record{}, unavailable(err)
	}
	k, err := s.cacheKey(rec, poolID, nodeID)
	return k, rec, err
}

// cacheKey caches the key of rec, the node as just read.
func (s *Service) cacheKey(rec Record, poolID, nodeID string) (cachedKey, error) {
	keys, err := dsse.ParsePEMBundle([]byte(rec.PublicKey))
	if err != nil {
		return cachedKey{}, apierr.New(apierr.Internal, "node %s: stored key: %v", nodeID, err)
	}
	pins, err := dsse.NewPins([]crypto.PublicKey{keys[0]}, 1)
	if err != nil {
		return cachedKey{}, apierr.New(apierr.Internal, "node %s: stored key: %v", nodeID, err)
	}
	k := cachedKey{pins: pins, keyID: rec.KeyID, owner: rec.Owner, record: rec, expireAt: s.now().Add(api.KeyCacheTTL)}
	s.keys.Store(poolID+"/"+nodeID, k)
	return k, nil
}

// open verifies the envelope under the node's key and decodes its report.
// A signature that does not verify under that one key is bad_signature,
// whatever its keyid says.
func (s *Service) open(k cachedKey, envelope []byte, poolID, nodeID string, now time.Time) (api.Report, error) {
	var rep api.Report
	opened, err := k.pins.Open(envelope, report)
	if err != nil {
		if e := apierr.As(err); e != nil {
			switch e.Details["reason"] {
			case dsse.ReasonUnknownKey, dsse.ReasonThreshold, dsse.ReasonBadSignature:
				return rep, apierr.Invalid(api.ReasonBadSignature, "report.signatures",
					"report.signatures: no signature verifies under the node's registered key (keyid %s)", k.keyID).
					With("keyId", k.keyID)
			}
		}
		return rep, err
	}
	rep, err = ParseReport(opened.Payload)
	if err != nil {
		return rep, err
	}
	switch {
	case rep.PoolID != poolID:
		return rep, apierr.Invalid(api.ReasonMismatch, "report.payload.poolId", "report.payload.poolId: %q, the request names %q", rep.PoolID, poolID)
	case rep.NodeID != nodeID:
		return rep, apierr.Invalid(api.ReasonMismatch, "report.payload.nodeId", "report.payload.nodeId: %q, the request names %q", rep.NodeID, nodeID)
	case rep.At.Before(now.Add(-api.MaxSkew)) || rep.At.After(now.Add(api.MaxSkew)):
		return rep, apierr.Invalid(api.ReasonReportStale, "report.payload.at",
			"report.payload.at: %s is more than %s from the server's clock (%s)", rep.At.UTC().Format(time.RFC3339), api.MaxSkew, now.Format(time.RFC3339))
	}
	return rep, nil
}

// ParseReport decodes a node report strictly (errors under
// report.payload): malformed for what is not a report-shaped JSON object,
// invalid_field for a wrong type, a missing member or a broken constraint.
func ParseReport(payload []byte) (api.Report, error) {
	const root = "report.payload"
	var rep api.Report
	if err := strictjson.Decode(payload, &rep, root); err != nil {
		var fe *strictjson.FieldError
		reason := api.ReasonMalformed
		if errors.As(err, &fe) && fe.Field != root && slices.Contains([]string{"type", "required", "constraint"}, fe.Kind) {
			reason = api.ReasonInvalidField
		}
		return rep, dsse.DecodeError(reason, err, root)
	}
	invalid := func(field, format string, args ...any) error {
		return apierr.Invalid(api.ReasonInvalidField, field, field+": "+format, args...)
	}
	if rep.Log != nil {
		if b, err := base64.StdEncoding.Strict().DecodeString(rep.Log.Root); err != nil || len(b) != tlog.HashSize {
			return rep, invalid(root+".log.root", "must be a base64 SHA-256 hash")
		}
	}
	if rep.Install != nil && !slices.Contains([]string{api.InstallInstalling, api.InstallInstalled, api.InstallFailed}, rep.Install.State) {
		return rep, invalid(root+".install.state", "must be installing, installed or failed")
	}
	for i, b := range rep.Bindings {
		if !slices.Contains([]string{api.BindBound, api.BindUnbound, api.BindFailed}, b.State) {
			return rep, invalid(root+".bindings["+strconv.Itoa(i)+"].state", "must be bound, unbound or failed")
		}
	}
	return rep, nil
}

// answer is a heartbeat's result for the node as the write left it.
func (s *Service) answer(ctx context.Context, rec Record) api.HeartbeatResult {
	d := api.Desired{Bindings: rec.desiredBindings(), Cordoned: rec.Operator != nil || rec.Rollout != nil}
	// A rollout's target while it has the node (the floor: what it ran
	// when taken); else what it runs; a node that runs none, its pool's
	// baseline. Outside rollouts a node is never moved.
	// A node that reported a root the log never had is told no release
	// (its floor still holds) until it is re-registered.
	var from int64
	if rec.Log != nil {
		from = rec.Log.Size
	}
	told := func(version string, seq int64) *api.DesiredRelease {
		if rec.LogSplit != nil {
			return nil
		}
		return s.desired(ctx, version, seq, from)
	}
	switch {
	case rec.Target != nil && s.targetHeld(ctx, rec):
		d.FloorSequence = rec.Floor
		d.Release = told(rec.Target.Version, rec.Target.Sequence)
	case rec.Running != nil:
		d.FloorSequence = rec.Running.Sequence
		d.Release = told(rec.Running.Version, rec.Running.Sequence)
	default:
		if b := s.baseline(ctx, rec.PoolID); b != nil {
			d.Release = told(b.Version, b.Sequence)
		}
	}
	next := s.interval()
	installing := rec.Target != nil && (rec.Running == nil || rec.Running.Version != rec.Target.Version)
	if rec.Busy() || installing {
		next = min(next, api.BusyInterval)
	}
	return api.HeartbeatResult{Node: rec.View(), Desired: d, NextHeartbeatSeconds: int(next / time.Second)}
}

// targetHeld reports whether the node may be told its target: only while
// the rollout that set it may still start it (not terminal). An ended rollout's target
// (left behind by a write that landed after the node was concluded, and
// outlasting a quarantine until the node is re-keyed) waits for the sweep
// to lift it, and is never told meanwhile. One read of the rollout, and
// only for a node told to install a version it does not run (a rollout's
// nodes in flight, at most its maxUnavailable); if the read fails the node
// is told nothing new.
func (s *Service) targetHeld(ctx context.Context, rec Record) bool {
	if s.Rollouts == nil || (rec.Running != nil && rec.Running.Version == rec.Target.Version) {
		return true
	}
	running, err := s.Rollouts.Running(ctx, rec.Target.RolloutID)
	if err != nil {
		s.logger().Warn("heartbeat: whether a node's rollout still runs", "rollout", rec.Target.RolloutID, "error", err.Error())
		return false
	}
	return running
}

// desired is the registered release version@sequence as a node is told
// it, with the release log's evidence from the node's reported size from
// (nil when it is not registered, or not with that sequence, or no signed
// checkpoint covers it yet: no node is told a release before one does).
func (s *Service) desired(ctx context.Context, version string, seq, from int64) *api.DesiredRelease {
	rel, ok := s.release(ctx, version)
	if !ok || rel.Sequence != seq || rel.Manifest == nil {
		return nil
	}
	d := &api.DesiredRelease{Version: rel.Version, Sequence: rel.Sequence, ManifestDigest: rel.Digest, Manifest: rel.Manifest}
	if s.Log == nil {
		return d
	}
	if rel.LogIndex == nil {
		return nil // registered before the log: nothing a node could verify
	}
	ev, err := s.evidence(ctx, *rel.LogIndex, from)
	if err != nil {
		s.logger().Warn("heartbeat: the release log's evidence for a release", "version", version, "error", err.Error())
		return nil
	}
	d.Log = ev
	return d
}

// baselineTTL is how long a function takes a pool to have no baseline
// once it read none (a baseline appears when a rollout completes; only
// nodes that run no release ask for it).
const baselineTTL = time.Minute

// baseline is the pool's baseline release, for a node that runs none. A
// baseline is read after the node's report was accepted, each time one
// is told, so a node is never told an older one than the control plane
// stored before it reported: a baseline cached for a minute told a new
// node 1.0.0 five seconds after a rollout stored 2.0.0, and the node,
// which moves only in rollouts, stayed on 1.0.0. Only "none" is kept for
// baselineTTL: telling a node nothing for up to a minute after a
// baseline appears is the one delay (docs/fleet.md, Heartbeats).
func (s *Service) baseline(ctx context.Context, poolID string) *Target {
	if v, ok := s.noBaseline.Load(poolID); ok && s.now().Before(v.(time.Time)) {
		return nil
	}
	t, err := s.Store.Baseline(ctx, poolID)
	if err != nil {
		s.logger().Warn("heartbeat: reading a pool's baseline", "pool", poolID, "error", err.Error())
		return nil
	}
	if t == nil {
		s.noBaseline.Store(poolID, s.now().Add(baselineTTL))
	}
	return t
}

// release reads a registered release once per function (releases never
// change once recorded); a version not recorded is asked again next time.
func (s *Service) release(ctx context.Context, version string) (NodeRelease, bool) {
	if v, ok := s.manifests.Load(version); ok {
		return v.(NodeRelease), true
	}
	if s.Releases == nil {
		return NodeRelease{}, false
	}
	rel, err := s.Releases.Release(ctx, version)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			s.logger().Warn("heartbeat: reading a release", "version", version, "error", err.Error())
		}
		return NodeRelease{}, false
	}
	s.manifests.Store(version, rel)
	return rel, true
}
