package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/release"
)

// Register is releases.register: it verifies manifest (a DSSE envelope)
// under the pins and records the release (RegisterVerified).
func (s *Service) Register(ctx context.Context, manifest []byte, by release.Audit) (release.Release, bool, error) {
	if s.Pins == nil {
		return release.Release{}, false, apierr.New(apierr.Unavailable, "no release pins are configured")
	}
	now := s.now()
	v, err := s.Pins.Verify(manifest, now)
	if err != nil {
		return release.Release{}, false, err
	}
	st := v.Statement
	r := release.Release{
		Version:        st.Version,
		Sequence:       st.Sequence,
		Binaries:       st.Binaries,
		ManifestDigest: v.Digest,
		Signers:        v.Signers,
		RegisteredAt:   now.Truncate(time.Millisecond),
		RegisteredBy:   by,
		Manifest:       manifest,
		Payload:        v.Payload,
	}
	if st.Expires != nil {
		e := st.Expires.UTC()
		r.Expires = &e
	}
	return s.RegisterVerified(ctx, r)
}

// RegisterVerified records a verified release r (docs/architecture.md,
// "Releases"), in single-item conditional writes, each idempotent:
//
//  1. putPending: the version's item as pending, if the version is new
//     (or only refused before). The version check happens here, before
//     the head is touched: a registration refused as CONFLICT never moves
//     the head.
//  2. claimHead: seq < r.Sequence, or the head already holds this very
//     claim (a retry). This decides the order; a lower or equal sequence
//     is a rollback, and its pending item is refused (rollback).
//  3. markClaimed (pending → claimed): from here on it is logged, never
//     refused — unless the log passed it (below).
//  4. Log.Append: the entry's put is the sequencing point of the log; the
//     head of the log follows.
//  5. Log.SignCovering: a checkpoint covering it (one KMS Sign).
//  6. record: it gets its log index and shows in lists.
//
// Whatever crashes where, the head never stays above the highest recorded
// release: the winner of the next claim finishes (steps 3–6) the head it
// replaced before its own release, and a refused claim finishes the head
// it ran into. A claim whose finishing never happened and whose successor's
// registration crashed too is passed in the log by a later release: it is
// refused then, never logged out of sequence order. A pending item that
// never claimed blocks only its own version, until a registration of that
// version finds it stale and refuses it (repair). The reconciler finishes
// the head each pass (Finish).
//
// Once recorded (or replayed), the envelope as sent is kept in an item of
// its own (Store.PutEnvelope), so lists never read it: whichever
// registration of the recorded statement writes it last, it is a verified
// envelope of that statement.
func (s *Service) RegisterVerified(ctx context.Context, r release.Release) (release.Release, bool, error) {
	if s.Log == nil {
		return release.Release{}, false, apierr.New(apierr.Unavailable, "no release log is configured (BC_RELEASE_LOG_KEY)")
	}
	if r.Payload == nil {
		return release.Release{}, false, fmt.Errorf("registry: release %s: no payload to log", r.Version)
	}
	for attempt := 0; ; attempt++ {
		stored, replayed, retry, err := s.register(ctx, r)
		if !retry || attempt == 2 {
			if err == nil && replayed {
				err = s.withCheckpoint(ctx, &stored)
			}
			if err == nil && r.Manifest != nil && stored.ManifestDigest == r.ManifestDigest {
				err = s.putEnvelope(ctx, r)
			}
			return stored, replayed, err
		}
	}
}

// register is one try of RegisterVerified; retry says to try again (an
// item that changed under it).
func (s *Service) register(ctx context.Context, r release.Release) (stored release.Release, replayed, retry bool, err error) {
	it := Item{Release: r, State: Pending, PendingAt: s.now(), Leaf: release.LeafHash(r.Payload)}
	it.Manifest, it.Payload, it.Log = nil, nil, nil
	landed, err := s.putPending(ctx, it)
	switch {
	case err != nil:
		return release.Release{}, false, false, err
	case !landed:
		cur, ok, err := s.Store.Item(ctx, r.Version)
		if err != nil {
			return release.Release{}, false, false, err
		}
		if !ok {
			return release.Release{}, false, true, nil // gone between the two reads: again
		}
		switch {
		case cur.State == Recorded && cur.Sequence == r.Sequence:
			return cur.Release, true, false, nil
		case cur.State == Recorded:
			return release.Release{}, false, false, conflict(r.Version, cur.Sequence)
		case cur.State.Unfinished() && cur.same(it):
			it = cur // this very registration, retried: carry on from its item
		case cur.State.Unfinished() && s.now().Sub(cur.PendingAt) >= PendingStale:
			if err := s.repair(ctx, cur); err != nil {
				return release.Release{}, false, false, err
			}
			return release.Release{}, false, true, nil
		case cur.State.Unfinished():
			return release.Release{}, false, false, apierr.New(apierr.Conflict,
				"version %s is being registered with sequence %d", r.Version, cur.Sequence).
				With("version", r.Version).With("sequence", cur.Sequence)
		default: // refused: overwritable, raced with another refusal
			return release.Release{}, false, true, nil
		}
	}

	var finish []Item // the releases to log and record, in sequence order
	if it.State == Pending {
		if s.now().Sub(it.PendingAt) >= ClaimWithin {
			// Too late to claim: a repair may act on this item soon. Unless the
			// head already holds it (a crash after the claim), start afresh.
			h, err := s.Store.Head(ctx)
			if err != nil {
				return release.Release{}, false, false, err
			}
			if !h.holds(it) {
				if err := s.refuse(ctx, it, Pending); err != nil {
					return release.Release{}, false, false, err
				}
				return release.Release{}, false, true, nil
			}
		} else {
			old, landed, err := s.claimHead(ctx, it)
			if err != nil {
				return release.Release{}, false, false, err
			}
			if !landed {
				retry, err := s.rollback(ctx, it)
				return release.Release{}, false, retry, err
			}
			if old != nil && !old.holds(it) {
				// The head's previous release is finished before this one,
				// so the log keeps sequence order even when its
				// registration crashed.
				prev, err := s.unfinished(ctx, *old)
				if err != nil {
					return release.Release{}, false, false, err
				}
				finish = append(finish, prev...)
			}
		}
	}
	done, err := s.finish(ctx, append(finish, it))
	if err != nil {
		return release.Release{}, false, false, err
	}
	mine := done[len(done)-1]
	switch {
	case mine.State == Recorded && mine.same(it):
		rel := mine.Release
		if rel.Log != nil {
			rel.Log.Checkpoint = mine.note
		}
		return rel, mine.twin, false, nil
	case mine.State == Refused:
		h, err := s.Store.Head(ctx)
		if err != nil {
			return release.Release{}, false, false, err
		}
		return release.Release{}, false, false, rollbackError(r.Sequence, h.Sequence)
	default:
		return release.Release{}, false, true, nil
	}
}

// withCheckpoint adds the latest signed checkpoint to a recorded release
// (it covers the release: recorded means covered, and checkpoints only grow).
func (s *Service) withCheckpoint(ctx context.Context, r *release.Release) error {
	if r.Log == nil {
		return fmt.Errorf("registry: release %s is recorded without a log index", r.Version)
	}
	note, size, err := s.Log.Store.Checkpoint(ctx)
	if err != nil {
		return apierr.Dependency("dynamodb", err)
	}
	if size <= r.Log.Index {
		return fmt.Errorf("registry: release %s (entry %d) is recorded but the checkpoint has size %d", r.Version, r.Log.Index, size)
	}
	r.Log.Checkpoint = note
	return nil
}

// putEnvelope keeps the envelope as sent of a recorded (or replayed)
// release.
func (s *Service) putEnvelope(ctx context.Context, r release.Release) error {
	if err := s.Store.PutEnvelope(ctx, r.Version, r.ManifestDigest, r.Manifest); err != nil {
		return apierr.Dependency("dynamodb", err)
	}
	return nil
}

// rollback finishes the head this registration's claim ran into (its
// registration may have crashed), refuses this one, and says why — unless
// the refusal does not land because a twin of this very registration (a
// client's retry racing it) claimed the item first: then it is logged, not
// refused, and retry says to answer what it becomes.
func (s *Service) rollback(ctx context.Context, it Item) (retry bool, err error) {
	h, prev, err := s.headUnfinished(ctx)
	if err != nil {
		return false, err
	}
	if _, err := s.finish(ctx, prev); err != nil {
		return false, err
	}
	if err := s.refuse(ctx, it, Pending); err != nil {
		return false, err
	}
	cur, ok, err := s.Store.Item(ctx, it.Version)
	if err != nil {
		return false, err
	}
	if ok && cur.State != Refused && cur.same(it) {
		return true, nil
	}
	return false, rollbackError(it.Sequence, h.Sequence)
}

func rollbackError(seq, latest int64) error {
	return apierr.Invalid("rollback", "manifest.payload.sequence",
		"sequence %d is not above the latest registered sequence %d (a rollback of the release channel)", seq, latest).
		With("latestSequence", latest)
}

func conflict(version string, seq int64) error {
	return apierr.New(apierr.Conflict, "version %s is already registered with sequence %d", version, seq).
		With("version", version).With("sequence", seq)
}

// headUnfinished reads the channel head and the release it names, if that
// is not finished yet.
func (s *Service) headUnfinished(ctx context.Context) (Head, []Item, error) {
	h, err := s.Store.Head(ctx)
	if err != nil {
		return Head{}, nil, err
	}
	prev, err := s.unfinished(ctx, h)
	return h, prev, err
}

// unfinished is the release a head claim names, if it is not finished yet
// (none, or one item).
func (s *Service) unfinished(ctx context.Context, h Head) ([]Item, error) {
	if h.Version == "" {
		return nil, nil
	}
	it, ok, err := s.Store.Item(ctx, h.Version)
	if err != nil || !ok {
		return nil, err
	}
	if !h.holds(it) || !it.State.Unfinished() {
		return nil, nil
	}
	return []Item{it}, nil
}

// finishedItem is a release item after finish, twin when another
// registration recorded it first.
type finishedItem struct {
	Item
	twin bool
	note string // the checkpoint signed over it
}

// finish logs and records claimed-over releases in sequence order: each is
// marked claimed and appended, then one checkpoint is signed over them
// all, then each is recorded. An item the log passed is refused. It
// returns each item's end state.
func (s *Service) finish(ctx context.Context, its []Item) ([]finishedItem, error) {
	out := make([]finishedItem, len(its))
	logged := int64(0) // the log's size as of the last append
	for i, it := range its {
		out[i].Item = it
		if it.State == Pending {
			cur, err := s.markClaimed(ctx, it)
			if err != nil {
				return nil, err
			}
			out[i].Item = cur
			if cur.State != Claimed {
				out[i].twin = cur.State == Recorded
				continue
			}
		}
		if it.Leaf == (tlog.Hash{}) {
			return nil, fmt.Errorf("registry: release %s: no leaf hash on its item", it.Version)
		}
		idx, err := s.Log.Append(ctx, it.Version, it.Sequence, it.Leaf)
		if errors.Is(err, ErrLogOrder) {
			if err := s.refuse(ctx, it, Claimed); err != nil {
				return nil, err
			}
			out[i].State = Refused
			continue
		}
		if err != nil {
			return nil, apierr.Dependency("dynamodb", err)
		}
		out[i].Log = &release.LogEntry{Index: idx}
		logged = max(logged, idx+1)
	}
	if logged == 0 {
		return out, nil
	}
	note, size, err := s.Log.SignCovering(ctx, logged)
	if err != nil {
		return nil, apierr.Dependency("kms", err)
	}
	for i := range out {
		it := &out[i]
		if it.State != Claimed || it.Log == nil {
			continue
		}
		if size <= it.Log.Index {
			return nil, fmt.Errorf("registry: release log: checkpoint of size %d signed after appending entry %d", size, it.Log.Index)
		}
		twin, err := s.record(ctx, it.Item, it.Log.Index)
		if err != nil {
			return nil, err
		}
		it.State, it.twin = Recorded, twin
	}
	for i := range out {
		if out[i].State == Recorded && out[i].Log != nil {
			out[i].note = note
		}
	}
	return out, nil
}

// putPending is step 1: false when the version has an item that is not
// refused.
func (s *Service) putPending(ctx context.Context, it Item) (bool, error) {
	landed, err := s.Store.PutPending(ctx, it)
	if err != nil {
		return false, apierr.Dependency("dynamodb", err)
	}
	if landed {
		if err := s.fault(FaultReleasePending); err != nil {
			return false, err
		}
	}
	return landed, nil
}

// claimHead is step 2; it returns the head it replaced (nil if there was
// none), landed false when the head is at or above it's sequence. The
// claim must land before a repair may judge the item stale.
func (s *Service) claimHead(ctx context.Context, it Item) (*Head, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, it.PendingAt.Add(PendingStale-ClaimWithin/2).Sub(s.now()))
	defer cancel()
	old, landed, err := s.Store.ClaimHead(cctx, headOf(it))
	if err != nil {
		return nil, false, apierr.Dependency("dynamodb", err)
	}
	if !landed {
		return nil, false, nil
	}
	if err := s.fault(FaultReleaseClaimed); err != nil {
		return nil, false, err
	}
	return old, true, nil
}

// markClaimed is step 3: pending → claimed, if the item still holds this
// claim. It returns the item as it stands after (claimed, or whatever
// another registration or a repair made of it).
func (s *Service) markClaimed(ctx context.Context, it Item) (Item, error) {
	landed, err := s.Store.MarkClaimed(ctx, it)
	if err != nil {
		return Item{}, apierr.Dependency("dynamodb", err)
	}
	if !landed {
		cur, ok, err := s.Store.Item(ctx, it.Version)
		if err != nil {
			return Item{}, err
		}
		if !ok || cur.Sequence != it.Sequence || cur.ManifestDigest != it.ManifestDigest {
			cur.State = Refused // gone or replaced: this claim is no more
		}
		return cur, nil
	}
	if err := s.fault(FaultReleaseMarked); err != nil {
		return Item{}, err
	}
	it.State = Claimed
	return it, nil
}

// record is step 6: claimed → recorded at its log index; twin when another
// registration recorded it first.
func (s *Service) record(ctx context.Context, it Item, index int64) (twin bool, err error) {
	landed, err := s.Store.Record(ctx, it, index)
	if err != nil {
		return false, apierr.Dependency("dynamodb", err)
	}
	if !landed {
		cur, ok, err := s.Store.Item(ctx, it.Version)
		if err != nil {
			return false, err
		}
		if ok && cur.State == Recorded && cur.same(it) {
			return true, nil
		}
		return false, fmt.Errorf("registry: release %s: logged at %d but its item is %s", it.Version, index, cur.State)
	}
	return false, s.fault(FaultReleaseCommitted)
}

// refuse marks an item of this claim refused if it is still in state from
// (idempotent): a pending item that never claimed, or a claimed one the log
// passed.
func (s *Service) refuse(ctx context.Context, it Item, from State) error {
	if _, err := s.Store.Refuse(ctx, it, from, s.now().Add(RefusedRetention)); err != nil {
		return apierr.Dependency("dynamodb", err)
	}
	return nil
}

// repair finishes a stale item: a claimed one, or a pending one the head
// holds (its claim landed), is logged and recorded; any other pending one
// is refused (its claim can no longer land: ClaimWithin).
func (s *Service) repair(ctx context.Context, it Item) error {
	if it.State == Pending {
		h, err := s.Store.Head(ctx)
		if err != nil {
			return err
		}
		if !h.holds(it) {
			return s.refuse(ctx, it, Pending)
		}
	}
	_, err := s.finish(ctx, []Item{it})
	return err
}
