package dynamo

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// Range is what a list reads: the items of partition PK whose key Attr —
// the table's sort key, or an LSI's (Index) — begins with Prefix, in that
// key's order (descending when Backward). An index that projects keys
// only (KeysOnly) is read in two steps: the page of entries, then their
// items in one consistent BatchGet, in the entries' order; an item gone
// or moved out of the index since is left out.
type Range struct {
	PK       string
	Index    string // "" for the table
	Attr     string // schema.AttrSK for the table
	Prefix   string
	SKPrefix string // every item of the range has a sort key beginning with it (a cursor's sk must)
	Backward bool
	KeysOnly bool
	// Filtered: take skips items (they do not count), so each read asks
	// for at least filteredRead entries, however few are left to take.
	Filtered bool
}

// filteredRead and maxRead bound the reads of a Filtered range.
const (
	filteredRead = 25
	maxRead      = 100
)

// The one way a list pages (every store's lists are read with Page): a
// cursor is the last taken item's sort key "sk" and, for an index's
// range, its index key "ik" — the keys the HMAC-bound API cursor carries.
const (
	CursorSK = "sk"
	CursorIK = "ik"
)

// Take is told each item of a page in order: counts says it is one of the
// page's limit items, stop that the page ends after it.
type Take func(item map[string]types.AttributeValue) (counts, stop bool, err error)

// Page reads r after the cursor after (nil: from the start) until limit
// items counted, take stopped it or r ends, asking for one more than it
// needs so that a full last page carries no cursor to an empty one. next
// is the cursor after the last counted item when more may follow (nil
// otherwise). A cursor outside r is ErrBadCursor.
func (t Table) Page(ctx context.Context, r Range, limit int, after map[string]string, take Take) (next map[string]string, err error) {
	e, err := expression.NewBuilder().WithKeyCondition(
		expression.Key(schema.AttrPK).Equal(expression.Value(r.PK)).And(expression.Key(r.Attr).BeginsWith(r.Prefix))).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{TableName: aws.String(t.Name), KeyConditionExpression: e.KeyCondition(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(true),
		ScanIndexForward: aws.Bool(!r.Backward)}
	if r.Index != "" {
		in.IndexName = aws.String(r.Index)
	}
	if in.ExclusiveStartKey, err = r.start(after); err != nil {
		return nil, err
	}
	counted := 0
	var last map[string]types.AttributeValue
	cursor := func() map[string]string {
		c := map[string]string{CursorSK: str(last[schema.AttrSK])}
		if r.Attr != schema.AttrSK {
			c[CursorIK] = str(last[r.Attr])
		}
		return c
	}
	for {
		want := limit - counted + 1
		if r.Filtered {
			want = min(maxRead, max(want, filteredRead))
		}
		in.Limit = aws.Int32(int32(want))
		res, err := t.DB.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		items := res.Items
		if r.KeysOnly {
			if items, err = t.fetch(ctx, r.Attr, items); err != nil {
				return nil, err
			}
		}
		for i, item := range items {
			if counted == limit {
				return cursor(), nil // a further item exists
			}
			counts, stop, err := take(item)
			if err != nil {
				return nil, err
			}
			if counts {
				counted++
				last = item
			}
			if stop {
				if res.LastEvaluatedKey == nil && i == len(items)-1 {
					return nil, nil
				}
				return cursor(), nil
			}
		}
		if res.LastEvaluatedKey == nil {
			return nil, nil
		}
		if counted == limit {
			return cursor(), nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// start is the ExclusiveStartKey of a cursor, which must lie in r.
func (r Range) start(after map[string]string) (map[string]types.AttributeValue, error) {
	sk, ik := after[CursorSK], after[CursorIK]
	if sk == "" && ik == "" {
		return nil, nil
	}
	index := r.Attr != schema.AttrSK
	if !strings.HasPrefix(sk, r.SKPrefix) || (!index && !strings.HasPrefix(sk, r.Prefix)) || (index && !strings.HasPrefix(ik, r.Prefix)) {
		return nil, ErrBadCursor
	}
	k := Key(r.PK, sk)
	if index {
		k[r.Attr] = &types.AttributeValueMemberS{Value: ik}
	}
	return k, nil
}

// fetch reads the items of index entries, in the entries' order; an item
// gone, or whose key attr no longer is the entry's (it moved in the index
// since), is left out.
func (t Table) fetch(ctx context.Context, attr string, entries []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	keys := make([]map[string]types.AttributeValue, len(entries))
	for i, e := range entries {
		keys[i] = map[string]types.AttributeValue{schema.AttrPK: e[schema.AttrPK], schema.AttrSK: e[schema.AttrSK]}
	}
	got := make(map[[2]string]map[string]types.AttributeValue, len(keys))
	if err := t.BatchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		got[ItemKey(item)] = item
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]map[string]types.AttributeValue, 0, len(entries))
	for _, e := range entries {
		if item, ok := got[ItemKey(e)]; ok && str(item[attr]) == str(e[attr]) {
			out = append(out, item)
		}
	}
	return out, nil
}

func str(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}
