package e2e

import (
	"context"
	"crypto"
	"encoding/json"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/test/teststack"
)

// A node's principal is authorized on its own scope only: node-0's
// credentials cannot report for node-1, however well signed. Then a
// reservation over HTTP becomes active only once its node reported it
// bound.
func TestHeartbeatOverHTTP(t *testing.T) {
	policy, err := iam.ParsePolicy([]byte(`{"grants": [
	  {"principal": "admin", "permissions": ["*"], "scopes": ["*"]},
	  {"principal": "agent-0", "permissions": ["compute:nodes:report"], "scopes": ["node:fp/gpu-node-0"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	clock := teststack.NewClock(time.Now().UTC().Truncate(time.Second))
	c := &capacityStack{Stack: newStack(t, teststack.WithClock(clock.Now), teststack.WithDecider(policy)), clock: clock}
	c.post(t, "admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "fp", "resources": map[string]any{"gpu": 16}}, &struct{}{})
	keys := map[string]crypto.Signer{}
	for _, n := range []string{"gpu-node-0", "gpu-node-1"} {
		k, _ := dsse.GenerateKey(dsse.AlgEd25519)
		pem, _ := dsse.MarshalPublicKeyPEM(k.Public())
		keys[n] = k
		c.post(t, "admin", "nodes.register", map[string]any{"tenantId": "acme", "poolId": "fp", "nodeId": n, "publicKey": string(pem), "platform": "linux/amd64"}, &struct{}{})
	}
	counter := int64(0)
	beat := func(principal, node string, bindings ...api.ReportedBinding) response {
		counter++
		if bindings == nil {
			bindings = []api.ReportedBinding{}
		}
		rep := api.Report{PoolID: "fp", NodeID: node, Counter: counter, At: clock.Now(),
			Health: api.Health{DevicesExpected: 8, DevicesVisible: 8, Checks: []api.Check{}}, Bindings: bindings}
		payload, _ := json.Marshal(rep)
		env, err := dsse.Sign(api.ReportPayloadType, payload, keys[node])
		if err != nil {
			t.Fatal(err)
		}
		return c.post(t, principal, "nodes.heartbeat", map[string]any{"tenantId": "acme", "poolId": "fp", "nodeId": node, "report": json.RawMessage(env)}, nil)
	}
	if r := beat("agent-0", "gpu-node-1"); r.Status != 403 {
		t.Fatalf("node-0's principal reporting for node-1: %d %s", r.Status, r.Body)
	}
	if r := beat("agent-0", "gpu-node-0"); r.Status != 200 {
		t.Fatalf("node-0 reporting for itself: %d %s", r.Status, r.Body)
	}
	pass := func() {
		if err := c.App.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	pass() // node 0 ready: its flags lifted; node 1 never reported
	start := clock.Now().Add(time.Minute)
	var res struct{ Reservation capacity.Reservation }
	c.post(t, "admin", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "fp", "resource": "gpu", "count": 8,
		"window": map[string]any{"start": start.Format(time.RFC3339), "end": start.Add(time.Hour).Format(time.RFC3339)}}, &res)
	if got := res.Reservation.NodeIDs; len(got) != 1 || got[0] != "gpu-node-0" {
		t.Fatalf("placed on %v, want the ready node", got)
	}
	id := res.Reservation.ReservationID
	state := func() api.ReservationState {
		var g struct{ Reservation capacity.Reservation }
		c.post(t, "admin", "reservations.get", map[string]any{"tenantId": "acme", "reservationId": id}, &g)
		return g.Reservation.State
	}
	clock.Advance(time.Minute)
	pass()
	r := beat("agent-0", "gpu-node-0")
	var hb api.HeartbeatResult
	if err := json.Unmarshal(r.Body, &hb); err != nil || len(hb.Desired.Bindings) != 1 || hb.Desired.Bindings[0].Action != api.ActionBind {
		t.Fatalf("answer: %s", r.Body)
	}
	pass()
	if s := state(); s != api.Binding {
		t.Fatalf("before the node reported bound: %s", s)
	}
	beat("agent-0", "gpu-node-0", api.ReportedBinding{ReservationID: id, State: api.BindBound})
	pass()
	if s := state(); s != api.Active {
		t.Fatalf("after the node reported bound: %s", s)
	}
}
