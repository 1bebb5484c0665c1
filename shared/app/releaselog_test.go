package app_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"

	tlogfmt "github.com/transparency-dev/formats/log"
	tnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

// devCheckpoint opens a checkpoint signed by the dev log key with
// transparency-dev's verifier (not this repository's).
func devCheckpoint(t *testing.T, signed string) *tlogfmt.Checkpoint {
	t.Helper()
	pub, err := kmssign.PublicKey(context.Background(), devstack.Shared(t).KMS(), devstack.DevReleaseLogKeyID)
	if err != nil {
		t.Fatal(err)
	}
	k, err := release.NewLogKey(devstack.DevReleaseLogOrigin, pub)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tnote.NewECDSAVerifier(k.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	cp, _, _, err := tlogfmt.ParseCheckpoint([]byte(signed), devstack.DevReleaseLogOrigin, v)
	if err != nil {
		t.Fatalf("checkpoint %q: %v", signed, err)
	}
	return cp
}

func hashes(t *testing.T, v any) [][]byte {
	t.Helper()
	var out [][]byte
	list, _ := v.([]any)
	for _, s := range list {
		b, err := base64.StdEncoding.DecodeString(s.(string))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestReleaseLogMethods: releases.log and releases.prove answer what an
// independent verifier (transparency-dev) accepts, for every entry and every
// pair of sizes, and refuse sizes beyond the log.
func TestReleaseLogMethods(t *testing.T) {
	key := newKey(t)
	h := newHarness(t, setup{config: func(c *app.Config) { c.PinsFile = teststack.WritePins(t, key.Public()) }})
	platform := map[string]any{"tenantId": "platform"}
	if a := h.call("admin", "releases.log", platform); a.Status != 503 || a.code() != "UNAVAILABLE" {
		t.Fatalf("log before any checkpoint: %d %s", a.Status, a.Raw)
	}

	const n = 5
	roots := map[uint64][]byte{}
	for i := 1; i <= n; i++ {
		a := h.call("admin", "releases.register", map[string]any{"tenantId": "platform",
			"manifest": manifest(t, statement(fmt.Sprintf("3.%d.0", i), int64(i)), key)})
		if a.Status != 200 {
			t.Fatalf("register %d: %s", i, a.Raw)
		}
		cp := devCheckpoint(t, a.Body["log"].(map[string]any)["checkpoint"].(string))
		roots[cp.Size] = cp.Hash
	}
	a := h.call("admin", "releases.log", platform)
	if a.Status != 200 || a.Body["size"] != float64(n) {
		t.Fatalf("log: %d %s", a.Status, a.Raw)
	}
	if cp := devCheckpoint(t, a.Body["checkpoint"].(string)); cp.Size != n || string(cp.Hash) != string(roots[n]) {
		t.Fatalf("log checkpoint %+v, want size %d root of the last registration's", cp, n)
	}

	hasher := rfc6962.DefaultHasher
	for size := uint64(1); size <= n; size++ {
		for i := uint64(0); i < size; i++ {
			version := fmt.Sprintf("3.%d.0", i+1)
			p := h.call("admin", "releases.prove", map[string]any{"tenantId": "platform", "version": version, "size": size})
			if p.Status != 200 || p.Body["index"] != float64(i) {
				t.Fatalf("prove %s in %d: %s", version, size, p.Raw)
			}
			leaf := hasher.HashLeaf(statement(version, int64(i+1)))
			if err := proof.VerifyInclusion(hasher, i, size, leaf, hashes(t, p.Body["inclusion"]), roots[size]); err != nil {
				t.Fatalf("inclusion of %d in %d: %v (%s)", i, size, err, p.Raw)
			}
		}
		for from := uint64(1); from < size; from++ {
			p := h.call("admin", "releases.prove", map[string]any{"tenantId": "platform", "fromSize": from, "size": size})
			if p.Status != 200 {
				t.Fatalf("prove %d→%d: %s", from, size, p.Raw)
			}
			if err := proof.VerifyConsistency(hasher, from, size, hashes(t, p.Body["consistency"]), roots[from], roots[size]); err != nil {
				t.Fatalf("consistency %d→%d: %v (%s)", from, size, err, p.Raw)
			}
		}
	}
	// Without size: the latest checkpoint's tree.
	p := h.call("admin", "releases.prove", map[string]any{"tenantId": "platform", "version": "3.2.0", "fromSize": 2})
	if p.Status != 200 || p.Body["index"] != 1.0 {
		t.Fatalf("prove latest: %s", p.Raw)
	}
	if err := proof.VerifyInclusion(hasher, 1, n, hasher.HashLeaf(statement("3.2.0", 2)), hashes(t, p.Body["inclusion"]), roots[n]); err != nil {
		t.Fatal(err)
	}
	if err := proof.VerifyConsistency(hasher, 2, n, hashes(t, p.Body["consistency"]), roots[2], roots[n]); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		in     map[string]any
		status int
		field  string
	}{
		{"size beyond the log", map[string]any{"size": n + 1}, 400, "size"},
		{"fromSize beyond size", map[string]any{"size": 2, "fromSize": 3}, 400, "fromSize"},
		{"fromSize beyond the log", map[string]any{"fromSize": n + 1}, 400, "fromSize"},
		{"entry not in the tree of size", map[string]any{"size": 2, "version": "3.3.0"}, 400, "version"},
		{"size 0, the empty tree: provable", map[string]any{"size": 0, "fromSize": 0}, 200, ""},
		{"unknown version", map[string]any{"version": "9.9.9"}, 404, ""},
	} {
		c.in["tenantId"] = "platform"
		a := h.call("admin", "releases.prove", c.in)
		if a.Status != c.status || (c.field != "" && a.detail("field") != c.field) {
			t.Errorf("%s: %d %s", c.name, a.Status, a.Raw)
		}
		if c.status == 400 && a.detail("logSize") != float64(n) {
			t.Errorf("%s: logSize %v", c.name, a.detail("logSize"))
		}
	}
	if a := h.call("alice", "releases.log", platform); a.Status != 403 {
		t.Fatalf("alice: %d %s", a.Status, a.Raw)
	}
}
