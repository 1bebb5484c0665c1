package devstack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const prSetChildSubreaper = 36 // prctl(2)

// A test binary that dies without Close takes its servers with it.
func TestChildrenDieWithParent(t *testing.T) {
	// Orphans are re-parented to this process, not to a PID 1 that may not
	// reap them, so the test can see them die and reap them.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Fatalf("prctl: %v", errno)
	}
	defer syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var pids []int
	if err := json.Unmarshal([]byte(line), &pids); err != nil || len(pids) != 2 {
		t.Fatalf("helper said %q", line)
	}
	t.Cleanup(func() { // kill whatever survived a failure, reap the orphans
		for _, pid := range pids {
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	})
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("pid %d not running before the parent dies", pid)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d survived its parent", pid)
			}
			time.Sleep(20 * time.Millisecond) // polling process death with a deadline
		}
	}
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...
	if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) {
		return data[i+2] != 'Z' && data[i+2] != 'X'
	}
	return true
}

// Temporary state left by a stack whose process died is removed by the next
// start; a running stack's state is not.
func TestSweepStaleTempDirs(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	stale, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		t.Fatal(err)
	}
	live, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	lock, err := lockStateDir(live) // held, as by a running stack
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	for _, d := range []string{stale, live} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	sweepTempDirs(slog.New(slog.DiscardHandler))
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		os.RemoveAll(stale)
		t.Errorf("stale dir kept: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("live dir removed: %v", err)
	}
}

// local-kms listens on loopback only, as dynalite does: no socket of its
// port listens on another address (the kernel's socket table, not a dial
// from outside, which a host without another interface could not make).
func TestKMSListensOnLoopbackOnly(t *testing.T) {
	s, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, endpoint := range map[string]string{"local-kms": s.KMSEndpoint, "dynalite": s.DynamoEndpoint} {
		port := portOf(endpoint)
		addrs := listeners(t, port)
		if len(addrs) == 0 {
			t.Errorf("%s: no listening socket on port %d", name, port)
		}
		for _, a := range addrs {
			if a != "0100007F" {
				t.Errorf("%s listens on %s:%d (hex, as /proc/net/tcp*), want 127.0.0.1 only", name, a, port)
			}
		}
	}
}

// listeners are the local addresses (hex, as /proc/net/tcp and tcp6 print
// them) of the sockets listening on port.
func listeners(t *testing.T, port int) []string {
	t.Helper()
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || fields[3] != "0A" { // TCP_LISTEN
				continue
			}
			host, p, ok := strings.Cut(fields[1], ":")
			if n, err := strconv.ParseUint(p, 16, 16); ok && err == nil && int(n) == port {
				out = append(out, host)
			}
		}
	}
	return out
}
