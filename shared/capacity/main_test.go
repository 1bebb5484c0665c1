package capacity_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
)

// TestMain shares one local stack (dynalite) across the package; every test
// gets its own table.
func TestMain(m *testing.M) { devstack.Main(m) }

// clock is an injected clock tests move by hand (no sleeps).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// env is a service on a fresh table of the local DynamoDB.
type env struct {
	svc   *capacity.Service
	store *capacitydb.Store
	rt    *dynamo.RoundTrips
	clock *clock
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	st := devstack.Shared(tb)
	table := devstack.NewTable(tb, st)
	rt := &dynamo.RoundTrips{}
	store := &capacitydb.Store{DB: st.DynamoDB(rt.Option()), Table: table}
	c := newClock()
	svc := &capacity.Service{Store: store, Now: c.Now, Logger: slog.New(slog.DiscardHandler)}
	return &env{svc: svc, store: store, rt: rt, clock: c}
}

func allow(context.Context, map[string]any) error { return nil }

func deny(context.Context, map[string]any) error {
	return apierr.New(apierr.PermissionDenied, "denied by test")
}

// check fails the test on any broken invariant.
func (e *env) check(tb testing.TB) {
	tb.Helper()
	vs, err := capacity.Check(context.Background(), e.store)
	if err != nil {
		tb.Fatalf("check: %v", err)
	}
	for _, v := range vs {
		tb.Errorf("invariant: %s", v)
	}
}

func (e *env) pool(tb testing.TB, tenant, id string, res map[string]int) capacity.Pool {
	tb.Helper()
	p, err := e.svc.Pools().Create(context.Background(), tenant, id, res, nil)
	if err != nil {
		tb.Fatalf("create pool: %v", err)
	}
	return p
}

func (e *env) offer(tb testing.TB, owner, pool, to, res string, max int64) {
	tb.Helper()
	if _, err := e.svc.Pools().Offer(context.Background(), owner, pool, to, res, max); err != nil {
		tb.Fatalf("offer: %v", err)
	}
}

// req is a create request for count devices over [start+from, start+to).
func (e *env) req(tenant, pool, res string, count int, from, to time.Duration) capacity.CreateRequest {
	s, end := e.clock.Now().Add(from), e.clock.Now().Add(to)
	return capacity.CreateRequest{TenantID: tenant, PoolID: pool, Resource: res, Count: count, Start: &s, End: end}
}

func code(err error) apierr.Code { return apierr.CodeOf(err) }

func detail(err error, k string) any {
	if e := apierr.As(err); e != nil {
		return e.Details[k]
	}
	return nil
}

// must is for calls that cannot fail in a passing test (a panic fails it).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func devices(res string, n ...int) []string {
	out := make([]string, len(n))
	for i, d := range n {
		out[i] = fmt.Sprintf("%s-%d", res, d)
	}
	return out
}

func joined(ss []string) string { return strings.Join(ss, ",") }
