package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/test/teststack"
)

// TestFaults races creates and releases over HTTP while a fifth of the app's
// DynamoDB requests fail — before or after they reach the server, retryable
// or not — then lets the reconciler run to quiescence. Every answer during
// the faults is a success or UNAVAILABLE (never INTERNAL, never a wrong
// QUOTA_EXCEEDED or CAPACITY_EXHAUSTED: quota and devices are ample), what
// was answered is what is stored, and the invariant checker finds nothing.
func TestFaults(t *testing.T) {
	const (
		workers   = 16
		creates   = 25 // per worker
		attempts  = 4  // a client retries UNAVAILABLE with the same clientToken
		faultRate = 0.2
	)
	faults := dynamo.NewFaults(20261130)
	clock := teststack.NewClock(time.Now().UTC().Truncate(time.Second))
	st := newStack(t, teststack.WithClock(clock.Now), teststack.WithAppOptions(app.WithDynamoOptions(faults.Option())))
	post := func(method string, body map[string]any) response {
		b, _ := json.Marshal(body)
		return call(t, st.URL, method, "Bearer dev:admin", b)
	}
	// Room for every create even if nothing were released: 400 × ≤ 2 < 4096.
	if r := post("pools.create", map[string]any{"tenantId": "acme", "poolId": "chaos", "resources": map[string]any{"gpu": 4096}}); r.Status != 200 {
		t.Fatalf("pools.create: %d %s", r.Status, r.Body)
	}
	end := clock.Now().Add(time.Hour).Format(time.RFC3339)

	type outcome struct {
		id        string
		created   bool // answered 200
		releasing bool // a release was sent (it may have been done though answered UNAVAILABLE)
		released  bool // its release answered 200
	}
	var mu sync.Mutex
	var bad []string
	var outcomes []*outcome
	// acceptable reports whether an answer may be seen under faults.
	acceptable := func(method string, r response) bool {
		if r.Status == http.StatusOK {
			return true
		}
		var e struct{ Error struct{ Code string } }
		_ = json.Unmarshal(r.Body, &e)
		if r.Status == http.StatusServiceUnavailable && e.Error.Code == "UNAVAILABLE" {
			return false
		}
		mu.Lock()
		bad = append(bad, fmt.Sprintf("%s: %d %s", method, r.Status, r.Body))
		mu.Unlock()
		return false
	}
	faults.SetRate(faultRate)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var live []*outcome
			for i := range creates {
				o := &outcome{}
				body := map[string]any{"tenantId": "acme", "poolId": "chaos", "resource": "gpu", "count": 1 + rng.IntN(2),
					"window": map[string]any{"end": end}, "clientToken": fmt.Sprintf("w%d-%d", w, i)}
				for a := 0; a < attempts && !o.created; a++ {
					r := post("reservations.create", body)
					if acceptable("reservations.create", r) {
						var out struct{ Reservation capacity.Reservation }
						_ = json.Unmarshal(r.Body, &out)
						o.id, o.created = out.Reservation.ReservationID, true
					}
				}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				if o.created {
					live = append(live, o)
				}
				if len(live) > 0 && rng.IntN(2) == 0 {
					k := rng.IntN(len(live))
					victim := live[k]
					victim.releasing = true
					for a := 0; a < attempts && !victim.released; a++ {
						r := post("reservations.release", map[string]any{"tenantId": "acme", "reservationId": victim.id})
						victim.released = acceptable("reservations.release", r)
					}
					live = append(live[:k], live[k+1:]...)
				}
			}
		}()
	}
	wg.Wait()
	faults.SetRate(0)
	calls, before, after := faults.Counts()
	t.Logf("faults: %d DynamoDB requests, %d failed before the server and %d after (%.1f%%)",
		calls, before, after, 100*float64(before+after)/float64(calls))
	if before == 0 || after == 0 {
		t.Fatal("no faults were injected")
	}
	for _, b := range bad {
		t.Error("answer under faults:", b)
	}

	// The reconciler runs to quiescence: a pass that moves, repairs and sweeps nothing.
	rc := st.App.Reconciler()
	rc.Capacity.ProvisionHours = 2 // the windows' hours: provisioning the 72 ahead of 512 nodes is not what this tests
	for pass := 0; ; pass++ {
		clock.Advance(api.StaleAfter + time.Second)
		res, err := rc.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors == 0 && res.TransitionCount() == 0 && res.Repaired == 0 && res.Swept == 0 {
			break
		}
		if pass == 10 {
			t.Fatalf("no quiescence after %d passes: %+v", pass, res)
		}
	}
	store := &capacitydb.Store{DB: st.Dev.DynamoDB(), Table: st.App.Config.Table}
	vs, err := capacity.Check(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Error("invariant:", v)
	}
	// What was answered is what is stored.
	created, released := 0, 0
	for _, o := range outcomes {
		if !o.created {
			continue
		}
		created++
		r, err := st.App.CapacityService().Reservations().Get(context.Background(), "acme", o.id)
		if err != nil {
			t.Fatalf("%s answered placed, now: %v", o.id, err)
		}
		switch {
		case o.released:
			released++
			if r.State != api.Released {
				t.Errorf("%s: release answered 200, state %s", o.id, r.State)
			}
		case o.releasing:
			// UNAVAILABLE: the release may or may not have been done.
			if r.State != api.Released && r.State != api.Active {
				t.Errorf("%s: release unanswered, state %s", o.id, r.State)
			}
		case r.State != api.Active:
			t.Errorf("%s: never released, state %s", o.id, r.State)
		}
	}
	t.Logf("%d of %d creates placed (with retries), %d released", created, len(outcomes), released)
}
