package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// Release items live in one partition: the channel head (the latest
// claimed sequence and the version and digest that claimed it) and one item
// per version, ordered by sequence through the `ordered` LSI once recorded.
const (
	releasePK   = "RELEASE"
	releaseHead = "#HEAD"

	// A version's item is pending from the first write of a registration
	// until that registration claims the head (then recorded) or is refused
	// (then refused, and overwritable). Only recorded items carry lsk, so
	// lists never see the others.
	relPending  = "pending"
	relRecorded = "recorded"
	relRefused  = "refused"

	// ClaimWithin bounds how long after its pending write a registration
	// may still claim the head; PendingStale is when any other registration
	// may repair a pending item (commit it if the head holds it, else
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

// Fault points of Register (Releases.Faults), after each write.
const (
	FaultReleasePending   = "release.pending"
	FaultReleaseClaimed   = "release.claimed"
	FaultReleaseCommitted = "release.committed"
)

// Releases is the rollout.Store on DynamoDB.
type Releases struct {
	DB    *dynamodb.Client
	Table string
	Now   func() time.Time // nil: time.Now
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

type releaseItem struct {
	PK           string           `dynamodbav:"pk"`
	SK           string           `dynamodbav:"sk"`
	LSK          string           `dynamodbav:"lsk,omitempty"`
	State        string           `dynamodbav:"state"`
	PendingAt    time.Time        `dynamodbav:"pendingAt"`
	Version      string           `dynamodbav:"version"`
	Sequence     int64            `dynamodbav:"seq"`
	Digest       string           `dynamodbav:"dig"`
	Binaries     []rollout.Binary `dynamodbav:"binaries"`
	Expires      *time.Time       `dynamodbav:"expires,omitempty"`
	Signers      []string         `dynamodbav:"signers"`
	RegisteredAt time.Time        `dynamodbav:"registeredAt"`
	RegisteredBy rollout.Audit    `dynamodbav:"registeredBy"`
}

func (it releaseItem) release() rollout.Release {
	return rollout.Release{Version: it.Version, Sequence: it.Sequence, Binaries: it.Binaries, Expires: it.Expires,
		ManifestDigest: it.Digest, Signers: it.Signers, RegisteredAt: it.RegisteredAt.UTC(), RegisteredBy: it.RegisteredBy}
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

// Register records r (docs/architecture.md, "Releases"), in three single-item conditional
// writes, each idempotent:
//
//  1. put the version's item as pending, if the version is new (or only
//     refused before). The version check happens here, before the head is
//     touched: a registration refused as CONFLICT never moves the head.
//  2. claim the head: seq < r.Sequence, or the head already holds this very
//     claim (a retry). This is the commit point: the release is registered
//     once its claim is on the head; a lower or equal sequence is a
//     rollback, and its pending item is refused.
//  3. mark the item recorded (it gets its lsk and shows in lists).
//
// Whatever crashes where, the head never stays above the highest recorded
// release: a claim whose step 3 did not happen is completed by the next
// registration — the winner of the next claim records the head it replaced
// (step 2 returns it), and a refused claim records the head it ran into.
// A pending item that never claimed blocks only its own version, until a
// registration of that version finds it stale and refuses it.
//
// Once recorded (or replayed), the envelope as sent is kept in an item of
// its own, ENV#<version>, so lists never read it: whichever registration of
// the recorded statement writes it last, it is a verified envelope of that
// statement.
func (s *Releases) Register(ctx context.Context, r rollout.Release) (rollout.Release, bool, error) {
	for attempt := 0; ; attempt++ {
		stored, replayed, retry, err := s.register(ctx, r)
		if !retry || attempt == 2 {
			if err == nil && r.Manifest != nil && stored.ManifestDigest == r.ManifestDigest {
				err = s.putEnvelope(ctx, r)
			}
			return stored, replayed, err
		}
	}
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
	err := s.table().put(ctx, envelopeItem{PK: releasePK, SK: envelopeSK(r.Version), Digest: r.ManifestDigest, Manifest: r.Manifest}, nil)
	if err != nil {
		return apierr.Dependency("dynamodb", err)
	}
	return nil
}

// Get implements rollout.Store: the release item and its envelope in one
// consistent BatchGetItem.
func (s *Releases) Get(ctx context.Context, version string) (rollout.Release, error) {
	res, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
		s.Table: {Keys: []map[string]types.AttributeValue{key(releasePK, releaseSK(version)), key(releasePK, envelopeSK(version))},
			ConsistentRead: aws.Bool(true)}}})
	if err != nil {
		return rollout.Release{}, err
	}
	var rel *releaseItem
	var env *envelopeItem
	for _, item := range res.Responses[s.Table] {
		switch itemKey(item)[1] {
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

func (s *Releases) register(ctx context.Context, r rollout.Release) (stored rollout.Release, replayed, retry bool, err error) {
	it := releaseItem{PK: releasePK, SK: releaseSK(r.Version), State: relPending, PendingAt: s.now(), Version: r.Version,
		Sequence: r.Sequence, Digest: r.ManifestDigest, Binaries: r.Binaries, Expires: r.Expires, Signers: r.Signers,
		RegisteredAt: r.RegisteredAt, RegisteredBy: r.RegisteredBy}
	err = s.putPending(ctx, it)
	switch {
	case isConditionFailed(err):
		cur, ok, gerr := s.item(ctx, r.Version)
		if gerr != nil {
			return rollout.Release{}, false, false, gerr
		}
		if !ok {
			return rollout.Release{}, false, true, nil // gone between the two reads: again
		}
		switch {
		case cur.State == relRecorded && cur.Sequence == r.Sequence:
			return cur.release(), true, false, nil
		case cur.State == relRecorded:
			return rollout.Release{}, false, false, conflict(r.Version, cur.Sequence)
		case cur.State == relPending && cur.Sequence == r.Sequence && cur.Digest == r.ManifestDigest:
			it = cur // this very registration, retried: carry on from its item
		case cur.State == relPending && s.now().Sub(cur.PendingAt) >= PendingStale:
			if err := s.repair(ctx, cur); err != nil {
				return rollout.Release{}, false, false, err
			}
			return rollout.Release{}, false, true, nil
		case cur.State == relPending:
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

	if s.now().Sub(it.PendingAt) >= ClaimWithin {
		// Too late to claim: a repair may act on this item soon. Unless the
		// head already holds it (a crash after the claim), start afresh.
		h, err := s.head(ctx)
		if err != nil {
			return rollout.Release{}, false, false, err
		}
		if h.holds(it.Sequence, it.Version, it.Digest) {
			return s.commit(ctx, it)
		}
		if err := s.refuse(ctx, it); err != nil {
			return rollout.Release{}, false, false, err
		}
		return rollout.Release{}, false, true, nil
	}
	old, err := s.claim(ctx, it)
	if isConditionFailed(err) {
		h, err := s.head(ctx)
		if err != nil {
			return rollout.Release{}, false, false, err
		}
		// The head's own release is recorded as of its claim: finish it if
		// its registration did not (or has not yet).
		if err := s.recordHead(ctx, h); err != nil {
			return rollout.Release{}, false, false, err
		}
		if err := s.refuse(ctx, it); err != nil {
			return rollout.Release{}, false, false, err
		}
		return rollout.Release{}, false, false, apierr.Invalid("rollback", "manifest.payload.sequence",
			"sequence %d is not above the latest registered sequence %d (a rollback of the release channel)", r.Sequence, h.Seq).
			With("latestSequence", h.Seq)
	}
	if err != nil {
		return rollout.Release{}, false, false, apierr.Dependency("dynamodb", err)
	}
	if err := s.fault(FaultReleaseClaimed); err != nil {
		return rollout.Release{}, false, false, err
	}
	if old != nil && !old.holds(it.Sequence, it.Version, it.Digest) {
		if err := s.recordHead(ctx, *old); err != nil {
			return rollout.Release{}, false, false, err
		}
	}
	return s.commit(ctx, it)
}

func conflict(version string, seq int64) error {
	return apierr.New(apierr.Conflict, "version %s is already registered with sequence %d", version, seq).
		With("version", version).With("sequence", seq)
}

// putPending is step 1.
func (s *Releases) putPending(ctx context.Context, it releaseItem) error {
	cond := expression.AttributeNotExists(expression.Name(schema.AttrPK)).
		Or(expression.Name("state").Equal(expression.Value(relRefused)))
	return s.table().put(ctx, it, &cond)
}

// claim is step 2; it returns the head it replaced (nil if there was none).
func (s *Releases) claim(ctx context.Context, it releaseItem) (*head, error) {
	seq, ver, dig := expression.Name("seq"), expression.Name("ver"), expression.Name("dig")
	s1, v1, d1 := expression.Value(it.Sequence), expression.Value(it.Version), expression.Value(it.Digest)
	cond := expression.Or(expression.AttributeNotExists(seq), seq.LessThan(s1),
		all([]expression.ConditionBuilder{seq.Equal(s1), ver.Equal(v1), dig.Equal(d1)})) // a retry after a crash continues
	// The claim must land before a repair may judge the item stale.
	cctx, cancel := context.WithTimeout(ctx, it.PendingAt.Add(PendingStale-ClaimWithin/2).Sub(s.now()))
	defer cancel()
	old, err := s.table().update(cctx, key(releasePK, releaseHead), expression.Set(seq, s1).Set(ver, v1).Set(dig, d1), &cond, types.ReturnValueUpdatedOld)
	if err != nil || len(old) == 0 {
		return nil, err
	}
	var h head
	if err := attributevalue.UnmarshalMap(old, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// commit is step 3; an item a twin already recorded is a replay.
func (s *Releases) commit(ctx context.Context, it releaseItem) (rollout.Release, bool, bool, error) {
	err := s.mark(ctx, it.Version, it.Sequence, it.Digest, relRecorded)
	if isConditionFailed(err) {
		cur, ok, err := s.item(ctx, it.Version)
		if err != nil {
			return rollout.Release{}, false, false, err
		}
		if ok && cur.State == relRecorded && cur.Sequence == it.Sequence {
			return cur.release(), true, false, nil
		}
		return rollout.Release{}, false, true, nil
	}
	if err != nil {
		return rollout.Release{}, false, false, apierr.Dependency("dynamodb", err)
	}
	if err := s.fault(FaultReleaseCommitted); err != nil {
		return rollout.Release{}, false, false, err
	}
	it.State = relRecorded
	return it.release(), false, false, nil
}

// mark moves a pending item of (version, seq, dig) to recorded or refused.
func (s *Releases) mark(ctx context.Context, version string, seq int64, dig, to string) error {
	upd := expression.Set(expression.Name("state"), expression.Value(to))
	if to == relRecorded {
		upd = upd.Set(expression.Name(schema.AttrLSK), expression.Value(seqKey(seq)))
	} else {
		upd = upd.Set(expression.Name(schema.AttrTTL), expression.Value(s.now().Add(RefusedRetention).Unix()))
	}
	cond := expression.Name("state").Equal(expression.Value(relPending)).
		And(expression.Name("seq").Equal(expression.Value(seq))).
		And(expression.Name("dig").Equal(expression.Value(dig)))
	_, err := s.table().update(ctx, key(releasePK, releaseSK(version)), upd, &cond, types.ReturnValueNone)
	return err
}

// refuse marks this registration's pending item refused (idempotent).
func (s *Releases) refuse(ctx context.Context, it releaseItem) error {
	if err := s.mark(ctx, it.Version, it.Sequence, it.Digest, relRefused); err != nil && !isConditionFailed(err) {
		return apierr.Dependency("dynamodb", err)
	}
	return nil
}

// recordHead records the release a head claim stands for, if its item is
// still pending (a no-op write otherwise).
func (s *Releases) recordHead(ctx context.Context, h head) error {
	if h.Ver == "" {
		return nil
	}
	if err := s.mark(ctx, h.Ver, h.Seq, h.Dig, relRecorded); err != nil && !isConditionFailed(err) {
		return apierr.Dependency("dynamodb", err)
	}
	return nil
}

// repair settles a stale pending item: recorded if the head holds it, else
// refused.
func (s *Releases) repair(ctx context.Context, it releaseItem) error {
	h, err := s.head(ctx)
	if err != nil {
		return err
	}
	if h.holds(it.Sequence, it.Version, it.Digest) {
		return s.recordHead(ctx, h)
	}
	return s.refuse(ctx, it)
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
	res, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: key(releasePK, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, apierr.Dependency("dynamodb", err)
	}
	if len(res.Item) == 0 {
		return false, nil
	}
	return true, attributevalue.UnmarshalMap(res.Item, out)
}

func (s *Releases) table() table { return table{s.DB, s.Table} }

// List reads release items through the `ordered` LSI, highest sequence
// first: one Query per page (limit+1 items, so a full last page carries no
// cursor to an empty one). limit ≤ 0 reads every page.
func (s *Releases) List(ctx context.Context, limit int, after map[string]string) ([]rollout.Release, map[string]string, error) {
	var out []rollout.Release
	start, err := startKey(after, releasePK)
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

// startKey turns a decoded cursor into an ExclusiveStartKey, refusing one
// outside the partition the query is bound to.
func startKey(after map[string]string, pk string) (map[string]types.AttributeValue, error) {
	if after == nil {
		return nil, nil
	}
	if after[schema.AttrPK] != pk {
		return nil, errBadCursor
	}
	k := make(map[string]types.AttributeValue, len(after))
	for name, v := range after {
		k[name] = &types.AttributeValueMemberS{Value: v}
	}
	return k, nil
}
