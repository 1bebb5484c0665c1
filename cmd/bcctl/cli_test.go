package main

import (
	"context"
	"crypto"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

// The CLI against the real app behind the local gateway: every resource
// verb a new user meets, its tables, its errors and exit codes, compared
// with golden files (times and derived ids normalised).
func TestCLIGolden(t *testing.T) {
	key, err := release.GenerateKey(release.AlgECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	st := teststack.Start(t, teststack.WithCursorKey("test"),
		teststack.WithPins(teststack.Pins{Keys: []crypto.PublicKey{key.Public()}}),
		teststack.WithDecider(&iam.Policy{Grants: []iam.Grant{
			{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}},
			{Principal: "viewer", Permissions: []string{"compute:pools:read"}, Scopes: []string{"tenant:acme"}},
		}}))
	dir := t.TempDir()
	pem, _ := release.MarshalPrivateKeyPEM(key)
	keyFile := filepath.Join(dir, "release.pem")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme", "BC_DYNAMODB_ENDPOINT": st.Dev.DynamoEndpoint}
	// One clock for the whole transcript: relative times resolve the same
	// in every step, as within one minute.
	now := time.Now()
	transcript := &transcript{t: t, env: env, now: func() time.Time { return now }}
	step := transcript.step
	manifest := filepath.Join(dir, "manifest.json")
	statement := "../../docs/examples/release-1.0.0.json"
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	step(0, "sign", "--statement", statement, "--key", keyFile, "--out", manifest)
	// A statement bcctl sign refuses (as register would), one that is
	// already signed, and an unsigned statement given to register.
	example, err := os.ReadFile(statement)
	if err != nil {
		t.Fatal(err)
	}
	step(4, "sign", "--statement", write("bad.json", strings.Replace(string(example), `"1.0.0"`, `"1.0"`, 1)), "--key", keyFile)
	step(4, "sign", "--statement", manifest, "--key", keyFile)
	step(4, "releases", "register", "--manifest", statement)
	step(0, "releases", "register", "--manifest", manifest)
	step(0, "releases", "list")
	// One release, from releases.list (the API has no releases.get).
	step(0, "releases", "get", "1.0.0")
	step(0, "-o", "json", "releases", "get", "1.0.0")
	step(1, "releases", "get", "9.9.9")
	step(1, "releases", "get", "v1.0.0")
	// Release refusals, each with its own hint: a key this deployment does
	// not pin, a rollback of the channel, a version taken.
	stranger, _ := release.GenerateKey(release.AlgEd25519)
	strangerPEM, _ := release.MarshalPrivateKeyPEM(stranger)
	strangerFile := write("stranger.pem", string(strangerPEM))
	seq := func(version string, n int) string {
		s := strings.Replace(string(example), `"sequence": 1`, fmt.Sprintf(`"sequence": %d`, n), 1)
		return write(version+".json", strings.Replace(s, `"1.0.0"`, `"`+version+`"`, 1))
	}
	step(0, "sign", "--statement", seq("2.0.0", 2), "--key", strangerFile, "--keyid", "none", "--out", filepath.Join(dir, "stranger.json"))
	step(1, "releases", "register", "--manifest", filepath.Join(dir, "stranger.json"))
	step(0, "sign", "--statement", seq("0.9.0", 1), "--key", keyFile, "--out", filepath.Join(dir, "old.json"))
	step(1, "releases", "register", "--manifest", filepath.Join(dir, "old.json"))
	step(0, "sign", "--statement", seq("1.0.0", 5), "--key", keyFile, "--keyid", "my-release-key", "--out", filepath.Join(dir, "again.json"))
	step(1, "releases", "register", "--manifest", filepath.Join(dir, "again.json"))
	step(0, "pools", "create", "gpu-pool-1", "--devices", "gpu.h100=16")
	step(0, "pools", "offer", "gpu-pool-1", "--to", "globex", "--resource", "gpu.h100", "--max", "4")
	step(0, "pools", "get", "gpu-pool-1")
	step(0, "quotas", "list")
	step(0, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "4",
		"--end", "+2h", "--client-token", "job-1")
	// The same command again (within the minute): the same reservation.
	step(0, "-o", "json", "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "4",
		"--end", "+2h", "--client-token", "job-1")
	step(1, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "5",
		"--end", "+2h", "--client-token", "job-1")
	step(0, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "8",
		"--start", "+3h", "--end", "+5h", "--client-token", "job-2")
	step(0, "reservations", "list")
	step(0, "reservations", "list", "--limit", "1")
	step(0, "reservations", "list", "--limit", "1", "--all")
	step(0, "-o", "json", "quotas", "get", "--pool", "gpu-pool-1", "--resource", "gpu.h100")
	// A hold that began before the span says so.
	step(0, "pools", "usage", "gpu-pool-1", "--resource", "gpu.h100", "--from", "+1h", "--hours", "1")
	// A quota whose max was lowered below used is over, not negative.
	step(0, "--tenant", "globex", "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "3", "--end", "+1h")
	step(0, "pools", "offer", "gpu-pool-1", "--to", "globex", "--resource", "gpu.h100", "--max", "1")
	step(0, "--tenant", "globex", "quotas", "list")
	// 1,024 devices on 128 nodes: one range each, not 1,024 ids.
	step(0, "pools", "create", "big", "--devices", "gpu.h100=1024")
	step(0, "reservations", "create", "--pool", "big", "--resource", "gpu.h100", "--count", "1024", "--end", "+1h", "--client-token", "all-of-it")
	// When can a reservation be had: one node held 8 devices from the
	// third hour on for four hours, so both nodes are free for two hours
	// from the seventh; a create of both in the held hours is refused and
	// says so, with the command that books the first window that fits —
	// which books it.
	base := now.Truncate(time.Hour).Add(3 * time.Hour)
	hour := func(n int) string { return base.Add(time.Duration(n) * time.Hour).UTC().Format(time.RFC3339) }
	step(0, "pools", "create", "avail-demo", "--devices", "gpu.h100=16")
	step(0, "pools", "offer", "avail-demo", "--to", "acme", "--resource", "gpu.h100", "--max", "48")
	step(0, "reservations", "create", "--pool", "avail-demo", "--resource", "gpu.h100", "--count", "8", "--start", hour(0), "--end", hour(4),
		"--client-token", "avail-1") // a token's id: the node it takes is the same every run
	step(1, "reservations", "create", "--pool", "avail-demo", "--resource", "gpu.h100", "--count", "16", "--start", hour(1), "--end", hour(3))
	book := lastLine(t, transcript.String(), "    Book it: bcctl ")
	step(0, "pools", "availability", "avail-demo", "--resource", "gpu.h100", "--count", "16", "--hours", "2", "--from", hour(0), "--to", hour(8))
	if first := lastLine(t, transcript.String(), "To book the first: bcctl "); first != book {
		t.Errorf("pools availability books with\n%s\nthe refusal said\n%s", first, book)
	}
	step(0, "-o", "json", "pools", "availability", "avail-demo", "--resource", "gpu.h100", "--count", "8", "--hours", "1", "--from", hour(0),
		"--to", hour(1), "--topology", "any")
	step(0, strings.Fields(book)...)
	step(0, "pools", "availability", "avail-demo", "--resource", "gpu.h100", "--count", "16", "--hours", "2", "--from", hour(0), "--to", hour(8))
	// Errors: what went wrong, the numbers, what to do.
	step(1, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "8",
		"--end", "+1h", "--client-token", "job-3")
	step(1, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "2",
		"--start", "+2h", "--end", "+1h")
	step(1, "--tenant", "globex", "pools", "get", "nope")
	step(1, "--token", "dev:viewer", "pools", "create", "p2", "--devices", "gpu=1")
	step(2, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "x", "--end", "+1h")
	step(2, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "1", "--end", "tomorrow")
	step(2, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "1")
	step(2, "reservations", "frobnicate")
	step(2, "reservations", "lsit")
	step(2, "resrvations", "list")
	step(3, "--api-url", "http://127.0.0.1:1", "pools", "list")
	step(2, "--api-url", "127.0.0.1:28080", "pools", "list") // no scheme: a bad command line, not an API down
	step(1, "--api-url", st.URL+"/api", "pools", "list")
	step(3, "check", "--dynamodb-endpoint", "http://127.0.0.1:1")
	step(4, "check", "--table", "nope")
	// call takes the global flags anywhere and fills tenantId from them.
	step(0, "call", "quotas.get", "poolId=gpu-pool-1", "resource=gpu.h100", "--tenant", "globex")
	step(0, "call", "--tenant=globex", "quotas.get", "poolId=gpu-pool-1", "resource=gpu.h100")
	step(0, "call", "quotas.get", "tenantId=globex", "poolId=gpu-pool-1", "resource=gpu.h100")
	step(0, "call", "releases.list", "limit:=1.0")
	// call's hints say how call takes a field (FIELD=value, FIELD:=json),
	// not a verb's flag.
	step(1, "call", "quotas.get", "resource=gpu.h100")
	step(1, "call", "reservations.create", "poolId=gpu-pool-1", "resource=gpu.h100", "count=2", "window:={}")
	step(1, "call", "reservations.create", "poolId=gpu-pool-1", "resource=gpu.h100", "count:=2", `window:={"start": "now"}`)
	got := normalise(strings.ReplaceAll(transcript.String(), dir, "<dir>"))
	golden(t, "cli.golden", got)
}

// lastLine is the last line of s that starts with prefix, without it.
func lastLine(t *testing.T, s, prefix string) string {
	t.Helper()
	var got string
	for l := range strings.Lines(s) {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			got = strings.TrimSpace(rest)
		}
	}
	if got == "" {
		t.Fatalf("no line %q in the transcript:\n%s", prefix, s[max(0, len(s)-1500):])
	}
	return got
}

// transcript runs bcctl command lines in process, as a user types them,
// and records each with its output and exit code for a golden file.
type transcript struct {
	t   *testing.T
	env map[string]string
	now func() time.Time // the CLI's clock
	b   strings.Builder
}

// step runs one command line, which must exit with want; it returns stdout.
func (tr *transcript) step(want int, args ...string) string {
	tr.t.Helper()
	var o, e strings.Builder
	c := &cli{out: &o, errOut: &e, getenv: func(k string) string { return tr.env[k] }, now: tr.now, sleep: conc.Sleep}
	code := c.exec(context.Background(), args)
	out, errOut := o.String(), e.String()
	tr.b.WriteString("$ bcctl " + strings.Join(args, " ") + "\n" + out + errOut)
	if code != want {
		tr.t.Errorf("bcctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errOut)
	}
	tr.b.WriteString("[exit " + strconv.Itoa(code) + "]\n\n")
	return out
}

func (tr *transcript) String() string { return tr.b.String() }

// Help comes from the catalog: every field, its type and limits; bash and
// zsh completion scripts are generated.
func TestHelpAndCompletion(t *testing.T) {
	var transcript strings.Builder
	for _, args := range [][]string{{"reservations", "create", "--help"}, {"releases", "list", "--help"}, {"call", "pools.offer", "-h"}, {"methods"},
		{"reservations", "--help"}, {"quotas", "get", "--help"}, {"sign", "--help"}, {"--help"}, {"nodes", "register", "--help"}, {"nodes", "list", "--help"}, {"releases", "get", "--help"}} {
		out, errOut, code := bcctlRun(t, nil, args...)
		if code != 0 {
			t.Errorf("bcctl %v: exit %d %s", args, code, errOut)
		}
		if strings.Contains(out, "\n: ") {
			t.Errorf("bcctl %v: a note without a label is printed after a colon:\n%s", args, out)
		}
		if strings.Contains(out, "](") {
			t.Errorf("bcctl %v: a markdown link in the help:\n%s", args, out)
		}
		transcript.WriteString("$ bcctl " + strings.Join(args, " ") + "\n" + out + "\n")
	}
	golden(t, "help.golden", ports.ReplaceAllString(transcript.String(), "127.0.0.1:<port>"))
	for _, shell := range []string{"bash", "zsh"} {
		out, _, code := bcctlRun(t, nil, "completion", shell)
		if code != 0 || !strings.Contains(out, "__start_bcctl") && !strings.Contains(out, "#compdef bcctl") {
			t.Errorf("completion %s: exit %d, %d bytes", shell, code, len(out))
		}
	}
	// Completion of flag values comes from the catalog's enums.
	out, _, _ := bcctlRun(t, nil, "__complete", "reservations", "list", "--state", "")
	for _, s := range []string{"active", "released", "denied"} {
		if !strings.Contains(out, s) {
			t.Errorf("--state completion lacks %s:\n%s", s, out)
		}
	}
	out, _, _ = bcctlRun(t, nil, "__complete", "nodes", "list", "--state", "")
	for _, s := range api.NodeStates {
		if !strings.Contains(out, string(s)+"\n") {
			t.Errorf("nodes list --state completion lacks %s:\n%s", s, out)
		}
	}
}

// watch prints each transition and exits at the state waited for; the
// reconciler runs between two polls (the test's sleep).
func TestWatch(t *testing.T) {
	st := teststack.Start(t, teststack.WithCursorKey("test"),
		teststack.WithDecider(&iam.Policy{Grants: []iam.Grant{{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}}}}))
	env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme"}
	if _, errOut, code := bcctlRun(t, env, "pools", "create", "p1", "--devices", "gpu=8"); code != 0 {
		t.Fatal(errOut)
	}
	out, errOut, code := bcctlRun(t, env, "-o", "json", "reservations", "create", "--pool", "p1", "--resource", "gpu", "--count", "2", "--end", "+1h")
	if code != 0 {
		t.Fatal(errOut)
	}
	id := regexp.MustCompile(`"reservationId": "([0-9A-Z]{26})"`).FindStringSubmatch(out)[1]
	// pools show from now (no --from): the reservation starting now is held now.
	if out, _, _ := bcctlRun(t, env, "pools", "show", "p1"); !strings.Contains(out, "(2 of 8 devices)") {
		t.Errorf("pools show right after a create:\n%s", out)
	}
	watch := func(args ...string) (string, string, int) {
		var o, e strings.Builder
		c := &cli{out: &o, errOut: &e, getenv: func(k string) string { return env[k] }, now: time.Now,
			sleep: func(ctx context.Context, _ time.Duration) error {
				_, err := st.App.Reconciler().Pass(ctx)
				return err
			}}
		code := c.exec(context.Background(), append([]string{"reservations", "watch", id}, args...))
		return o.String(), e.String(), code
	}
	o, e, code := watch("--until", "active")
	if code != 0 || !strings.Contains(o, "draft") || !strings.Contains(o, "placed") || !strings.Contains(o, "binding") || !strings.HasSuffix(strings.TrimSpace(o), "active") {
		t.Fatalf("watch until active: exit %d\n%s%s", code, o, e)
	}
	if _, _, code := bcctlRun(t, env, "reservations", "release", id); code != 0 {
		t.Fatal("release")
	}
	o, e, code = watch()
	if code != 0 || !strings.Contains(o, "released  by tenant") {
		t.Errorf("watch a released one: exit %d\n%s%s", code, o, e)
	}
	if _, e, code = watch("--until", "binding"); code != exitAPIError || !strings.Contains(e, "will not become binding") {
		t.Errorf("watch for a state it cannot reach: exit %d %q", code, e)
	}
}

var (
	stamps  = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?Z`)
	digests = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	ulids   = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)
	ports   = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	cursors = regexp.MustCompile(`--cursor [A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`)
	// availability's sentences: 14:00, Tue 02:00, Dec 12 02:00 (UTC).
	clocks = regexp.MustCompile(`\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) |(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{1,2} )?\d{2}:\d{2}\b`)
)

// normalise replaces what changes from run to run: times, key and manifest
// digests, generated ids, cursors, ports.
func normalise(s string) string {
	s = stamps.ReplaceAllString(s, "<time>")
	s = clocks.ReplaceAllString(s, "<when>")
	s = digests.ReplaceAllStringFunc(s, func(d string) string {
		if strings.HasPrefix(d, "9f86d0") || strings.HasPrefix(d, "60303a") {
			return d // the example binaries' digests are fixed
		}
		return "<digest>"
	})
	s = ulids.ReplaceAllString(s, "<id>")
	s = cursors.ReplaceAllString(s, "--cursor <cursor>")
	return ports.ReplaceAllString(s, "127.0.0.1:<port>")
}

// A release's expiry as the tables show it.
func TestExpiresText(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, c := range []struct {
		expires *time.Time
		want    string
	}{
		{nil, "never"},
		{at(time.Hour), "2026-12-01 11:00:00Z"},
		{at(0), "2026-12-01 10:00:00Z (expired)"},
		{at(-time.Hour), "2026-12-01 09:00:00Z (expired)"},
	} {
		if got := expiresText(release.Release{Expires: c.expires}, now); got != c.want {
			t.Errorf("expiresText(%v) = %q, want %q", c.expires, got, c.want)
		}
	}
}

// A negated switch's help says what the switch does: --no-rollback leaves
// the updated nodes where they are, so no line of its help may read as if
// the flag sent them back.
func TestNoRollbackHelp(t *testing.T) {
	out, errOut, code := bcctlRun(t, nil, "rollouts", "create", "--help")
	if code != 0 {
		t.Fatalf("exit %d %s", code, errOut)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "--no-rollback ") && !strings.Contains(l, "leaves the updated nodes on VERSION") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("want the field line and the flag line of --no-rollback, got %q", lines)
	}
	for _, l := range lines {
		i := strings.Index(l, "on abort send every updated node back")
		if i >= 0 && !strings.Contains(l[:i], "without it") {
			t.Errorf("--no-rollback described as rolling back: %q", l)
		}
		if !strings.Contains(l, "rollbackOnAbort false") {
			t.Errorf("--no-rollback line does not say it sends rollbackOnAbort false: %q", l)
		}
	}
}

// bcctl version and --version print the same line: the build's version,
// the Go release and the platform, without calling the API.
func TestVersion(t *testing.T) {
	env := map[string]string{"BC_API_URL": "not a url"} // neither needs the API
	v, errOut, code := bcctlRun(t, env, "version")
	if code != 0 || !strings.HasPrefix(v, "bcctl ") || !strings.Contains(v, runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) {
		t.Fatalf("bcctl version: exit %d %q %s", code, v, errOut)
	}
	if flag, errOut, code := bcctlRun(t, env, "--version"); code != 0 || flag != v {
		t.Errorf("bcctl --version: exit %d %q %s, want %q", code, flag, errOut, v)
	}
}

// An empty reservations list of a tenant that owns no pool and was
// offered none says so; one of a tenant with a pool does not.
func TestReservationsListOfATenantWithoutPools(t *testing.T) {
	st := teststack.Start(t)
	env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme"}
	out, errOut, code := bcctlRun(t, env, "--tenant", "globex", "reservations", "list")
	if code != 0 || !strings.Contains(errOut, "tenant globex owns no pool and was offered none") || !strings.HasPrefix(out, "RESERVATION") {
		t.Errorf("globex, no pools: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := bcctlRun(t, env, "pools", "create", "p1", "--devices", "gpu=8"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := bcctlRun(t, env, "reservations", "list"); code != 0 || errOut != "" {
		t.Errorf("acme owns p1: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := bcctlRun(t, env, "pools", "offer", "p1", "--to", "globex", "--resource", "gpu", "--max", "1"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := bcctlRun(t, env, "--tenant", "globex", "reservations", "list"); code != 0 || errOut != "" {
		t.Errorf("globex, offered p1: exit %d, stderr %q", code, errOut)
	}
}
