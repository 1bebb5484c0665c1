package main

import (
	"context"
	"crypto"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/strictjson"
	"github.com/bettercompute/control-plane/test/teststack"
)

// The nodes verbs against the real app behind the local gateway: a pool of
// three nodes registered from key files, heartbeats signed by the nodes'
// keys through the API (each node's principal granted compute:nodes:report
// on its own node only), a cordon, bindings through a node, and a node gone
// silent; the tables, -o json, the errors and their hints in a golden file.
// The app and the CLI share one clock, so relative times are exact.
func TestNodesGolden(t *testing.T) {
	const pool = "gpu-pool-1"
	clock := teststack.NewClock(time.Now().UTC().Truncate(time.Minute))
	grants := []iam.Grant{{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}}}
	for _, n := range []string{"0", "1"} {
		grants = append(grants, iam.Grant{Principal: "node-" + n, Permissions: []string{"compute:nodes:report"},
			Scopes: []string{"node:" + pool + "/gpu.h100-node-" + n}})
	}
	st := teststack.Start(t, teststack.WithCursorKey("test"), teststack.WithClock(clock.Now),
		teststack.WithDecider(&iam.Policy{Grants: grants}))
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// node-0 registers from its public key, node-1 and node-2 from their
	// private key files (only the public key is sent).
	keys := map[string]crypto.Signer{}
	for node, alg := range map[string]string{"gpu.h100-node-0": dsse.AlgECDSAP256, "gpu.h100-node-1": dsse.AlgEd25519, "gpu.h100-node-2": dsse.AlgECDSAP256} {
		k, err := dsse.GenerateKey(alg)
		if err != nil {
			t.Fatal(err)
		}
		keys[node] = k
	}
	pub0, _ := dsse.MarshalPublicKeyPEM(keys["gpu.h100-node-0"].Public())
	priv1, _ := dsse.MarshalPrivateKeyPEM(keys["gpu.h100-node-1"])
	priv2, _ := dsse.MarshalPrivateKeyPEM(keys["gpu.h100-node-2"])
	pub0File, key1File, key2File := write("node-0.pub", pub0), write("node-1.pem", priv1), write("node-2.pem", priv2)

	// beat sends a node's signed heartbeat through the API as the node's
	// own principal and returns the envelope it sent.
	counters := map[string]int64{}
	beat := func(node string, health api.Health, bindings ...api.ReportedBinding) []byte {
		t.Helper()
		counters[node]++
		rep := api.Report{PoolID: pool, NodeID: node, Counter: counters[node], At: clock.Now(),
			Running: &api.Version{Version: "1.0.0", Sequence: 1}, Health: health, Bindings: append([]api.ReportedBinding{}, bindings...)}
		payload, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		env, err := dsse.Sign(api.ReportPayloadType, payload, keys[node])
		if err != nil {
			t.Fatal(err)
		}
		principal := "node-" + node[strings.LastIndex(node, "-")+1:]
		in := &api.HeartbeatInput{Tenant: api.Tenant{TenantID: "acme"}, NodeRef: api.NodeRef{PoolID: pool, NodeID: node}, Report: strictjson.Object(env)}
		if _, err := client.New(st.URL, "dev:"+principal).NodesHeartbeat(ctx, in); err != nil {
			t.Fatalf("heartbeat %s: %v", node, err)
		}
		return env
	}
	healthy := api.Health{DevicesExpected: 8, DevicesVisible: 8, Checks: []api.Check{{Name: "nvidia-smi", OK: true}, {Name: "dcgm-diag", OK: true}}}
	lost := "GPU 3 fell off the bus"
	sick := api.Health{DevicesExpected: 8, DevicesVisible: 7, Checks: []api.Check{{Name: "nvidia-smi", OK: false, Detail: &lost}, {Name: "dcgm-diag", OK: true}}}
	pass := func() {
		t.Helper()
		if res, err := st.App.Reconciler().Pass(ctx); err != nil || res.Errors > 0 {
			t.Fatalf("reconciler pass: %+v %v", res, err)
		}
	}

	env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme"}
	tr := &transcript{t: t, env: env, now: clock.Now}
	step := tr.step
	reservationID := func(out string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^reservation\s+(\S+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no reservation id in:\n%s", out)
		}
		return m[1]
	}

	step(0, "pools", "create", pool, "--devices", "gpu.h100=24")
	step(0, "nodes", "list", "--pool", pool)
	step(0, "nodes", "register", "--pool", pool, "gpu.h100-node-0", "--public-key-file", pub0File)
	// The same node with another key, or another platform: CONFLICT.
	step(1, "nodes", "register", "--pool", pool, "gpu.h100-node-0", "--key", key1File)
	step(1, "nodes", "register", "--pool", pool, "gpu.h100-node-0", "--public-key-file", pub0File, "--platform", "linux/arm64")
	step(1, "nodes", "get", "--pool", pool, "gpu.h100-node-1")
	out := step(0, "nodes", "register", "--pool", pool, "gpu.h100-node-1", "--key", key1File, "--platform", "linux/arm64")
	if want, _ := dsse.KeyID(keys["gpu.h100-node-1"].Public()); !regexp.MustCompile(`(?m)^keyid\s+` + want + `$`).MatchString(out) {
		t.Errorf("register --key: the keyid of the key file's public key (%s) is not shown:\n%s", want, out)
	}
	step(1, "nodes", "register", "--pool", pool, "gpu.h100-node-3", "--key", key2File)
	step(0, "nodes", "register", "--pool", pool, "gpu.h100-node-2", "--key", key2File)
	// Key files refused before anything is sent.
	step(4, "nodes", "register", "--pool", pool, "gpu.h100-node-2", "--public-key-file", key2File)
	step(4, "nodes", "register", "--pool", pool, "gpu.h100-node-2", "--key", pub0File)
	step(4, "nodes", "register", "--pool", pool, "gpu.h100-node-2", "--key", filepath.Join(dir, "missing.pem"))
	step(2, "nodes", "register", "--pool", pool, "gpu.h100-node-2")
	step(2, "nodes", "register", "--pool", pool, "gpu.h100-node-2", "--key", key2File, "--public-key-file", pub0File)

	// node-0 reports healthy, node-1 a device short; node-2 never reports.
	beat("gpu.h100-node-0", healthy)
	beat("gpu.h100-node-1", sick)
	pass() // the sweep lifts node-0's flags: it is ready
	step(0, "nodes", "cordon", "--pool", pool, "gpu.h100-node-2", "--reason", "PSU replacement, ticket OPS-1234")
	step(2, "nodes", "cordon", "--pool", pool, "gpu.h100-node-2")
	step(0, "nodes", "list", "--pool", pool)
	step(0, "nodes", "list", "--pool", pool, "--state", "ready")
	step(0, "nodes", "list", "--pool", pool, "--limit", "2")
	step(0, "nodes", "list", "--pool", pool, "--limit", "2", "--all")
	step(0, "nodes", "get", "--pool", pool, "gpu.h100-node-1")

	// Bindings through node-0, the only node placed on: a reservation bound,
	// then released while the next holder of its devices waits; the node is
	// told the unbind before the bind.
	first := reservationID(step(0, "reservations", "create", "--pool", pool, "--resource", "gpu.h100", "--count", "4", "--end", "+2h", "--client-token", "job-1"))
	clock.Advance(time.Minute)
	pass() // window start: binding, node-0 told to bind
	step(0, "nodes", "get", "--pool", pool, "gpu.h100-node-0")
	beat("gpu.h100-node-0", healthy, api.ReportedBinding{ReservationID: first, State: api.BindBound})
	pass() // every node reported it bound: active
	step(0, "reservations", "release", first)
	second := reservationID(step(0, "reservations", "create", "--pool", pool, "--resource", "gpu.h100", "--count", "8", "--end", "+1h", "--client-token", "job-2"))
	pass()
	step(0, "nodes", "get", "--pool", pool, "gpu.h100-node-0")
	step(0, "-o", "json", "nodes", "get", "--pool", pool, "gpu.h100-node-0")
	step(0, "nodes", "uncordon", "--pool", pool, "gpu.h100-node-2")

	// Heartbeats through the CLI: the same report again is a replay, and a
	// node's principal may report for its own node only.
	last := write("beat.json", beat("gpu.h100-node-0", healthy, api.ReportedBinding{ReservationID: first, State: api.BindBound}))
	step(1, "--token", "dev:node-0", "nodes", "heartbeat", "--pool", pool, "gpu.h100-node-0", "--report", last)
	step(1, "--token", "dev:node-0", "nodes", "heartbeat", "--pool", pool, "gpu.h100-node-1", "--report", last)
	// NOT_FOUND says which is missing: the pool (also when the tenant is
	// not its owner), or the node.
	step(1, "nodes", "heartbeat", "--pool", "gpu-pool-9", "gpu.h100-node-0", "--report", last)
	step(1, "--tenant", "globex", "nodes", "heartbeat", "--pool", pool, "gpu.h100-node-0", "--report", last)
	step(1, "nodes", "heartbeat", "--pool", pool, "gpu.h100-node-5", "--report", last)

	// Silent for more than three intervals: unreachable at the next pass.
	clock.Advance(2 * time.Minute)
	pass()
	step(0, "nodes", "list", "--pool", pool)
	step(0, "nodes", "list", "--pool", pool, "--state", "unreachable")
	step(1, "nodes", "list", "--pool", pool, "--state", "gone")
	step(1, "--tenant", "globex", "nodes", "list", "--pool", pool)
	// node-1's host re-imaged with a new key: --replace hands it the node,
	// registered until its first heartbeat under that key.
	reimaged, err := dsse.GenerateKey(dsse.AlgEd25519)
	if err != nil {
		t.Fatal(err)
	}
	privNew, _ := dsse.MarshalPrivateKeyPEM(reimaged)
	step(0, "nodes", "register", "--pool", pool, "gpu.h100-node-1", "--key", write("node-1-new.pem", privNew), "--platform", "linux/arm64", "--replace")
	step(2, "nodes", "get", "--pool", pool)
	step(2, "nodes", "lsit")
	step(2, "node", "list")
	golden(t, "nodes.golden", normalise(strings.ReplaceAll(tr.String(), dir, "<dir>")))

	// -o json over every page is one answer: the nodes in order, their
	// states (node-1 replaced), node-0's bindings as the API lists them,
	// no cursor.
	all := step(0, "-o", "json", "nodes", "list", "--pool", pool, "--limit", "1", "--all")
	var got api.ListNodesResult
	if err := json.Unmarshal([]byte(all), &got); err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, n := range got.Nodes {
		states = append(states, n.NodeID+" "+string(n.State))
	}
	if want := []string{"gpu.h100-node-0 unreachable", "gpu.h100-node-1 registered", "gpu.h100-node-2 registered"}; !slices.Equal(states, want) || got.NextCursor != "" {
		t.Errorf("-o json --all: %v (nextCursor %q), want %v", states, got.NextCursor, want)
	}
	if len(got.Nodes) == 3 {
		var actions []string
		for _, b := range got.Nodes[0].Bindings {
			actions = append(actions, b.Action+" "+b.ReservationID+" "+b.Reported)
		}
		if want := []string{"unbind " + first + " bound", "bind " + second + " "}; !slices.Equal(actions, want) {
			t.Errorf("node-0's bindings %v, want %v", actions, want)
		}
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	for _, c := range []struct {
		t    *time.Time
		want string
	}{
		{nil, "never"},
		{at(0), "<1m ago"},
		{at(59 * time.Second), "<1m ago"},
		{at(-30 * time.Second), "<1m ago"}, // a little ahead: the clocks differ by seconds
		{at(61 * time.Second), "1m ago"},
		{at(3*time.Minute + 59*time.Second), "3m ago"},
		{at(2 * time.Hour), "2h ago"},
		{at(2*time.Hour + 5*time.Minute + 30*time.Second), "2h5m ago"},
		{at(24 * time.Hour), "1d ago"},
		{at(3*24*time.Hour + 4*time.Hour + 59*time.Minute), "3d4h ago"},
		{at(-5 * time.Minute), "2026-12-01 10:35:00Z"},
	} {
		if got := ago(c.t, now); got != c.want {
			t.Errorf("ago(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}

func TestBindingCount(t *testing.T) {
	b := func(action, reported string) api.NodeBinding {
		return api.NodeBinding{DesiredBinding: api.DesiredBinding{Action: action}, Reported: reported}
	}
	for _, c := range []struct {
		bs   []api.NodeBinding
		want string
	}{
		{nil, "0"},
		{[]api.NodeBinding{b("bind", "bound"), b("unbind", "unbound")}, "2"},
		{[]api.NodeBinding{b("unbind", "bound"), b("bind", "")}, "2 (2 pending)"},
		{[]api.NodeBinding{b("bind", "failed"), b("bind", "bound"), b("bind", "")}, "3 (1 pending, 1 failed)"},
	} {
		if got := bindingCount(c.bs); got != c.want {
			t.Errorf("bindingCount(%v) = %q, want %q", c.bs, got, c.want)
		}
	}
}

// nodes get's table shows the node's witness of the release log, not only
// -o json: none yet, consistent, or the split view that quarantines it.
func TestNodeTableShowsWitness(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	root := "q9ZQ0GRUM1xXQeZ0xq4z4C3Ba0hIb3fH5m0HaA1c6kQ="
	for _, c := range []struct {
		log  *api.NodeLog
		want string
	}{
		{nil, "release log     no checkpoint reported\n"},
		{&api.NodeLog{Size: 3, Root: root, Consistent: true}, "release log     consistent (size 3, root q9ZQ0GRUM1xXQeZ…)\n"},
		{&api.NodeLog{Size: 3, Root: root, SplitView: &api.LogSplit{Size: 3, Root: root, At: now}},
			"release log     SPLIT VIEW: reported size 3 root q9ZQ0GRUM1xXQeZ…, which the log never had (since 2026-12-04 12:00:00Z); told no release until re-registered (nodes register --replace)\n"},
	} {
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		printNode(tw, api.Node{PoolID: "p1", NodeID: "gpu-node-0", State: api.Ready, CreatedAt: now, Log: c.log}, now)
		tw.Flush()
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("nodes get with log %+v:\n%s\nwant the line %q", c.log, b.String(), c.want)
		}
	}
}

// nodes list without --pool lists the nodes of every pool the tenant owns
// (not those of a pool it was offered), pool by pool and page by page: the
// first --limit rows, saying more follow, or all of them with --all.
func TestNodesListFleetWide(t *testing.T) {
	st := teststack.Start(t)
	env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme"}
	must := func(args ...string) string {
		t.Helper()
		out, errOut, code := bcctlRun(t, env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	must("pools", "create", "p1", "--devices", "gpu=24", "--node-size", "gpu=8")
	must("pools", "create", "p2", "--devices", "gpu=16", "--node-size", "gpu=8")
	must("--tenant", "globex", "pools", "create", "g1", "--devices", "gpu=8")
	must("--tenant", "globex", "pools", "offer", "g1", "--to", "acme", "--resource", "gpu", "--max", "8")
	key := filepath.Join(t.TempDir(), "node.pem")
	must("keygen", "--out", key)
	for _, pn := range [][2]string{{"p1", "gpu-node-0"}, {"p1", "gpu-node-2"}, {"p2", "gpu-node-1"}} {
		must("nodes", "register", "--pool", pn[0], pn[1], "--key", key)
	}
	must("--tenant", "globex", "nodes", "register", "--pool", "g1", "gpu-node-0", "--key", key)

	out := must("nodes", "list", "--all")
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "POOL") {
		t.Fatalf("nodes list --all: want a header and acme's 3 nodes:\n%s", out)
	}
	for i, want := range []string{"p1  gpu-node-0", "p1  gpu-node-2", "p2  gpu-node-1"} {
		if !strings.HasPrefix(strings.Join(strings.Fields(rows[i+1])[:2], "  "), want) {
			t.Errorf("row %d: %q, want %s", i+1, rows[i+1], want)
		}
	}
	// Pages of 1: the first row alone, and a note; -o json merges the pages.
	out, errOut, code := bcctlRun(t, env, "nodes", "list", "--limit", "1")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(errOut, "1 node of 2 pools shown; more follow: --all") {
		t.Errorf("nodes list --limit 1: exit %d\n%s%s", code, out, errOut)
	}
	var all api.ListNodesResult
	if err := json.Unmarshal([]byte(must("-o", "json", "nodes", "list", "--limit", "1", "--all")), &all); err != nil || len(all.Nodes) != 3 {
		t.Errorf("-o json --all --limit 1: %d nodes, %v", len(all.Nodes), err)
	}
	if _, errOut, code := bcctlRun(t, env, "--tenant", "initech", "nodes", "list"); code != 0 || !strings.Contains(errOut, "tenant initech owns no pool") {
		t.Errorf("a tenant without pools: exit %d %q", code, errOut)
	}
}
