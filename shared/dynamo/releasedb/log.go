package releasedb

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
)

// Log is registry.LogStore: the log's entries, its head and its latest
// signed checkpoint (RLOG / …).
type Log struct {
	DB    *dynamodb.Client
	Table string
}

var _ registry.LogStore = (*Log)(nil)

func (l *Log) table() dynamo.Table { return dynamo.Table{DB: l.DB, Name: l.Table} }

// Size reads the head: the number of entries it acknowledges.
func (l *Log) Size(ctx context.Context) (int64, error) {
	var h countItem
	_, err := l.table().Get(ctx, dynamo.Key(logPK, logHead), &h)
	return h.N, err
}

// Entry reads entry i (ok false: none).
func (l *Log) Entry(ctx context.Context, i int64) (registry.Entry, bool, error) {
	var e logEntryItem
	ok, err := l.table().Get(ctx, dynamo.Key(logPK, logSK(i)), &e)
	if err != nil || !ok {
		return registry.Entry{}, ok, err
	}
	out := registry.Entry{Version: e.Ver, Sequence: e.Seq, Hashes: make([]tlog.Hash, len(e.HS)/tlog.HashSize)}
	for k := range out.Hashes {
		copy(out.Hashes[k][:], e.HS[k*tlog.HashSize:])
	}
	return out, true, nil
}

// PutEntry puts entry i only if no entry i exists.
func (l *Log) PutEntry(ctx context.Context, i int64, e registry.Entry) (bool, error) {
	it := logEntryItem{PK: logPK, SK: logSK(i), Ver: e.Version, Seq: e.Sequence, HS: make([]byte, 0, len(e.Hashes)*tlog.HashSize)}
	for k := range e.Hashes {
		it.HS = append(it.HS, e.Hashes[k][:]...)
	}
	cond := expression.AttributeNotExists(expression.Name(schema.AttrPK))
	return landed(l.table().Put(ctx, it, &cond))
}

// MoveHead moves the head from n to n+1 only if it is n (or, for n = 0,
// there is none).
func (l *Log) MoveHead(ctx context.Context, n int64) (bool, error) {
	attr := expression.Name(attrN)
	cond := attr.Equal(expression.Value(n))
	if n == 0 {
		cond = expression.AttributeNotExists(expression.Name(schema.AttrPK)).Or(cond)
	}
	_, err := l.table().Update(ctx, dynamo.Key(logPK, logHead), expression.Set(attr, expression.Value(n+1)), &cond, types.ReturnValueNone)
	return landed(err)
}

// ReadHashes implements release.LogHashes: each stored hash is read from
// the entry whose append stored it, in consistent BatchGetItems of up to
// 100 entries (keys left unprocessed are asked for again after
// dynamo.UnprocessedPause).
func (l *Log) ReadHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	var entries []int64
	for _, x := range indexes {
		e, _ := release.Owner(x)
		entries = append(entries, e)
	}
	slices.Sort(entries)
	entries = slices.Compact(entries)
	got := map[int64][]byte{}
	for len(entries) > 0 {
		batch := entries[:min(len(entries), 100)]
		entries = entries[len(batch):]
		keys := make([]map[string]types.AttributeValue, len(batch))
		for i, e := range batch {
			keys[i] = dynamo.Key(logPK, logSK(e))
		}
		req := map[string]types.KeysAndAttributes{l.Table: {Keys: keys, ConsistentRead: aws.Bool(true),
			ProjectionExpression: aws.String("#sk, " + attrHashes), ExpressionAttributeNames: map[string]string{"#sk": schema.AttrSK}}}
		for len(req) > 0 {
			res, err := l.DB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, err
			}
			for _, av := range res.Responses[l.Table] {
				var e logEntryItem
				if err := attributevalue.UnmarshalMap(av, &e); err != nil {
					return nil, err
				}
				var i int64
				if _, err := fmt.Sscanf(e.SK, "E#%d", &i); err != nil {
					return nil, fmt.Errorf("releasedb: release log: entry key %q", e.SK)
				}
				got[i] = e.HS
			}
			req = res.UnprocessedKeys
		}
	}
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		e, pos := release.Owner(x)
		hs, ok := got[e]
		if !ok || len(hs)%tlog.HashSize != 0 || (pos+1)*tlog.HashSize > len(hs) {
			return nil, fmt.Errorf("releasedb: release log: stored hash %d (entry %d) missing", x, e)
		}
		copy(out[i][:], hs[pos*tlog.HashSize:])
	}
	return out, nil
}

// Checkpoint reads the latest signed checkpoint ("" and size 0 before the
// first).
func (l *Log) Checkpoint(ctx context.Context) (string, int64, error) {
	var cp logCPItem
	_, err := l.table().Get(ctx, dynamo.Key(logPK, logCP), &cp)
	return cp.Note, cp.N, err
}

// PutCheckpoint stores a checkpoint of size n only over a smaller one (or
// none).
func (l *Log) PutCheckpoint(ctx context.Context, n int64, note string) (bool, error) {
	attr := expression.Name(attrN)
	cond := expression.AttributeNotExists(expression.Name(schema.AttrPK)).Or(attr.LessThan(expression.Value(n)))
	return landed(l.table().Put(ctx, logCPItem{PK: logPK, SK: logCP, N: n, Note: note}, &cond))
}
