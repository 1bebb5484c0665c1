package rollout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dynamo/rolloutdb"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// interleaved is the real store with a hook where another party runs.
type interleaved struct {
	*rolloutdb.Store
	onClaim func(pool, id string) error
	onGet   func(r rollout.Record)
}

func (s *interleaved) ClaimPool(ctx context.Context, pool, id string) (string, error) {
	if s.onClaim != nil {
		if err := s.onClaim(pool, id); err != nil {
			return "", err
		}
	}
	return s.Store.ClaimPool(ctx, pool, id)
}

func (s *interleaved) GetRollout(ctx context.Context, id string) (rollout.Record, error) {
	r, err := s.Store.GetRollout(ctx, id)
	if err == nil && s.onGet != nil {
		s.onGet(r)
	}
	return r, err
}

// rollouts.create never answers a rollout the reconciler will not run:
// a create that outlives StaleAfter, abandoned by a pass in the middle of
// it, answers UNAVAILABLE (and its retry with the clientToken gets a
// rollout that runs); a pass that read the create as stale but lost to
// its final write leaves its claims alone.
func TestCreateOutlivingStaleness(t *testing.T) {
	waves := []api.WaveSpec{{Percent: ptr(100)}}
	by := rollout.Audit{TenantID: "platform", Principal: "admin"}
	t.Run("abandoned first", func(t *testing.T) {
		e := newFleetEnv(t)
		e.release("1.0.0", 1)
		e.release("2.0.0", 2)
		e.pool("a", 1, "1.0.0", 1)
		e.pass()
		ctx := context.Background()
		st := &interleaved{Store: e.rstore}
		e.rollouts.Store = st
		once := false
		st.onClaim = func(_, id string) error {
			if !once {
				once = true
				e.clock.Advance(api.StaleAfter + time.Second) // the create stalls past StaleAfter
				if err := e.rc.Advance(ctx, id); err != nil {
					t.Error(err)
				}
			}
			return nil
		}
		req := rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"}, Waves: waves, ClientToken: "slow", By: by, BakeSeconds: ptr(0)}
		r, err := e.rollouts.Create(ctx, req)
		if apierr.CodeOf(err) != apierr.Unavailable {
			got, gerr := e.rollouts.Get(ctx, r.RolloutID)
			t.Fatalf("create answered %+v, %v; a get then: %s %v", r.RolloutID, err, got.State, gerr)
		}
		r, err = e.rollouts.Create(ctx, req) // the client's retry
		if err != nil {
			t.Fatal(err)
		}
		if again, err := e.rollouts.Create(ctx, req); err != nil || again.RolloutID != r.RolloutID {
			t.Errorf("a second retry: %s %v, want %s", again.RolloutID, err, r.RolloutID)
		}
		e.until(r.RolloutID, api.Completed, 100, nil)
	})
	t.Run("listed first", func(t *testing.T) {
		e := newFleetEnv(t)
		e.release("1.0.0", 1)
		e.release("2.0.0", 2)
		e.pool("a", 1, "1.0.0", 1)
		e.pass()
		ctx := context.Background()
		st := &interleaved{Store: e.rstore}
		e.rollouts.Store = st
		cut, id := errors.New("cut off"), ""
		st.onClaim = func(_, rid string) error { id = rid; return cut } // the first call stops before its claims
		req := rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"}, Waves: waves, ClientToken: "slow", By: by, BakeSeconds: ptr(0)}
		if _, err := e.rollouts.Create(ctx, req); err == nil {
			t.Fatal("the cut-off create answered")
		}
		st.onClaim = nil
		e.clock.Advance(api.StaleAfter + time.Second)
		// The pass reads the unlisted rollout; the retry lists it before
		// the pass acts on what it read.
		rst := &interleaved{Store: e.rstore}
		e.rc.Store = rst
		var r api.Rollout
		rst.onGet = func(rec rollout.Record) {
			if rec.Listed || r.RolloutID != "" {
				return
			}
			var err error
			if r, err = e.rollouts.Create(ctx, req); err != nil {
				t.Errorf("retry: %v", err)
			}
		}
		if err := e.rc.Advance(ctx, id); err != nil {
			t.Fatal(err)
		}
		e.rc.Store = e.rstore
		if r.RolloutID == "" {
			t.Fatal("the retry did not run")
		}
		other := rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"}, Waves: waves, By: by}
		if _, err := e.rollouts.Create(ctx, other); apierr.CodeOf(err) != apierr.Conflict {
			t.Fatalf("another rollout of the pool: %v, want CONFLICT (the listed rollout keeps its claim)", err)
		}
		e.until(r.RolloutID, api.Completed, 100, nil)
	})
}
