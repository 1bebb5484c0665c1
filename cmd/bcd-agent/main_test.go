package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// exec runs a command line with env as the whole environment.
func exec(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e, func(k string) string { return env[k] })
	return code, o.String(), e.String()
}

// keygen writes a 0600 PKCS#8 key, prints its keyid and public PEM, and
// never replaces a key without --force.
func TestKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.pem")
	code, out, errOut := exec(t, nil, "keygen", "--out", path, "--pool", "gpu-pool-1", "--node", "gpu.h100-node-0")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	data, _ := os.ReadFile(path)
	k, err := dsse.ParsePrivateKeyPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := dsse.KeyID(k.Public())
	pem, _ := dsse.MarshalPublicKeyPEM(k.Public())
	for _, want := range []string{"keyid " + id + "\n", string(pem), "bcctl nodes register gpu.h100-node-0 --pool gpu-pool-1 --key " + path} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errOut := exec(t, nil, "keygen", "--out", path); code != exitLocal || !strings.Contains(errOut, "--force") {
		t.Errorf("a second keygen: exit %d: %s", code, errOut)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(after, data) {
		t.Error("the key was replaced")
	}
}

// Bad command lines are exit 2 and say what is missing.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"once"}, "--tenant is required"},
		{map[string]string{"BC_TENANT": "acme", "BC_POOL": "p", "BC_NODE": "n"}, []string{"once"}, "--key is required"},
		{map[string]string{"BC_AGENT_DEVICES": "eight"}, []string{"once"}, `BC_AGENT_DEVICES="eight" is not an integer`},
		{nil, []string{"keygen"}, "--out is required"},
		{nil, []string{"rnu"}, "unknown command"},
	} {
		if code, _, errOut := exec(t, tc.env, tc.args...); code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v %v: exit %d: %s", tc.env, tc.args, code, errOut)
		}
	}
}

// The walk docs/agent.md describes, against the real API: keygen, register
// the node as the pool's owner, then `once` from the environment alone
// prints the answer (the node ready); a bad pins file is a local failure;
// an unregistered node is the API's NOT_FOUND (exit 1); an API that is not
// there is exit 3.
func TestOnceAgainstTheStack(t *testing.T) {
	st := teststack.Start(t)
	ctx := context.Background()
	admin := client.New(st.URL, "dev:admin")
	acme := api.Tenant{TenantID: "acme"}
	if _, err := admin.PoolsCreate(ctx, &api.CreatePoolInput{Tenant: acme, PoolID: "p-cmd", Resources: api.Resources{"gpu.h100": 16}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "node.pem")
	if code, _, errOut := exec(t, nil, "keygen", "--out", key); code != exitOK {
		t.Fatalf("keygen: %s", errOut)
	}
	data, _ := os.ReadFile(key)
	k, _ := dsse.ParsePrivateKeyPEM(data)
	pem, _ := dsse.MarshalPublicKeyPEM(k.Public())
	if _, err := admin.NodesRegister(ctx, &api.RegisterNodeInput{Tenant: acme, NodeRef: api.NodeRef{PoolID: "p-cmd", NodeID: "gpu.h100-node-1"},
		PublicKey: string(pem), Platform: "linux/arm64"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BC_API_URL": st.URL, "BC_TENANT": "acme", "BC_POOL": "p-cmd", "BC_NODE": "gpu.h100-node-1",
		"BC_NODE_KEY": key, "BC_PLATFORM": "linux/arm64", "BC_AGENT_STATE_DIR": filepath.Join(dir, "state"),
		"BC_AGENT_PINS_FILE": filepath.Join(devstackRoot(t), devstack.PinsFile), "BC_AGENT_JOURNAL": filepath.Join(dir, "journal"),
		"BC_AGENT_LOG_KEY": devstack.DevLogKey(t).VerifierKey()}
	// Pins without the log's key: a usage error that says how to get it.
	if code, _, errOut := exec(t, with(env, "BC_AGENT_LOG_KEY", ""), "once"); code != exitUsage || !strings.Contains(errOut, "--log-key") {
		t.Errorf("pins without a log key: exit %d: %s", code, errOut)
	}
	if code, _, errOut := exec(t, with(env, "BC_AGENT_LOG_KEY", "not a key"), "once"); code != exitUsage || !strings.Contains(errOut, "--log-key") {
		t.Errorf("a malformed log key: exit %d: %s", code, errOut)
	}
	code, out, errOut := exec(t, env, "once")
	if code != exitOK {
		t.Fatalf("once: exit %d: %s", code, errOut)
	}
	var res api.HeartbeatResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("once printed %q: %v", out, err)
	}
	if res.Node.NodeID != "gpu.h100-node-1" || res.Node.State != api.Ready || res.NextHeartbeatSeconds <= 0 {
		t.Errorf("answer: %+v", res)
	}

	// run says it is up at once, then its first heartbeat's outcome; on
	// SIGTERM (the context's cause, as main sets it) it says it stopped and
	// exits 0.
	runCtx, stop := context.WithCancelCause(ctx)
	e := &syncBuffer{}
	done := make(chan int)
	go func() { done <- run(runCtx, []string{"run"}, io.Discard, e, func(k string) string { return env[k] }) }()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(e.String(), "first heartbeat"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("run: no first heartbeat line:\n%s", e.String())
		}
	}
	stop(stopped{syscall.SIGTERM})
	if code := <-done; code != exitOK {
		t.Errorf("run, stopped: exit %d: %s", code, e.String())
	}
	lines := strings.Split(strings.TrimSpace(e.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("run printed %d lines, want 3 (running, first heartbeat, stopped):\n%s", len(lines), e.String())
	}
	for i, want := range []map[string]any{
		{"msg": "bcd-agent running", "node": "gpu.h100-node-1", "pool": "p-cmd", "api_url": st.URL, "state_dir": filepath.Join(dir, "state"),
			"installs": "1 pinned key, threshold 1"},
		{"msg": "first heartbeat accepted", "node_state": "ready", "running": "none"},
		{"msg": "bcd-agent stopped", "by": "SIGTERM"},
	} {
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, lines[i])
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v\n%s", i, k, got[k], v, lines[i])
			}
		}
	}

	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("not a key"), 0o600)
	if code, _, errOut := exec(t, with(env, "BC_AGENT_PINS_FILE", bad), "once"); code != exitLocal || !strings.Contains(errOut, "--pins-file") {
		t.Errorf("a bad pins file: exit %d: %s", code, errOut)
	}
	// The API's errors as bcctl prints them: code and status, the details,
	// one line of what to do — not raw JSON.
	code, _, errOut = exec(t, with(env, "BC_NODE", "gpu.h100-node-0"), "once")
	if code != exitAPIError || !strings.HasPrefix(errOut, `NOT_FOUND (HTTP 404): node "gpu.h100-node-0" of pool "p-cmd" is not registered`) ||
		!strings.Contains(errOut, "\n    If gpu.h100-node-0 is not registered, register it first: bcctl nodes register --pool p-cmd gpu.h100-node-0") ||
		strings.Contains(errOut, "{") {
		t.Errorf("an unregistered node: exit %d: %s", code, errOut)
	}
	code, _, errOut = exec(t, env, "once", "--token", "dev:alice") // alice may not report for nodes
	if code != exitAPIError || !strings.HasPrefix(errOut, "PERMISSION_DENIED (HTTP 403): ") ||
		!strings.Contains(errOut, "\n    A heartbeat needs compute:nodes:report on node:p-cmd/gpu.h100-node-1 for the principal of --token") {
		t.Errorf("a principal without the grant: exit %d: %s", code, errOut)
	}
	if code, _, errOut := exec(t, with(env, "BC_API_URL", "http://127.0.0.1:1"), "once"); code != exitUnreachable {
		t.Errorf("no API: exit %d: %s", code, errOut)
	}
}

// The agent's token is its own: --token, else BC_AGENT_TOKEN, else the
// local node principal; bcctl's BC_TOKEN (make run's export block says
// dev:admin) is not read, only warned of; the local admin is refused; and
// --help shows no token.
func TestToken(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"NOT_FOUND","message":"node not found","details":{}},"requestId":"r"}`))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	key := filepath.Join(dir, "node.pem")
	if code, _, errOut := exec(t, nil, "keygen", "--out", key); code != exitOK {
		t.Fatal(errOut)
	}
	env := map[string]string{"BC_API_URL": srv.URL, "BC_TENANT": "acme", "BC_POOL": "p", "BC_NODE": "gpu-node-0", "BC_NODE_KEY": key,
		"BC_AGENT_STATE_DIR": filepath.Join(dir, "state")}
	for _, c := range []struct {
		env        map[string]string
		args       []string
		want, warn string
	}{
		{env, nil, "Bearer dev:fleet-agent", ""},
		{with(env, "BC_TOKEN", "dev:admin"), nil, "Bearer dev:fleet-agent", "BC_TOKEN is bcctl's token and the agent does not read it"},
		{with(with(env, "BC_TOKEN", "dev:admin"), "BC_AGENT_TOKEN", "jwt-of-the-node"), nil, "Bearer jwt-of-the-node", ""},
		{with(env, "BC_AGENT_TOKEN", "jwt-of-the-node"), []string{"--token", "dev:node-7"}, "Bearer dev:node-7", ""},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		code, _, errOut := exec(t, c.env, append([]string{"once"}, c.args...)...)
		mu.Lock()
		sent := slices.Clone(got)
		mu.Unlock()
		if code != exitAPIError || len(sent) != 1 || sent[0] != c.want || (c.warn != "") != strings.Contains(errOut, "BC_TOKEN is bcctl's") ||
			!strings.Contains(errOut, c.warn) {
			t.Errorf("%v %v: exit %d, sent %q, want %q\n%s", c.env, c.args, code, sent, c.want, errOut)
		}
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
	}{{with(env, "BC_AGENT_TOKEN", "dev:admin"), nil}, {env, []string{"--token", "dev:admin"}}} {
		mu.Lock()
		got = nil
		mu.Unlock()
		code, _, errOut := exec(t, c.env, append([]string{"once"}, c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, "the local gateway's admin") || !strings.Contains(errOut, "dev:fleet-agent, the default") || len(got) != 0 {
			t.Errorf("the admin's token %v: exit %d, %d requests\n%s", c.args, code, len(got), errOut)
		}
	}
	_, out, _ := exec(t, map[string]string{"BC_AGENT_TOKEN": "secret-jwt", "BC_TOKEN": "dev:admin"}, "run", "--help")
	if strings.Contains(out, "secret-jwt") || strings.Contains(out, `default "dev:`) || !strings.Contains(out, "$BC_AGENT_TOKEN") {
		t.Errorf("--help shows a token, or not where it comes from:\n%s", out)
	}
}

// A state dir the agent cannot make is refused at start, naming
// --state-dir, not at the first install.
func TestStateDirChecked(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "node.pem")
	if code, _, errOut := exec(t, nil, "keygen", "--out", key); code != exitOK {
		t.Fatal(errOut)
	}
	file := filepath.Join(dir, "file")
	_ = os.WriteFile(file, nil, 0o600)
	env := map[string]string{"BC_API_URL": "http://127.0.0.1:1", "BC_TENANT": "acme", "BC_POOL": "p", "BC_NODE": "gpu-node-0", "BC_NODE_KEY": key,
		"BC_AGENT_STATE_DIR": filepath.Join(file, "state")}
	for _, cmd := range []string{"run", "once"} {
		code, _, errOut := exec(t, env, cmd)
		if code != exitLocal || !strings.Contains(errOut, "bcd-agent: --state-dir "+filepath.Join(file, "state")+" (BC_AGENT_STATE_DIR): mkdir") ||
			!strings.Contains(errOut, "give --state-dir a directory it may write") {
			t.Errorf("%s with a state dir under a file: exit %d\n%s", cmd, code, errOut)
		}
	}
}

// syncBuffer is a bytes.Buffer safe to write while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func with(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for key, val := range env {
		if key != k {
			out[key] = val
		}
	}
	return out
}

func devstackRoot(t *testing.T) string {
	t.Helper()
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
