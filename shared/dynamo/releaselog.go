package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/releaselog"
)

// The release log's items (SPEC §4.8), in a partition of their own:
//
//	RLOG / HEAD              {n}: entries [0, n) are appended (entry n may
//	                         exist too: an append that crashed before moving
//	                         the head; the next append moves it)
//	RLOG / E#<index, 16 digits> {ver, seq, hs}: entry index — the release it
//	                         logs and the tree hashes its append stored
//	                         (releaselog.StoredHashes: its leaf hash, then one
//	                         per subtree it completes)
//	RLOG / CP                {n, note}: the latest signed checkpoint
//
// Worst case: an entry item holds 64 hashes (an index of 2^63 − 1; 20 at a
// million releases) — 64 × 32 B + a 128-byte version and the key names,
// under 2.4 KB; the checkpoint item under 1.1 KB (releaselog.MaxCheckpoint);
// the head under 40 B. None grows with anything but the log's size, and
// then only logarithmically. The entry's payload itself (the DSSE payload,
// up to 256 KiB) is not stored here: its leaf hash is, and the envelope item
// of the release holds the payload.
const (
	logPK   = "RLOG"
	logHead = "HEAD"
	logCP   = "CP"
)

func logSK(i int64) string { return fmt.Sprintf("E#%016d", i) }

// Fault points of Append and Sign (ReleaseLog.Faults), after each write.
const (
	FaultLogEntry      = "log.entry"      // entry n put, head not moved
	FaultLogHead       = "log.head"       // head moved to n+1
	FaultLogCheckpoint = "log.checkpoint" // checkpoint signed and stored
)

// maxAppendAttempts bounds an append that keeps losing index after index:
// each loss means another release was appended, so it is only reached by a
// burst of that many registrations at once (or a bug; the simulation's
// reverts end here rather than spin).
const maxAppendAttempts = 32

// ErrLogOrder is an append whose sequence is not above the last entry's:
// appends run in registration (sequence) order, so this release was
// overtaken by a later one before it was logged.
var ErrLogOrder = errors.New("dynamo: release log: an append out of sequence order")

// ReleaseLog is the release log's store: the entries, the tree hashes they
// stored, the head and the latest signed checkpoint. Every write is one
// single-item conditional write (dynalite has no transactions):
//
//   - Append puts entry n (n the head's) only if no entry n exists — the
//     sequencing point: two appends never share an index — then moves the
//     head n → n+1 conditioned on n. An append that finds entry n taken
//     moves the head for its writer (which may have crashed) and tries n+1,
//     so entries never leave a gap, and an append of a release already
//     logged returns its index.
//   - Sign signs the tree of the head's size and stores the checkpoint only
//     over a smaller one. Entries never change once put, so every tree of a
//     size has one root, and no two checkpoints the log signs disagree.
type ReleaseLog struct {
	DB     *dynamodb.Client
	Table  string
	Signer *releaselog.Signer
	// Faults is a test-only hook (nil in production): called after each
	// write; an error stops the call there, as a crash would.
	Faults func(point string) error
}

type logHeadItem struct {
	PK string `dynamodbav:"pk"`
	SK string `dynamodbav:"sk"`
	N  int64  `dynamodbav:"n"`
}

type logEntryItem struct {
	PK  string `dynamodbav:"pk"`
	SK  string `dynamodbav:"sk"`
	Ver string `dynamodbav:"ver"`
	Seq int64  `dynamodbav:"seq"`
	// HS is the entry's stored hashes, concatenated in order (32 bytes
	// each): one binary attribute, since a binary set (what [][]byte
	// marshals to) has no order in DynamoDB.
	HS []byte `dynamodbav:"hs"`
}

type logCPItem struct {
	PK   string `dynamodbav:"pk"`
	SK   string `dynamodbav:"sk"`
	N    int64  `dynamodbav:"n"`
	Note string `dynamodbav:"note"`
}

func (l *ReleaseLog) table() Table { return Table{DB: l.DB, Name: l.Table} }

func (l *ReleaseLog) fault(point string) error {
	if l.Faults == nil {
		return nil
	}
	return l.Faults(point)
}

func (l *ReleaseLog) get(ctx context.Context, sk string, out any) (bool, error) {
	res, err := l.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(l.Table), Key: Key(logPK, sk), ConsistentRead: aws.Bool(true)})
	if err != nil || res.Item == nil {
		return false, err
	}
	return true, attributevalue.UnmarshalMap(res.Item, out)
}

// Size is the number of entries the head acknowledges.
func (l *ReleaseLog) Size(ctx context.Context) (int64, error) {
	var h logHeadItem
	_, err := l.get(ctx, logHead, &h)
	return h.N, err
}

// Entry is the release entry i logs (ok false: no entry i).
func (l *ReleaseLog) Entry(ctx context.Context, i int64) (version string, seq int64, ok bool, err error) {
	e, ok, err := l.entry(ctx, i)
	return e.Ver, e.Seq, ok, err
}

func (l *ReleaseLog) entry(ctx context.Context, i int64) (logEntryItem, bool, error) {
	var e logEntryItem
	ok, err := l.get(ctx, logSK(i), &e)
	return e, ok, err
}

// Append logs the release (version, seq) whose entry (its DSSE payload) has
// leaf hash leaf (releaselog.LeafHash) and returns its index. It is
// idempotent: a release already logged gets its index back, whoever logged
// it. Only the leaf hash is needed, so any registration can append a
// release another one recorded: the release item keeps it.
func (l *ReleaseLog) Append(ctx context.Context, version string, seq int64, leaf tlog.Hash) (int64, error) {
	for attempt := 0; ; attempt++ {
		if attempt == maxAppendAttempts {
			return 0, fmt.Errorf("dynamo: release log: %s not appended after %d attempts (index taken each time)", version, attempt)
		}
		n, err := l.Size(ctx)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			last, ok, err := l.entry(ctx, n-1)
			if err != nil {
				return 0, err
			}
			if !ok {
				return 0, fmt.Errorf("dynamo: release log: head %d but no entry %d", n, n-1)
			}
			switch {
			case last.Ver == version && last.Seq == seq:
				return n - 1, nil
			case last.Seq >= seq:
				return l.find(ctx, version, seq, n-1)
			}
		}
		hs, err := releaselog.StoredHashes(ctx, l, n, leaf)
		if err != nil {
			return 0, err
		}
		it := logEntryItem{PK: logPK, SK: logSK(n), Ver: version, Seq: seq, HS: make([]byte, 0, len(hs)*tlog.HashSize)}
		for i := range hs {
			it.HS = append(it.HS, hs[i][:]...)
		}
		cond := expression.AttributeNotExists(expression.Name(schema.AttrPK))
		err = l.table().Put(ctx, it, &cond)
		switch {
		case ConditionFailed(err):
			// Entry n is taken: by this very release (a retry whose first
			// put landed) or another. Either way its head move may be
			// missing; make it, then look again.
			e, _, gerr := l.entry(ctx, n)
			if gerr != nil {
				return 0, gerr
			}
			if err := l.advance(ctx, n); err != nil {
				return 0, err
			}
			if e.Ver == version && e.Seq == seq {
				return n, nil
			}
			continue
		case err != nil:
			return 0, err
		}
		if err := l.fault(FaultLogEntry); err != nil {
			return 0, err
		}
		if err := l.advance(ctx, n); err != nil {
			return 0, err
		}
		if err := l.fault(FaultLogHead); err != nil {
			return 0, err
		}
		return n, nil
	}
}

// advance moves the head from n to n+1; a head already past n is no loss.
func (l *ReleaseLog) advance(ctx context.Context, n int64) error {
	attr := expression.Name("n")
	cond := attr.Equal(expression.Value(n))
	if n == 0 {
		cond = expression.AttributeNotExists(expression.Name(schema.AttrPK)).Or(cond)
	}
	_, err := l.table().Update(ctx, Key(logPK, logHead), expression.Set(attr, expression.Value(n+1)), &cond, types.ReturnValueNone)
	return WhenConditionFails(err, nil)
}

// find is the index of (version, seq) among entries [0, last], by binary
// search on their sequences (appends run in sequence order); ErrLogOrder if
// it is not there.
func (l *ReleaseLog) find(ctx context.Context, version string, seq, last int64) (int64, error) {
	lo, hi := int64(0), last
	for lo <= hi {
		mid := lo + (hi-lo)/2
		e, ok, err := l.entry(ctx, mid)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, fmt.Errorf("dynamo: release log: no entry %d below the head", mid)
		}
		switch {
		case e.Seq == seq && e.Ver == version:
			return mid, nil
		case e.Seq < seq:
			lo = mid + 1
		default:
			hi = mid - 1
		}
	}
	return 0, fmt.Errorf("%w: %s (sequence %d)", ErrLogOrder, version, seq)
}

// ReadHashes implements releaselog.Hashes: each stored hash is read from
// the entry whose append stored it, in consistent BatchGetItems of up to
// 100 entries.
func (l *ReleaseLog) ReadHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	var entries []int64
	for _, x := range indexes {
		e, _ := releaselog.Owner(x)
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
			keys[i] = Key(logPK, logSK(e))
		}
		req := map[string]types.KeysAndAttributes{l.Table: {Keys: keys, ConsistentRead: aws.Bool(true),
			ProjectionExpression: aws.String("#sk, hs"), ExpressionAttributeNames: map[string]string{"#sk": schema.AttrSK}}}
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
					return nil, fmt.Errorf("dynamo: release log: entry key %q", e.SK)
				}
				got[i] = e.HS
			}
			req = res.UnprocessedKeys
		}
	}
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		e, pos := releaselog.Owner(x)
		hs, ok := got[e]
		if !ok || len(hs)%tlog.HashSize != 0 || (pos+1)*tlog.HashSize > len(hs) {
			return nil, fmt.Errorf("dynamo: release log: stored hash %d (entry %d) missing", x, e)
		}
		copy(out[i][:], hs[pos*tlog.HashSize:])
	}
	return out, nil
}

// Checkpoint is the latest signed checkpoint ("" and size 0 before the
// first Sign).
func (l *ReleaseLog) Checkpoint(ctx context.Context) (string, int64, error) {
	var cp logCPItem
	_, err := l.get(ctx, logCP, &cp)
	return cp.Note, cp.N, err
}

// Sign returns a signed checkpoint of at least the head's size: the stored
// one when it is that large, else a new one over the tree of the head's
// size, stored unless a larger one was stored meanwhile (then that one).
func (l *ReleaseLog) Sign(ctx context.Context) (string, int64, error) {
	n, err := l.Size(ctx)
	if err != nil {
		return "", 0, err
	}
	return l.SignCovering(ctx, n)
}

// SignCovering is Sign for a caller that knows the log has at least n
// entries (an append's index + 1): a checkpoint of at least size n.
func (l *ReleaseLog) SignCovering(ctx context.Context, n int64) (string, int64, error) {
	note, size, err := l.Checkpoint(ctx)
	if err != nil || (note != "" && size >= n) {
		return note, size, err
	}
	root, err := releaselog.TreeHash(ctx, l, n)
	if err != nil {
		return "", 0, err
	}
	signed, err := l.Signer.Sign(releaselog.Checkpoint{Origin: l.Signer.Key().Name, Size: n, Root: root})
	if err != nil {
		return "", 0, fmt.Errorf("release log: signing the checkpoint of size %d: %w", n, err)
	}
	attr := expression.Name("n")
	cond := expression.AttributeNotExists(expression.Name(schema.AttrPK)).Or(attr.LessThan(expression.Value(n)))
	err = l.table().Put(ctx, logCPItem{PK: logPK, SK: logCP, N: n, Note: string(signed)}, &cond)
	if ConditionFailed(err) {
		return l.Checkpoint(ctx) // as large or larger, signed by another
	}
	if err != nil {
		return "", 0, err
	}
	if err := l.fault(FaultLogCheckpoint); err != nil {
		return "", 0, err
	}
	return string(signed), n, nil
}
