package capacity_test

import (
	"context"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// fillNodeHour places capacity.MaxEntriesPerNodeHour reservations of one
// device in the hour starting 1 h from now, staggered so that at every
// instant 8 of them overlap (each 400 s long, one every 50 s): each takes
// the one device its predecessors left free, so they all land on the node
// whose devices they find busiest — the first one's.
func fillNodeHour(t *testing.T, e *env, pool string) (node string) {
	t.Helper()
	ctx := context.Background()
	for i := range capacity.MaxEntriesPerNodeHour {
		from := time.Hour + time.Duration(i)*50*time.Second
		r, err := e.svc.Admission().Create(ctx, e.req("acme", pool, "gpu", 1, from, from+400*time.Second), allow)
		if err != nil {
			t.Fatalf("filling entry %d: %v", i, err)
		}
		if node == "" {
			node = r.NodeIDs[0]
		}
		if r.NodeIDs[0] != node {
			t.Fatalf("entry %d on %s, the others on %s", i, r.NodeIDs[0], node)
		}
	}
	return node
}

// A node-hour holding its maximum of entries is not a candidate: a create
// whose count its devices would hold (in a gap between the entries) does
// not retry the full node-hour until its deadline (UNAVAILABLE, retried by
// the client for ever) but chooses without it — CAPACITY_EXHAUSTED
// (reason capacity) on a one-node pool, the other node on a two-node one —
// at a cost of a few calls.
func TestFullNodeHourIsNotACandidate(t *testing.T) {
	// 3,500 s into the hour only the last entry (3,150–3,550 s) is there: 7
	// of the full node's 8 devices are free, so best fit prefers it to an
	// emptier node.
	target := func(e *env, pool string) capacity.CreateRequest {
		return e.req("acme", pool, "gpu", 1, time.Hour+3500*time.Second, time.Hour+3510*time.Second)
	}
	// The calls of a create that is refused (or placed) after one write
	// to the full node-hour: the draft, candidates, pool, proof and probe
	// reads, the charge, the refused write and its read, the same reads
	// again without the node, the fence and the give-back. Retrying the
	// full node-hour costs ~7 calls an attempt.
	const maxCalls = 24

	t.Run("one node", func(t *testing.T) {
		e := newEnv(t)
		ctx := context.Background()
		e.pool(t, "acme", "p1", map[string]int{"gpu": 8})
		e.offer(t, "acme", "p1", "acme", "gpu", 1000)
		fillNodeHour(t, e, "p1")
		before, start := e.rt.Count(), time.Now()
		_, err := e.svc.Admission().Create(ctx, target(e, "p1"), allow)
		calls := e.rt.Count() - before
		t.Logf("create on a full node-hour: %v, %d calls, %v", err, calls, time.Since(start))
		if code(err) != apierr.CapacityExhausted || detail(err, "reason") != api.ReasonCapacity {
			t.Errorf("create on the only node, its hour full: %v, want CAPACITY_EXHAUSTED (reason capacity)", err)
		}
		if calls > maxCalls {
			t.Errorf("%d store calls, want at most %d", calls, maxCalls)
		}
		e.check(t)
	})

	t.Run("two nodes", func(t *testing.T) {
		e := newEnv(t)
		ctx := context.Background()
		e.pool(t, "acme", "p2", map[string]int{"gpu": 16})
		e.offer(t, "acme", "p2", "acme", "gpu", 1000)
		// A whole node early in the hour: every device of it touched (no
		// fast-path candidate), busy while the first entries are placed,
		// free at the target's time.
		other := must(e.svc.Admission().Create(ctx, e.req("acme", "p2", "gpu", 8, time.Hour, time.Hour+400*time.Second), allow)).NodeIDs[0]
		full := fillNodeHour(t, e, "p2")
		if full == other {
			t.Fatalf("the entries went to %s, the node held whole", full)
		}
		before := e.rt.Count()
		r, err := e.svc.Admission().Create(ctx, target(e, "p2"), allow)
		calls := e.rt.Count() - before
		t.Logf("create beside a full node-hour: %v on %v, %d calls", err, r.NodeIDs, calls)
		if err != nil || r.State != api.Placed || len(r.NodeIDs) != 1 || r.NodeIDs[0] != other {
			t.Errorf("create beside a full node-hour: %+v %v, want placed on %s", r, err, other)
		}
		if calls > maxCalls {
			t.Errorf("%d store calls, want at most %d", calls, maxCalls)
		}
		e.check(t)
	})
}
