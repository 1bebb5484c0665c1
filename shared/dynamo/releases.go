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
// sequence and the version and digest that claimed it) and one item per
// version, ordered by sequence through the `ordered` LSI.
const (
	releasePK   = "RELEASE"
	releaseHead = "#HEAD"
)

func releaseSK(version string) string { return "V#" + version }

// seqKey orders sequences as strings: 16 digits cover 2^53−1.
func seqKey(seq int64) string { return fmt.Sprintf("%016d", seq) }

// Releases is the rollout.Store on DynamoDB.
type Releases struct {
	DB    *dynamodb.Client
	Table string
}

type releaseItem struct {
	PK           string           `dynamodbav:"pk"`
	SK           string           `dynamodbav:"sk"`
	LSK          string           `dynamodbav:"lsk"`
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

// Register claims the channel head, then writes the release item: 2 round
// trips on the happy path. A failed condition is classified by one
// consistent read of the version's item.
func (s *Releases) Register(ctx context.Context, r rollout.Release) (rollout.Release, bool, error) {
	seq := expression.Name("seq")
	ver := expression.Name("ver")
	dig := expression.Name("dig")
	s1, v1, d1 := expression.Value(r.Sequence), expression.Value(r.Version), expression.Value(r.ManifestDigest)
	cond := expression.AttributeNotExists(seq).
		Or(seq.LessThan(s1)).
		Or(seq.Equal(s1).And(ver.Equal(v1)).And(dig.Equal(d1))) // a retry after a crash continues
	upd := expression.Set(seq, s1).Set(ver, v1).Set(dig, d1)
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return rollout.Release{}, false, err
	}
	head, err := s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.Table),
		Key:                       key(releasePK, releaseHead),
		ConditionExpression:       expr.Condition(),
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ReturnValues:              types.ReturnValueUpdatedOld,
	})
	if isConditionFailed(err) {
		return s.classify(ctx, r)
	}
	if err != nil {
		return rollout.Release{}, false, apierr.Dependency("dynamodb", err)
	}

	item := releaseItem{PK: releasePK, SK: releaseSK(r.Version), LSK: seqKey(r.Sequence), Version: r.Version,
		Sequence: r.Sequence, Digest: r.ManifestDigest, Binaries: r.Binaries, Expires: r.Expires, Signers: r.Signers,
		RegisteredAt: r.RegisteredAt, RegisteredBy: r.RegisteredBy}
	av, err := attributevalue.MarshalMap(item)
	if err != nil {
		return rollout.Release{}, false, err
	}
	pcond := expression.AttributeNotExists(expression.Name(schema.AttrPK)).
		Or(seq.Equal(s1).And(dig.Equal(d1)))
	pexpr, err := expression.NewBuilder().WithCondition(pcond).Build()
	if err != nil {
		return rollout.Release{}, false, err
	}
	put, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(s.Table),
		Item:                      av,
		ConditionExpression:       pexpr.Condition(),
		ExpressionAttributeNames:  pexpr.Names(),
		ExpressionAttributeValues: pexpr.Values(),
		ReturnValues:              types.ReturnValueAllOld,
	})
	if isConditionFailed(err) {
		// The version exists with another sequence or payload: the head we
		// claimed must not stand for a release that was never recorded.
		stored, replayed, cerr := s.classify(ctx, r)
		if !replayed {
			s.restoreHead(ctx, r, head.Attributes)
		}
		return stored, replayed, cerr
	}
	if err != nil {
		return rollout.Release{}, false, apierr.Dependency("dynamodb", err)
	}
	if len(put.Attributes) > 0 { // a racing identical registration wrote it first
		var old releaseItem
		if err := attributevalue.UnmarshalMap(put.Attributes, &old); err != nil {
			return rollout.Release{}, false, err
		}
		return old.release(), true, nil
	}
	return item.release(), false, nil
}

// classify decides what a failed condition meant, by one consistent read.
func (s *Releases) classify(ctx context.Context, r rollout.Release) (rollout.Release, bool, error) {
	out, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table),
		Key: key(releasePK, releaseSK(r.Version)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return rollout.Release{}, false, apierr.Dependency("dynamodb", err)
	}
	if len(out.Item) == 0 {
		return rollout.Release{}, false, apierr.Invalid("rollback", "manifest.payload.sequence",
			"sequence %d is not above the latest registered sequence (a rollback of the release channel)", r.Sequence)
	}
	var it releaseItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return rollout.Release{}, false, err
	}
	if it.Sequence == r.Sequence {
		return it.release(), true, nil
	}
	return rollout.Release{}, false, apierr.New(apierr.Conflict,
		"version %s is already registered with sequence %d", r.Version, it.Sequence).
		With("version", r.Version).With("sequence", it.Sequence)
}

// restoreHead undoes this registration's head claim, only if the head still
// holds it (a later registration may have moved it on legitimately).
func (s *Releases) restoreHead(ctx context.Context, r rollout.Release, old map[string]types.AttributeValue) {
	seq, ver, dig := expression.Name("seq"), expression.Name("ver"), expression.Name("dig")
	cond := seq.Equal(expression.Value(r.Sequence)).And(ver.Equal(expression.Value(r.Version))).
		And(dig.Equal(expression.Value(r.ManifestDigest)))
	var upd expression.UpdateBuilder
	if len(old) == 0 {
		upd = expression.Remove(seq).Remove(ver).Remove(dig)
	} else {
		var prev struct {
			Seq int64  `dynamodbav:"seq"`
			Ver string `dynamodbav:"ver"`
			Dig string `dynamodbav:"dig"`
		}
		if err := attributevalue.UnmarshalMap(old, &prev); err != nil {
			return
		}
		upd = expression.Set(seq, expression.Value(prev.Seq)).Set(ver, expression.Value(prev.Ver)).Set(dig, expression.Value(prev.Dig))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return
	}
	// Best effort: on failure the head keeps a higher sequence, which only
	// makes a lower one a rollback — never admits an out-of-order release.
	_, _ = s.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.Table), Key: key(releasePK, releaseHead),
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
}

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
