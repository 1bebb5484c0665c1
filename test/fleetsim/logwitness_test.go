package fleetsim

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/agent"
	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/release"
)

// tamperer is a proxy in front of the stack's gateway that rewrites the
// release log evidence of the heartbeat answers naming version: a control
// plane (or a table) lying to one node.
func tamperer(tb testing.TB, upstream, version string, alter func(d *api.DesiredLog)) string {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		var res api.HeartbeatResult
		if r.URL.Path == "/api/compute/nodes/heartbeat" && resp.StatusCode == 200 && json.Unmarshal(out, &res) == nil &&
			res.Desired.Release != nil && res.Desired.Release.Version == version && res.Desired.Release.Log != nil {
			alter(res.Desired.Release.Log)
			out, _ = json.Marshal(res)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// foreignSigner is a release log key of origin that no node pins.
func foreignSigner(tb testing.TB, origin string) *release.LogSigner {
	tb.Helper()
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	s, err := release.NewLogSigner(origin, k)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestAgentsRefuseTamperedLogEvidence: reference agents behind a proxy
// that rewrites the release log evidence of a rollout's target refuse it
// ("log: <reason>"), report the install failed, and the rollout fails the
// node like any install failure; a node told the truth beside them
// installs.
func TestAgentsRefuseTamperedLogEvidence(t *testing.T) {
	t.Parallel() // its own tables: the real-time waits of the package overlap
	h := newRig(t, 5*time.Second)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	h.register(t, h.sign(t, h.statement("1.0.0", 1)))
	h.register(t, h.sign(t, h.statement("1.0.1", 2)))
	h.register(t, h.sign(t, h.statement("1.1.0", 3))) // entry 2 of 3
	v1 := &api.Version{Version: "1.0.0", Sequence: 1}
	foreign := foreignSigner(t, devstack.DevReleaseLogOrigin)
	otherKey := foreign.Key()
	cases := []struct {
		name, pool string
		alter      func(d *api.DesiredLog)
		logKey     *release.LogKey
		want       string // "" installs
	}{
		{"told the truth", "l-truth", nil, nil, ""},
		{"forged checkpoint", "l-forged", func(d *api.DesiredLog) {
			c := release.Checkpoint{Origin: devstack.DevReleaseLogOrigin, Size: 3}
			signed, _ := foreign.Sign(c)
			d.Checkpoint = string(signed)
		}, nil, "log: checkpoint signature"},
		{"proof of another entry", "l-proof", func(d *api.DesiredLog) { d.Index = 1 }, nil, "log: inclusion"},
		{"proof tampered", "l-hash", func(d *api.DesiredLog) {
			b, _ := base64.StdEncoding.DecodeString(d.Inclusion[0])
			b[0] ^= 1
			d.Inclusion[0] = base64.StdEncoding.EncodeToString(b)
		}, nil, "log: inclusion"},
		{"another log pinned", "l-pinned", nil, &otherKey, "log: checkpoint signature"},
	}
	nodes := map[string]*simNode{}
	for _, c := range cases {
		h.must(t, "pools.create", map[string]any{"tenantId": "acme", "poolId": c.pool, "resources": map[string]any{"gpu": 8}}, nil)
		n := h.node(t, c.pool, "gpu-node-0", "", v1, nil)
		if c.alter != nil {
			n.apiURL = tamperer(t, h.st.URL, "1.1.0", c.alter)
		}
		n.logKey = c.logKey
		h.run(t, ctx, n, 1)
		nodes[c.pool] = n
	}
	reconciling := reconcileEverySecond(ctx, h)
	defer func() { stop(); <-reconciling }()
	waitFor(t, 15*time.Second, func() bool {
		for _, c := range cases {
			if n := h.getNode(t, c.pool, "gpu-node-0"); n.Running == nil || n.State != api.Ready {
				return false
			}
		}
		return true
	})
	ids := map[string]string{}
	for _, c := range cases {
		var out struct{ Rollout api.Rollout }
		h.must(t, "rollouts.create", map[string]any{"tenantId": platformTenant, "version": "1.1.0", "pools": []string{c.pool},
			"waves": []map[string]any{{"percent": 100}}, "maxUnavailable": 1, "maxFailedNodes": 0, "bakeSeconds": 0}, &out)
		ids[c.pool] = out.Rollout.RolloutID
	}
	waitFor(t, 45*time.Second, func() bool {
		for _, id := range ids {
			if r, err := h.getRollout(ctx, id); err != nil || !r.State.Terminal() {
				return false
			}
		}
		return true
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := h.getRollout(ctx, ids[c.pool])
			n := h.getNode(t, c.pool, "gpu-node-0")
			ps := h.rolloutNodes(t, ids[c.pool])
			if c.want == "" {
				if r.State != api.Completed || n.Running == nil || n.Running.Version != "1.1.0" {
					t.Fatalf("rollout %s, node runs %+v", r.State, n.Running)
				}
				if n.Log == nil || !n.Log.Consistent || n.Log.Size != 3 {
					t.Errorf("the node's witness: %+v", n.Log)
				}
				return
			}
			if n.Install == nil || n.Install.State != api.InstallFailed || !strings.Contains(*n.Install.Reason, c.want) {
				t.Fatalf("install %+v, want failed naming %q", n.Install, c.want)
			}
			if len(ps) != 1 || ps[0].Step != api.Failed || !strings.Contains(ps[0].Reason, c.want) || r.Counts.Failed != 1 {
				t.Errorf("progress %+v, counts %+v", ps, r.Counts)
			}
			if n.Running == nil || n.Running.Version != "1.0.0" || len(nodes[c.pool].starter.log()) != 0 {
				t.Errorf("the node runs %+v, started %v", n.Running, nodes[c.pool].starter.log())
			}
		})
	}
}

func reconcileEverySecond(ctx context.Context, h *rig) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = h.st.App.Reconcile(ctx)
			}
		}
	}()
	return done
}

// TestForkedRootRaisesTheAlarm: a node whose agent stored a checkpoint of a
// forked log — signed by the real log key, as its holder could sign any
// history, and shown to this node alone — reports it; the control plane
// finds the root its own tree never had at that size: the node shows
// log.consistent false with the evidence, the sweep counts it in
// NodesSplitView (alarmed), and it is told no release until it is
// re-registered. A node beside it that witnessed the real log is told its
// release with the log's evidence, and counts as consistent.
func TestForkedRootRaisesTheAlarm(t *testing.T) {
	t.Parallel() // its own tables: the real-time waits of the package overlap
	h := newRig(t, 5*time.Second)
	ctx := context.Background()
	h.register(t, h.sign(t, h.statement("1.0.0", 1)))
	h.register(t, h.sign(t, h.statement("1.1.0", 2)))
	v1 := &api.Version{Version: "1.1.0", Sequence: 2}

	// The fork: size 2 with another root, under the dev log key.
	ks, err := kmssign.NewSigner(ctx, devstack.Shared(t).KMS(), devstack.DevReleaseLogKeyID)
	if err != nil {
		t.Fatal(err)
	}
	logSigner, err := release.NewLogSigner(devstack.DevReleaseLogOrigin, ks)
	if err != nil {
		t.Fatal(err)
	}
	real, err := release.TreeHash(ctx, &releasedb.Log{DB: h.st.App.DB, Table: h.st.App.Config.Table}, 2)
	if err != nil {
		t.Fatal(err)
	}
	forkRoot := release.LeafHash([]byte("a history nobody else was shown"))
	forked, err := logSigner.Sign(release.Checkpoint{Origin: devstack.DevReleaseLogOrigin, Size: 2, Root: forkRoot})
	if err != nil {
		t.Fatal(err)
	}

	h.must(t, "pools.create", map[string]any{"tenantId": "acme", "poolId": "w-pool", "resources": map[string]any{"gpu": 16}}, nil)
	step := func(n *simNode) api.HeartbeatResult {
		t.Helper()
		a, err := agent.New(agent.Config{Client: client.New(h.st.URL, "dev:fleet-agent"), TenantID: "acme", PoolID: n.pool, NodeID: n.id,
			Key: n.key, Pins: n.pins, LogKey: devstack.DevLogKey(t), Platform: n.platform, Devices: 8, Driver: n.driver,
			StateDir: n.dir, HTTP: h.site.srv.Client(), Starter: n.starter})
		if err != nil {
			t.Fatal(err)
		}
		res, err := a.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	honest := h.node(t, "w-pool", "gpu-node-0", "", v1, nil)
	if res := step(honest); res.Desired.Release == nil || res.Desired.Release.Log == nil || res.Desired.Release.Log.Index != 1 {
		t.Fatalf("the honest node is told %+v", res.Desired.Release)
	}
	if res := step(honest); res.Node.Log == nil || !res.Node.Log.Consistent || res.Node.Log.Size != 2 ||
		res.Node.Log.Root != base64.StdEncoding.EncodeToString(real[:]) {
		t.Fatalf("the honest node's witness: %+v", res.Node.Log)
	}

	witness := h.node(t, "w-pool", "gpu-node-1", "", v1, nil)
	stateFile := filepath.Join(witness.dir, agent.StateFile)
	data, err := os.ReadFile(stateFile)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	st["checkpoint"] = string(forked)
	data, _ = json.Marshal(st)
	if err := os.WriteFile(stateFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	res := step(witness)
	wantRoot := base64.StdEncoding.EncodeToString(forkRoot[:])
	if res.Desired.Release != nil {
		t.Errorf("a node with a split view is told %+v", res.Desired.Release)
	}
	if l := res.Node.Log; l == nil || l.Consistent || l.SplitView == nil || l.SplitView.Size != 2 || l.SplitView.Root != wantRoot {
		t.Fatalf("the witness of a fork shows %+v", res.Node.Log)
	}
	if err := h.st.App.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.logs.splitView("w-pool"); got != 1 {
		t.Fatalf("the sweep's NodesSplitView of w-pool: %d, want 1", got)
	}
	// The flag stays whatever the node reports next (its stored checkpoint
	// put right by hand, say), until an operator re-registers it with a new
	// key (replace: the host re-imaged).
	st["checkpoint"] = ""
	data, _ = json.Marshal(st)
	if err := os.WriteFile(stateFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if res := step(witness); res.Desired.Release != nil || res.Node.Log == nil || res.Node.Log.Consistent {
		t.Fatalf("after a report without the fork: told %+v, log %+v", res.Desired.Release, res.Node.Log)
	}
	key, _ := dsse.GenerateKey(dsse.AlgEd25519)
	pem, _ := dsse.MarshalPublicKeyPEM(key.Public())
	h.must(t, "nodes.register", map[string]any{"tenantId": "acme", "poolId": "w-pool", "nodeId": "gpu-node-1",
		"publicKey": string(pem), "platform": "linux/amd64", "replace": true}, nil)
	witness.key = key
	if res := step(witness); res.Desired.Release == nil || res.Node.Log != nil {
		t.Fatalf("re-registered: told %+v, log %+v (the evidence is gone with the old key)", res.Desired.Release, res.Node.Log)
	}
	if res := step(witness); res.Node.Log == nil || !res.Node.Log.Consistent || res.Node.Log.Size != 2 {
		t.Fatalf("re-registered: told %+v, log %+v", res.Desired.Release, res.Node.Log)
	}
	if err := h.st.App.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.logs.splitView("w-pool"); got != 0 {
		t.Fatalf("the sweep's NodesSplitView after the re-registration: %d", got)
	}
}
