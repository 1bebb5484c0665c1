package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/devstack"
)

// The release log is for auditors and tenants: alice, granted
// compute:releases:read (localstack/policy.json), reads the log and its
// proofs; a principal without it is told which grant it lacks, on the
// fleet's scope. releases.log names the verifier key, size 0 is provable,
// a proof that needs no hash is [], prove takes VERSION as verify does,
// and verify keeps what it verified in the user's config directory, so the
// next run proves consistency from it.
func TestReleaseLogForAuditors(t *testing.T) {
	st, root, logKey := logStack(t) // the dev policy, as make run
	ctx := context.Background()
	config := t.TempDir()
	run := func(token string, args ...string) (string, string, int) {
		env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": token, "BC_TENANT": "acme", "XDG_CONFIG_HOME": config,
			"BC_RELEASE_LOG_VKEY": logKey.VerifierKey()}
		var o, e bytes.Buffer
		c := &cli{out: &o, errOut: &e, getenv: func(k string) string { return env[k] }, now: time.Now}
		code := c.exec(ctx, args)
		return o.String(), e.String(), code
	}
	manifest := filepath.Join(t.TempDir(), "manifest.json")
	for _, args := range [][]string{
		{"sign", "--statement", filepath.Join(root, "docs/examples/release-1.0.0.json"), "--key", filepath.Join(root, devstack.KeyFile), "--out", manifest},
		{"releases", "register", "--manifest", manifest},
	} {
		if out, errOut, code := run("dev:admin", args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}

	var log struct {
		Size        int64  `json:"size"`
		VerifierKey string `json:"verifierKey"`
	}
	out, errOut, code := run("dev:alice", "-o", "json", "releases", "log")
	if code != 0 || json.Unmarshal([]byte(out), &log) != nil {
		t.Fatalf("alice: releases log: exit %d\n%s%s", code, out, errOut)
	}
	if log.Size != 1 || log.VerifierKey != logKey.VerifierKey() {
		t.Errorf("releases.log: size %d, verifierKey %q; want 1 and %q", log.Size, log.VerifierKey, logKey.VerifierKey())
	}

	// The proofs an auditor asks for, as alice: each asked-for proof is a
	// list, [] when the tree needs no hash; one not asked for is left out.
	for _, c := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"releases", "prove", "1.0.0"}, []string{`"index": 0`, `"inclusion": []`}, []string{`"consistency"`}},
		{[]string{"releases", "prove", "--size", "0", "--from-size", "0"}, []string{`"consistency": []`}, []string{`"inclusion"`, `"index"`}},
		{[]string{"releases", "prove", "--from-size", "0"}, []string{`"consistency": []`}, nil},
		{[]string{"releases", "prove", "1.0.0", "--from-size", "1"}, []string{`"inclusion": []`, `"consistency": []`}, nil},
	} {
		out, errOut, code := run("dev:alice", append([]string{"-o", "json"}, c.args...)...)
		if code != 0 {
			t.Errorf("alice: %v: exit %d\n%s%s", c.args, code, out, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: no %s in\n%s", c.args, w, out)
			}
		}
		for _, n := range c.not {
			if strings.Contains(out, n) {
				t.Errorf("%v: %s, not asked for, in\n%s", c.args, n, out)
			}
		}
	}
	if _, errOut, code := run("dev:alice", "releases", "prove", "1.0.0", "--size", "0"); code != exitAPIError || !strings.Contains(errOut, "not in the tree of size 0") {
		t.Errorf("1.0.0 in the empty tree: exit %d %s", code, errOut)
	}

	// ops has no compute:releases:read: the hint names it and the fleet's scope.
	_, errOut, code = run("dev:ops", "releases", "log")
	if code != exitAPIError || !strings.Contains(errOut, "lacks compute:releases:read on compute-fleet") || strings.Contains(errOut, "on this tenant") {
		t.Errorf("ops: releases log: exit %d\n%s", code, errOut)
	}

	// verify twice: the first keeps the checkpoint, the second proves the
	// log consistent with it.
	stored := filepath.Join(config, "bettercompute", "releaselog", "dev.bettercompute.local%2Freleases.checkpoint")
	out, errOut, code = run("dev:alice", "releases", "verify", "1.0.0", "--manifest", manifest)
	if code != 0 || !strings.Contains(out, "consistency: no stored checkpoint (the first run: this one is kept in "+stored+")") {
		t.Fatalf("first verify: exit %d\n%s%s", code, out, errOut)
	}
	if data, err := os.ReadFile(stored); err != nil || !strings.HasPrefix(string(data), devstack.DevReleaseLogOrigin+"\n1\n") {
		t.Fatalf("kept checkpoint: %q %v", data, err)
	}
	out, errOut, code = run("dev:alice", "releases", "verify", "1.0.0", "--manifest", manifest)
	if code != 0 || !strings.Contains(out, "consistency: consistent with the stored checkpoint of size 1") {
		t.Errorf("second verify: exit %d\n%s%s", code, out, errOut)
	}
}
