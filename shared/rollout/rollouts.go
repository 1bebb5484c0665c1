package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Sentinel errors of the rollout store.
var (
	// ErrTransition: the state machine has no such edge (a pass or verb
	// asked for a move its state does not allow).
	ErrTransition = errors.New("rollout: no such state transition")
	ErrExists     = errors.New("rollout: already exists")
	ErrStale      = errors.New("rollout: stored state changed (condition failed)")
)

// CreateRequest is rollouts.create as sent (nil: the default).
type CreateRequest struct {
	Version                 string
	Pools                   []string
	Waves                   []api.WaveSpec
	BakeSeconds             *int
	MaxUnavailable          *int
	MaxFailedNodes          *int
	ProgressDeadlineSeconds *int
	DrainWaitSeconds        *int
	DrainOnTimeout          *string
	RollbackOnAbort         *bool
	ClientToken             string
	By                      Audit
}

// Rollouts is the rollouts API's behaviour.
type Rollouts struct {
	Store    RolloutStore
	Releases Releases // registered releases
	Pools    interface {
		GetPool(ctx context.Context, poolID string) (capacity.Pool, error)
	}
	Now func() time.Time
	// Logger and Table: an abort's transition line (metrics.go); nil: none.
	Logger *slog.Logger
	Table  string
	// PauseWait bounds how long pause waits for a pass starting nodes to
	// finish (default 5 s).
	PauseWait time.Duration
	// Sleep replaces the pause's wait (tests; default a timer).
	Sleep func(ctx context.Context, d time.Duration) error
}

func (s *Rollouts) now() time.Time { return s.Now().UTC() }

func dependency(err error) error {
	if e := apierr.As(err); e != nil {
		return e
	}
	return apierr.Dependency("dynamodb", err)
}

// settings applies the defaults and checks the rules the input tags do
// not state.
func settingsOf(req CreateRequest) (api.Settings, error) {
	def := func(p *int, d int) int {
		if p == nil {
			return d
		}
		return *p
	}
	st := api.Settings{Waves: req.Waves, BakeSeconds: def(req.BakeSeconds, int(DefaultBake/time.Second)),
		MaxUnavailable: def(req.MaxUnavailable, DefaultMaxUnavailable), MaxFailedNodes: def(req.MaxFailedNodes, 0),
		ProgressDeadlineSeconds: def(req.ProgressDeadlineSeconds, int(DefaultProgressDeadline/time.Second)),
		Drain:                   api.Drain{WaitSeconds: def(req.DrainWaitSeconds, int(DefaultDrainWait/time.Second)), OnTimeout: api.OnTimeoutSkip},
		RollbackOnAbort:         req.RollbackOnAbort == nil || *req.RollbackOnAbort}
	if req.DrainOnTimeout != nil {
		st.Drain.OnTimeout = *req.DrainOnTimeout
	}
	if st.Drain.OnTimeout != api.OnTimeoutSkip && st.Drain.OnTimeout != api.OnTimeoutForce {
		return st, apierr.Invalid("constraint", "drain.onTimeout", "drain.onTimeout: must be skip or force")
	}
	for i, w := range req.Waves {
		if (w.Nodes == nil) == (w.Percent == nil) {
			field := fmt.Sprintf("waves[%d]", i)
			return st, apierr.Invalid("constraint", field, "%s: give exactly one of nodes and percent", field)
		}
	}
	return st, nil
}

// fingerprint is the identity of a create as sent.
func fingerprint(req CreateRequest) string {
	req.By, req.ClientToken = Audit{}, ""
	b, _ := json.Marshal(req)
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%x", sum[:16])
}

var idEncoding = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// tokenID derives a rollout's id from its creator and clientToken; gen
// counts the creates of that token the reconciler abandoned before
// (abandoned is final: a retry never revives one, whose claims another
// create may be taking over).
func tokenID(by Audit, token string, gen int) string {
	s := "bc-rollout\x00" + by.TenantID + "\x00" + by.Principal + "\x00" + token
	if gen > 0 {
		s += "\x00" + itoa(gen)
	}
	sum := sha256.Sum256([]byte(s))
	return idEncoding.EncodeToString(sum[:17])[:26]
}

// maxAbandoned bounds the abandoned creates a clientToken steps over (each
// took more than api.StaleAfter).
const maxAbandoned = 8

// Create validates a rollout, claims its pools and records it; its nodes
// are taken by the reconciler (docs/rollouts.md, Create).
func (s *Rollouts) Create(ctx context.Context, req CreateRequest) (api.Rollout, error) {
	now := s.now()
	st, err := settingsOf(req)
	if err != nil {
		return api.Rollout{}, err
	}
	pools := slices.Clone(req.Pools)
	slices.Sort(pools)
	if len(slices.Compact(slices.Clone(pools))) != len(pools) {
		return api.Rollout{}, apierr.Invalid("constraint", "pools", "pools: a pool is named twice")
	}
	rec := Record{Rollout: api.Rollout{Version: req.Version, Pools: pools, State: api.Progressing, Settings: st, CreatedBy: req.By,
		CreatedAt: now.Truncate(time.Millisecond), UpdatedAt: now.Truncate(time.Millisecond)},
		Request: fingerprint(req), ClientToken: req.ClientToken, Due: now}
	rec.RolloutID = ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
	for gen := 0; req.ClientToken != ""; gen++ {
		rec.RolloutID = tokenID(req.By, req.ClientToken, gen)
		stored, err := s.Store.GetRollout(ctx, rec.RolloutID)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return api.Rollout{}, dependency(err)
		case stored.Finished && !stored.Listed && stored.Reason == ReasonAbandoned && stored.Request == rec.Request && gen < maxAbandoned:
			continue // this request, abandoned: the next id
		default:
			return s.replay(ctx, stored, rec)
		}
		break
	}
	rel, err := s.Releases.Get(ctx, req.Version)
	switch {
	case errors.Is(err, ErrNotFound):
		return api.Rollout{}, apierr.New(apierr.NotFound, "release %q is not registered", req.Version)
	case err != nil:
		return api.Rollout{}, dependency(err)
	case rel.Expires != nil && !rel.Expires.After(now):
		return api.Rollout{}, apierr.Invalid(ReasonExpired, "version", "version: release %s expired at %s", req.Version, rel.Expires.Format(time.RFC3339))
	}
	rec.Sequence, rec.Digest = rel.Sequence, rel.ManifestDigest
	platforms := map[string]bool{}
	for _, b := range rel.Binaries {
		platforms[b.Platform] = true
	}
	total, withBinary := 0, 0
	for _, id := range pools {
		if _, err := s.Pools.GetPool(ctx, id); errors.Is(err, capacity.ErrNotFound) {
			return api.Rollout{}, apierr.New(apierr.NotFound, "pool %q not found", id).With("poolId", id)
		} else if err != nil {
			return api.Rollout{}, dependency(err)
		}
		n, b, err := s.Store.CountPoolNodes(ctx, id, now, platforms)
		if err != nil {
			return api.Rollout{}, dependency(err)
		}
		total, withBinary = total+n, withBinary+b
	}
	switch {
	case total == 0:
		return api.Rollout{}, apierr.Invalid(api.ReasonNoNodes, "pools", "pools: no managed node in the rollout's pools")
	case withBinary == 0:
		return api.Rollout{}, apierr.Invalid(api.ReasonNoBinary, "version", "version: release %s has no binary for the platform of any managed node of the rollout's pools", req.Version)
	}
	sizes, bad, err := WaveSizes(req.Waves, total)
	if err != nil {
		field := fmt.Sprintf("waves[%d]", bad)
		return api.Rollout{}, apierr.Invalid("constraint", field, "%s: %v (the rollout's pools have %d managed nodes)", field, err, total)
	}
	for _, size := range sizes {
		rec.Waves = append(rec.Waves, api.Wave{Size: size})
	}
	rec.Counts.Nodes, rec.Counts.Pending = total, total
	rec.History = []api.RolloutEvent{{State: api.Progressing, At: rec.CreatedAt}}
	stored, err := s.Store.CreateRollout(ctx, rec)
	switch {
	case errors.Is(err, ErrExists):
		return s.replay(ctx, stored, rec)
	case err != nil:
		return api.Rollout{}, dependency(err)
	}
	return s.claim(ctx, stored)
}

// replay answers a create whose id exists: the same request gets the
// rollout (finishing its claims if the first call stopped short), another
// one CONFLICT.
func (s *Rollouts) replay(ctx context.Context, stored, sent Record) (api.Rollout, error) {
	if stored.Request != sent.Request {
		return api.Rollout{}, apierr.New(apierr.Conflict, "clientToken %q was used for another rollout request", sent.ClientToken).
			With("field", "clientToken")
	}
	return s.claim(ctx, stored)
}

// claim claims the rollout's pools in order (a pool in another
// non-terminal rollout: the claims made are released, CONFLICT with that
// rollout's id) and makes it listed.
func (s *Rollouts) claim(ctx context.Context, rec Record) (api.Rollout, error) {
	if rec.Listed {
		return rec.Rollout, nil
	}
	if rec.Finished && rec.Reason == ReasonAbandoned {
		return api.Rollout{}, retryCreate(rec.RolloutID) // the retry takes the token's next id
	}
	if rec.Finished {
		return api.Rollout{}, s.conflict(rec.Reason)
	}
	for i, pool := range rec.Pools {
		holder, err := s.claimPool(ctx, pool, rec.RolloutID)
		if err != nil {
			return api.Rollout{}, dependency(err)
		}
		if holder == "" {
			continue
		}
		for _, p := range rec.Pools[:i] {
			if err := s.Store.ReleasePool(ctx, p, rec.RolloutID); err != nil {
				return api.Rollout{}, dependency(err)
			}
		}
		rec.Finished, rec.Reason, rec.Due = true, holder, time.Time{}
		if _, err := s.Store.UpdateRollout(ctx, rec); err != nil && !errors.Is(err, ErrStale) {
			return api.Rollout{}, dependency(err)
		}
		return api.Rollout{}, s.conflict(holder)
	}
	// The commit, conditioned on Ver: it loses to the reconciler's abandon
	// (which writes the rollout finished before it releases any claim), so a
	// create never answers a rollout the reconciler will not run.
	rec.Listed = true
	cur, err := s.Store.UpdateRollout(ctx, rec)
	if errors.Is(err, ErrStale) {
		cur, err = s.Store.GetRollout(ctx, rec.RolloutID)
		switch {
		case err == nil && cur.Listed:
			return cur.Rollout, nil // a concurrent retry listed it
		case err == nil && cur.Finished: // abandoned meanwhile: the claims it made go too
			for _, p := range rec.Pools {
				if err := s.Store.ReleasePool(ctx, p, rec.RolloutID); err != nil {
					return api.Rollout{}, dependency(err)
				}
			}
			return api.Rollout{}, retryCreate(rec.RolloutID)
		case err == nil:
			return api.Rollout{}, retryCreate(rec.RolloutID) // changed by a concurrent retry: retry
		}
	}
	if err != nil {
		return api.Rollout{}, dependency(err)
	}
	return cur.Rollout, nil
}

// retryCreate: a create took longer than api.StaleAfter and the reconciler
// abandoned it; the same request with its clientToken starts it again.
func retryCreate(id string) error {
	return apierr.New(apierr.Unavailable, "rollout %s was abandoned while it was being created (the create took longer than %s); retry with the same clientToken", id, api.StaleAfter)
}

func (s *Rollouts) conflict(holder string) error {
	return apierr.New(apierr.Conflict, "a pool of this rollout is in rollout %s, not finished", holder).With("rolloutId", holder)
}

// claimPool claims a pool, taking it over from a holder that is terminal
// (a claim its end did not get to release).
func (s *Rollouts) claimPool(ctx context.Context, pool, id string) (string, error) {
	for range 3 {
		holder, err := s.Store.ClaimPool(ctx, pool, id)
		if err != nil || holder == "" {
			return holder, err
		}
		h, err := s.Store.GetRollout(ctx, holder)
		switch {
		case errors.Is(err, ErrNotFound) || (err == nil && (h.State.Terminal() || (h.Finished && !h.Listed))):
			if err := s.Store.ReleasePool(ctx, pool, holder); err != nil {
				return "", err
			}
		case err != nil:
			return "", err
		default:
			return holder, nil
		}
	}
	return "", errors.New("rollout: a pool's claim kept changing")
}

// Get returns a rollout.
func (s *Rollouts) Get(ctx context.Context, id string) (api.Rollout, error) {
	rec, err := s.Store.GetRollout(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound) || (err == nil && !rec.Listed):
		return api.Rollout{}, apierr.New(apierr.NotFound, "rollout %q not found", id)
	case err != nil:
		return api.Rollout{}, dependency(err)
	}
	return ended(rec.Rollout), nil
}

// ended is r as it reads: once r is terminal, the nodes it never started
// count as skipped (not_started), not pending: nothing will start them.
// They stay stored pending; reading them so costs no write per node.
func ended(r api.Rollout) api.Rollout {
	if r.State.Terminal() {
		r.Counts.Skipped += r.Counts.Pending
		r.Counts.Pending = 0
	}
	return r
}

// skippedPhase and pendingPhase mark which stored step a page of a
// finished rollout's skipped nodes (stored pending first, then skipped)
// goes on from.
const (
	pendingPhase = "pending:"
	skippedPhase = "skipped:"
)

// endedSkipped is a page of a terminal rollout's skipped nodes: those it
// never started (stored pending), then those it skipped.
func (s *Rollouts) endedSkipped(ctx context.Context, id string, limit int, after string) ([]Progress, string, error) {
	var out []Progress
	if after == "" || strings.HasPrefix(after, pendingPhase) {
		ps, err := s.Store.ProgressByStep(ctx, id, api.Pending, limit+1, strings.TrimPrefix(after, pendingPhase))
		if err != nil {
			return nil, "", err
		}
		if len(ps) > limit {
			return ps[:limit], pendingPhase + ps[limit-1].Key(), nil
		}
		out, after = ps, ""
	}
	need := limit - len(out)
	rest, err := s.Store.ProgressByStep(ctx, id, api.Skipped, need+1, strings.TrimPrefix(after, skippedPhase))
	if err != nil {
		return nil, "", err
	}
	if len(rest) <= need {
		return append(out, rest...), "", nil
	}
	next := skippedPhase
	if need > 0 {
		next += rest[need-1].Key()
	}
	return append(out, rest[:need]...), next, nil
}

// List lists rollouts newest first.
func (s *Rollouts) List(ctx context.Context, state api.RolloutState, page paging.Page) ([]api.Rollout, map[string]string, error) {
	recs, next, err := s.Store.ListRollouts(ctx, state, page)
	if err != nil {
		return nil, nil, dependency(err)
	}
	out := make([]api.Rollout, len(recs))
	for i, r := range recs {
		out[i] = ended(r.Rollout)
	}
	return out, next, nil
}

// Nodes lists a rollout's nodes, in its order (of one step when step is
// not "").
func (s *Rollouts) Nodes(ctx context.Context, id string, step api.RolloutStep, limit int, after string) ([]api.NodeProgress, string, error) {
	rec, err := s.Store.GetRollout(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound) || (err == nil && !rec.Listed):
		return nil, "", apierr.New(apierr.NotFound, "rollout %q not found", id)
	case err != nil:
		return nil, "", dependency(err)
	}
	var ps []Progress
	next := ""
	switch {
	case rec.State.Terminal() && step == api.Pending:
		return []api.NodeProgress{}, "", nil // none is, once it ended
	case rec.State.Terminal() && step == api.Skipped:
		ps, next, err = s.endedSkipped(ctx, id, limit, after)
	case step != "":
		if ps, err = s.Store.ProgressByStep(ctx, id, step, limit+1, after); err == nil && len(ps) > limit {
			ps, next = ps[:limit], ps[limit-1].Key()
		}
	default:
		ps, next, err = s.Store.ProgressInOrder(ctx, id, limit, after)
	}
	if err != nil {
		return nil, "", dependency(err)
	}
	out := make([]api.NodeProgress, len(ps))
	for i, p := range ps {
		out[i] = p.NodeProgress
		out[i].Wave = waveOfOrder(rec.Boundaries, p.Order)
		if out[i].Rollback == RollbackDue {
			out[i].Rollback = "" // not rolled back (yet)
		}
		if rec.State.Terminal() && out[i].Step == api.Pending {
			out[i].Step, out[i].Reason = api.Skipped, ReasonNotStarted
		}
	}
	return out, next, nil
}

// waveOfOrder is the wave of an order key (boundaries: each wave's last).
func waveOfOrder(boundaries []string, order string) int {
	for w, b := range boundaries {
		if order <= b {
			return w
		}
	}
	return max(len(boundaries)-1, 0)
}

// Pause stops new nodes from starting; those in progress finish. It
// answers once no pass is starting nodes, so no node starts after it.
func (s *Rollouts) Pause(ctx context.Context, id, reason string) (api.Rollout, error) {
	return s.change(ctx, id, func(r *Record) bool {
		return r.move(api.Paused, s.now(), reason) == nil
	}, true)
}

// Resume lets a paused rollout go on.
func (s *Rollouts) Resume(ctx context.Context, id, reason string) (api.Rollout, error) {
	return s.change(ctx, id, func(r *Record) bool {
		return r.move(api.Progressing, s.now(), reason) == nil
	}, false)
}

// Abort moves a progressing or paused rollout to aborting.
func (s *Rollouts) Abort(ctx context.Context, id, reason string) (api.Rollout, error) {
	return s.change(ctx, id, func(r *Record) bool {
		return r.abort(ReasonAbortedBy, s.now(), firstNonEmpty(reason, ReasonAbortedBy)) == nil
	}, false)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// move takes the rollout to state to along an edge of the state machine,
// with an event (note: its reason) on the timeline.
func (r *Record) move(to api.RolloutState, at time.Time, note string) error {
	if !r.State.CanMoveTo(to) {
		return fmt.Errorf("%w: %s → %s", ErrTransition, r.State, to)
	}
	r.State = to
	r.add(to, at, note)
	return nil
}

// abort moves it to aborting for reason (ReasonFailures, ReasonAbortedBy).
func (r *Record) abort(reason string, at time.Time, note string) error {
	if err := r.move(api.Aborting, at, note); err != nil {
		return err
	}
	r.Reason = reason
	return nil
}

// add appends an event to the timeline (at most MaxHistory: later ones
// replace the last), on a copy: the record it was copied from keeps its own.
func (r *Record) add(st api.RolloutState, at time.Time, reason string) {
	ev := api.RolloutEvent{State: st, At: at.Truncate(time.Millisecond), Reason: reason}
	r.UpdatedAt = ev.At
	h := slices.Clone(r.History)
	if len(h) >= MaxHistory {
		h = h[:len(h)-1]
	}
	r.History = append(h, ev)
}

// change applies fn to the stored rollout (unchanged when fn says so) with
// an optimistic write; waitIntent: first wait for a pass starting nodes.
func (s *Rollouts) change(ctx context.Context, id string, fn func(*Record) bool, waitIntent bool) (api.Rollout, error) {
	wait := s.PauseWait
	if wait <= 0 {
		wait = 5 * time.Second
	}
	deadline := s.now().Add(wait)
	// lost counts the writes lost to another writer only: the polls that
	// wait for a pass's intent must not use up the retries (a pause that
	// waited 16 polls once answered UNAVAILABLE on its first lost write).
	for lost := 0; ; {
		rec, err := s.Store.GetRollout(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound) || (err == nil && !rec.Listed):
			return api.Rollout{}, apierr.New(apierr.NotFound, "rollout %q not found", id)
		case err != nil:
			return api.Rollout{}, dependency(err)
		}
		if waitIntent && rec.Intent != nil && s.now().Sub(rec.Intent.At) < IntentStale && rec.State == api.Progressing {
			if s.now().After(deadline) {
				return api.Rollout{}, apierr.New(apierr.Unavailable, "a reconciler pass is starting nodes of rollout %s; retry", id)
			}
			if err := s.sleep(ctx, 50*time.Millisecond); err != nil {
				return api.Rollout{}, err
			}
			continue
		}
		from := rec.State
		if !fn(&rec) {
			return ended(rec.Rollout), nil // already so, or terminal: unchanged
		}
		if waitIntent {
			rec.Intent = nil // absent, or stale: its pass is gone
		}
		cur, err := s.Store.UpdateRollout(ctx, rec)
		if errors.Is(err, ErrStale) && lost < 16 {
			lost++
			continue
		}
		if err != nil {
			return api.Rollout{}, dependency(err)
		}
		logTransition(ctx, s.Logger, s.Table, from, cur.Rollout, s.now())
		return cur.Rollout, nil
	}
}

func (s *Rollouts) sleep(ctx context.Context, d time.Duration) error {
	if s.Sleep != nil {
		return s.Sleep(ctx, d)
	}
	return conc.Sleep(ctx, d)
}
