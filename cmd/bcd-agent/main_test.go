package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/fleet"
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
		"BC_AGENT_PINS_FILE": filepath.Join(devstackRoot(t), devstack.PinsFile), "BC_AGENT_JOURNAL": filepath.Join(dir, "journal")}
	code, out, errOut := exec(t, env, "once")
	if code != exitOK {
		t.Fatalf("once: exit %d: %s", code, errOut)
	}
	var res fleet.HeartbeatResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("once printed %q: %v", out, err)
	}
	if res.Node.NodeID != "gpu.h100-node-1" || res.Node.State != fleet.Ready || res.NextHeartbeatSeconds <= 0 {
		t.Errorf("answer: %+v", res)
	}

	// run heartbeats until its context ends, then exits 0.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	var o, e bytes.Buffer
	if code := run(stopped, []string{"run"}, &o, &e, func(k string) string { return env[k] }); code != exitOK {
		t.Errorf("run, stopped: exit %d: %s", code, e.String())
	}

	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("not a key"), 0o600)
	if code, _, errOut := exec(t, with(env, "BC_AGENT_PINS_FILE", bad), "once"); code != exitLocal || !strings.Contains(errOut, "--pins-file") {
		t.Errorf("a bad pins file: exit %d: %s", code, errOut)
	}
	if code, _, errOut := exec(t, with(env, "BC_NODE", "gpu.h100-node-0"), "once"); code != exitAPIError || !strings.Contains(errOut, "NOT_FOUND") {
		t.Errorf("an unregistered node: exit %d: %s", code, errOut)
	}
	if code, _, errOut := exec(t, with(env, "BC_API_URL", "http://127.0.0.1:1"), "once"); code != exitUnreachable {
		t.Errorf("no API: exit %d: %s", code, errOut)
	}
}

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
