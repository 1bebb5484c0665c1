package fleet_test

import (
	"context"
	"crypto"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/fleet"
)

// newKey is a fresh node key and its PEM public key.
func newKey(tb testing.TB) (crypto.Signer, string) {
	tb.Helper()
	k, err := dsse.GenerateKey(dsse.AlgEd25519)
	if err != nil {
		tb.Fatal(err)
	}
	pem, err := dsse.MarshalPublicKeyPEM(k.Public())
	if err != nil {
		tb.Fatal(err)
	}
	return k, string(pem)
}

// replace hands the node to a new key (nodes.register with replace) and
// makes it the env's key for the node, its counter restarted.
func (e *env) replace(tb testing.TB, s *fleet.Service, pool, node string) (api.Node, crypto.Signer) {
	tb.Helper()
	old := e.keys[pool+"/"+node]
	k, pem := newKey(tb)
	n, err := s.Replace(context.Background(), "acme", pool, node, pem, "linux/arm64")
	if err != nil {
		tb.Fatalf("replace %s: %v", node, err)
	}
	e.keys[pool+"/"+node], e.count[pool+"/"+node] = k, 0
	return n, old
}

// beatWith sends rep signed by key.
func (e *env) beatWith(tb testing.TB, rep api.Report, key crypto.Signer) (api.HeartbeatResult, error) {
	tb.Helper()
	return e.fleet.Heartbeat(context.Background(), "acme", rep.PoolID, rep.NodeID, sign(tb, rep, key))
}

// A re-imaged host: the owner replaces the node's key. The node keeps its
// reservation (active, same devices), the bind it is told and its cordon;
// it is registered and out of placement and of service at once; the old
// key's reports are refused, the new key's accepted from counter 1; the
// same replacement again restarts nothing.
func TestReplaceKey(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.managed(t, "p1", 8, 1)
	node := nodeName(0)
	r, err := e.create(t, "p1", 8, 0, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.pass(t)
	e.ready(t, "p1", node, bound(r.ReservationID))
	e.pass(t)
	if got := e.get(t, r.ReservationID); got.State != api.Active {
		t.Fatalf("before the replace: %s", got.State)
	}
	if _, err := e.fleet.Cordon(ctx, "acme", "p1", node, "re-image"); err != nil {
		t.Fatal(err)
	}
	before := e.node(t, "p1", node)
	oldCounter := e.count["p1/"+node]

	n, oldKey := e.replace(t, e.fleet, "p1", node)
	if n.State != api.Registered || n.KeyID == before.KeyID || n.Platform != "linux/arm64" || !n.CreatedAt.Equal(before.CreatedAt) {
		t.Errorf("replaced: state %s, keyid %s (was %s), platform %s", n.State, n.KeyID, before.KeyID, n.Platform)
	}
	if n.Cordon == nil || n.Cordon.By != api.ByOperator || n.Cordon.Reason != "re-image" {
		t.Errorf("cordon after the replace: %+v", n.Cordon)
	}
	if len(n.Bindings) != 1 || n.Bindings[0].ReservationID != r.ReservationID || n.Bindings[0].Action != api.ActionBind {
		t.Errorf("bindings after the replace: %+v", n.Bindings)
	}
	if got := e.get(t, r.ReservationID); got.State != api.Active || !slices.Equal(got.DeviceIDs, r.DeviceIDs) {
		t.Errorf("the reservation after the replace: %s on %v (was %v)", got.State, got.DeviceIDs, r.DeviceIDs)
	}
	if out, err := e.nodes.CountOut(ctx, "p1"); err != nil || out != 1 {
		t.Errorf("out of service: %d, %v", out, err)
	}

	// The old key: refused, whatever its counter.
	old := e.report("p1", node)
	old.Counter = oldCounter + 1
	if _, err := e.beatWith(t, old, oldKey); reason(err) != api.ReasonBadSignature {
		t.Errorf("the old key's heartbeat: %v", err)
	}
	e.pass(t)
	if got := e.node(t, "p1", node); got.State != api.Registered {
		t.Errorf("before the new key's first heartbeat: %s", got.State)
	}

	// The same replacement again (a retry) is a replay, also once the new
	// key heartbeated: the counter is not restarted again.
	pem, _ := dsse.MarshalPublicKeyPEM(e.keys["p1/"+node].Public())
	if again, err := e.fleet.Replace(ctx, "acme", "p1", node, string(pem), "linux/arm64"); err != nil || again.KeyID != n.KeyID || again.State != api.Registered {
		t.Errorf("replace again: %+v, %v", again, err)
	}
	ans := e.ready(t, "p1", node, bound(r.ReservationID)) // counter 1
	if ans.Node.State != api.Ready || !ans.Desired.Cordoned {
		t.Errorf("the new key's first heartbeat: %s, cordoned %v", ans.Node.State, ans.Desired.Cordoned)
	}
	if again, err := e.fleet.Replace(ctx, "acme", "p1", node, string(pem), "linux/arm64"); err != nil || again.State != api.Ready {
		t.Errorf("replace again after a heartbeat: %+v, %v", again, err)
	}
	first := e.report("p1", node)
	first.Counter = 1
	if _, err := e.beat(t, first); apierr.CodeOf(err) != apierr.Conflict || reason(err) != api.ReasonReplay {
		t.Errorf("counter 1 again after a replayed replace: %v", err)
	}
	if _, err := e.fleet.Uncordon(ctx, "acme", "p1", node); err != nil {
		t.Fatal(err)
	}
	e.ready(t, "p1", node, bound(r.ReservationID))
	e.pass(t)
	if out, err := e.nodes.CountOut(ctx, "p1"); err != nil || out != 0 {
		t.Errorf("out of service once ready again: %d, %v", out, err)
	}
	e.check(t)
}

// A ready, uncordoned node whose key is replaced is out of placement when
// the replace answers (its node-hours flagged then, as a heartbeat that
// takes a node out of ready flags them), not at the next pass.
func TestReplaceTakesTheNodeOutAtOnce(t *testing.T) {
	e := newEnv(t)
	e.managed(t, "p1", 8, 1)
	if off, _ := e.flagsOff(t, "p1", 0); off != 0 {
		t.Fatalf("ready node: %d hours off", off)
	}
	e.replace(t, e.fleet, "p1", nodeName(0))
	if off, on := e.flagsOff(t, "p1", 0); on != 0 {
		t.Errorf("after the replace: %d hours off, %d not", off, on)
	}
	if _, err := e.create(t, "p1", 8, 0, time.Hour); apierr.CodeOf(err) != apierr.CapacityExhausted {
		t.Errorf("create on the replaced node: %v", err)
	}
	e.ready(t, "p1", nodeName(0))
	e.pass(t) // a node that turns ready is lifted by the sweep
	if _, err := e.create(t, "p1", 8, 0, time.Hour); err != nil {
		t.Errorf("create once the new key reported healthy: %v", err)
	}
	e.check(t)
}

// Without replace another key or platform stays CONFLICT, and its message
// says how to replace; replace of a node not registered registers it.
func TestReplaceOrConflict(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "p1", 16)
	n := e.register(t, "p1", nodeName(0))
	_, pem := newKey(t)
	_, err := e.fleet.Register(ctx, "acme", "p1", nodeName(0), pem, "linux/amd64")
	if ae := apierr.As(err); ae == nil || ae.Code != apierr.Conflict || ae.Details["keyId"] != n.KeyID ||
		!strings.Contains(ae.Message, "replace: true") || !strings.Contains(ae.Message, "bcctl nodes register --replace") {
		t.Errorf("another key without replace: %v", err)
	}
	old, _ := dsse.MarshalPublicKeyPEM(e.keys["p1/"+nodeName(0)].Public())
	if _, err := e.fleet.Register(ctx, "acme", "p1", nodeName(0), string(old), "linux/arm64"); apierr.CodeOf(err) != apierr.Conflict ||
		!strings.Contains(err.Error(), "replace: true") {
		t.Errorf("another platform without replace: %v", err)
	}
	fresh, err := e.fleet.Replace(ctx, "acme", "p1", nodeName(1), pem, "linux/amd64")
	if err != nil || fresh.State != api.Registered || fresh.KeyID == "" {
		t.Errorf("replace of a node not registered: %+v, %v", fresh, err)
	}
	if _, err := e.fleet.Replace(ctx, "globex", "p1", nodeName(0), pem, "linux/amd64"); apierr.CodeOf(err) != apierr.NotFound {
		t.Errorf("replace by a tenant that does not own the pool: %v", err)
	}
	if got := e.node(t, "p1", nodeName(0)); got.KeyID != n.KeyID {
		t.Errorf("a refused registration changed the key: %s", got.KeyID)
	}
}

// heldStore stops the first call of one method (ReplaceKey or Heartbeat)
// until released: the writer has read the node and is about to write.
type heldStore struct {
	*fleetdb.Store
	method  string
	once    sync.Once
	stopped chan struct{}
	release chan struct{}
}

func newHeldStore(inner *fleetdb.Store, method string) *heldStore {
	return &heldStore{Store: inner, method: method, stopped: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldStore) stop(method string) {
	if method == h.method {
		h.once.Do(func() {
			close(h.stopped)
			<-h.release
		})
	}
}

func (h *heldStore) ReplaceKey(ctx context.Context, r fleet.Record, keyID, pub, platform string) (fleet.Record, error) {
	h.stop("ReplaceKey")
	return h.Store.ReplaceKey(ctx, r, keyID, pub, platform)
}

func (h *heldStore) Heartbeat(ctx context.Context, r fleet.Record, keyID string, rep api.Report, st api.NodeState, split *api.LogSplit, now time.Time) (fleet.Record, error) {
	h.stop("Heartbeat")
	return h.Store.Heartbeat(ctx, r, keyID, rep, st, split, now)
}

// heldService is a fleet service on a held store.
func (e *env) heldService(h *heldStore) *fleet.Service {
	return &fleet.Service{Store: h, Pools: e.store, Calendar: e.store, Now: e.clock.Now, Logger: e.fleet.Logger}
}

// until runs fn in a goroutine and returns once h stopped it, with a wait
// for its end.
func until(tb testing.TB, h *heldStore, fn func()) (wait func()) {
	tb.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-h.stopped:
	case <-done:
		tb.Fatal("the held writer ended before its write")
	}
	return func() { close(h.release); <-done }
}

// A replace racing the old key's heartbeat and an operator's cordon, each
// interleaving replayed: whichever write lands first, the node ends under
// the new key, registered, out of placement and of service, with the
// cordon; the old key is refused and the new key's first report accepted.
func TestReplaceRacingAHeartbeat(t *testing.T) {
	settle := func(t *testing.T, e *env, oldKey crypto.Signer) {
		t.Helper()
		rec, err := e.nodes.GetNode(context.Background(), "p1", "gpu", 0)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != api.Registered || rec.Counter != 0 || !rec.Out || !e.fleet.InSync(rec) {
			t.Errorf("after the race: state %s, counter %d, out %v, flags in sync %v", rec.State, rec.Counter, rec.Out, e.fleet.InSync(rec))
		}
		if off, on := e.flagsOff(t, "p1", 0); on != 0 {
			t.Errorf("after the race: %d hours off, %d not", off, on)
		}
		if _, err := e.beatWith(t, e.report("p1", nodeName(0)), oldKey); reason(err) != api.ReasonBadSignature {
			t.Errorf("the old key after the race: %v", err)
		}
		if ans := e.ready(t, "p1", nodeName(0)); ans.Node.State != api.Ready {
			t.Errorf("the new key's first heartbeat: %s", ans.Node.State)
		}
		e.check(t)
	}

	// The replace has read the node; the old key's heartbeat and a cordon
	// land whole before its write.
	t.Run("heartbeat and cordon before the replace's write", func(t *testing.T) {
		e := newEnv(t)
		e.managed(t, "p1", 8, 1)
		h := newHeldStore(e.nodes, "ReplaceKey")
		oldKey := e.keys["p1/"+nodeName(0)]
		newK, pem := newKey(t)
		var rerr error
		wait := until(t, h, func() {
			_, rerr = e.heldService(h).Replace(context.Background(), "acme", "p1", nodeName(0), pem, "linux/amd64")
		})
		if ans := e.ready(t, "p1", nodeName(0)); ans.Node.State != api.Ready {
			t.Fatalf("the old key's heartbeat before the write: %s", ans.Node.State)
		}
		if _, err := e.fleet.Cordon(context.Background(), "acme", "p1", nodeName(0), "swap"); err != nil {
			t.Fatal(err)
		}
		wait()
		if rerr != nil {
			t.Fatalf("replace: %v", rerr)
		}
		if n := e.node(t, "p1", nodeName(0)); n.Cordon == nil || n.Cordon.Reason != "swap" {
			t.Errorf("the cordon after the replace: %+v", n.Cordon)
		}
		e.keys["p1/"+nodeName(0)], e.count["p1/"+nodeName(0)] = newK, 0
		settle(t, e, oldKey)
	})

	// The old key's heartbeat verified under the (cached) old key; the
	// replace lands whole before its write, which then fails and is
	// verified again under the new key: bad_signature.
	t.Run("replace before the heartbeat's write", func(t *testing.T) {
		e := newEnv(t)
		e.managed(t, "p1", 8, 1)
		h := newHeldStore(e.nodes, "Heartbeat")
		hs := e.heldService(h)
		oldKey := e.keys["p1/"+nodeName(0)]
		var herr error
		wait := until(t, h, func() {
			rep := e.report("p1", nodeName(0))
			_, herr = hs.Heartbeat(context.Background(), "acme", "p1", nodeName(0), sign(t, rep, oldKey))
		})
		e.replace(t, e.fleet, "p1", nodeName(0))
		wait()
		if reason(herr) != api.ReasonBadSignature {
			t.Errorf("the old key's heartbeat held across the replace: %v", herr)
		}
		settle(t, e, oldKey)
	})

	// Goroutines: the old key heartbeating while the replace runs, many
	// times over; the replace always wins the node.
	t.Run("goroutines", func(t *testing.T) {
		e := newEnv(t)
		e.managed(t, "p1", 8, 1)
		oldKey := e.keys["p1/"+nodeName(0)]
		reps := make([][]byte, 8)
		for i := range reps {
			reps[i] = sign(t, e.report("p1", nodeName(0)), oldKey)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(reps))
		for i := range reps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = e.fleet.Heartbeat(context.Background(), "acme", "p1", nodeName(0), reps[i])
			}()
		}
		e.replace(t, e.fleet, "p1", nodeName(0))
		wg.Wait()
		for i, err := range errs {
			if err != nil && reason(err) != api.ReasonBadSignature && reason(err) != api.ReasonReplay {
				t.Errorf("old key heartbeat %d: %v", i, err)
			}
		}
		settle(t, e, oldKey)
	})
}

// The sweep's mark of a silent node is conditioned on the key as well as
// the counter: a node replaced after the sweep read it, whose new key then
// reached the same counter, is not marked unreachable from the old read.
func TestMarkUnreachableAfterAReplace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.managed(t, "p1", 8, 1)
	read, err := e.nodes.GetNode(ctx, "p1", "gpu", 0)
	if err != nil {
		t.Fatal(err)
	}
	e.replace(t, e.fleet, "p1", nodeName(0))
	e.count["p1/"+nodeName(0)] = read.Counter - 1
	e.ready(t, "p1", nodeName(0)) // the new key at the old read's counter
	if _, err := e.nodes.MarkUnreachable(ctx, read); !errors.Is(err, fleet.ErrStale) {
		t.Errorf("mark from a read before the replace: %v", err)
	}
	if n := e.node(t, "p1", nodeName(0)); n.State != api.Ready {
		t.Errorf("after the stale mark: %s", n.State)
	}
}
