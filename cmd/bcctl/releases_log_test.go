package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlogfmt "github.com/transparency-dev/formats/log"
	tnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

// TestReleasesVerify: bcctl releases verify as a monitor (a stored
// checkpoint, run after each registration) accepts the real log, and
// refuses, with its reason, each way an answer can lie: a forged
// checkpoint, another origin, a changed entry, a proof for another size, a
// forked log and a replayed older checkpoint.
func TestReleasesVerify(t *testing.T) {
	st, root, logKey := logStack(t)
	ctx := context.Background()
	dir := t.TempDir()
	env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": "dev:admin", "BC_RELEASE_LOG_VKEY": logKey.VerifierKey()}
	run := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		c := &cli{out: &o, errOut: &e, getenv: func(k string) string { return env[k] }, now: time.Now}
		code := c.exec(ctx, args)
		return o.String(), e.String(), code
	}
	stored := filepath.Join(dir, "checkpoint")
	var manifests []string
	for i := 1; i <= 3; i++ {
		version := fmt.Sprintf("1.%d.0", i)
		statement := filepath.Join(dir, version+".json")
		body := fmt.Sprintf(`{"version":%q,"sequence":%d,"binaries":[{"platform":"linux/amd64","url":"https://dl.example.com/bcd","sha256":"%064x","size":1}]}`, version, i, i)
		if err := os.WriteFile(statement, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		m := filepath.Join(dir, version+".dsse.json")
		manifests = append(manifests, m)
		for _, args := range [][]string{
			{"sign", "--statement", statement, "--key", filepath.Join(root, devstack.KeyFile), "--out", m},
			{"releases", "register", "--manifest", m},
			{"releases", "verify", version, "--manifest", m, "--checkpoint", stored},
		} {
			if out, errOut, code := run(args...); code != 0 {
				t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
			}
		}
		data, err := os.ReadFile(stored)
		if err != nil || !bytes.Contains(data, fmt.Appendf(nil, "\n%d\n", i)) {
			t.Fatalf("stored checkpoint after %s: %q %v", version, data, err)
		}
	}
	out, _, code := run("releases", "verify", "1.1.0", "--manifest", manifests[0], "--checkpoint", stored)
	if code != 0 || !strings.Contains(out, "entry 0 of "+devstack.DevReleaseLogOrigin) || !strings.Contains(out, "stored checkpoint of size 3") {
		t.Fatalf("verify 1.1.0: exit %d\n%s", code, out)
	}
	if out, _, _ := run("releases", "log"); !strings.HasPrefix(out, devstack.DevReleaseLogOrigin+"\n3\n") {
		t.Fatalf("releases log prints the checkpoint as signed:\n%s", out)
	}

	// The lies, each against verifyProof with a real answer altered.
	verifier, err := tnote.NewVerifier(logKey.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	admin := client.New(st.URL, "dev:admin")
	prove := func(version string, size, from *int64) api.ProveResult {
		t.Helper()
		p, err := admin.ReleasesProve(ctx, &api.ProveReleaseInput{Tenant: api.Tenant{TenantID: "platform"}, Version: &version, Size: size, FromSize: from})
		if err != nil {
			t.Fatal(err)
		}
		return *p
	}
	entry, err := manifestPayload(manifests[1], "1.2.0")
	if err != nil {
		t.Fatal(err)
	}
	two := int64(2)
	at2 := prove("1.2.0", &two, nil) // the proofs for size 2, under the size-3 checkpoint
	good := prove("1.2.0", nil, &two)
	cp2 := signCheckpoint(t, devSigner(t), release.Checkpoint{Origin: devstack.DevReleaseLogOrigin, Size: 2, Root: rootOf(t, st, 2)})
	stored2 := mustStored(t, cp2, verifier)
	if _, err := verifyProof(verifier, stored2, good, entry); err != nil {
		t.Fatalf("the real answer from size 2: %v", err)
	}
	other := devstack.LogSigner(t, devstack.Shared(t), devstack.DevReleaseLogOrigin)
	otherOrigin := devstack.LogSigner(t, devstack.Shared(t), "elsewhere.example/releases")
	cp3 := mustOpen(t, logKey, good.Checkpoint)
	forkRoot := cp3.Root
	forkRoot[0] ^= 1
	for _, c := range []struct {
		name   string
		alter  func(p *api.ProveResult) []byte // the entry checked
		stored bool
		want   error
	}{
		{"forged checkpoint", func(p *api.ProveResult) []byte { p.Checkpoint = signCheckpoint(t, other, cp3); return entry }, false, release.ErrCheckpointSignature},
		{"wrong origin", func(p *api.ProveResult) []byte {
			p.Checkpoint = signCheckpoint(t, otherOrigin, release.Checkpoint{Origin: "elsewhere.example/releases", Size: cp3.Size, Root: cp3.Root})
			return entry
		}, false, release.ErrCheckpointSignature},
		{"changed entry", func(p *api.ProveResult) []byte { return bytes.Replace(entry, []byte("1.2.0"), []byte("1.2.1"), 1) }, false, release.ErrInclusion},
		{"proof for another size", func(p *api.ProveResult) []byte { p.Inclusion = at2.Inclusion; return entry }, false, release.ErrInclusion},
		{"forked log (same key, another root)", func(p *api.ProveResult) []byte {
			p.Checkpoint = signCheckpoint(t, devSigner(t), release.Checkpoint{Origin: cp3.Origin, Size: cp3.Size, Root: forkRoot})
			return entry
		}, true, release.ErrInclusion},
		{"truncated log: consistency from a root it never had", func(p *api.ProveResult) []byte { p.Consistency = nil; return entry }, true, release.ErrConsistency},
		{"replayed older checkpoint", func(p *api.ProveResult) []byte { p.Checkpoint, p.Inclusion = cp2, at2.Inclusion; return entry }, true, release.ErrStale},
	} {
		p := good
		e := c.alter(&p)
		var s = stored2
		if !c.stored {
			s = nil
		}
		if c.name == "replayed older checkpoint" {
			s = mustStored(t, good.Checkpoint, verifier)
		}
		_, err := verifyProof(verifier, s, p, e)
		if err == nil || !strings.HasPrefix(err.Error(), c.want.Error()) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Through the command: a manifest of another release is refused before any call.
	if _, errOut, code := run("releases", "verify", "1.2.0", "--manifest", manifests[0]); code == 0 || !strings.Contains(errOut, "not \"1.2.0\"") {
		t.Fatalf("verify with another release's manifest: exit %d %s", code, errOut)
	}
	if err := os.WriteFile(stored, []byte(signCheckpoint(t, other, cp3)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run("releases", "verify", "1.2.0", "--manifest", manifests[1], "--checkpoint", stored); code == 0 || !strings.Contains(errOut, "does not verify under the log key") {
		t.Fatalf("verify from a forged stored checkpoint: exit %d %s", code, errOut)
	}
}

// devSigner signs with the dev log key itself (local-kms): what a holder
// of the log key could sign.
func devSigner(t *testing.T) *release.LogSigner {
	t.Helper()
	ks, err := kmssign.NewSigner(context.Background(), devstack.Shared(t).KMS(), devstack.DevReleaseLogKeyID)
	if err != nil {
		t.Fatal(err)
	}
	s, err := release.NewLogSigner(devstack.DevReleaseLogOrigin, ks)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func signCheckpoint(t *testing.T, s *release.LogSigner, c release.Checkpoint) string {
	t.Helper()
	signed, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}

// rootOf is the stack's tree root at size, from its table.
func rootOf(t *testing.T, st *teststack.Stack, size int64) tlog.Hash {
	t.Helper()
	h, err := release.TreeHash(context.Background(), &releasedb.Log{DB: st.App.DB, Table: st.App.Config.Table}, size)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustOpen(t *testing.T, k release.LogKey, signed string) release.Checkpoint {
	t.Helper()
	c, err := k.Open([]byte(signed))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustStored(t *testing.T, signed string, v note.Verifier) *tlogfmt.Checkpoint {
	t.Helper()
	c, _, _, err := tlogfmt.ParseCheckpoint([]byte(signed), v.Name(), v)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// logStack is a local stack as make run's (the dev pins and policy), the
// repository root and the stack's release log key.
func logStack(t *testing.T) (*teststack.Stack, string, release.LogKey) {
	t.Helper()
	st := teststack.Start(t)
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	logKey, err := rolloutapp.LogKey(context.Background(), st.App.App)
	if err != nil {
		t.Fatal(err)
	}
	return st, root, logKey
}
