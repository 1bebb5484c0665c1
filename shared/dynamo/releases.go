package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/releaselog"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// Release items live in one partition: the channel head (the latest
// claimed sequence and the version and digest that claimed it) and one item
// per version, ordered by sequence through the `ordered` LSI once recorded.
const (
	releasePK   = "RELEASE"
	releaseHead = "#HEAD"

	// A version's item is pending from the first write of a registration
	// until that registration claims the head (then claimed) or is refused
	// (then refused, and overwritable). A claimed item may be appended to
	// the release log; once it is, and a signed checkpoint covers it, it is
	// recorded. Only recorded items carry lsk, so lists (and so nodes and
	// rollouts) never see the others: nothing is told a release no signed
	// checkpoint covers.
	relPending  = "pending"
	relClaimed  = "claimed"
	relRecorded = "recorded"
	relRefused  = "refused"

	// ClaimWithin bounds how long after its pending write a registration
	// may still claim the head; PendingStale is when any other registration
	// may repair a pending item (settle it if the head holds it, else
	// refuse it). The gap keeps a slow claimant and a repair from ever
	// acting on the same item.
	ClaimWithin  = time.Minute
	PendingStale = 2 * time.Minute
	// RefusedRetention: refused items are deleted by TTL after this.
	RefusedRetention = 24 * time.Hour
)

func releaseSK(version string) string { return "V#" + version }

// seqKey orders sequences as strings: 16 digits cover 2^53−1.
func seqKey(seq int64) string { return fmt.Sprintf("%016d", seq) }

// Fault points of Register (Releases.Faults), after each write; the log's
// own (FaultLogEntry, …) come from Releases.Log.Faults.
const (
	FaultReleasePending   = "release.pending"   // item put pending
	FaultReleaseClaimed   = "release.claimed"   // head claimed
	FaultReleaseMarked    = "release.marked"    // item marked claimed (may be logged)
	FaultReleaseCommitted = "release.committed" // item recorded
)

// Releases is the rollout.Store on DynamoDB.
type Releases struct {
	DB    *dynamodb.Client
	Table string
	// Log is the release log every registration appends to (required to
	// register; reads do without).
	Log *ReleaseLog
	Now func() time.Time // nil: time.Now
	// Faults is a test-only hook (nil in production): called after each
	// write of Register; an error stops it there as a crash would.
	Faults func(point string) error
}

func (s *Releases) now() time.Time {
	if s.Now == nil {
		return time.Now().UTC()
	}
	return s.Now().UTC()
}

func (s *Releases) fault(point string) error {
	if s.Faults == nil {
		return nil
	}
	return s.Faults(point)
}

// releaseItem is RELEASE / V#<version>. Worst case: 64 binaries of a
// 2,048-byte URL and their platform, digest and size (~140 KB), the
// signers, the audit and the 32-byte leaf hash — under 150 KB.
type releaseItem struct {
	PK           string           `dynamodbav:"pk"`
	SK           string           `dynamodbav:"sk"`
	LSK          string           `dynamodbav:"lsk,omitempty"`
	State        string           `dynamodbav:"state"`
	PendingAt    time.Time        `dynamodbav:"pendingAt"`
	Version      string           `dynamodbav:"version"`
	Sequence     int64            `dynamodbav:"seq"`
	Digest       string           `dynamodbav:"dig"`
	Leaf         []byte           `dynamodbav:"leaf"` // the log entry's leaf hash (its payload's)
	LogIndex     *int64           `dynamodbav:"li,omitempty"`
	Binaries     []rollout.Binary `dynamodbav:"binaries"`
	Expires      *time.Time       `dynamodbav:"expires,omitempty"`
	Signers      []string         `dynamodbav:"signers"`
	RegisteredAt time.Time        `dynamodbav:"registeredAt"`
	RegisteredBy rollout.Audit    `dynamodbav:"registeredBy"`
}

func (it releaseItem) release() rollout.Release {
	r := rollout.Release{Version: it.Version, Sequence: it.Sequence, Binaries: it.Binaries, Expires: it.Expires,
		ManifestDigest: it.Digest, Signers: it.Signers, RegisteredAt: it.RegisteredAt.UTC(), RegisteredBy: it.RegisteredBy}
	if it.LogIndex != nil {
		r.Log = &rollout.LogEntry{Index: *it.LogIndex}
	}
	return r
}

func (it releaseItem) leaf() (tlog.Hash, error) {
	var h tlog.Hash
	if len(it.Leaf) != tlog.HashSize {
		return h, fmt.Errorf("dynamo: release %s: no leaf hash on its item", it.Version)
	}
	copy(h[:], it.Leaf)
	return h, nil
}

// head is the channel head's claim.
type head struct {
	Seq int64  `dynamodbav:"seq"`
	Ver string `dynamodbav:"ver"`
	Dig string `dynamodbav:"dig"`
}

func (h head) holds(seq int64, ver, dig string) bool {
	return h.Seq == seq && h.Ver == ver && h.Dig == dig
}

// errOvertaken: a claimed release the log passed before it was appended
// (the registration that claimed over it crashed before logging it): it is
// refused, and its registration answers rollback.
var errOvertaken = errors.New("dynamo: release overtaken in the log")

// Register records r (docs/architecture.md, "Releases"), in single-item
// conditional writes, each idempotent:
//
//  1. put the version's item as pending, if the version is new (or only
//     refused before). The version check happens here, before the head is
//     touched: a registration refused as CONFLICT never moves the head.
//  2. claim the head: seq < r.Sequence, or the head already holds this very
//     claim (a retry). This decides the order; a lower or equal sequence is
//     a rollback, and its pending item is refused.
//  3. mark the item claimed (pending → claimed): from here on it is logged,
//     never refused — unless the log passed it (below).
//  4. append it to the release log (Releases.Log): the entry's put is the
//     sequencing point of the log; the head of the log follows.
//  5. sign a checkpoint covering it (one KMS Sign; the log's checkpoint item).
//  6. mark it recorded (it gets its lsk and log index and shows in lists).
//
// Whatever crashes where, the head never stays above the highest recorded
// release: the winner of the next claim settles (steps 3–6) the head it
// replaced before its own release, and a refused claim settles the head it
// ran into. A claim whose settling never happened and whose successor's
// registration crashed too is passed in the log by a later release: it is
// refused then, never logged out of sequence order. A pending item that
// never claimed blocks only its own version, until a registration of that
// version finds it stale and refuses it. The reconciler settles the head
// each pass (Settle).
//
// Once recorded (or replayed), the envelope as sent is kept in an item of
// its own, ENV#<version>, so lists never read it: whichever registration of
// the recorded statement writes it last, it is a verified envelope of that
// statement.
func (s *Releases) Register(ctx context.Context, r rollout.Release) (rollout.Release, bool, error) {
	if s.Log == nil {
		return rollout.Release{}, false, apierr.New(apierr.Unavailable, "no release log is configured (BC_RELEASE_LOG_KEY)")
	}
	if r.Payload == nil {
		return rollout.Release{}, false, fmt.Errorf("dynamo: release %s: no payload to log", r.Version)
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

// withCheckpoint adds the latest signed checkpoint to a recorded release
// (it covers the release: recorded means covered, and checkpoints only grow).
func (s *Releases) withCheckpoint(ctx context.Context, r *rollout.Release) error {
	if r.Log == nil {
		return fmt.Errorf("dynamo: release %s is recorded without a log index", r.Version)
	}
	note, size, err := s.Log.Checkpoint(ctx)
	if err != nil {
		return apierr.Dependency("dynamodb", err)
	}
	if size <= r.Log.Index {
		return fmt.Errorf("dynamo: release %s (entry %d) is recorded but the checkpoint has size %d", r.Version, r.Log.Index, size)
	}
	r.Log.Checkpoint = note
	return nil
}

// envelopeItem is a recorded release's manifest, RELEASE / ENV#<version>.
// Worst case: the 256 KiB request body.
type envelopeItem struct {
	PK       string `dynamodbav:"pk"`
	SK       string `dynamodbav:"sk"`
	Digest   string `dynamodbav:"dig"`
	Manifest []byte `dynamodbav:"env"`
}

func envelopeSK(version string) string { return "ENV#" + version }

func (s *Releases) putEnvelope(ctx context.Context, r rollout.Release) error {
	err := s.table().Put(ctx, envelopeItem{PK: releasePK, SK: envelopeSK(r.Version), Digest: r.ManifestDigest, Manifest: r.Manifest}, nil)
	if err != nil {
		return apierr.Dependency("dynamodb", err)
	}
	return nil
}

// Get implements rollout.Store: the release item and its envelope in one
// consistent BatchGetItem.
func (s *Releases) Get(ctx context.Context, version string) (rollout.Release, error) {
	res, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
		s.Table: {Keys: []map[string]types.AttributeValue{Key(releasePK, releaseSK(version)), Key(releasePK, envelopeSK(version))},
			ConsistentRead: aws.Bool(true)}}})
	if err != nil {
		return rollout.Release{}, err
	}
	var rel *releaseItem
	var env *envelopeItem
	for _, item := range res.Responses[s.Table] {
		switch ItemKey(item)[1] {
		case releaseSK(version):
			rel = new(releaseItem)
			err = attributevalue.UnmarshalMap(item, rel)
		case envelopeSK(version):
			env = new(envelopeItem)
			err = attributevalue.UnmarshalMap(item, env)
		}
		if err != nil {
			return rollout.Release{}, err
		}
	}
	if len(res.UnprocessedKeys) > 0 {
		return rollout.Release{}, fmt.Errorf("dynamo: release %s: keys left unprocessed", version)
	}
	if rel == nil || rel.State != relRecorded {
		return rollout.Release{}, rollout.ErrNotFound
	}
	out := rel.release()
	if env != nil && env.Digest == out.ManifestDigest {
		out.Manifest = env.Manifest
	}
	return out, nil
}

// ReleaseIndexes finds recorded releases' entries in the release log
// (rollout.LogIndexes) for releases.prove. A type of its own, not a method
// of Releases: every function stores releases through Releases, and only
// releases.prove needs this.
type ReleaseIndexes struct{ Releases *Releases }

// LogIndex is a recorded release's entry in the release log: its item
// alone, one GetItem — not its envelope, which Releases.Get also reads.
// ErrNotFound when the version is not recorded; ok false when it was
// recorded before the log.
func (x ReleaseIndexes) LogIndex(ctx context.Context, version string) (index int64, ok bool, err error) {
	it, found, err := x.Releases.item(ctx, version)
	switch {
	case err != nil:
		return 0, false, err
	case !found || it.State != relRecorded:
		return 0, false, rollout.ErrNotFound
	case it.LogIndex == nil:
		return 0, false, nil
	}
	return *it.LogIndex, true, nil
}

func (s *Releases) register(ctx context.Context, r rollout.Release) (stored rollout.Release, replayed, retry bool, err error) {
	leaf := releaselog.LeafHash(r.Payload)
	it := releaseItem{PK: releasePK, SK: releaseSK(r.Version), State: relPending, PendingAt: s.now(), Version: r.Version,
		Sequence: r.Sequence, Digest: r.ManifestDigest, Leaf: leaf[:], Binaries: r.Binaries, Expires: r.Expires, Signers: r.Signers,
		RegisteredAt: r.RegisteredAt, RegisteredBy: r.RegisteredBy}
	err = s.putPending(ctx, it)
	switch {
	case ConditionFailed(err):
		cur, ok, gerr := s.item(ctx, r.Version)
		if gerr != nil {
			return rollout.Release{}, false, false, gerr
		}
		if !ok {
			return rollout.Release{}, false, true, nil // gone between the two reads: again
		}
		unsettled := cur.State == relPending || cur.State == relClaimed
		switch {
		case cur.State == relRecorded && cur.Sequence == r.Sequence:
			return cur.release(), true, false, nil
		case cur.State == relRecorded:
			return rollout.Release{}, false, false, conflict(r.Version, cur.Sequence)
		case unsettled && cur.Sequence == r.Sequence && cur.Digest == r.ManifestDigest:
			it = cur // this very registration, retried: carry on from its item
		case unsettled && s.now().Sub(cur.PendingAt) >= PendingStale:
			if err := s.repair(ctx, cur); err != nil {
				return rollout.Release{}, false, false, err
			}
			return rollout.Release{}, false, true, nil
		case unsettled:
			return rollout.Release{}, false, false, apierr.New(apierr.Conflict,
				"version %s is being registered with sequence %d", r.Version, cur.Sequence).
				With("version", r.Version).With("sequence", cur.Sequence)
		default: // refused: overwritable, raced with another refusal
			return rollout.Release{}, false, true, nil
		}
	case err != nil:
		return rollout.Release{}, false, false, apierr.Dependency("dynamodb", err)
	default:
		if err := s.fault(FaultReleasePending); err != nil {
			return rollout.Release{}, false, false, err
		}
	}

	var settle []releaseItem // the releases to log and record, in sequence order
	if it.State == relPending {
		if s.now().Sub(it.PendingAt) >= ClaimWithin {
			// Too late to claim: a repair may act on this item soon. Unless the
			// head already holds it (a crash after the claim), start afresh.
			h, err := s.head(ctx)
			if err != nil {
				return rollout.Release{}, false, false, err
			}
			if !h.holds(it.Sequence, it.Version, it.Digest) {
				if err := s.refuse(ctx, it, relPending); err != nil {
					return rollout.Release{}, false, false, err
				}
				return rollout.Release{}, false, true, nil
			}
		} else {
			old, err := s.claim(ctx, it)
			if ConditionFailed(err) {
				retry, err := s.rollback(ctx, it)
				return rollout.Release{}, false, retry, err
			}
			if err != nil {
				return rollout.Release{}, false, false, apierr.Dependency("dynamodb", err)
			}
			if err := s.fault(FaultReleaseClaimed); err != nil {
				return rollout.Release{}, false, false, err
			}
			if old != nil && !old.holds(it.Sequence, it.Version, it.Digest) {
				// The head's previous release is settled before this one, so
				// the log keeps sequence order even when its registration
				// crashed.
				prev, err := s.unsettled(ctx, *old)
				if err != nil {
					return rollout.Release{}, false, false, err
				}
				settle = append(settle, prev...)
			}
		}
	}
	done, err := s.settle(ctx, append(settle, it))
	if err != nil {
		return rollout.Release{}, false, false, err
	}
	mine := done[len(done)-1]
	switch {
	case mine.State == relRecorded && mine.Version == it.Version && mine.Sequence == it.Sequence && mine.Digest == it.Digest:
		rel := mine.release()
		if rel.Log != nil {
			rel.Log.Checkpoint = mine.note
		}
		return rel, mine.twin, false, nil
	case mine.State == relRefused:
		h, err := s.head(ctx)
		if err != nil {
			return rollout.Release{}, false, false, err
		}
		return rollout.Release{}, false, false, rollbackError(r.Sequence, h.Seq)
	default:
		return rollout.Release{}, false, true, nil
	}
}

// rollback settles the head this registration's claim ran into (its
// registration may have crashed), refuses this one, and says why — unless
// the refusal does not land because a twin of this very registration (a
// client's retry racing it) claimed the item first: then it is logged, not
// refused, and retry says to answer what it becomes.
func (s *Releases) rollback(ctx context.Context, it releaseItem) (retry bool, err error) {
	h, err := s.head(ctx)
	if err != nil {
		return false, err
	}
	prev, err := s.unsettled(ctx, h)
	if err != nil {
		return false, err
	}
	if _, err := s.settle(ctx, prev); err != nil {
		return false, err
	}
	if err := s.refuse(ctx, it, relPending); err != nil {
		return false, err
	}
	cur, ok, err := s.item(ctx, it.Version)
	if err != nil {
		return false, err
	}
	if ok && cur.State != relRefused && cur.Sequence == it.Sequence && cur.Digest == it.Digest {
		return true, nil
	}
	return false, rollbackError(it.Sequence, h.Seq)
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

// unsettled is the release a head claim names, if it is not settled yet
// (none, or one item).
func (s *Releases) unsettled(ctx context.Context, h head) ([]releaseItem, error) {
	if h.Ver == "" {
		return nil, nil
	}
	it, ok, err := s.item(ctx, h.Ver)
	if err != nil || !ok {
		return nil, err
	}
	if it.Sequence != h.Seq || it.Digest != h.Dig || (it.State != relPending && it.State != relClaimed) {
		return nil, nil
	}
	return []releaseItem{it}, nil
}

// settledItem is a release item after settle, twin when another
// registration recorded it first.
type settledItem struct {
	releaseItem
	twin bool
	note string // the checkpoint signed over it
}

// settle logs and records claimed-over releases in sequence order: each is
// marked claimed and appended, then one checkpoint is signed over them
// all, then each is recorded. An item the log passed is refused. It
// returns each item's end state.
func (s *Releases) settle(ctx context.Context, its []releaseItem) ([]settledItem, error) {
	out := make([]settledItem, len(its))
	logged := int64(0) // the log's size as of the last append
	for i, it := range its {
		out[i].releaseItem = it
		if it.State == relPending {
			cur, err := s.markClaimed(ctx, it)
			if err != nil {
				return nil, err
			}
			out[i].releaseItem = cur
			if cur.State != relClaimed {
				out[i].twin = cur.State == relRecorded
				continue
			}
		}
		leaf, err := it.leaf()
		if err != nil {
			return nil, err
		}
		idx, err := s.Log.Append(ctx, it.Version, it.Sequence, leaf)
		if errors.Is(err, ErrLogOrder) {
			if err := s.refuse(ctx, it, relClaimed); err != nil {
				return nil, err
			}
			out[i].State = relRefused
			continue
		}
		if err != nil {
			return nil, apierr.Dependency("dynamodb", err)
		}
		out[i].LogIndex = &idx
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
		if it.State != relClaimed || it.LogIndex == nil {
			continue
		}
		if size <= *it.LogIndex {
			return nil, fmt.Errorf("dynamo: release log: checkpoint of size %d signed after appending entry %d", size, *it.LogIndex)
		}
		twin, err := s.record(ctx, it.releaseItem, *it.LogIndex)
		if err != nil {
			return nil, err
		}
		it.State, it.twin = relRecorded, twin
		it.LSK = seqKey(it.Sequence)
	}
	for i := range out {
		if out[i].State == relRecorded && out[i].LogIndex != nil {
			out[i].note = note
		}
	}
	return out, nil
}

// putPending is step 1.
func (s *Releases) putPending(ctx context.Context, it releaseItem) error {
	cond := expression.AttributeNotExists(expression.Name(schema.AttrPK)).
		Or(expression.Name("state").Equal(expression.Value(relRefused)))
	return s.table().Put(ctx, it, &cond)
}

// claim is step 2; it returns the head it replaced (nil if there was none).
func (s *Releases) claim(ctx context.Context, it releaseItem) (*head, error) {
	seq, ver, dig := expression.Name("seq"), expression.Name("ver"), expression.Name("dig")
	s1, v1, d1 := expression.Value(it.Sequence), expression.Value(it.Version), expression.Value(it.Digest)
	cond := expression.Or(expression.AttributeNotExists(seq), seq.LessThan(s1),
		All([]expression.ConditionBuilder{seq.Equal(s1), ver.Equal(v1), dig.Equal(d1)})) // a retry after a crash continues
	// The claim must land before a repair may judge the item stale.
	cctx, cancel := context.WithTimeout(ctx, it.PendingAt.Add(PendingStale-ClaimWithin/2).Sub(s.now()))
	defer cancel()
	old, err := s.table().Update(cctx, Key(releasePK, releaseHead), expression.Set(seq, s1).Set(ver, v1).Set(dig, d1), &cond, types.ReturnValueUpdatedOld)
	if err != nil || len(old) == 0 {
		return nil, err
	}
	var h head
	if err := attributevalue.UnmarshalMap(old, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// markClaimed is step 3: pending → claimed, if the item still holds this
// claim. It returns the item as it stands after (claimed, or whatever
// another registration or a repair made of it).
func (s *Releases) markClaimed(ctx context.Context, it releaseItem) (releaseItem, error) {
	cond := expression.Name("state").In(expression.Value(relPending), expression.Value(relClaimed)).
		And(expression.Name("seq").Equal(expression.Value(it.Sequence))).
		And(expression.Name("dig").Equal(expression.Value(it.Digest)))
	_, err := s.table().Update(ctx, Key(releasePK, releaseSK(it.Version)),
		expression.Set(expression.Name("state"), expression.Value(relClaimed)), &cond, types.ReturnValueNone)
	if ConditionFailed(err) {
		cur, ok, err := s.item(ctx, it.Version)
		if err != nil {
			return releaseItem{}, err
		}
		if !ok || cur.Sequence != it.Sequence || cur.Digest != it.Digest {
			cur.State = relRefused // gone or replaced: this claim is no more
		}
		return cur, nil
	}
	if err != nil {
		return releaseItem{}, apierr.Dependency("dynamodb", err)
	}
	if err := s.fault(FaultReleaseMarked); err != nil {
		return releaseItem{}, err
	}
	it.State = relClaimed
	return it, nil
}

// record is step 6: claimed → recorded with its lsk and log index; twin
// when another registration recorded it first.
func (s *Releases) record(ctx context.Context, it releaseItem, index int64) (twin bool, err error) {
	upd := expression.Set(expression.Name("state"), expression.Value(relRecorded)).
		Set(expression.Name(schema.AttrLSK), expression.Value(seqKey(it.Sequence))).
		Set(expression.Name("li"), expression.Value(index))
	_, err = s.table().Update(ctx, Key(releasePK, releaseSK(it.Version)), upd, s.holding(it, relClaimed), types.ReturnValueNone)
	if ConditionFailed(err) {
		cur, ok, err := s.item(ctx, it.Version)
		if err != nil {
			return false, err
		}
		if ok && cur.State == relRecorded && cur.Sequence == it.Sequence && cur.Digest == it.Digest {
			return true, nil
		}
		return false, fmt.Errorf("dynamo: release %s: logged at %d but its item is %s", it.Version, index, cur.State)
	}
	if err != nil {
		return false, apierr.Dependency("dynamodb", err)
	}
	return false, s.fault(FaultReleaseCommitted)
}

// holding is the condition that the item is in state from with it's claim.
func (s *Releases) holding(it releaseItem, from string) *expression.ConditionBuilder {
	cond := expression.Name("state").Equal(expression.Value(from)).
		And(expression.Name("seq").Equal(expression.Value(it.Sequence))).
		And(expression.Name("dig").Equal(expression.Value(it.Digest)))
	return &cond
}

// refuse marks an item of this claim refused if it is still in state from
// (idempotent): a pending item that never claimed, or a claimed one the log
// passed.
func (s *Releases) refuse(ctx context.Context, it releaseItem, from string) error {
	upd := expression.Set(expression.Name("state"), expression.Value(relRefused)).
		Set(expression.Name(schema.AttrTTL), expression.Value(s.now().Add(RefusedRetention).Unix()))
	_, err := s.table().Update(ctx, Key(releasePK, releaseSK(it.Version)), upd, s.holding(it, from), types.ReturnValueNone)
	if err != nil && !ConditionFailed(err) {
		return apierr.Dependency("dynamodb", err)
	}
	return nil
}

// repair settles a stale item: a claimed one, or a pending one the head
// holds (its claim landed), is logged and recorded; any other pending one
// is refused (its claim can no longer land: ClaimWithin).
func (s *Releases) repair(ctx context.Context, it releaseItem) error {
	if it.State == relPending {
		h, err := s.head(ctx)
		if err != nil {
			return err
		}
		if !h.holds(it.Sequence, it.Version, it.Digest) {
			return s.refuse(ctx, it, relPending)
		}
	}
	_, err := s.settle(ctx, []releaseItem{it})
	return err
}

// Settle finishes what crashed registrations left (the reconciler, each
// pass): the release the channel head names is logged and recorded if its
// registration did not finish, and the log's checkpoint is signed up to
// the log's size. It says whether it had anything to do.
func (s *Releases) Settle(ctx context.Context) (bool, error) {
	if s.Log == nil {
		return false, nil
	}
	h, err := s.head(ctx)
	if err != nil {
		return false, err
	}
	prev, err := s.unsettled(ctx, h)
	if err != nil {
		return false, err
	}
	if len(prev) > 0 && s.now().Sub(prev[0].PendingAt) < PendingStale {
		prev = nil // its registration may still be running: leave it to it
	}
	if _, err := s.settle(ctx, prev); err != nil {
		return false, err
	}
	n, err := s.Log.Size(ctx)
	if err != nil {
		return false, err
	}
	_, size, err := s.Log.Checkpoint(ctx)
	if err != nil {
		return false, err
	}
	signed := size
	if size < n {
		if _, signed, err = s.Log.SignCovering(ctx, n); err != nil {
			return false, apierr.Dependency("kms", err)
		}
	}
	recorded, err := s.recordLogged(ctx, signed)
	if err != nil {
		return false, err
	}
	return len(prev) > 0 || size < n || recorded > 0, nil
}

// logRec is the log's recorded watermark (RLOG / REC {n}): the releases of
// entries [0, n) are recorded.
const logRec = "REC"

// RecordBatch bounds the entries one Settle checks past the watermark.
const RecordBatch = 64

// recordLogged converges the releases on the log: every entry's release is
// recorded (desired) — a registration that crashed between its append and
// its record, with no later registration's claim passing through it, would
// otherwise stay logged but never listed. From the watermark up to the
// signed size (a release is recorded only once a checkpoint covers it), at
// most RecordBatch entries per call: a claimed item is recorded at its
// entry's index once PendingStale passed (before, its registration may still
// be running, and the walk stops there), a recorded one skipped; then the
// watermark moves, only forward. It returns how many it recorded; in steady state it reads the
// watermark alone.
func (s *Releases) recordLogged(ctx context.Context, signed int64) (int, error) {
	var w struct {
		N int64 `dynamodbav:"n"`
	}
	if _, err := s.Log.get(ctx, logRec, &w); err != nil {
		return 0, err
	}
	recorded, i := 0, w.N
walk:
	for ; i < min(signed, w.N+RecordBatch); i++ {
		e, ok, err := s.Log.entry(ctx, i)
		if err != nil {
			return recorded, err
		}
		if !ok {
			return recorded, fmt.Errorf("dynamo: release log: no entry %d below the signed size %d", i, signed)
		}
		it, ok, err := s.item(ctx, e.Ver)
		if err != nil {
			return recorded, err
		}
		switch {
		case ok && it.State == relRecorded && it.Sequence == e.Seq:
		case ok && it.State == relClaimed && it.Sequence == e.Seq && s.now().Sub(it.PendingAt) < PendingStale:
			break walk // its registration may still be running: left to it, and the watermark waits
		case ok && it.State == relClaimed && it.Sequence == e.Seq:
			if _, err := s.record(ctx, it, i); err != nil {
				return recorded, err
			}
			recorded++
		default:
			return recorded, fmt.Errorf("dynamo: release log: entry %d is %s@%d, whose item is %q (sequence %d)", i, e.Ver, e.Seq, it.State, it.Sequence)
		}
	}
	if i > w.N {
		attr := expression.Name("n")
		cond := expression.AttributeNotExists(expression.Name(schema.AttrPK)).Or(attr.LessThan(expression.Value(i)))
		err := s.Log.table().Put(ctx, logHeadItem{PK: logPK, SK: logRec, N: i}, &cond)
		if err != nil && !ConditionFailed(err) {
			return recorded, err
		}
	}
	return recorded, nil
}

// head reads the channel head consistently (zero if none).
func (s *Releases) head(ctx context.Context) (head, error) {
	var h head
	if _, err := s.get(ctx, releaseHead, &h); err != nil {
		return h, err
	}
	return h, nil
}

// item reads a version's item consistently.
func (s *Releases) item(ctx context.Context, version string) (releaseItem, bool, error) {
	var it releaseItem
	ok, err := s.get(ctx, releaseSK(version), &it)
	return it, ok, err
}

// get reads one release item consistently; a failed read is the
// dependency's error, a bad item a plain one.
func (s *Releases) get(ctx context.Context, sk string, out any) (bool, error) {
	res, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: Key(releasePK, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, apierr.Dependency("dynamodb", err)
	}
	if len(res.Item) == 0 {
		return false, nil
	}
	return true, attributevalue.UnmarshalMap(res.Item, out)
}

func (s *Releases) table() Table { return Table{DB: s.DB, Name: s.Table} }

// List reads release items through the `ordered` LSI, highest sequence
// first: one Query per page (limit+1 items, so a full last page carries no
// cursor to an empty one). limit ≤ 0 reads every page.
func (s *Releases) List(ctx context.Context, limit int, after map[string]string) ([]rollout.Release, map[string]string, error) {
	var out []rollout.Release
	start, err := StartKey(after, releasePK)
	if err != nil {
		return nil, nil, err
	}
	for {
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(s.Table),
			IndexName:                 aws.String(schema.IndexOrdered),
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  map[string]string{"#pk": schema.AttrPK},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: releasePK}},
			ScanIndexForward:          aws.Bool(false),
			ExclusiveStartKey:         start,
		}
		if limit > 0 {
			in.Limit = aws.Int32(int32(limit - len(out) + 1))
		}
		page, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, nil, apierr.Dependency("dynamodb", err)
		}
		for _, av := range page.Items {
			var it releaseItem
			if err := attributevalue.UnmarshalMap(av, &it); err != nil {
				return nil, nil, err
			}
			if limit > 0 && len(out) == limit {
				last := out[len(out)-1]
				return out, map[string]string{schema.AttrPK: releasePK, schema.AttrSK: releaseSK(last.Version), schema.AttrLSK: seqKey(last.Sequence)}, nil
			}
			out = append(out, it.release())
		}
		if page.LastEvaluatedKey == nil {
			return out, nil, nil
		}
		start = page.LastEvaluatedKey
	}
}
