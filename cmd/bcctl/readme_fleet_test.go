package main

import (
	"bufio"
	"bytes"
	"context"
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
// node it skipped and make clean.
func TestReadmeWalkThenSimFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds make run's binary and runs it twice")
	}
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	bin := filepath.Join(t.TempDir(), "bc-local")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/bc-local").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/bc-local: %v\n%s", err, out)
	}
	state, tmp := filepath.Join(t.TempDir(), "state"), t.TempDir()

	url, _, stop := makeRun(t, bin, state)
	runQuickstart(t, url)
	outputs := walkReadme(t, readmeCommands(t, filepath.Join(root, "README.md")), url, tmp,
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

	url, lines, stop := makeRun(t, bin, state, "BC_SIM_NODES=4")
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
		case <-time.After(90 * time.Second):
			t.Fatal("no simulated fleet summary within 90 s")
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
}

// makeRun starts make run's binary on state (BC_LISTEN on a free port,
// the reconciler every second) with env added, and returns once it
// serves: its URL, its stdout's lines after the banner, and a stop that
// sends Ctrl-C and waits.
func makeRun(t *testing.T, bin, state string, env ...string) (url string, lines <-chan string, stop func()) {
	t.Helper()
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "BC_STATE_DIR="+state, "BC_LISTEN=127.0.0.1:0", "BC_RECONCILE_INTERVAL=1s", "BC_LOG_LEVEL=error")
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
	for url == "" {
		select {
		case line, ok := <-ch:
			if !ok {
				t.Fatalf("make run ended before serving:\n%s", errOut.String())
			}
			if m := banner.FindStringSubmatch(line); m != nil {
				url = m[1]
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("make run printed no banner within 90 s:\n%s", errOut.String())
		}
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s/healthz not ready within 30 s", url)
		}
	}
	return url, ch, stop
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
