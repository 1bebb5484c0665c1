package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/devstack"
)

// The README's sections in order on one state dir, as a user runs them:
// make run, the quickstart and the first walk (which registers
// gpu.h100-node-0 with the user's own key), Ctrl-C, then BC_SIM_NODES=4
// make run on that state. The simulated fleet starts with the nodes it
// can take, leaves the user's node as it was, and its summary names the
// node it skipped and make clean. Then the README's rollout block runs as
// pasted into a shell (readmeShell): the rollout completes with every
// sim-fleet node updated, and nodes list shows each RUNNING 1.1.0.
func TestReadmeWalkThenSimFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds make run's binary and bcctl, runs make run twice and a rollout (about 90 s)")
	}
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	bin, sh := filepath.Join(t.TempDir(), "bc-local"), readmeShell(t, root)
	goBuild(t, map[string]string{bin: "./cmd/bc-local", filepath.Join(sh.dir, "bin", "bcctl"): "./cmd/bcctl"})
	state, tmp := filepath.Join(t.TempDir(), "state"), t.TempDir()

	url, _, exports, stop := makeRun(t, bin, state, "BC_RECONCILE_INTERVAL=1s")
	runQuickstart(t, url)
	vkey := regexp.MustCompile(`BC_RELEASE_LOG_VKEY=(\S+)`).FindStringSubmatch(exports)
	if vkey == nil {
		t.Fatalf("make run's export block sets no BC_RELEASE_LOG_VKEY:\n%s", exports)
	}
	outputs := walkReadme(t, readmeCommands(t, filepath.Join(root, "README.md")), url, tmp, map[string]string{"BC_RELEASE_LOG_VKEY": vkey[1]},
		func(ctx context.Context, d time.Duration) error { // the stack reconciles every second
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(d, time.Second)):
				return nil
			}
		})
	keyID := regexp.MustCompile(`(?m)^keyid\s+(\S+)$`).FindStringSubmatch(outputs["nodes get"])
	if keyID == nil {
		t.Fatalf("no keyid in nodes get:\n%s", outputs["nodes get"])
	}
	stop()

	// As the README starts it: the variables it gives make run.
	url, lines, exports, stop := makeRun(t, bin, state, readmeSimFleetEnv(t, filepath.Join(root, "README.md"))...)
	defer stop()
	var summary []string
	for summary == nil {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("make run ended before the simulated fleet's summary")
			}
			if strings.HasPrefix(line, "Simulated fleet") {
				summary = []string{line}
			}
		case <-time.After(5 * time.Minute): // of silence: generous, for a busy machine
			t.Fatal("no simulated fleet summary within 5 minutes")
		}
	}
	for more := true; more; { // a line per skipped node follows at once
		select {
		case line, ok := <-lines:
			if more = ok && strings.HasPrefix(line, "  "); more {
				summary = append(summary, line)
			}
		case <-time.After(2 * time.Second):
			more = false
		}
	}
	text := strings.Join(summary, "\n")
	for _, want := range []string{"Simulated fleet up: 3 of 4 agents", "gpu-pool-1/gpu.h100-node-0 skipped", "`make clean`", "--replace"} {
		if !strings.Contains(text, want) {
			t.Errorf("the fleet's summary misses %q:\n%s", want, text)
		}
	}
	var o, e bytes.Buffer
	c := &cli{out: &o, errOut: &e, getenv: func(k string) string {
		return map[string]string{"BC_API_URL": url, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme"}[k]
	}, now: time.Now}
	if code := c.exec(context.Background(), []string{"nodes", "get", "--pool", "gpu-pool-1", "gpu.h100-node-0"}); code != 0 ||
		!strings.Contains(o.String(), keyID[1]) || !strings.Contains(o.String(), "psu-swap") {
		t.Errorf("the README's node after the fleet started (keyid %s, cordon psu-swap): exit %d\n%s%s", keyID[1], code, o.String(), e.String())
	}

	// The README's rollout onto the fleet, each line as pasted into the
	// shell that has the export block this make run printed. watch takes
	// about 70 s: each wave's node hears its target at its next idle
	// heartbeat (30 s), and the fleet's agents beat together.
	simNodes := regexp.MustCompile(`sim-fleet \(([^)]*)\)`).FindStringSubmatch(summary[0])
	if simNodes == nil {
		t.Fatalf("the fleet's summary names no sim-fleet nodes:\n%s", text)
	}
	block := readmeShBlock(t, filepath.Join(root, "README.md"), `printf '#!/bin/sh`)
	sh.exports = exports
	var rolloutID string
	listed := false
	for _, line := range block {
		line = strings.ReplaceAll(line, "/tmp/", tmp+"/")
		line = strings.ReplaceAll(line, "<the rollout id>", rolloutID)
		out := sh.run(t, line)
		switch {
		case strings.HasPrefix(line, "bin/bcctl rollouts create "):
			m := regexp.MustCompile(`(?m)^rollout\s+(\S+)$`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("README: %s printed no rollout id:\n%s", line, out)
			}
			rolloutID = m[1]
		case strings.HasPrefix(line, "bin/bcctl nodes list --pool sim-fleet"):
			listed = true
			running := runningColumn(t, out)
			for _, n := range strings.Split(simNodes[1], ", ") {
				if running[n] != "1.1.0" {
					t.Errorf("README: %s: %s runs %q, not 1.1.0:\n%s", line, n, running[n], out)
				}
			}
			if len(running) != len(strings.Split(simNodes[1], ", ")) {
				t.Errorf("README: %s lists other nodes than the fleet's %s:\n%s", line, simNodes[1], out)
			}
		}
	}
	if rolloutID == "" || !listed {
		t.Fatalf("the README's rollout block creates no rollout or lists no sim-fleet nodes after it:\n%s", strings.Join(block, "\n"))
	}
}

// readmeShBlock returns the README's first sh block whose first line
// starts with first, a command a line: a line ending in a backslash goes
// on with the next, as the shell reads it; blank lines are left out.
func readmeShBlock(t *testing.T, path, first string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(data), "```sh\n")[1:] {
		body, _, ok := strings.Cut(block, "\n```")
		if !ok || !strings.HasPrefix(body, first) {
			continue
		}
		var out []string
		cont := false
		for _, line := range strings.Split(body, "\n") {
			switch {
			case cont:
				out[len(out)-1] += "\n" + line
			case strings.TrimSpace(line) != "":
				out = append(out, line)
			}
			cont = strings.HasSuffix(line, "\\")
		}
		return out
	}
	t.Fatalf("%s has no sh block starting %q", path, first)
	return nil
}

// shell is the user's second shell: a working dir laid out as the
// repository's root for the README's relative paths (bin/bcctl, docs/
// and localstack/ linked), the export block pasted.
type shell struct {
	dir, exports string
	env          []string
}

// readmeShell makes a fresh working dir with the repository's docs/ and
// localstack/ linked in it; the caller builds bin/bcctl there.
func readmeShell(t *testing.T, root string) *shell {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"docs", "localstack"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BC_") { // the export block's, not the test's
			env = append(env, kv)
		}
	}
	return &shell{dir: dir, env: env}
}

// goBuild builds each package into its output path (out: package), all
// at once, from the working directory (the repository's root).
func goBuild(t *testing.T, pkgs map[string]string) {
	t.Helper()
	errs := make(chan error, len(pkgs))
	for out, pkg := range pkgs {
		go func() {
			if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
				errs <- fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
			errs <- nil
		}()
	}
	for range pkgs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// run runs line with bash -e after the export block, in the shell's dir,
// and returns its stdout; a line that does not exit 0 fails the test.
func (s *shell) run(t *testing.T, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", s.exports+"\n"+line)
	cmd.Dir, cmd.Env = s.dir, s.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("README: %s: %v after %s\n%s%s", line, err, time.Since(start).Round(time.Millisecond), o.String(), e.String())
	}
	t.Logf("README: %s: %s\n%s", line, time.Since(start).Round(time.Millisecond), o.String())
	return o.String()
}

// runningColumn reads a nodes list table: each node's RUNNING cell.
func runningColumn(t *testing.T, table string) map[string]string {
	t.Helper()
	rows := strings.Split(strings.TrimRight(table, "\n"), "\n")
	col := strings.Index(rows[0], "RUNNING")
	if !strings.HasPrefix(rows[0], "NODE") || col < 0 {
		t.Fatalf("not a nodes list:\n%s", table)
	}
	out := map[string]string{}
	for _, r := range rows[1:] {
		if len(r) <= col {
			t.Fatalf("a short row in nodes list:\n%s", table)
		}
		out[strings.Fields(r)[0]] = strings.Fields(r[col:])[0]
	}
	return out
}

// makeRun starts make run's binary on state (BC_LISTEN on a free port,
// errors alone logged) with env added, and returns once it
// serves: its URL, its stdout's lines after the export block, the export
// block as printed (the lines a user pastes into the CLI's shell), and a
// stop that sends Ctrl-C and waits.
func makeRun(t *testing.T, bin, state string, env ...string) (url string, lines <-chan string, exports string, stop func()) {
	t.Helper()
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "BC_STATE_DIR="+state, "BC_LISTEN=127.0.0.1:0", "BC_LOG_LEVEL=error")
	cmd.Env = append(cmd.Env, env...)
	errOut := &lockedBuffer{}
	cmd.Stderr = errOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	ch := make(chan string, 256)
	go func() {
		defer close(done)
		defer close(ch)
		for sc := bufio.NewScanner(out); sc.Scan(); {
			select {
			case ch <- sc.Text():
			default: // nobody reads: never block make run's stdout
			}
		}
		_ = cmd.Wait()
	}()
	banner := regexp.MustCompile(`^Better Compute local stack: (http://\S+) `)
	var block []string // from "export " through its last continued line
	for url == "" || block == nil || strings.HasSuffix(block[len(block)-1], "\\") {
		select {
		case line, ok := <-ch:
			if !ok {
				t.Fatalf("make run ended before serving and printing its export block:\n%s", errOut.String())
			}
			if m := banner.FindStringSubmatch(line); m != nil {
				url = m[1]
			}
			if url != "" && (block != nil || strings.HasPrefix(line, "export ")) {
				block = append(block, line)
			}
		case <-time.After(5 * time.Minute): // of silence: generous, for a busy machine
			t.Fatalf("make run printed no banner and export block within 5 minutes:\n%s", errOut.String())
		}
	}
	exports = strings.Join(block, "\n")
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("%s/healthz not ready within 3 minutes", url)
		}
	}
	return url, ch, exports, stop
}

// lockedBuffer is a child's stderr, read while it writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// readmeSimFleetEnv is the variables of the README's first
// `BC_SIM_NODES=… make run` command (BC_SIM_NODES=4 and the intervals it
// sets).
func readmeSimFleetEnv(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`((?:BC_[A-Z_]+=[^ `]+ )+)make run`").FindSubmatch(b)
	if m == nil || !strings.Contains(string(m[1]), "BC_SIM_NODES=") {
		t.Fatal("the README starts no simulated fleet (`BC_SIM_NODES=… make run`)")
	}
	return strings.Fields(string(m[1]))
}
