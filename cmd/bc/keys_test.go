package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keygen never replaces an existing private key unless told to.
func TestKeygenKeepsExistingKey(t *testing.T) {
	out := filepath.Join(t.TempDir(), "release.pem")
	stdout := os.Stdout
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	os.Stdout = devnull
	t.Cleanup(func() { os.Stdout = stdout; devnull.Close() })
	if err := keygen([]string{"-out", out}); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(out)
	err := keygen([]string{"-out", out})
	if err == nil || !strings.Contains(err.Error(), "-force") {
		t.Fatalf("second keygen: %v, want a refusal naming -force", err)
	}
	if again, _ := os.ReadFile(out); !bytes.Equal(again, first) {
		t.Fatal("the existing key was changed")
	}
	if err := keygen([]string{"-out", out, "-force"}); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(out); bytes.Equal(again, first) {
		t.Fatal("-force did not replace the key")
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
}
