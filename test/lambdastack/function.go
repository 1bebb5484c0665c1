package lambdastack

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// InvokePath is the emulator's Lambda invoke API.
const InvokePath = "/2015-03-31/functions/function/invocations"

// Function is one bootstrap running under the runtime interface emulator
// (aws-lambda-rie): the emulator serves the invoke API on URL and the
// Runtime API to the bootstrap, which it starts on the first invoke.
type Function struct {
	Name string
	URL  string // http://127.0.0.1:<port>

	cmd  *exec.Cmd
	done chan struct{} // closed when the emulator exits
	// out is a file, not a pipe: the emulator and the bootstrap write to it
	// directly, so what they wrote before answering an invoke is there when
	// the answer arrives (no copying goroutine to wait for).
	out  *os.File
	http *http.Client
}

// StartFunction runs bootstrap under the emulator at rie with exactly env
// (nothing of the test's own environment leaks in: the emulator hands its
// whole environment to the function). It stops when tb ends.
func StartFunction(tb testing.TB, rie, name, bootstrap string, env []string) *Function {
	tb.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		f, err := startFunction(rie, name, bootstrap, env)
		if err == nil {
			tb.Cleanup(f.stop)
			return f
		}
		lastErr = err
	}
	tb.Fatalf("lambdastack: %s: %v", name, lastErr)
	return nil
}

func startFunction(rie, name, bootstrap string, env []string) (*Function, error) {
	ip := nextLoopback()
	invokePort, runtimePort, err := freePorts(ip)
	if err != nil {
		return nil, err
	}
	invokeAddr, runtimeAddr := net.JoinHostPort(ip, strconv.Itoa(invokePort)), net.JoinHostPort(ip, strconv.Itoa(runtimePort))
	out, err := os.CreateTemp("", "lambdastack-"+name+"-*.log")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(out.Name()) // the open file lives on until closed
	f := &Function{Name: name, URL: "http://" + invokeAddr, out: out,
		http: &http.Client{Timeout: 60 * time.Second}}
	f.cmd = exec.Command(rie, "--runtime-interface-emulator-address", invokeAddr, "--runtime-api-address", runtimeAddr, bootstrap)
	f.cmd.Env = env
	f.cmd.Stdout, f.cmd.Stderr = f.out, f.out
	f.cmd.SysProcAttr = sysProcAttr()
	if err := f.cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	f.done = make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(f.done) }()
	// Ready when both the Runtime API (for the bootstrap) and the invoke API
	// accept connections: the emulator logs nothing when it listens, and a
	// port taken under it ends the process (then another try).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if listening(runtimeAddr) && listening(invokeAddr) {
			return f, nil
		}
		select {
		case <-f.done:
			defer out.Close()
			return nil, fmt.Errorf("emulator exited before listening on %s: %s", invokeAddr, f.Output())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			defer f.stop()
			return nil, fmt.Errorf("emulator did not listen on %s within 10 s: %s", invokeAddr, f.Output())
		}
	}
}

// stop kills the emulator and the bootstrap it started (one process group).
func (f *Function) stop() {
	kill(f.cmd.Process)
	<-f.done
	f.out.Close()
}

// Invoke sends one payload through the invoke API and returns the
// emulator's answer: the function's result, or its error document.
func (f *Function) Invoke(ctx context.Context, payload []byte) (status int, body []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL+InvokePath, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Output is everything the emulator and the bootstrap wrote so far.
func (f *Function) Output() string {
	st, err := f.out.Stat()
	if err != nil {
		return "(output unreadable: " + err.Error() + ")"
	}
	b, err := io.ReadAll(io.NewSectionReader(f.out, 0, st.Size()))
	if err != nil {
		return "(output unreadable: " + err.Error() + ")"
	}
	return string(b)
}

// Lines are the output's lines.
func (f *Function) Lines() []string { return strings.Split(strings.TrimSpace(f.Output()), "\n") }

var initReport = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// InitDurations are the emulator's measurements of each init phase so far,
// in milliseconds: from starting the bootstrap to its first call for work
// ("INIT REPORT(durationMs: …)"). The REPORT line's "Init Duration" of this
// emulator is not that: it times only the hand-off to the init (~0.03 ms),
// so it is not used.
func (f *Function) InitDurations() []float64 {
	var out []float64
	for _, m := range initReport.FindAllStringSubmatch(f.Output(), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		out = append(out, v)
	}
	return out
}

// Count is how many output lines contain s.
func (f *Function) Count(s string) int { return strings.Count(f.Output(), s) }

func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err == nil
}

var loopbacks atomic.Uint32

// nextLoopback is an address of the loopback network 127.0.0.0/8 that no
// other function of this process uses, in a /16 of this process's own: the
// emulators' ports, chosen before they bind them, cannot be taken by another
// emulator of this or a concurrent test binary.
func nextLoopback() string {
	n := loopbacks.Add(1)
	return fmt.Sprintf("127.%d.%d.%d", 100+os.Getpid()%150, n/250%250, n%250+1)
}

// freePorts returns two distinct free ports of ip (both are held open until
// both are chosen).
func freePorts(ip string) (int, int, error) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, 0, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], nil
}
