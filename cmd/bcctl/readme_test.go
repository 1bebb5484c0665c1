package main

import (
	"bufio"
	"bytes"
	"context"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/localgw"
	"github.com/bettercompute/control-plane/test/teststack"
)

// The README's first walk, as a new user pastes it, after the curl
// quickstart make run prints (both create gpu-pool-1: they must agree):
// every bcctl line of its first sh block runs and exits 0.
func TestReadmeWalk(t *testing.T) {
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)            // the README's paths are from the repository root
	st := teststack.Start(t) // the dev pins and policy, as make run
	runQuickstart(t, st.URL)

	lines := readmeCommands(t, filepath.Join(root, "README.md"))
	if len(lines) < 8 {
		t.Fatalf("found %d bcctl lines in the README's first sh block", len(lines))
	}
	logKey, err := rolloutapp.LogKey(context.Background(), st.App.App)
	if err != nil {
		t.Fatal(err)
	}
	vkey := map[string]string{"BC_RELEASE_LOG_VKEY": logKey.VerifierKey()} // as make run's export block sets it
	outputs := walkReadme(t, lines, st.URL, t.TempDir(), vkey, func(ctx context.Context, _ time.Duration) error {
		_, err := st.App.Reconciler().Pass(ctx) // watch: a reconciler pass between polls
		return err
	})
	// The README says what quotas get shows: 4 of its own reservation, 2
	// more after the quickstart's.
	if q := outputs["quotas get"]; !strings.Contains(q, " 16   6 ") {
		t.Errorf("quotas get after the quickstart and the README:\n%s", q)
	}
}

// runQuickstart sends the curl calls make run prints to the API at url.
func runQuickstart(t *testing.T, url string) {
	t.Helper()
	for _, ex := range localgw.Examples(time.Now()) {
		req, _ := http.NewRequest(http.MethodPost, url+api.Lookup(ex.Method).Path(), strings.NewReader(ex.Body))
		req.Header.Set("Authorization", "Bearer dev:"+ex.Principal)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("quickstart %s: HTTP %d", ex.Title, resp.StatusCode)
		}
	}
}

// walkReadme runs the README's bcctl lines against the API at url, /tmp/
// as tmp, each of which must exit 0; sleep is watch's wait between polls.
// It returns each verb's last output.
func walkReadme(t *testing.T, lines []string, url, tmp string, extra map[string]string, sleep func(context.Context, time.Duration) error) map[string]string {
	t.Helper()
	// releases verify keeps its checkpoint in the user's config directory.
	env := map[string]string{"BC_API_URL": url, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme", "XDG_CONFIG_HOME": tmp + "/config"}
	maps.Copy(env, extra)
	var id string
	outputs := map[string]string{}
	for _, line := range lines {
		line = strings.ReplaceAll(line, "/tmp/", tmp+"/")
		line = strings.ReplaceAll(line, "<the reservation id>", id)
		var o, e bytes.Buffer
		c := &cli{out: &o, errOut: &e, getenv: func(k string) string { return env[k] }, now: time.Now, sleep: sleep}
		args := strings.Fields(line)[1:]
		if code := c.exec(context.Background(), args); code != 0 {
			t.Fatalf("README: %s: exit %d\n%s%s", line, code, o.String(), e.String())
		}
		outputs[strings.Join(args[:2], " ")] = o.String()
		if args[0] == "reservations" && args[1] == "create" {
			id = strings.Fields(strings.SplitN(o.String(), "\n", 2)[0])[1]
		}
	}
	return outputs
}

// readmeCommands returns the bcctl command lines of the README's first sh
// block (comments cut off).
func readmeCommands(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case line == "```sh" && !in:
			in = true
		case line == "```" && in:
			if len(out) > 0 {
				return out
			}
			in = false
		case in && strings.HasPrefix(line, "bin/bcctl "):
			line, _, _ = strings.Cut(line, "#")
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}
