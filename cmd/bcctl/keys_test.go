package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bcctlRun runs one bcctl command line in process with env as its environment.
func bcctlRun(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] })
	return out.String(), errOut.String(), code
}

// keygen never replaces an existing private key unless told to.
func TestKeygenKeepsExistingKey(t *testing.T) {
	out := filepath.Join(t.TempDir(), "release.pem")
	if _, stderr, code := bcctlRun(t, nil, "keygen", "--out", out); code != 0 || !strings.HasPrefix(stderr, "keyid: ") {
		t.Fatalf("keygen: exit %d, %s", code, stderr)
	}
	first, _ := os.ReadFile(out)
	_, stderr, code := bcctlRun(t, nil, "keygen", "--out", out)
	if code != exitLocal || !strings.Contains(stderr, "--force") {
		t.Fatalf("second keygen: exit %d %q, want a refusal naming --force", code, stderr)
	}
	if again, _ := os.ReadFile(out); !bytes.Equal(again, first) {
		t.Fatal("the existing key was changed")
	}
	if _, _, code := bcctlRun(t, nil, "keygen", "--out", out, "--force"); code != 0 {
		t.Fatalf("keygen --force: exit %d", code)
	}
	if again, _ := os.ReadFile(out); bytes.Equal(again, first) {
		t.Fatal("--force did not replace the key")
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if _, stderr, code := bcctlRun(t, nil, "keygen"); code != exitUsage || !strings.Contains(stderr, "--out is required") {
		t.Errorf("keygen without --out: exit %d %q", code, stderr)
	}
}
