package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/test/teststack"
)

// docs/releases.md's offline verification runs as written: its sh block in
// bash (bin/bcctl built, /tmp/ a temporary dir), after the README's walk
// registered 1.0.0 and, at the block's "later", after 1.1.0; the program
// it runs is the doc's go block, byte for byte.
func TestOfflineVerifyDoc(t *testing.T) {
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/releases.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)[strings.Index(string(doc), "## Verifying by hand, offline"):]
	shBlock := fenced(t, section, "```sh\n")
	program, err := os.ReadFile(filepath.Join(root, "docs/examples/offline-verify/main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if goBlock := fenced(t, section, "```go\n"); goBlock != string(program) {
		t.Errorf("docs/releases.md's go block is not docs/examples/offline-verify/main.go")
	}

	st := teststack.Start(t)
	logKey, err := rolloutapp.LogKey(context.Background(), st.App.App)
	if err != nil {
		t.Fatal(err)
	}
	tmp, bin := t.TempDir(), t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "bcctl"), filepath.Join(root, "cmd/bcctl")).CombinedOutput(); err != nil {
		t.Fatalf("go build bcctl: %v\n%s", err, out)
	}
	env := append(os.Environ(), "BC_API_URL="+st.URL, "BC_TOKEN=dev:admin", "BC_TENANT=acme", "XDG_CONFIG_HOME="+tmp,
		"BC_RELEASE_LOG_VKEY="+logKey.VerifierKey())
	sh := func(line string) string {
		t.Helper()
		line = strings.ReplaceAll(strings.ReplaceAll(line, "/tmp/", tmp+"/"), "bin/bcctl", filepath.Join(bin, "bcctl"))
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", line)
		cmd.Dir, cmd.Env = root, env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s%s", line, err, out.String(), errOut.String())
		}
		return out.String()
	}
	// The README walk's release, then the rollout section's.
	register := func(statement, manifest string) {
		sh("bin/bcctl sign --statement " + statement + " --key localstack/dev-release-key.pem --out " + manifest)
		sh("bin/bcctl releases register --manifest " + manifest)
	}
	register("docs/examples/release-1.0.0.json", "/tmp/manifest.json")
	var out string
	later := false
	for _, line := range strings.Split(strings.TrimSpace(shBlock), "\n") {
		if strings.HasPrefix(line, "# … later") {
			statement := filepath.Join(tmp, "release-1.1.0.json")
			body := `{"version": "1.1.0", "sequence": 2, "expires": "2030-01-01T00:00:00Z", "binaries": [{"platform": "linux/amd64", "url": "https://dl.example.com/bcd", "sha256": "` + strings.Repeat("ab", 32) + `", "size": 1}]}`
			if err := os.WriteFile(statement, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			register("/tmp/release-1.1.0.json", "/tmp/manifest-1.1.0.json")
			later = true
			continue
		}
		out = sh(line)
	}
	if !later {
		t.Fatal("the doc's block has no \"# … later\" line between keeping the checkpoint and proving")
	}
	for _, want := range []string{"entry 0 is in the tree of size 2 (root ", "the tree of size 2 extends the kept one of size 1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("offline-verify printed\n%s\nwant %q", out, want)
		}
	}
}

// fenced is the body of the first fenced block of section opened by open.
func fenced(t *testing.T, section, open string) string {
	t.Helper()
	i := strings.Index(section, open)
	if i < 0 {
		t.Fatalf("no %q block", strings.TrimSpace(open))
	}
	body := section[i+len(open):]
	j := strings.Index(body, "```\n")
	if j < 0 {
		t.Fatal("an unclosed block")
	}
	return body[:j]
}
