package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/localgw"
)

// A listen address another process holds is refused with what to do: stop
// it, or set BC_LISTEN to an address that is free now.
func TestBusyListenPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	_, err = listen(addr)
	if err == nil {
		t.Fatalf("listen on a held %s succeeded", addr)
	}
	msg := err.Error()
	_, alt, ok := strings.Cut(msg, "set BC_LISTEN=")
	if !strings.HasPrefix(msg, addr+" is in use: stop the other process") || !ok {
		t.Fatalf("busy port: %s", msg)
	}
	l, err := net.Listen("tcp", alt)
	if err != nil {
		t.Fatalf("the suggested BC_LISTEN=%s is not free: %v", alt, err)
	}
	l.Close()
	if ln, err := listen("127.0.0.1:0"); err != nil {
		t.Errorf("a free address: %v", err)
	} else {
		ln.Close()
	}
}

// The banner builds and calls the CLI as the README does (bin/bcctl), and
// says what make clean keeps and starts over.
func TestBannerAsTheReadme(t *testing.T) {
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "\n"+localgw.CLIBuild+" ") {
		t.Errorf("the README does not build the CLI as the banner says: %s", localgw.CLIBuild)
	}
	banner := localgw.Quickstart(localgw.Stack{URL: "http://127.0.0.1:8080", DynamoEndpoint: "http://127.0.0.1:20000",
		KMSEndpoint: "http://127.0.0.1:20001", Table: "better-compute", Region: "us-east-1"}, time.Now())
	for _, want := range []string{localgw.CLIBuild + ", then bin/bcctl", "stay the same across restarts and make clean", "which make clean removes to start over"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner misses %q:\n%s", want, banner)
		}
	}
	if strings.Contains(banner, "go run ./cmd/bcctl") {
		t.Errorf("banner says go run, the README builds bin/bcctl:\n%s", banner)
	}
}
