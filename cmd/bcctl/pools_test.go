package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/test/teststack"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test ./cmd/bcctl -run %s -update to accept):\n--- got\n%s\n--- want\n%s", name, t.Name(), got, want)
	}
}

// bcctl pools show draws what pools.usage answers, against the real app.
func TestPoolsShow(t *testing.T) {
	st := teststack.Start(t, teststack.WithCursorKey("test"),
		teststack.WithDecider(&iam.Policy{Grants: []iam.Grant{{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}}}}))
	c := client.New(st.URL, "dev:admin")
	cl := &cli{out: io.Discard, errOut: io.Discard, getenv: func(string) string { return "" }, now: time.Now, client: c, apiURL: st.URL}
	ctx := context.Background()
	call := func(method string, in map[string]any) map[string]any {
		t.Helper()
		var out map[string]any
		if err := c.Call(ctx, method, in, &out); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		return out
	}
	call("pools.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resources": map[string]int{"gpu": 20}})
	from := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	at := func(h float64) string { return from.Add(time.Duration(h * float64(time.Hour))).Format(time.RFC3339) }
	for _, r := range []struct {
		count      int
		start, end float64
	}{{8, 0, 2}, {2, 1, 3.5}, {1, 1, 6}, {4, 4, 5}} {
		// Tokens make the ids, and so the choice among equal nodes, the same every run.
		call("reservations.create", map[string]any{"tenantId": "acme", "poolId": "p1", "resource": "gpu", "count": r.count,
			"window": map[string]any{"start": at(r.start), "end": at(r.end)}, "clientToken": fmt.Sprintf("show-%d-%v", r.count, r.start)})
	}
	var out bytes.Buffer
	if err := cl.showPool(ctx, &out, showOptions{Tenant: "acme", Pool: "p1", Hours: 6, Nodes: 64, ASCII: true, From: from}); err != nil {
		t.Fatal(err)
	}
	// The date and the hours on the axis change with the day; the rest not.
	got := strings.Replace(out.String(), from.Format("2006-01-02 15:04"), "FROM", 1)
	got = strings.Replace(got, from.Add(6*time.Hour).Format("2006-01-02 15:04"), "TO", 1)
	lines := strings.Split(got, "\n")
	lines[2] = "node (axis)"
	golden(t, "pools-show.golden", strings.Join(lines, "\n"))
	// Fewer rows than the resource has nodes: the figures stay the whole
	// pool's (every page is read), the header says which rows are drawn.
	out.Reset()
	if err := cl.showPool(ctx, &out, showOptions{Tenant: "acme", Pool: "p1", Resource: "gpu", Hours: 6, Nodes: 2, From: from}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "(8 of 20 devices)") || !strings.Contains(s, "rows: the first 2 of 3 nodes") ||
		strings.Contains(s, "gpu-node-2") || strings.Contains(s, "figures of the first") {
		t.Errorf("two rows of three nodes:\n%s", s)
	}
	// A tenant that cannot see the pool gets the API's answer.
	if err := cl.showPool(ctx, &out, showOptions{Tenant: "globex", Pool: "p1", Hours: 6, Nodes: 64}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("another tenant: %v", err)
	}
}

// -o json --all of pools.usage is one answer over every page: the nodes of
// all pages and their totals added up, the same as one page holding them all
// (it kept the first page only).
func TestPoolsUsageAllPages(t *testing.T) {
	st := teststack.Start(t, teststack.WithCursorKey("test"),
		teststack.WithDecider(&iam.Policy{Grants: []iam.Grant{{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}}}}))
	env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme"}
	bcctl := func(args ...string) string {
		t.Helper()
		out, errOut, code := bcctlRun(t, env, args...)
		if code != 0 {
			t.Fatalf("bcctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	bcctl("pools", "create", "p1", "--devices", "gpu=20")
	bcctl("reservations", "create", "--pool", "p1", "--resource", "gpu", "--count", "10", "--end", "+2h", "--client-token", "t1")
	from := time.Now().UTC().Truncate(time.Minute).Add(time.Minute).Format(time.RFC3339) // the reservation holds its devices then
	usage := []string{"-o", "json", "pools", "usage", "p1", "--resource", "gpu", "--from", from, "--hours", "3"}
	one := bcctl(usage...)
	all := bcctl(append(usage, "--limit", "1", "--all")...)
	if all != one {
		t.Errorf("--limit 1 --all differs from one page of every node:\n--- --all\n%s\n--- one page\n%s", all, one)
	}
	var got struct {
		Usage struct {
			Nodes []struct{ NodeID string }
			Page  struct{ Nodes, Devices, BusyNow int }
		}
		NextCursor *string
	}
	if err := json.Unmarshal([]byte(all), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Usage.Nodes) != 3 || got.Usage.Page.Nodes != 3 || got.Usage.Page.Devices != 20 || got.Usage.Page.BusyNow != 10 || got.NextCursor != nil {
		t.Errorf("--all: %d nodes, totals %+v, nextCursor %v; want 3 nodes, 20 devices, 10 busy, no cursor:\n%s",
			len(got.Usage.Nodes), got.Usage.Page, got.NextCursor, all)
	}
}
