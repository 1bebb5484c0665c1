package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/release"
)

// BinaryName is the file an installed release's binary is written to:
// <StateDir>/<version>/bcd.
const BinaryName = "bcd"

// ErrRefused marks an install that must not be tried again for the same
// manifest: a verification refusal or a binary that did not start healthy.
// Other failures (the download's transport, the disk) are retried after
// RetryInstallAfter.
var ErrRefused = errors.New("install refused")

// RetryInstallAfter is how long after a failure that was not a refusal the
// same release is tried again.
const RetryInstallAfter = time.Minute

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// Starter starts an installed binary and says whether it came up healthy
// (nil) or not.
type Starter interface {
	Start(ctx context.Context, path string, v api.Version) error
}

// ExecStarter is the default Starter: a health probe that runs
// `<binary> --version` and wants exit status 0 within Timeout (default
// 10 s) and the release's version in what it prints. bcd itself is run by
// the host's service manager; this only proves the binary executes here.
type ExecStarter struct{ Timeout time.Duration }

// Start implements Starter.
func (s ExecStarter) Start(ctx context.Context, path string, v api.Version) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %w", path, err)
	}
	if !bytes.Contains(out, []byte(v.Version)) {
		return fmt.Errorf("%s --version printed %q, not version %s", path, strings.TrimSpace(string(clipBytes(out))), v.Version)
	}
	return nil
}

func clipBytes(b []byte) []byte { return b[:min(len(b), 120)] }

// Install installs a release the node is told to run, or refuses it. It
// verifies the manifest under the agent's own pins at the agent's time
// (signatures, threshold, the statement, its expiry), that the answer names
// the release the statement signs, that its sequence is at least floor,
// the release log's evidence (verifyLog: refused as "log: …"), that the
// statement has a binary for the agent's platform; downloads that
// binary (never more than its size: reading stops at size+1 bytes), checks
// its size and sha256, writes it to <StateDir>/<version>/bcd atomically
// (kept if already there and intact), starts it with the Starter, and
// records it as running with the release it replaces as the previous one.
// A binary that does not start healthy is refused and the previous one is
// started again; the node runs what it ran.
func (a *Agent) Install(ctx context.Context, d api.DesiredRelease, floor int64) error {
	if a.cfg.Pins == nil {
		return refused("installs are disabled: the agent has no release pins")
	}
	v, err := a.cfg.Pins.Verify(d.Manifest, a.cfg.Now())
	if err != nil {
		return refused("manifest: %s", describe(err))
	}
	st := v.Statement
	if st.Version != d.Version || st.Sequence != d.Sequence || v.Digest != d.ManifestDigest {
		return refused("the answer names %s (sequence %d, %s), the signed statement %s (sequence %d, %s)",
			d.Version, d.Sequence, d.ManifestDigest, st.Version, st.Sequence, v.Digest)
	}
	if st.Sequence < floor {
		return refused("sequence %d is below the floor %d (a node only moves forward, or back to the release it ran)", st.Sequence, floor)
	}
	if err := a.verifyLog(d.Log, v.Payload); err != nil {
		return err
	}
	bin, ok := binaryFor(st, a.cfg.Platform)
	if !ok {
		return refused("release %s has no binary for platform %s", st.Version, a.cfg.Platform)
	}
	if filepath.Base(st.Version) != st.Version { // SemVer never has a separator; be sure
		return refused("version %q is not a file name", st.Version)
	}
	path := a.binaryPath(st.Version)
	if !intact(path, bin) {
		if err := a.download(ctx, bin, path); err != nil {
			return err
		}
	}
	next := api.Version{Version: st.Version, Sequence: st.Sequence}
	prev := a.Running()
	if err := a.cfg.Starter.Start(ctx, path, next); err != nil {
		running := "none"
		if prev != nil {
			running = prev.Version
			if perr := a.cfg.Starter.Start(ctx, a.binaryPath(prev.Version), *prev); perr != nil {
				a.log.Error("the previous release did not start again either", "version", prev.Version, "error", perr.Error())
			}
		}
		return refused("%s did not start healthy (%v); running %s", st.Version, err, running)
	}
	a.mu.Lock()
	note := a.note
	a.mu.Unlock()
	if err := saveState(a.cfg.StateDir, state{Running: &next, Previous: prev, Checkpoint: note}); err != nil {
		return err
	}
	a.mu.Lock()
	a.running = &next
	a.mu.Unlock()
	a.prune(next, prev)
	return nil
}

// describe is a verification error's reason and message.
func describe(err error) string {
	if e := apierr.As(err); e != nil {
		if r, ok := e.Details["reason"].(string); ok {
			return r + ": " + e.Message
		}
		return e.Message
	}
	return err.Error()
}

// binaryFor is the statement's binary for platform (compared as a string:
// linux/arm64 and linux/arm64/v8 are distinct platforms).
func binaryFor(st release.Statement, platform string) (release.Binary, bool) {
	for _, b := range st.Binaries {
		if b.Platform == platform {
			return b, true
		}
	}
	return release.Binary{}, false
}

func (a *Agent) binaryPath(version string) string {
	return filepath.Join(a.cfg.StateDir, version, BinaryName)
}

// intact reports whether the file at path is the binary already (a
// rollback to the previous release needs no download).
func intact(path string, bin release.Binary) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, bin.Size+1))
	return err == nil && n == bin.Size && hex.EncodeToString(h.Sum(nil)) == bin.SHA256
}

// download fetches bin (https, or file: a path on the host, for
// air-gapped hosts and tests) into path: a temporary file in the same
// directory, renamed over path only once its size and sha256 are the
// manifest's.
func (a *Agent) download(ctx context.Context, bin release.Binary, path string) error {
	body, length, err := a.open(ctx, bin)
	if err != nil {
		return err
	}
	defer body.Close()
	if length > bin.Size {
		return refused("download %s: %d bytes offered, the manifest says %d", bin.URL, length, bin.Size)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+BinaryName+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(body, bin.Size+1))
	switch {
	case n > bin.Size:
		return refused("download %s: more than the manifest's %d bytes", bin.URL, bin.Size)
	case err != nil:
		return fmt.Errorf("download %s: %w", bin.URL, err)
	case n != bin.Size:
		return refused("download %s: %d bytes, the manifest says %d", bin.URL, n, bin.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != bin.SHA256 {
		return refused("download %s: sha256 %s, the manifest says %s", bin.URL, sum, bin.SHA256)
	}
	if err := tmp.Chmod(0o755); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// open opens bin's URL: its body and its length as offered (-1: not
// said). Only https and file URLs are fetched; the bytes are checked
// against the signed manifest either way.
func (a *Agent) open(ctx context.Context, bin release.Binary) (io.ReadCloser, int64, error) {
	u, err := url.Parse(bin.URL)
	switch {
	case err != nil:
		return nil, 0, refused("binary URL %q: %v", bin.URL, err)
	case u.Scheme == "file":
		if u.Host != "" {
			return nil, 0, refused("binary URL %q names a host", bin.URL)
		}
		f, err := os.Open(u.Path)
		if err != nil {
			return nil, 0, fmt.Errorf("download %s: %w", bin.URL, err)
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, 0, refused("binary URL %q is not a regular file", bin.URL)
		}
		return f, st.Size(), nil
	case u.Scheme != "https":
		return nil, 0, refused("binary URL %q is neither https nor file", bin.URL)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, bin.URL, nil)
	if err != nil {
		return nil, 0, refused("binary URL %q: %v", bin.URL, err)
	}
	resp, err := a.cfg.HTTP.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("download %s: %w", bin.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("download %s: HTTP %d", bin.URL, resp.StatusCode)
	}
	return resp.Body, resp.ContentLength, nil
}

// prune removes installed releases other than the one running and the one
// before it.
func (a *Agent) prune(running api.Version, prev *api.Version) {
	entries, err := os.ReadDir(a.cfg.StateDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == running.Version || (prev != nil && name == prev.Version) {
			continue
		}
		if _, err := os.Stat(filepath.Join(a.cfg.StateDir, name, BinaryName)); err != nil {
			continue // not an installed release
		}
		if err := os.RemoveAll(filepath.Join(a.cfg.StateDir, name)); err != nil {
			a.log.Warn("removing an old release", "version", name, "error", err.Error())
		}
	}
}

// release starts installing the answer's release when it is not what the
// node runs, unless an install is in progress or this release was refused
// (or failed less than RetryInstallAfter ago). The outcome is reported in
// the next reports: installing, then installed or failed.
func (a *Agent) release(ctx context.Context, d api.Desired) {
	rel := d.Release
	if rel == nil {
		return
	}
	a.mu.Lock()
	runs := a.running != nil && a.running.Version == rel.Version && a.running.Sequence == rel.Sequence
	idle := a.busy == nil
	a.mu.Unlock()
	if runs {
		if idle {
			a.advance(*rel)
		}
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	key := rel.Version + "@" + rel.ManifestDigest
	if a.busy != nil {
		return
	}
	if key != a.asked {
		// The answer names another release than last time: a refusal of an
		// earlier one no longer holds (a rollout may send the node back to
		// it, and must be able to).
		a.asked = key
		clear(a.retryAt)
	}
	if a.cfg.Now().Before(a.retryAt[key]) {
		return
	}
	a.retryAt[key] = forever
	a.install = &api.Install{Version: rel.Version, State: api.InstallInstalling}
	busy := make(chan struct{})
	a.busy = busy
	a.log.Info("installing", "version", rel.Version, "sequence", rel.Sequence, "floor", d.FloorSequence)
	go func() {
		err := a.Install(ctx, *rel, d.FloorSequence)
		a.mu.Lock()
		defer a.mu.Unlock()
		defer close(busy)
		a.busy = nil
		if err == nil {
			delete(a.retryAt, key) // installed: asked again later (a rollback to it), it installs again
			a.install = &api.Install{Version: rel.Version, State: api.InstallInstalled}
			a.log.Info("installed", "version", rel.Version)
			return
		}
		reason := clip(err.Error())
		a.install = &api.Install{Version: rel.Version, State: api.InstallFailed, Reason: &reason}
		a.log.Error("install failed", "version", rel.Version, "error", err.Error())
		if !errors.Is(err, ErrRefused) || ctx.Err() != nil {
			a.retryAt[key] = a.cfg.Now().Add(RetryInstallAfter)
		}
	}()
}

// forever: a refused release is not tried again while the answers keep
// naming it (until the agent restarts).
var forever = time.Unix(1<<62, 0)

// Wait waits for the install in progress, if any, to end.
func (a *Agent) Wait(ctx context.Context) error {
	a.mu.Lock()
	busy := a.busy
	a.mu.Unlock()
	if busy == nil {
		return nil
	}
	select {
	case <-busy:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// verifyLog checks the release log's evidence for entry (the release's
// DSSE payload) under the pinned log key, against the checkpoint the node
// stored (release.VerifyEvidence: signature and origin, not older, consistent,
// the entry included), then stores that checkpoint in its place. Every
// failure is a refusal whose reason starts with "log:".
func (a *Agent) verifyLog(d *api.DesiredLog, entry []byte) error {
	if a.cfg.LogKey == nil {
		return refused("log: no release log key is pinned")
	}
	if d == nil {
		return refused("log: the answer carries no release log evidence")
	}
	incl, err := release.DecodeHashes(d.Inclusion)
	if err != nil {
		return refused("log: inclusion: %v", err)
	}
	cons, err := release.DecodeHashes(d.Consistency)
	if err != nil {
		return refused("log: consistency: %v", err)
	}
	a.mu.Lock()
	stored := a.checkpoint
	a.mu.Unlock()
	c, err := release.VerifyEvidence(*a.cfg.LogKey, stored, release.Evidence{Checkpoint: []byte(d.Checkpoint), Index: d.Index,
		Inclusion: incl, Consistency: cons}, entry)
	if err != nil {
		return refused("log: %v", err)
	}
	return a.storeCheckpoint(c, d.Checkpoint)
}

// storeCheckpoint makes c (signed as note) the checkpoint the node
// witnesses: in the state file first, so a restart reports it too.
func (a *Agent) storeCheckpoint(c release.Checkpoint, note string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.note == note {
		return nil
	}
	st, err := loadState(a.cfg.StateDir)
	if err != nil {
		return err
	}
	st.Checkpoint = note
	if err := saveState(a.cfg.StateDir, st); err != nil {
		return err
	}
	a.checkpoint, a.note = &c, note
	return nil
}

// advance moves the stored checkpoint forward: it verifies the log
// evidence told with the release the node runs, when its checkpoint is
// new, and stores it, so the node's reports follow the log as it grows and
// each heartbeat witnesses a recent checkpoint. A refusal is logged and
// the stored checkpoint kept.
func (a *Agent) advance(rel api.DesiredRelease) {
	if rel.Log == nil || a.cfg.LogKey == nil {
		return
	}
	a.mu.Lock()
	seen := rel.Log.Checkpoint == a.note
	a.mu.Unlock()
	if seen {
		return
	}
	// The entry is the envelope's payload; its signatures were checked
	// at install (and an expired release still runs, so still witnesses).
	entry, err := dsse.Payload(rel.Manifest)
	if err == nil {
		err = a.verifyLog(rel.Log, entry)
	}
	if err != nil {
		a.log.Error("release log: the checkpoint told with the running release does not verify; keeping the stored one", "version", rel.Version, "error", err.Error())
	}
}
