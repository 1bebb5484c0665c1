package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/release"
)

// installEnv is a fixture whose downloads go to a TLS site of binaries.
type installEnv struct {
	*fixture
	site *binarySite
}

func newInstallEnv(t *testing.T) *installEnv {
	t.Helper()
	site := newBinarySite(t)
	f := newFixture(t, "http://127.0.0.1:1", newKey(t), func(c *Config) { c.HTTP = site.srv.Client() })
	return &installEnv{fixture: f, site: site}
}

// statement is release version (sequence seq) with a linux/amd64 binary
// served by the site.
func (e *installEnv) statement(version string, seq int64) (release.Statement, []byte) {
	data := []byte("#!bcd " + version + "\n" + strings.Repeat("x", 100))
	bin := e.site.put("/bcd-"+version, "linux/amd64", data)
	arm := e.site.put("/bcd-"+version+"-arm64", "linux/arm64", []byte("arm "+version))
	return release.Statement{Version: version, Sequence: seq, Binaries: []release.Binary{arm, bin}}, data
}

// refusedWith asserts an install was refused, naming want.
func refusedWith(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), want) {
		t.Fatalf("install: %v, want a refusal naming %q", err, want)
	}
}

// nothingInstalled asserts no binary was written and the node runs what it ran.
func (e *installEnv) nothingInstalled(t *testing.T, version string, running *api.Version) {
	t.Helper()
	if _, err := os.Stat(e.agent.binaryPath(version)); !os.IsNotExist(err) {
		t.Errorf("%s was written (%v)", e.agent.binaryPath(version), err)
	}
	if got := e.agent.Running(); !equalVersion(got, running) {
		t.Errorf("running %+v, want %+v", got, running)
	}
	if len(e.starter.starts()) != 0 {
		t.Errorf("started %v", e.starter.starts())
	}
}

func equalVersion(a, b *api.Version) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// Each refusal of the verification chain: nothing is downloaded or
// started, and the node runs what it ran.
func TestInstallRefusals(t *testing.T) {
	past := t0.Add(-time.Hour)
	for name, tc := range map[string]struct {
		desired func(e *installEnv) api.DesiredRelease
		floor   int64
		want    string
		fetched bool // the refusal comes after the download
	}{
		"signed by a key the node does not pin": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			return desired(t, st, newKey(t))
		}, want: "unknown_key"},
		"a signature that does not verify": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			d := desired(t, st, e.release)
			d.Manifest = bytes.Replace(d.Manifest, []byte(`"sig":"`), []byte(`"sig":"AAAA`), 1)
			return d
		}, want: "bad_signature"},
		"expired": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			st.Expires = &past
			return desired(t, st, e.release)
		}, want: "expired"},
		"sequence below the floor": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			return desired(t, st, e.release)
		}, floor: 3, want: "below the floor 3"},
		"the answer names another release than the statement": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			d := desired(t, st, e.release)
			d.Sequence = 9
			return d
		}, want: "the answer names 1.1.0 (sequence 9"},
		"no binary for the platform": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			st.Binaries = slices.DeleteFunc(st.Binaries, func(b release.Binary) bool { return b.Platform == "linux/amd64" })
			return desired(t, st, e.release)
		}, want: "no binary for platform linux/amd64"},
		"wrong sha256": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			st.Binaries[1].SHA256 = strings.Repeat("0", 64)
			return desired(t, st, e.release)
		}, want: "sha256", fetched: true},
		"larger than the manifest says (Content-Length)": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			st.Binaries[1].Size--
			return desired(t, st, e.release)
		}, want: "bytes offered, the manifest says", fetched: true},
		"shorter than the manifest says": {desired: func(e *installEnv) api.DesiredRelease {
			st, _ := e.statement("1.1.0", 2)
			st.Binaries[1].Size++
			return desired(t, st, e.release)
		}, want: "the manifest says", fetched: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newInstallEnv(t)
			err := e.install(t, tc.desired(e), tc.floor)
			refusedWith(t, err, tc.want)
			e.nothingInstalled(t, "1.1.0", nil)
			if fetched := e.site.downloads() > 0; fetched != tc.fetched {
				t.Errorf("downloaded: %v, want %v", fetched, tc.fetched)
			}
		})
	}
}

// A body without Content-Length that never ends: reading stops at size+1
// bytes, the install is refused, nothing is written.
func TestInstallStopsReadingPastTheSize(t *testing.T) {
	e := newInstallEnv(t)
	st, _ := e.statement("1.1.0", 2)
	written := make(chan int, 1)
	e.site.serve = func(w http.ResponseWriter, r *http.Request) bool {
		chunk := bytes.Repeat([]byte("y"), 4096)
		n := 0
		defer func() { written <- n }()
		for n < 64<<20 { // far more than any test reads; the client hangs up first
			if _, err := w.Write(chunk); err != nil {
				return true
			}
			w.(http.Flusher).Flush()
			n += len(chunk)
		}
		return true
	}
	err := e.install(t, desired(t, st, e.release), 0)
	refusedWith(t, err, "more than the manifest's")
	e.nothingInstalled(t, "1.1.0", nil)
	entries, _ := os.ReadDir(filepath.Join(e.dir, "1.1.0"))
	if len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
	if n := <-written; n >= 64<<20 {
		t.Errorf("the server wrote all %d bytes: the agent read them", n)
	}
}

// A healthy start: the binary is at <state>/<version>/bcd, executable,
// the node runs it, the release before it is kept as the previous one, and
// a restarted agent still reports it running.
func TestInstallHealthyStartRunsTheNewRelease(t *testing.T) {
	e := newInstallEnv(t)
	st1, _ := e.statement("1.0.0", 1)
	if err := e.install(t, desired(t, st1, e.release), 0); err != nil {
		t.Fatal(err)
	}
	st2, data := e.statement("1.1.0", 2)
	if err := e.install(t, desired(t, st2, e.release), 1); err != nil {
		t.Fatal(err)
	}
	want := api.Version{Version: "1.1.0", Sequence: 2}
	if got := e.agent.Running(); got == nil || *got != want {
		t.Fatalf("running %+v", got)
	}
	got, err := os.ReadFile(e.agent.binaryPath("1.1.0"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("installed binary: %q, %v", got, err)
	}
	if fi, _ := os.Stat(e.agent.binaryPath("1.1.0")); fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("not executable: %v", fi.Mode())
	}
	if _, err := os.Stat(e.agent.binaryPath("1.0.0")); err != nil {
		t.Errorf("the previous binary is gone: %v", err)
	}
	if want := []string{"1.0.0 1.0.0/bcd", "1.1.0 1.1.0/bcd"}; !slices.Equal(e.starter.starts(), want) {
		t.Errorf("started %v, want %v", e.starter.starts(), want)
	}
	// A third release: the one two back is pruned, the previous kept.
	st3, _ := e.statement("1.2.0", 3)
	if err := e.install(t, desired(t, st3, e.release), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "1.0.0")); !os.IsNotExist(err) {
		t.Errorf("1.0.0 kept after two newer installs: %v", err)
	}
	if _, err := os.Stat(e.agent.binaryPath("1.1.0")); err != nil {
		t.Errorf("the previous binary is gone: %v", err)
	}
	again, err := New(e.agent.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Running(); got == nil || *got != (api.Version{Version: "1.2.0", Sequence: 3}) {
		t.Errorf("a restarted agent runs %+v", got)
	}
}

// A binary that does not start healthy: refused, the previous one started
// again, the node still runs the previous release.
func TestInstallUnhealthyStartFallsBack(t *testing.T) {
	e := newInstallEnv(t)
	st1, _ := e.statement("1.0.0", 1)
	if err := e.install(t, desired(t, st1, e.release), 0); err != nil {
		t.Fatal(err)
	}
	e.starter.unhealthy["1.1.0"] = errors.New("exit status 3")
	st2, _ := e.statement("1.1.0", 2)
	err := e.install(t, desired(t, st2, e.release), 1)
	refusedWith(t, err, "1.1.0 did not start healthy (exit status 3); running 1.0.0")
	if got := e.agent.Running(); got == nil || *got != (api.Version{Version: "1.0.0", Sequence: 1}) {
		t.Errorf("running %+v, want 1.0.0", got)
	}
	if want := []string{"1.0.0 1.0.0/bcd", "1.1.0 1.1.0/bcd", "1.0.0 1.0.0/bcd"}; !slices.Equal(e.starter.starts(), want) {
		t.Errorf("started %v, want %v", e.starter.starts(), want)
	}
	st, err := loadState(e.dir)
	if err != nil || st.Running == nil || st.Running.Version != "1.0.0" {
		t.Errorf("state file: %+v, %v", st, err)
	}
}

// Back to the release it ran before: its binary is still there and intact,
// so nothing is downloaded.
func TestInstallRollbackUsesTheKeptBinary(t *testing.T) {
	e := newInstallEnv(t)
	st1, _ := e.statement("1.0.0", 1)
	st2, _ := e.statement("1.1.0", 2)
	for i, st := range []release.Statement{st1, st2} {
		if err := e.install(t, desired(t, st, e.release), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	before := e.site.downloads()
	if err := e.install(t, desired(t, st1, e.release), 1); err != nil {
		t.Fatal(err)
	}
	if e.site.downloads() != before {
		t.Errorf("downloaded again for a rollback to a kept binary")
	}
	if got := e.agent.Running(); got == nil || got.Version != "1.0.0" {
		t.Errorf("running %+v", got)
	}
}

// No pins: installs are disabled, and say so.
func TestInstallWithoutPins(t *testing.T) {
	e := newInstallEnv(t)
	e.agent.cfg.Pins = nil
	st, _ := e.statement("1.1.0", 2)
	refusedWith(t, e.install(t, desired(t, st, e.release), 0), "no release pins")
}

// A download that fails in transport is not a refusal: it is retried.
func TestInstallTransportFailureIsNotARefusal(t *testing.T) {
	e := newInstallEnv(t)
	st, _ := e.statement("1.1.0", 2)
	e.site.serve = func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return true
	}
	err := e.install(t, desired(t, st, e.release), 0)
	if err == nil || errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("install: %v, want a retryable HTTP 503", err)
	}
}

// The default starter runs `<binary> --version`: healthy when it exits 0
// printing the version.
func TestExecStarter(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v := api.Version{Version: "1.2.3", Sequence: 4}
	for path, want := range map[string]string{
		script("good", `[ "$1" = --version ] && echo "bcd 1.2.3"`): "",
		script("fails", "exit 3"):                                  "exit status 3",
		script("other", "echo bcd 1.2.2"):                          "not version 1.2.3",
		filepath.Join(dir, "missing"):                              "no such file",
	} {
		err := ExecStarter{Timeout: 10 * time.Second}.Start(context.Background(), path, v)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", filepath.Base(path), err, want)
		}
	}
}

// file URLs: a binary on the host is installed like a downloaded one
// (size and sha256 checked); a file that differs from the manifest, a
// directory, another host or another scheme is refused.
func TestInstallFromFileURLs(t *testing.T) {
	dir := t.TempDir()
	data := []byte("#!bcd 1.1.0 from a file\n")
	path := filepath.Join(dir, "bcd-1.1.0")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	good := release.Binary{Platform: "linux/amd64", URL: "file://" + path, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
	e := newInstallEnv(t)
	st := release.Statement{Version: "1.1.0", Sequence: 2, Binaries: []release.Binary{good}}
	if err := e.install(t, desired(t, st, e.release), 0); err != nil {
		t.Fatalf("install from %s: %v", good.URL, err)
	}
	if got, err := os.ReadFile(e.agent.binaryPath("1.1.0")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("installed %q, %v", got, err)
	}
	for name, tc := range map[string]struct {
		bin  func(b release.Binary) release.Binary
		want string
	}{
		"a file other than the manifest's": {func(b release.Binary) release.Binary { b.SHA256 = strings.Repeat("1", 64); return b }, "sha256"},
		"larger than the manifest says":    {func(b release.Binary) release.Binary { b.Size--; return b }, "bytes offered"},
		"a directory":                      {func(b release.Binary) release.Binary { b.URL = "file://" + dir; return b }, "not a regular file"},
		"a host":                           {func(b release.Binary) release.Binary { b.URL = "file://mirror" + path; return b }, "must be an https URL with a host, or a file URL"},
		"plain http":                       {func(b release.Binary) release.Binary { b.URL = "http://127.0.0.1:1/bcd"; return b }, "must be an https URL with a host, or a file URL"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newInstallEnv(t)
			st := release.Statement{Version: "1.1.0", Sequence: 2, Binaries: []release.Binary{tc.bin(good)}}
			refusedWith(t, e.install(t, desired(t, st, e.release), 0), tc.want)
			e.nothingInstalled(t, "1.1.0", nil)
		})
	}
}
