package releasedb

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
)

// Releases is registry.Store: the channel head, the version items, the
// envelopes and the log's recorded mark.
type Releases struct {
	DB    *dynamodb.Client
	Table string
}

var _ registry.Store = (*Releases)(nil)

func (s *Releases) table() dynamo.Table { return dynamo.Table{DB: s.DB, Name: s.Table} }

func itemOf(it registry.Item) releaseItem {
	r := it.Release
	out := releaseItem{PK: releasePK, SK: releaseSK(r.Version), State: string(it.State), PendingAt: it.PendingAt, Version: r.Version,
		Sequence: r.Sequence, Digest: r.ManifestDigest, Leaf: it.Leaf[:], Binaries: r.Binaries, Expires: r.Expires, Signers: r.Signers,
		RegisteredAt: r.RegisteredAt, RegisteredBy: r.RegisteredBy}
	if r.Log != nil {
		i := r.Log.Index
		out.LogIndex = &i
	}
	return out
}

func (it releaseItem) release() release.Release {
	r := release.Release{Version: it.Version, Sequence: it.Sequence, Binaries: it.Binaries, Expires: it.Expires,
		ManifestDigest: it.Digest, Signers: it.Signers, RegisteredAt: it.RegisteredAt.UTC(), RegisteredBy: it.RegisteredBy}
	if it.LogIndex != nil {
		r.Log = &release.LogEntry{Index: *it.LogIndex}
	}
	return r
}

func (it releaseItem) item() registry.Item {
	out := registry.Item{Release: it.release(), State: registry.State(it.State), PendingAt: it.PendingAt}
	if len(it.Leaf) == tlog.HashSize { // none on a release recorded before the log
		copy(out.Leaf[:], it.Leaf)
	}
	return out
}

// holding is the condition that the item is in state from with it's
// claim (sequence and digest).
func holding(it registry.Item, from ...registry.State) expression.ConditionBuilder {
	state := expression.Name(attrState).Equal(expression.Value(string(from[0])))
	if len(from) == 2 {
		state = expression.Name(attrState).In(expression.Value(string(from[0])), expression.Value(string(from[1])))
	}
	return dynamo.All([]expression.ConditionBuilder{state,
		expression.Name(attrSeq).Equal(expression.Value(it.Sequence)),
		expression.Name(attrDigest).Equal(expression.Value(it.ManifestDigest))})
}

// landed is a conditional write's outcome: false when its condition did
// not hold.
func landed(err error) (bool, error) {
	if dynamo.ConditionFailed(err) {
		return false, nil
	}
	return err == nil, err
}

// PutPending puts the version's item if it has none or a refused one.
func (s *Releases) PutPending(ctx context.Context, it registry.Item) (bool, error) {
	cond := expression.AttributeNotExists(expression.Name(schema.AttrPK)).
		Or(expression.Name(attrState).Equal(expression.Value(string(registry.Refused))))
	return landed(s.table().Put(ctx, itemOf(it), &cond))
}

// ClaimHead sets the head to h if its sequence is below h's, there is
// none, or it already is h (a retry after a crash continues).
func (s *Releases) ClaimHead(ctx context.Context, h registry.Head) (*registry.Head, bool, error) {
	seq, ver, dig := expression.Name(attrSeq), expression.Name(attrVer), expression.Name(attrDigest)
	s1, v1, d1 := expression.Value(h.Sequence), expression.Value(h.Version), expression.Value(h.Digest)
	cond := expression.Or(expression.AttributeNotExists(seq), seq.LessThan(s1),
		dynamo.All([]expression.ConditionBuilder{seq.Equal(s1), ver.Equal(v1), dig.Equal(d1)}))
	old, err := s.table().Update(ctx, dynamo.Key(releasePK, releaseHead), expression.Set(seq, s1).Set(ver, v1).Set(dig, d1), &cond, types.ReturnValueUpdatedOld)
	if ok, err := landed(err); !ok {
		return nil, false, err
	}
	if len(old) == 0 {
		return nil, true, nil
	}
	var prev headItem
	if err := attributevalue.UnmarshalMap(old, &prev); err != nil {
		return nil, true, err
	}
	return &registry.Head{Sequence: prev.Seq, Version: prev.Ver, Digest: prev.Dig}, true, nil
}

// MarkClaimed moves the item from pending (or claimed) to claimed, if it
// holds it's claim.
func (s *Releases) MarkClaimed(ctx context.Context, it registry.Item) (bool, error) {
	cond := holding(it, registry.Pending, registry.Claimed)
	_, err := s.table().Update(ctx, dynamo.Key(releasePK, releaseSK(it.Version)),
		expression.Set(expression.Name(attrState), expression.Value(string(registry.Claimed))), &cond, types.ReturnValueNone)
	return landed(err)
}

// Record moves the item from claimed to recorded, with its lsk (so lists
// see it) and its log index.
func (s *Releases) Record(ctx context.Context, it registry.Item, index int64) (bool, error) {
	upd := expression.Set(expression.Name(attrState), expression.Value(string(registry.Recorded))).
		Set(expression.Name(schema.AttrLSK), expression.Value(seqKey(it.Sequence))).
		Set(expression.Name(attrLogIndex), expression.Value(index))
	cond := holding(it, registry.Claimed)
	_, err := s.table().Update(ctx, dynamo.Key(releasePK, releaseSK(it.Version)), upd, &cond, types.ReturnValueNone)
	return landed(err)
}

// Refuse moves the item from state from to refused, deleted by TTL at
// expireAt.
func (s *Releases) Refuse(ctx context.Context, it registry.Item, from registry.State, expireAt time.Time) (bool, error) {
	upd := expression.Set(expression.Name(attrState), expression.Value(string(registry.Refused))).
		Set(expression.Name(schema.AttrTTL), expression.Value(expireAt.Unix()))
	cond := holding(it, from)
	_, err := s.table().Update(ctx, dynamo.Key(releasePK, releaseSK(it.Version)), upd, &cond, types.ReturnValueNone)
	return landed(err)
}

// PutEnvelope keeps a recorded release's envelope as sent
// (RELEASE / ENV#<version>), unconditionally: every registration of the
// recorded statement writes a verified envelope of it.
func (s *Releases) PutEnvelope(ctx context.Context, version, digest string, manifest []byte) error {
	return s.table().Put(ctx, envelopeItem{PK: releasePK, SK: envelopeSK(version), Digest: digest, Manifest: manifest}, nil)
}

// Recorded reads the release item and its envelope in one consistent
// BatchGetItem.
func (s *Releases) Recorded(ctx context.Context, version string) (release.Release, error) {
	res, err := s.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
		s.Table: {Keys: []map[string]types.AttributeValue{dynamo.Key(releasePK, releaseSK(version)), dynamo.Key(releasePK, envelopeSK(version))},
			ConsistentRead: aws.Bool(true)}}})
	if err != nil {
		return release.Release{}, err
	}
	var rel *releaseItem
	var env *envelopeItem
	for _, item := range res.Responses[s.Table] {
		switch dynamo.ItemKey(item)[1] {
		case releaseSK(version):
			rel = new(releaseItem)
			err = attributevalue.UnmarshalMap(item, rel)
		case envelopeSK(version):
			env = new(envelopeItem)
			err = attributevalue.UnmarshalMap(item, env)
		}
		if err != nil {
			return release.Release{}, err
		}
	}
	if len(res.UnprocessedKeys) > 0 {
		return release.Release{}, fmt.Errorf("releasedb: release %s: keys left unprocessed", version)
	}
	if rel == nil || rel.State != string(registry.Recorded) {
		return release.Release{}, release.ErrNotFound
	}
	out := rel.release()
	if env != nil && env.Digest == out.ManifestDigest {
		out.Manifest = env.Manifest
	}
	return out, nil
}

// Get is Recorded under the name rollouts and the fleet read it by
// (rollout.Releases).
func (s *Releases) Get(ctx context.Context, version string) (release.Release, error) {
	return s.Recorded(ctx, version)
}

// Head reads the channel head consistently (zero if none).
func (s *Releases) Head(ctx context.Context) (registry.Head, error) {
	var h headItem
	if _, err := s.get(ctx, releaseHead, &h); err != nil {
		return registry.Head{}, err
	}
	return registry.Head{Sequence: h.Seq, Version: h.Ver, Digest: h.Dig}, nil
}

// Item reads a version's item consistently.
func (s *Releases) Item(ctx context.Context, version string) (registry.Item, bool, error) {
	var it releaseItem
	ok, err := s.get(ctx, releaseSK(version), &it)
	if err != nil || !ok {
		return registry.Item{}, ok, err
	}
	return it.item(), true, nil
}

// get reads one release item consistently; a failed read is the
// dependency's error, a bad item a plain one.
func (s *Releases) get(ctx context.Context, sk string, out any) (bool, error) {
	res, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: dynamo.Key(releasePK, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, apierr.Dependency("dynamodb", err)
	}
	if len(res.Item) == 0 {
		return false, nil
	}
	return true, attributevalue.UnmarshalMap(res.Item, out)
}

// RecordedMark reads the log's recorded mark (RLOG / REC).
func (s *Releases) RecordedMark(ctx context.Context) (int64, error) {
	var w countItem
	_, err := s.table().Get(ctx, dynamo.Key(logPK, logRec), &w)
	return w.N, err
}

// MoveRecordedMark sets the mark to n, only forward.
func (s *Releases) MoveRecordedMark(ctx context.Context, n int64) (bool, error) {
	cond := expression.AttributeNotExists(expression.Name(schema.AttrPK)).Or(expression.Name(attrN).LessThan(expression.Value(n)))
	return landed(s.table().Put(ctx, countItem{PK: logPK, SK: logRec, N: n}, &cond))
}

// List reads release items through the `ordered` LSI, highest sequence
// first: one Query per page (limit+1 items, so a full last page carries no
// cursor to an empty one). limit ≤ 0 reads every page.
func (s *Releases) List(ctx context.Context, limit int, after map[string]string) ([]release.Release, map[string]string, error) {
	var out []release.Release
	start, err := dynamo.StartKey(after, releasePK)
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
