package devstack

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

// child is one server process: its output is kept (last lines, for errors)
// and logged, and a line that announces readiness yields its endpoint.
type child struct {
	name string
	cmd  *exec.Cmd
	log  *slog.Logger

	ready    chan struct{} // closed when the ready line was seen
	endpoint string        // set before ready is closed
	done     chan struct{} // closed when the process has exited
	waitErr  error         // set before done is closed

	mu   sync.Mutex
	tail []string
}

const tailLines = 40

// startChild starts path with args and extra env in its own process group;
// readyLine reports the endpoint announced by one output line.
func startChild(name, path string, args, env []string, log *slog.Logger, readyLine func(string) (string, bool)) (*child, error) {
	c := &child{name: name, log: log, ready: make(chan struct{}), done: make(chan struct{})}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = sysProcAttr()
	var once sync.Once
	w := &lineWriter{onLine: func(line string) {
		c.record(line)
		if ep, ok := readyLine(line); ok {
			once.Do(func() { c.endpoint = ep; close(c.ready) })
		}
	}}
	// One writer for both streams: one pipe, lines in the order written.
	cmd.Stdout, cmd.Stderr = w, w
	// A grandchild holding the pipe open must not block Wait forever.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devstack: start %s: %w", name, err)
	}
	c.cmd = cmd
	go func() {
		c.waitErr = cmd.Wait()
		w.flush()
		close(c.done)
	}()
	return c, nil
}

// waitReady waits for the ready line, then polls probe (a real request)
// until it succeeds, the child exits, or ctx ends.
func (c *child) waitReady(ctx context.Context, probe func(ctx context.Context, endpoint string) error) (string, error) {
	select {
	case <-c.ready:
	case <-c.done:
		return "", c.exitError()
	case <-ctx.Done():
		return "", fmt.Errorf("devstack: %s did not announce its port: %w\n%s", c.name, ctx.Err(), c.output())
	}
	delay := 10 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := probe(pctx, c.endpoint)
		cancel()
		if err == nil {
			return c.endpoint, nil
		}
		select {
		case <-c.done:
			return "", c.exitError()
		case <-ctx.Done():
			return "", fmt.Errorf("devstack: %s at %s does not answer: %w (last error: %v)\n%s", c.name, c.endpoint, ctx.Err(), err, c.output())
		case <-time.After(delay):
		}
		delay = min(2*delay, 250*time.Millisecond)
	}
}

func (c *child) exitError() error {
	return fmt.Errorf("devstack: %s exited during start (%v):\n%s", c.name, c.waitErr, c.output())
}

// stop sends SIGTERM to the child's process group, then SIGKILL after grace.
// An exit caused by these signals is not an error; an earlier crash is.
func (c *child) stop(grace time.Duration) error {
	select {
	case <-c.done:
		if c.waitErr != nil {
			return fmt.Errorf("devstack: %s had exited: %v", c.name, c.waitErr)
		}
		return nil
	default:
	}
	terminate(c.cmd.Process)
	select {
	case <-c.done:
		return nil
	case <-time.After(grace):
	}
	kill(c.cmd.Process)
	<-c.done
	c.log.Warn("child killed after grace period", "child", c.name, "grace", grace.String())
	return nil
}

// exited reports whether the process has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *child) record(line string) {
	c.log.Debug(line, "child", c.name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tail) == tailLines {
		c.tail = append(c.tail[:0], c.tail[1:]...)
	}
	c.tail = append(c.tail, line)
}

// output is the child's last output lines.
func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "  " + c.name + "> " + strings.Join(c.tail, "\n  "+c.name+"> ")
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")

// lineWriter splits a stream into lines without terminal colours.
type lineWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	onLine func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		line := string(w.buf.Next(i + 1))
		w.emit(line)
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() > 0 {
		w.emit(w.buf.String())
		w.buf.Reset()
	}
}

func (w *lineWriter) emit(line string) {
	line = strings.TrimRight(ansi.ReplaceAllString(line, ""), " \t\r\n")
	if line != "" {
		w.onLine(line)
	}
}
