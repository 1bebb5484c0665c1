package capacitydb

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// The occupancy map of an hour lives on the hour's `#HOUR` item, as
// numbered words `o<j>` (capacity.OccWordBits nodes each): before the hour
// is provisioned the item holds only the words (and kind, expiresAt), so
// neither the `fit` nor the `cap` index sees it; provisioning writes the
// marker over it (fit and cap set: every node stored, the words are not
// needed any more). So one consistent read of one item per hour tells a
// create both whether the hour is provisioned and, if not, which nodes
// nothing was ever stored for.
//
// Worst case: 100,000 nodes (the pool limit, one device each) / 48 =
// 2,084 words × (a 5-character name + a 15-digit number ≈ 13 B) ≈ 27 KB;
// a 100,000-device pool of 8-device nodes: 261 words ≈ 3.4 KB — one
// consistent read unit — however many of its nodes are stored.

// occWriteWords bounds the words one UpdateItem of Occupy changes (an
// update expression is limited to 4 KB).
const occWriteWords = 64

// occAttempts bounds Occupy's conditional writes of one call.
const occAttempts = 8

// occCacheHours bounds the hours whose words a Capacity remembers (the
// guess each conditional word write is made on; a wrong guess costs one
// refused write and a read).
const occCacheHours = 1024

// occCache is the words last read or written per hour item.
type occCache struct {
	mu    sync.Mutex
	words map[string]map[int]uint64
}

func (c *occCache) get(pk string) map[int]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.words[pk])
}

// entry is pk's words, made (evicting another hour's when full) if
// missing; the caller holds mu.
func (c *occCache) entry(pk string) map[int]uint64 {
	if c.words == nil {
		c.words = map[string]map[int]uint64{}
	}
	cur, ok := c.words[pk]
	if !ok {
		if len(c.words) >= occCacheHours {
			for k := range c.words { // any one: a guess, not a truth
				delete(c.words, k)
				break
			}
		}
		cur = map[int]uint64{}
		c.words[pk] = cur
	}
	return cur
}

// set replaces pk's words with what was just read (the item's words are
// only ever added to, unless provisioning wrote the marker over them or
// TTL removed the item: then the cache must forget, or every guess fails).
func (c *occCache) set(pk string, w map[int]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.entry(pk)
	clear(cur)
	maps.Copy(cur, w)
}

// merge adds this process's own written bits to pk's words.
func (c *occCache) merge(pk string, w map[int]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.entry(pk)
	for j, v := range w {
		cur[j] |= v
	}
}

func occName(j int) string { return "o" + strconv.Itoa(j) }

// occupancyOf reads an hour item's words (and whether it is the marker).
func occupancyOf(item map[string]types.AttributeValue) (capacity.Occupancy, error) {
	o := capacity.Occupancy{Words: map[int]uint64{}}
	if _, ok := item[schema.AttrFit]; ok {
		o.Provisioned = true
	}
	for name, av := range item {
		if !strings.HasPrefix(name, "o") {
			continue
		}
		j, err := strconv.Atoi(name[1:])
		if err != nil {
			continue
		}
		var v uint64
		if err := attributevalue.Unmarshal(av, &v); err != nil {
			return o, fmt.Errorf("dynamo: occupancy word %s: %w", name, err)
		}
		o.Words[j] = v
	}
	return o, nil
}

// Occupancy implements capacity.CandidateStore: one consistent
// BatchGetItem of the hours' `#HOUR` items (100 at a time).
func (s *Store) Occupancy(ctx context.Context, t capacity.PoolResource, hours []capacity.Hour) (map[capacity.Hour]capacity.Occupancy, error) {
	return s.occupancy(ctx, t, hours, true)
}

// occupancy reads the hours' maps; with remember, the words are kept as
// the guesses of this process's map writes (a create's), else not (a
// search over a month of hours would hold its maps for nothing).
func (s *Store) occupancy(ctx context.Context, t capacity.PoolResource, hours []capacity.Hour, remember bool) (map[capacity.Hour]capacity.Occupancy, error) {
	keys := make([]map[string]types.AttributeValue, len(hours))
	byPK := make(map[string]capacity.Hour, len(hours))
	for i, h := range hours {
		pk := calPK(t.PoolID, t.Resource, h)
		keys[i] = dynamo.Key(pk, skHour)
		byPK[pk] = h
	}
	out := make(map[capacity.Hour]capacity.Occupancy, len(hours))
	err := s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		pk, _ := item["pk"].(*types.AttributeValueMemberS)
		if pk == nil {
			return nil
		}
		o, err := occupancyOf(item)
		if err != nil {
			return err
		}
		out[byPK[pk.Value]] = o
		if remember {
			s.occ.set(pk.Value, o.Words)
		}
		return nil
	})
	if err == nil && remember {
		for pk, h := range byPK {
			if _, ok := out[h]; !ok {
				s.occ.set(pk, nil) // no map: every word unset
			}
		}
	}
	return out, err
}

// Occupy implements capacity.CalendarStore. Each word is written as the
// union of its bits and the word as last seen (cached per process), on
// the condition that it still holds that: bits are only ever added, so a
// lost write reads the words again and adds to them.
func (s *Store) Occupy(ctx context.Context, t capacity.PoolResource, h capacity.Hour, nodes []int) error {
	pk := calPK(t.PoolID, t.Resource, h)
	want := map[int]uint64{}
	for _, k := range nodes {
		j, bit := k/capacity.OccWordBits, uint64(1)<<uint(k%capacity.OccWordBits)
		want[j] |= bit
	}
	for attempt := 0; ; attempt++ {
		seen := s.occ.get(pk)
		var todo []int
		for j, bits := range want {
			if seen[j]&bits != bits {
				todo = append(todo, j)
			}
		}
		if len(todo) == 0 {
			return nil
		}
		if attempt == occAttempts {
			return fmt.Errorf("dynamo: occupancy of %s: %d words still lost after %d attempts", pk, len(todo), occAttempts)
		}
		slices.Sort(todo)
		lost := false
		for len(todo) > 0 {
			chunk := todo[:min(len(todo), occWriteWords)]
			todo = todo[len(chunk):]
			ok, err := s.occupyWords(ctx, pk, h, chunk, seen, want)
			if err != nil {
				return err
			}
			lost = lost || !ok
		}
		if lost {
			if err := s.readWords(ctx, pk); err != nil {
				return err
			}
		}
	}
}

// occupyWords writes words js of pk as seen|want, if each still holds
// what was seen (false: one did not).
func (s *Store) occupyWords(ctx context.Context, pk string, h capacity.Hour, js []int, seen, want map[int]uint64) (bool, error) {
	upd := expression.Set(expression.Name("kind"), expression.IfNotExists(expression.Name("kind"), expression.Value(dynamo.KindHour))).
		Set(expression.Name("expiresAt"), expression.IfNotExists(expression.Name("expiresAt"), expression.Value(hourExpiry(h))))
	conds := make([]expression.ConditionBuilder, 0, len(js))
	next := make(map[int]uint64, len(js))
	for _, j := range js {
		name := expression.Name(occName(j))
		next[j] = seen[j] | want[j]
		upd = upd.Set(name, expression.Value(next[j]))
		if seen[j] == 0 {
			conds = append(conds, expression.AttributeNotExists(name))
		} else {
			conds = append(conds, name.Equal(expression.Value(seen[j])))
		}
	}
	c := dynamo.All(conds)
	_, err := s.update(ctx, dynamo.Key(pk, skHour), upd, &c, types.ReturnValueNone)
	switch {
	case dynamo.ConditionFailed(err):
		return false, nil
	case err != nil:
		return false, err
	}
	s.occ.merge(pk, next)
	return true, nil
}

// readWords reads pk's words again into the cache.
func (s *Store) readWords(ctx context.Context, pk string) error {
	res, err := s.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: dynamo.Key(pk, skHour), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return err
	}
	o := capacity.Occupancy{}
	if len(res.Item) > 0 {
		if o, err = occupancyOf(res.Item); err != nil {
			return err
		}
	}
	s.occ.set(pk, o.Words)
	return nil
}
