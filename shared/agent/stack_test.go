package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/test/teststack"
)

// TestMain shares one local stack (dynalite, local-kms) across the
// package's integration tests.
func TestMain(m *testing.M) { devstack.Main(m) }

// The agent against the real API over HTTP, as principal fleet-agent of
// the dev policy: its reports are accepted (signature, strict decoding,
// authorization), a reservation on its node becomes active only through its
// bind, its release through its unbind; a restarted agent whose clock is
// behind gets a replay and is accepted on the next step.
func TestAgentAgainstTheStack(t *testing.T) {
	ctx := context.Background()
	clock := teststack.NewClock(time.Now().UTC().Truncate(time.Second))
	st := teststack.Start(t, teststack.WithClock(clock.Now))
	admin := client.New(st.URL, "dev:admin")
	acme := api.Tenant{TenantID: "acme"}
	if _, err := admin.PoolsCreate(ctx, &api.CreatePoolInput{Tenant: acme, PoolID: "p-agent", Resources: api.Resources{"gpu.h100": 8}}); err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	pem, err := dsse.MarshalPublicKeyPEM(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	ref := api.NodeRef{PoolID: "p-agent", NodeID: "gpu.h100-node-0"}
	if _, err := admin.NodesRegister(ctx, &api.RegisterNodeInput{Tenant: acme, NodeRef: ref, PublicKey: string(pem), Platform: "linux/amd64"}); err != nil {
		t.Fatal(err)
	}
	driver := NewRecordingDriver(8)
	cfg := Config{Client: client.New(st.URL, "dev:fleet-agent"), TenantID: "acme", PoolID: ref.PoolID, NodeID: ref.NodeID,
		Key: key, Platform: "linux/amd64", Devices: 8, Driver: driver, StateDir: t.TempDir(), Now: clock.Now}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pass := func() {
		t.Helper()
		if res, err := st.App.Reconciler().Pass(ctx); err != nil || res.Errors > 0 {
			t.Fatalf("pass: %+v, %v", res, err)
		}
	}
	state := func(id string) api.ReservationState {
		t.Helper()
		r, err := admin.ReservationsGet(ctx, &api.GetReservationInput{Tenant: acme, ReservationID: id})
		if err != nil {
			t.Fatal(err)
		}
		return r.Reservation.State
	}

	if res := step(t, a); res.Node.State != api.Ready || res.NextHeartbeatSeconds != int(api.DefaultInterval/time.Second) {
		t.Fatalf("first heartbeat: state %s, next %d", res.Node.State, res.NextHeartbeatSeconds)
	}
	pass() // the sweep makes the ready node placeable
	start := clock.Now().Add(time.Minute)
	r, err := admin.ReservationsCreate(ctx, &api.CreateReservationInput{Tenant: acme, PoolID: ref.PoolID, Resource: "gpu.h100", Count: 8,
		Window: api.ReservationWindow{Start: &start, End: start.Add(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Reservation.ReservationID
	clock.Advance(time.Minute)
	pass()
	if s := state(id); s != api.Binding {
		t.Fatalf("at window start: %s", s)
	}
	clock.Advance(time.Second)
	if res := step(t, a); len(res.Desired.Bindings) != 1 || res.Desired.Bindings[0].Action != api.ActionBind {
		t.Fatalf("told %+v", res.Desired.Bindings)
	}
	pass()
	if s := state(id); s != api.Binding {
		t.Fatalf("active before the agent reported bound: %s", s)
	}
	clock.Advance(time.Second)
	step(t, a) // reports bound
	pass()
	if s := state(id); s != api.Active {
		t.Fatalf("after the agent's bind: %s", s)
	}
	if held := driver.Held()[id]; len(held) != 8 {
		t.Errorf("driver holds %v", held)
	}

	if _, err := admin.ReservationsRelease(ctx, &api.ReleaseReservationInput{Tenant: acme, ReservationID: id}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // told unbind, then reports unbound
		clock.Advance(time.Second)
		step(t, a)
	}
	pass() // the sweep drops the unbind the node reported done
	clock.Advance(time.Second)
	if res := step(t, a); len(res.Desired.Bindings) != 0 || len(a.words) != 0 {
		t.Errorf("after the unbind was dropped: told %+v, still says %v", res.Desired.Bindings, a.words)
	}
	if got, want := ops(driver), []string{"bind " + id, "unbind " + id}; !slices.Equal(got, want) {
		t.Errorf("driver: %v, want %v", got, want)
	}
	n, err := admin.NodesGet(ctx, &api.GetNodeInput{Tenant: acme, NodeRef: ref})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Node.Bindings) != 0 || n.Node.State != api.Ready {
		t.Errorf("node after the unbind: %+v", n.Node)
	}

	// A second life of the agent, its clock a minute behind: the server
	// has a higher counter.
	behind := cfg
	behind.Now = func() time.Time { return clock.Now().Add(-time.Minute) }
	again, err := New(behind)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Step(ctx); err == nil {
		t.Fatal("a counter below the last accepted one was accepted")
	} else if _, ok := replayed(err); !ok {
		t.Fatalf("step: %v, want a replay", err)
	}
	step(t, again)

	// Another principal may not report for the node.
	alice := cfg
	alice.Client = client.New(st.URL, "dev:alice")
	intruder, err := New(alice)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := intruder.Step(ctx); apierr.CodeOf(err) != apierr.PermissionDenied || Retryable(err) {
		t.Errorf("alice's heartbeat: %v", err)
	}
}
