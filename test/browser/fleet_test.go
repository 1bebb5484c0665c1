package browser

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/agent"
	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

// fleet is reference agents on the stack's pools, stepped with a reconciler
// pass between rounds: what make run's simulated fleet does, driven as fast
// as the machine goes (no intervals to wait out).
type fleet struct {
	st     *teststack.Stack
	admin  *client.Client
	agents []*agent.Agent
	mu     sync.Mutex
	stop   context.CancelFunc
	done   chan struct{}
}

// healthyStarter counts a downloaded release as started healthy (the
// simulated fleet never runs what it downloads).
type healthyStarter struct{}

func (healthyStarter) Start(context.Context, string, api.Version) error { return nil }

func newFleet(t *testing.T, st *teststack.Stack) *fleet {
	return &fleet{st: st, admin: client.New(st.URL, "dev:admin")}
}

// call is a method call as admin that must succeed.
func call(t *testing.T, c *client.Client, method string, in, out any) {
	t.Helper()
	body, _ := json.Marshal(in)
	resp, err := c.Do(context.Background(), method, body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 {
		t.Fatalf("%s: HTTP %d %s", method, resp.Status, resp.Body)
	}
	if out != nil {
		if err := json.Unmarshal(resp.Body, out); err != nil {
			t.Fatal(err)
		}
	}
}

// addNodes registers count nodes of pool (owned by acme) and starts an
// agent for each.
func (f *fleet) addNodes(t *testing.T, pool string, count int) {
	t.Helper()
	logKey := devstack.DevLogKey(t)
	pins, err := release.NewPins([]crypto.PublicKey{teststack.DevReleaseKey(t).Public()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for k := range count {
		node := fmt.Sprintf("gpu.h100-node-%d", k)
		key, _ := dsse.GenerateKey(dsse.AlgEd25519)
		pem, _ := dsse.MarshalPublicKeyPEM(key.Public())
		call(t, f.admin, "nodes.register", map[string]any{"tenantId": "acme", "poolId": pool, "nodeId": node,
			"publicKey": string(pem), "platform": "linux/amd64"}, nil)
		a, err := agent.New(agent.Config{Client: client.New(f.st.URL, "dev:fleet-agent"), TenantID: "acme", PoolID: pool, NodeID: node,
			Key: key, Pins: pins, LogKey: logKey, Platform: "linux/amd64", Devices: 8, Driver: agent.NewRecordingDriver(8),
			StateDir: filepath.Join(t.TempDir(), pool, node), Starter: healthyStarter{}})
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.agents = append(f.agents, a)
		f.mu.Unlock()
	}
}

// run steps every agent, then passes the reconciler, until stopped.
func (f *fleet) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f.stop, f.done = cancel, make(chan struct{})
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			f.mu.Lock()
			agents := append([]*agent.Agent(nil), f.agents...)
			f.mu.Unlock()
			for _, a := range agents {
				_, _ = a.Step(ctx)
			}
			_ = f.st.App.Reconcile(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { f.stop(); <-f.done })
}

// registerRelease signs a statement of version with the dev release key
// (a file:// binary) and registers it.
func registerRelease(t *testing.T, c *client.Client, version string, seq int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bcd-"+version)
	data := []byte("#!/bin/sh\necho bcd " + version + "\n")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	st, _ := json.Marshal(map[string]any{"version": version, "sequence": seq, "expires": "2099-01-01T00:00:00Z",
		"binaries": []map[string]any{{"platform": "linux/amd64", "url": "file://" + bin, "sha256": hex.EncodeToString(sum[:]), "size": len(data)}}})
	env, err := dsse.Sign(release.PayloadType, st, teststack.DevReleaseKey(t))
	if err != nil {
		t.Fatal(err)
	}
	call(t, c, "releases.register", map[string]any{"tenantId": "platform", "manifest": json.RawMessage(env)}, nil)
}
