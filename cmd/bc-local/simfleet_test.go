package main

import (
	"context"
	"crypto"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/localgw"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

func TestParseSimNodes(t *testing.T) {
	for in, want := range map[string]int{"": 0, "0": 0, "3": 3, "256": 256} {
		if got, err := parseSimNodes(in); err != nil || got != want {
			t.Errorf("%q: %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"-1", "257", "two", "1.5"} {
		if _, err := parseSimNodes(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// The simulated fleet against the real stack and the dev policy: three
// nodes are the quickstart pool's two and one of sim-fleet; every agent's
// heartbeat is accepted as fleet-agent and its node is ready; the user's
// quickstart still creates its pool (a replay); a restart on the same state
// dir reuses the keys; a larger fleet than an earlier run's sim-fleet
// holds is refused with a way out.
func TestSimFleetSetup(t *testing.T) {
	ctx := context.Background()
	st := teststack.Start(t)
	dir := filepath.Join(t.TempDir(), "sim-nodes")
	admin, agents := client.New(st.URL, "dev:admin"), client.New(st.URL, "dev:"+simPrincipal)
	pins, err := release.NewPins([]crypto.PublicKey{teststack.DevReleaseKey(t).Public()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	f, err := setupSimFleet(ctx, admin, agents, 3, dir, pins, devstack.DevLogKey(t), log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	var names []string
	for _, n := range f.Nodes {
		names = append(names, n.Pool+"/"+n.Node)
	}
	if want := []string{"gpu-pool-1/gpu.h100-node-0", "gpu-pool-1/gpu.h100-node-1", "sim-fleet/gpu.h100-node-0"}; !slices.Equal(names, want) {
		t.Fatalf("nodes %v, want %v", names, want)
	}
	f.firstBeats(ctx, log) // a refused one leaves its node registered, not ready
	for _, pool := range []string{"gpu-pool-1", "sim-fleet"} {
		res, err := admin.NodesList(ctx, &api.ListNodesInput{Tenant: api.Tenant{TenantID: "acme"}, PoolID: pool})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range res.Nodes {
			if n.State != api.Ready || n.Platform != simPlatform || n.Health == nil || n.Health.DevicesExpected != 8 {
				t.Errorf("%s/%s: %+v", pool, n.NodeID, n)
			}
		}
		if want := map[string]int{"gpu-pool-1": 2, "sim-fleet": 1}[pool]; len(res.Nodes) != want {
			t.Errorf("%s: %d nodes, want %d", pool, len(res.Nodes), want)
		}
	}
	if got := f.summary(); !strings.Contains(got, "3 agents heartbeating as fleet-agent on gpu-pool-1 (gpu.h100-node-0, gpu.h100-node-1), sim-fleet (gpu.h100-node-0)") ||
		!strings.Contains(got, "bcctl nodes list --pool gpu-pool-1") || !strings.Contains(got, `{"tenantId":"acme","poolId":"gpu-pool-1"}`) {
		t.Errorf("summary: %s", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "gpu-pool-1", "gpu.h100-node-0.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("node key file: %v %v", fi, err)
	}

	// The user pastes the quickstart after make run created the pool.
	for _, ex := range localgw.Examples(time.Now()) {
		if ex.Method != "pools.create" {
			continue
		}
		req, _ := http.NewRequest(http.MethodPost, st.URL+api.Lookup(ex.Method).Path(), strings.NewReader(ex.Body))
		req.Header.Set("Authorization", "Bearer dev:"+ex.Principal)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the quickstart's pools.create after the fleet's: HTTP %d %s", resp.StatusCode, body)
		}
	}

	// A restart: the same keys, the same registrations.
	again, err := setupSimFleet(ctx, admin, agents, 3, dir, pins, devstack.DevLogKey(t), log)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	again.close()
	if _, err := setupSimFleet(ctx, admin, agents, 5, dir, pins, devstack.DevLogKey(t), log); err == nil || !strings.Contains(err.Error(), "make clean") {
		t.Errorf("more nodes than sim-fleet holds: %v", err)
	}
}

// The README's sections in order: its first walk registers
// gpu.h100-node-0 with a key of the user's (and cordons it), then the
// stack restarts with BC_SIM_NODES=4. The fleet leaves that node alone —
// never re-keys it — runs the other three, and its summary names the
// skipped node, why, and the ways out; taking the --replace way out, the
// next start runs all four.
func TestSimFleetOnTheReadmesState(t *testing.T) {
	ctx := context.Background()
	st := teststack.Start(t)
	dir := filepath.Join(t.TempDir(), "sim-nodes")
	admin, agents := client.New(st.URL, "dev:admin"), client.New(st.URL, "dev:"+simPrincipal)
	pins, err := release.NewPins([]crypto.PublicKey{teststack.DevReleaseKey(t).Public()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	quick, err := quickstartPool()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PoolsCreate(ctx, &quick); err != nil {
		t.Fatal(err)
	}
	userKey, err := dsse.GenerateKey(dsse.AlgECDSAP256) // bcctl keygen --out /tmp/node-0.pem
	if err != nil {
		t.Fatal(err)
	}
	userPEM, _ := dsse.MarshalPublicKeyPEM(userKey.Public())
	node0 := api.NodeRef{PoolID: "gpu-pool-1", NodeID: "gpu.h100-node-0"}
	acme := api.Tenant{TenantID: "acme"}
	registered, err := admin.NodesRegister(ctx, &api.RegisterNodeInput{Tenant: acme, NodeRef: node0, PublicKey: string(userPEM), Platform: simPlatform})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.NodesCordon(ctx, &api.CordonNodeInput{Tenant: acme, NodeRef: node0, Reason: "psu-swap"}); err != nil {
		t.Fatal(err)
	}

	// A fleet of one, that one node skipped: no agent, and it says why.
	f, err := setupSimFleet(ctx, admin, agents, 1, dir, pins, devstack.DevLogKey(t), log)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.summary(); len(f.Agents) != 0 || !strings.HasPrefix(got, "Simulated fleet not started: each of its 1 nodes") ||
		!strings.Contains(got, "gpu-pool-1/gpu.h100-node-0 skipped") {
		t.Errorf("a fleet of one skipped node: %d agents, summary %s", len(f.Agents), got)
	}

	f, err = setupSimFleet(ctx, admin, agents, 4, dir, pins, devstack.DevLogKey(t), log)
	if err != nil {
		t.Fatalf("the fleet on the README's state: %v", err)
	}
	f.firstBeats(ctx, log)
	f.close()
	var names []string
	for _, n := range f.Nodes {
		names = append(names, n.Pool+"/"+n.Node)
	}
	if want := []string{"gpu-pool-1/gpu.h100-node-1", "sim-fleet/gpu.h100-node-0", "sim-fleet/gpu.h100-node-1"}; !slices.Equal(names, want) || len(f.Agents) != 3 {
		t.Fatalf("agents on %v, want %v", names, want)
	}
	keyFile := filepath.Join(dir, "gpu-pool-1", "gpu.h100-node-0.pem")
	summary := f.summary()
	for _, want := range []string{"Simulated fleet up: 3 of 4 agents heartbeating",
		"gpu-pool-1/gpu.h100-node-0 skipped: registered under a key this stack does not hold (the README's `nodes register` step?)",
		"`make clean` (or another BC_STATE_DIR) starts over", "`bin/bcctl nodes register --pool gpu-pool-1 gpu.h100-node-0 --key " + keyFile + " --replace`"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary misses %q:\n%s", want, summary)
		}
	}
	got, err := admin.NodesGet(ctx, &api.GetNodeInput{Tenant: acme, NodeRef: node0})
	if err != nil {
		t.Fatal(err)
	}
	if got.Node.KeyID != registered.Node.KeyID || got.Node.State != api.Registered || got.Node.Cordon == nil {
		t.Errorf("the user's node after the fleet started: %+v", got.Node)
	}
	for _, pool := range []string{"gpu-pool-1", "sim-fleet"} {
		res, err := admin.NodesList(ctx, &api.ListNodesInput{Tenant: acme, PoolID: pool})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range res.Nodes {
			if n.NodeID != node0.NodeID || pool != node0.PoolID {
				if n.State != api.Ready {
					t.Errorf("%s/%s: %s", pool, n.NodeID, n.State)
				}
			}
		}
	}

	// The summary's other way out: hand the node to the fleet's key.
	simKey, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	k, err := dsse.ParsePrivateKeyPEM(simKey)
	if err != nil {
		t.Fatal(err)
	}
	simPEM, _ := dsse.MarshalPublicKeyPEM(k.Public())
	replace := true
	if _, err := admin.NodesRegister(ctx, &api.RegisterNodeInput{Tenant: acme, NodeRef: node0, PublicKey: string(simPEM), Platform: simPlatform, Replace: &replace}); err != nil {
		t.Fatal(err)
	}
	f, err = setupSimFleet(ctx, admin, agents, 4, dir, pins, devstack.DevLogKey(t), log)
	if err != nil {
		t.Fatal(err)
	}
	f.firstBeats(ctx, log)
	f.close()
	if len(f.Agents) != 4 || len(f.Skipped) != 0 || strings.Contains(f.summary(), "skipped") {
		t.Errorf("after the replace: %d agents, %d skipped: %s", len(f.Agents), len(f.Skipped), f.summary())
	}
	if got, err := admin.NodesGet(ctx, &api.GetNodeInput{Tenant: acme, NodeRef: node0}); err != nil || got.Node.State != api.Ready || got.Node.Cordon == nil {
		t.Errorf("the replaced node under the fleet's agent: %+v, %v", got.Node, err)
	}
}

// The quickstart's pool is read from what it prints; a pool's nodes follow
// from its resources and node sizes, the last node of a resource smaller.
func TestPoolNodes(t *testing.T) {
	quick, err := quickstartPool()
	if err != nil {
		t.Fatal(err)
	}
	if quick.PoolID != "gpu-pool-1" || quick.Resources["gpu.h100"] != 16 {
		t.Fatalf("quickstart pool: %+v", quick)
	}
	got := poolNodes(api.Pool{PoolID: "p", Resources: map[string]int{"b": 3, "a": 10}, NodeSize: map[string]int{"a": 8, "b": 3}})
	want := []simNode{{"p", "a-node-0", 8}, {"p", "a-node-1", 2}, {"p", "b-node-0", 3}}
	if !slices.Equal(got, want) {
		t.Errorf("nodes %v, want %v", got, want)
	}
}
