package main

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/rollout"
	"github.com/bettercompute/control-plane/shared/strictjson"
	"github.com/bettercompute/control-plane/test/teststack"
)

// simAgent is one node's agent as a rollout sees it, driven through the
// API: it heartbeats a signed report and does what the answer says. A
// release it is told it installs (reporting it installed, still running
// the old one), then runs on the next report; bindings it is told it
// reports done. fail makes an install of that version fail.
type simAgent struct {
	pool, node, platform string
	key                  crypto.Signer
	counter              int64
	running              *api.Version
	install              *api.Install
	pending              *api.Version // installed, runs once a report said so
	reported             bool         // a report said pending is installed
	bindings             map[string]string
	fail                 map[string]string // version → the install's failure reason
}

// rolloutFleet is the local stack with simulated agents on a shared clock.
type rolloutFleet struct {
	t      *testing.T
	st     *teststack.Stack
	clock  *teststack.Clock
	agents []*simAgent
}

func (f *rolloutFleet) beat(a *simAgent) {
	f.t.Helper()
	if a.pending != nil && a.reported {
		a.running, a.pending, a.reported = a.pending, nil, false
	}
	a.counter++
	var bs []api.ReportedBinding
	for _, id := range sortedKeys(a.bindings) {
		bs = append(bs, api.ReportedBinding{ReservationID: id, State: a.bindings[id]})
	}
	rep := api.Report{PoolID: a.pool, NodeID: a.node, Counter: a.counter, At: f.clock.Now(), Running: a.running, Install: a.install,
		Health:   api.Health{DevicesExpected: 8, DevicesVisible: 8, Checks: []api.Check{{Name: "nvidia-smi", OK: true}}},
		Bindings: append([]api.ReportedBinding{}, bs...)}
	payload, err := json.Marshal(rep)
	if err != nil {
		f.t.Fatal(err)
	}
	env, err := dsse.Sign(api.ReportPayloadType, payload, a.key)
	if err != nil {
		f.t.Fatal(err)
	}
	in := &api.HeartbeatInput{Tenant: api.Tenant{TenantID: "acme"}, NodeRef: api.NodeRef{PoolID: a.pool, NodeID: a.node}, Report: strictjson.Object(env)}
	res, err := client.New(f.st.URL, "dev:admin").NodesHeartbeat(context.Background(), in)
	if err != nil {
		f.t.Fatalf("heartbeat %s/%s: %v", a.pool, a.node, err)
	}
	a.reported = a.pending != nil
	a.bindings = map[string]string{}
	for _, b := range res.Desired.Bindings {
		a.bindings[b.ReservationID] = map[string]string{api.ActionBind: api.BindBound, api.ActionUnbind: api.BindUnbound}[b.Action]
	}
	d := res.Desired.Release
	if d == nil || (a.running != nil && a.running.Version == d.Version) || (a.install != nil && a.install.Version == d.Version) {
		return
	}
	if reason, ok := a.fail[d.Version]; ok {
		a.install = &api.Install{Version: d.Version, State: api.InstallFailed, Reason: &reason}
		return
	}
	a.install = &api.Install{Version: d.Version, State: api.InstallInstalled}
	a.pending = &api.Version{Version: d.Version, Sequence: d.Sequence}
}

// round: the clock moves, every agent reports, a reconciler pass runs.
func (f *rolloutFleet) round(d time.Duration) {
	f.t.Helper()
	f.clock.Advance(d)
	for _, a := range f.agents {
		f.beat(a)
	}
	if res, err := f.st.App.Reconciler().Pass(context.Background()); err != nil || res.Errors > 0 {
		f.t.Fatalf("reconciler pass: %+v %v", res, err)
	}
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// watchStep runs `bcctl rollouts watch` into the transcript, each poll's
// wait being one round of the fleet (the clock moves by the interval).
func (tr *transcript) watchStep(f *rolloutFleet, want int, args ...string) string {
	tr.t.Helper()
	every := 30 * time.Second
	var o, e strings.Builder
	c := &cli{out: &o, errOut: &e, getenv: func(k string) string { return tr.env[k] }, now: tr.now,
		sleep: func(context.Context, time.Duration) error { f.round(every); return nil }}
	code := c.exec(context.Background(), args)
	tr.b.WriteString("$ bcctl " + strings.Join(args, " ") + "\n" + o.String() + e.String())
	if code != want {
		tr.t.Errorf("bcctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, o.String(), e.String())
	}
	tr.b.WriteString("[exit " + strconv.Itoa(code) + "]\n\n")
	return o.String()
}

// The rollouts verbs against the real app behind the local gateway: two
// pools of simulated agents (one node of a platform the release has no
// binary for), signed releases, a rollout created, paused, resumed and
// watched to completion (a node drained around a reservation on its
// devices first); a second whose node fails its install, so it aborts
// and rolls the updated node back; a third aborted by hand without
// rollback; the refusals before sending, the API's errors and their
// hints, and -o json. The app and the CLI share one clock and every
// rollout's id comes from its client token, so the order of the nodes,
// and so every picture, is the same each run.
func TestRolloutsGolden(t *testing.T) {
	key, err := dsse.GenerateKey(dsse.AlgECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	clock := teststack.NewClock(time.Now().UTC().Truncate(time.Minute))
	st := teststack.Start(t, teststack.WithCursorKey("test"), teststack.WithClock(clock.Now),
		teststack.WithPins(teststack.Pins{Keys: []crypto.PublicKey{key.Public()}}),
		teststack.WithDecider(&iam.Policy{Grants: []iam.Grant{{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}}}}))
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyPEM, _ := dsse.MarshalPrivateKeyPEM(key)
	keyFile := write("release.pem", keyPEM)
	env := map[string]string{"BC_API_URL": st.URL, "BC_TOKEN": "dev:admin", "BC_TENANT": "acme"}
	f := &rolloutFleet{t: t, st: st, clock: clock}

	// Set up (not in the golden file): releases 1.0.0 to 3.0.0 signed and
	// registered, two pools, their nodes registered and reporting 1.0.0.
	setup := &transcript{t: t, env: env, now: clock.Now}
	example, err := os.ReadFile("../../docs/examples/release-1.0.0.json")
	if err != nil {
		t.Fatal(err)
	}
	for seq, version := range []string{"1.0.0", "2.0.0", "3.0.0"} {
		s := strings.Replace(string(example), `"sequence": 1`, fmt.Sprintf(`"sequence": %d`, seq+1), 1)
		statement := write(version+".json", []byte(strings.Replace(s, `"1.0.0"`, `"`+version+`"`, 1)))
		manifest := filepath.Join(dir, version+".manifest.json")
		setup.step(0, "sign", "--statement", statement, "--key", keyFile, "--out", manifest)
		setup.step(0, "releases", "register", "--manifest", manifest)
	}
	setup.step(0, "pools", "create", "gpu-pool-1", "--devices", "gpu.h100=32")
	setup.step(0, "pools", "create", "gpu-pool-2", "--devices", "gpu.h100=16")
	nodes := []struct{ pool, node, platform string }{
		{"gpu-pool-1", "gpu.h100-node-0", "linux/amd64"}, {"gpu-pool-1", "gpu.h100-node-1", "linux/amd64"},
		{"gpu-pool-1", "gpu.h100-node-2", "linux/arm64"}, {"gpu-pool-1", "gpu.h100-node-3", "linux/amd64"},
		{"gpu-pool-2", "gpu.h100-node-0", "linux/amd64"}, {"gpu-pool-2", "gpu.h100-node-1", "linux/riscv64"},
	}
	for _, n := range nodes {
		k, err := dsse.GenerateKey(dsse.AlgEd25519)
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := dsse.MarshalPublicKeyPEM(k.Public())
		setup.step(0, "nodes", "register", "--pool", n.pool, n.node, "--public-key-file", write(n.pool+"-"+n.node+".pub", pub), "--platform", n.platform)
		f.agents = append(f.agents, &simAgent{pool: n.pool, node: n.node, platform: n.platform, key: k,
			running: &api.Version{Version: "1.0.0", Sequence: 1}, fail: map[string]string{}})
	}
	f.round(time.Minute) // every node ready

	tr := &transcript{t: t, env: env, now: clock.Now}
	step := tr.step
	rolloutID := func(out string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^rollout\s+(\S+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no rollout id in:\n%s", out)
		}
		return m[1]
	}
	step(0, "rollouts", "list")
	// Refused before anything is sent.
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1")
	step(2, "rollouts", "create", "2.0.0", "--wave", "100%")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "ten")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "0", "--wave", "100%")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "150%")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "1", "--wave", "50%")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "3", "--wave", "2", "--wave", "100%")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "100%", "--bake", "1.5s")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "100%", "--bake", "48h")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "100%", "--progress-deadline", "30s")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "100%", "--max-unavailable", "10%")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "100%", "--max-unavailable", "0")
	step(2, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "100%", "--drain-on-timeout", "wait")
	// Refused by the API, each with its hint.
	step(1, "rollouts", "create", "9.9.9", "--pool", "gpu-pool-1", "--wave", "100%")
	step(1, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--pool", "nope", "--wave", "100%")
	step(1, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--pool", "gpu-pool-1", "--wave", "100%")
	step(1, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "2")

	// A reservation holds a whole node of gpu-pool-1 for the next ten
	// minutes: the rollout drains that node around it.
	step(0, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "8", "--end", "+10m", "--client-token", "train-1")

	create := []string{"rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--pool", "gpu-pool-2", "--wave", "1", "--wave", "50%", "--wave", "100%",
		"--max-unavailable", "2", "--bake", "2m", "--client-token", "upgrade-2.0.0"}
	first := rolloutID(step(0, create...))
	step(0, append([]string{"-o", "json"}, create...)...) // the same again: the same rollout
	// Its pools are taken: CONFLICT naming it; its token is taken too.
	step(1, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-2", "--wave", "100%", "--client-token", "pool-2-only")
	step(1, "rollouts", "create", "2.0.0", "--pool", "gpu-pool-1", "--wave", "100%", "--client-token", "upgrade-2.0.0")
	step(0, "rollouts", "list")
	f.round(time.Second) // its nodes taken
	f.round(time.Second) // its waves' bounds found
	step(0, "rollouts", "nodes", first)
	step(0, "rollouts", "nodes", first, "--limit", "2")
	step(0, "rollouts", "nodes", first, "--limit", "2", "--all")
	step(0, "rollouts", "nodes", first, "--step", "skipped")
	f.round(time.Second) // wave 1 starts
	step(0, "rollouts", "get", first)
	step(0, "rollouts", "pause", first, "--reason", "checking the dashboards")
	step(0, "rollouts", "resume", first)
	step(0, "rollouts", "resume", first) // not paused: unchanged
	// Completed, but its riscv64 node had no binary: not every node runs
	// 2.0.0, so watch exits 1 and says so.
	tr.watchStep(f, 1, "rollouts", "watch", first, "--interval", "30s")
	step(0, "rollouts", "get", first)
	step(0, "rollouts", "pause", first) // completed: unchanged

	// 3.0.0 onto gpu-pool-1: the second node of its order fails its
	// install; with --max-failed 0 it aborts and rolls back the first.
	second := rolloutID(step(0, "rollouts", "create", "3.0.0", "--pool", "gpu-pool-1", "--wave", "2", "--wave", "100%", "--bake", "0s",
		"--max-unavailable", "1", "--client-token", "upgrade-3.0.0"))
	f.round(time.Second)
	f.round(time.Second)
	var order api.RolloutNodesResult
	if err := client.New(st.URL, "dev:admin").Call(ctx, "rollouts.nodes", map[string]any{"tenantId": "platform", "rolloutId": second}, &order); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.agents {
		if a.pool == order.Nodes[1].PoolID && a.node == order.Nodes[1].NodeID {
			// As the agent words it: longer than the 200 characters a
			// rollout keeps, so the API's copy ends inside the second digest.
			a.fail["3.0.0"] = "download https://releases.example.com/bcd/3.0.0/bcd-linux-amd64: sha256 " + strings.Repeat("ab", 32) +
				", the manifest says " + strings.Repeat("cd", 32)
		}
	}
	tr.watchStep(f, 1, "rollouts", "watch", second, "--interval", "30s")
	step(0, "rollouts", "nodes", second)
	step(0, "rollouts", "abort", second, "--reason", "after the fact") // rolled back: unchanged

	// 3.0.0 again, aborted by hand once a node is updated: --no-rollback
	// leaves it on 3.0.0.
	for _, a := range f.agents {
		delete(a.fail, "3.0.0")
	}
	third := rolloutID(step(0, "rollouts", "create", "3.0.0", "--pool", "gpu-pool-1", "--wave", "1", "--wave", "100%", "--bake", "10m",
		"--no-rollback", "--drain-wait", "30m", "--drain-on-timeout", "force", "--progress-deadline", "10m", "--max-failed", "1", "--client-token", "upgrade-3.0.0-again"))
	for range 5 {
		f.round(30 * time.Second)
	}
	step(0, "rollouts", "get", third)
	step(0, "rollouts", "abort", third, "--reason", "p99 latency up 40% on wave 1")
	f.round(30 * time.Second)
	step(0, "rollouts", "get", third)
	// Already aborting: unchanged (exit 0, as the API answers), and the
	// second abort's reason is not recorded.
	step(0, "rollouts", "abort", third, "--reason", "still slow")
	tr.watchStep(f, 1, "rollouts", "watch", third)
	step(0, "rollouts", "list")
	step(0, "rollouts", "list", "--state", "completed")
	step(0, "rollouts", "list", "--limit", "1")
	step(1, "rollouts", "get", "NOPE")
	step(1, "rollouts", "resume", "NOPE")
	step(2, "rollouts", "watch", third, "--interval", "0s")

	// A reservation of the whole pool, and a rollout that does not wait
	// for it (--drain-wait 0s, force): the reservation's timeline names
	// the rollout that disrupted it.
	held := step(0, "reservations", "create", "--pool", "gpu-pool-1", "--resource", "gpu.h100", "--count", "32", "--end", "+1h", "--client-token", "all-of-pool-1")
	heldID := strings.Fields(held)[1]
	fourth := rolloutID(step(0, "rollouts", "create", "3.0.0", "--pool", "gpu-pool-1", "--wave", "100%", "--max-unavailable", "4",
		"--drain-wait", "0s", "--drain-on-timeout", "force", "--client-token", "force-3.0.0"))
	for range 4 {
		f.round(30 * time.Second)
	}
	step(0, "reservations", "get", heldID)
	out := strings.ReplaceAll(tr.String(), dir, "<dir>")
	for id, name := range map[string]string{first: "<rollout-1>", second: "<rollout-2>", third: "<rollout-3>", fourth: "<rollout-4>"} {
		out = strings.ReplaceAll(out, id, name)
	}
	golden(t, "rollouts.golden", normalise(out))

	// -o json is the API's answer as it is.
	raw := step(0, "-o", "json", "rollouts", "get", first)
	var got api.RolloutResult
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	if r := got.Rollout; r.RolloutID != first || r.State != api.Completed || r.Counts.Updated != 5 || r.Counts.Skipped != 1 || len(r.Waves) != 3 {
		t.Errorf("-o json rollouts get: %+v", r)
	}
	// watch -o json: one line per change, {"rollout", "nodes"}; an aborted
	// rollout's is its last, exit 1.
	var o, e strings.Builder
	c := &cli{out: &o, errOut: &e, getenv: func(k string) string { return env[k] }, now: clock.Now, sleep: conc.Sleep}
	if code := c.exec(ctx, []string{"-o", "json", "rollouts", "watch", third}); code != exitAPIError || strings.Count(o.String(), "\n") != 1 {
		t.Errorf("-o json rollouts watch: exit %d\n%s%s", code, o.String(), e.String())
	}
	var line struct {
		Rollout api.Rollout
		Nodes   []api.NodeProgress
	}
	if err := json.Unmarshal([]byte(o.String()), &line); err != nil || line.Rollout.State != api.Aborted || len(line.Nodes) != 4 {
		t.Errorf("-o json rollouts watch: %v %+v", err, line)
	}
	raw = step(0, "-o", "json", "rollouts", "nodes", first, "--limit", "4", "--all")
	var ns api.RolloutNodesResult
	if err := json.Unmarshal([]byte(raw), &ns); err != nil {
		t.Fatal(err)
	}
	if len(ns.Nodes) != 6 || ns.NextCursor != "" {
		t.Errorf("-o json rollouts nodes --all: %d nodes, cursor %q", len(ns.Nodes), ns.NextCursor)
	}
}

func TestParseWaves(t *testing.T) {
	n := func(v int) api.WaveSpec { return api.WaveSpec{Nodes: &v} }
	p := func(v int) api.WaveSpec { return api.WaveSpec{Percent: &v} }
	for _, c := range []struct {
		in   []string
		want []api.WaveSpec
		err  string
	}{
		{[]string{"100%"}, []api.WaveSpec{p(100)}, ""},
		{[]string{"1", "10%", "100%"}, []api.WaveSpec{n(1), p(10), p(100)}, ""},
		{[]string{"5", "5", "20"}, []api.WaveSpec{n(5), n(5), n(20)}, ""}, // counts: the API checks the last covers every node
		{[]string{" 7 "}, []api.WaveSpec{n(7)}, ""},
		{[]string{"0"}, nil, "--wave 0 (wave 1): a node count must be 1 to 1000000"},
		{[]string{"0%"}, nil, "a percent must be 1% to 100%"},
		{[]string{"101%"}, nil, "a percent must be 1% to 100%"},
		{[]string{"1.5"}, nil, "not a node count (5) or a percent (10%)"},
		{[]string{"-1"}, nil, "not a node count"},
		{[]string{"10 %"}, nil, "not a node count"},
		{[]string{"%"}, nil, "not a node count"},
		{[]string{""}, nil, "not a node count"},
		{[]string{"99999999999999999999"}, nil, "not a node count"},
		{[]string{"1", "50%"}, nil, "--wave 50%: the last wave must cover every node: end with --wave 100%"},
		{[]string{"4", "2", "100%"}, nil, "--wave 2 (wave 2): covers fewer nodes than wave 1 (4)"},
		{[]string{"4", "10%", "2", "100%"}, nil, "--wave 2 (wave 3): covers fewer nodes than wave 1 (4)"},
		{[]string{"50%", "20%", "100%"}, nil, "--wave 20% (wave 2): a smaller percent than an earlier wave (50%)"},
		{strings.Split("1,2,3,4,5,6,7,8,9,10,100%", ","), nil, "--wave: 11 waves, at most 10"},
	} {
		got, err := parseWaves(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseWaves(%q): error %v, want %q", c.in, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("parseWaves(%q): %v", c.in, err)
		case c.err == "":
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(c.want)
			if string(a) != string(b) {
				t.Errorf("parseWaves(%q) = %s, want %s", c.in, a, b)
			}
		}
	}
}

// fieldDoc is a field as the catalog describes it; min and max are its
// limits (nil: none), which Constraints words.
func fieldDoc(name, typ, constraints string, min, max *int64) strictjson.FieldDoc {
	return strictjson.FieldDoc{Name: name, Type: typ, Constraints: constraints, Min: min, Max: max}
}

func TestCheckBounds(t *testing.T) {
	bake := field{FieldDoc: fieldDoc("bakeSeconds", "integer", "0..86400", new(int64(0)), new(int64(86400))), flag: "bake"}
	failed := field{FieldDoc: fieldDoc("maxFailedNodes", "integer", "at least 0", new(int64(0)), nil), flag: "max-failed"}
	for _, c := range []struct {
		f    field
		n    int
		raw  string
		want string
	}{
		{bake, 0, "0s", ""},
		{bake, 86400, "24h", ""},
		{bake, 86401, "24h0m1s", "--bake: 24h0m1s (86401s) is out of range: 0s to 1d"},
		{bake, -60, "-1m", "--bake: -1m (-60s) is out of range: 0s to 1d"},
		{failed, 0, "0", ""},
		{failed, -1, "-1", "--max-failed: -1 is out of range: at least 0"},
	} {
		err := checkBounds(c.f, c.n, c.raw)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("checkBounds(%s, %d) = %v, want %q", c.f.flag, c.n, err, c.want)
		}
	}
}

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", -time.Second: "0s", 45 * time.Second: "45s", 1500 * time.Millisecond: "2s", 90 * time.Second: "1m30s",
		5 * time.Minute: "5m", time.Hour: "1h", time.Hour + 5*time.Minute + 9*time.Second: "1h5m", 24 * time.Hour: "1d",
		7 * 24 * time.Hour: "7d", 50 * time.Hour: "2d2h",
	} {
		if got := span(d); got != want {
			t.Errorf("span(%v) = %q, want %q", d, got, want)
		}
	}
}

// The watch picture of a rollout rolling back after a failure in its
// second wave, of twelve nodes in three waves, with the clock's parts and
// without; and a baking one.
func TestRolloutPicture(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	pct := func(v int) api.WaveSpec { return api.WaveSpec{Percent: &v} }
	one := 1
	r := api.Rollout{RolloutID: "R1", Version: "2.0.0", Sequence: 2, Pools: []string{"p1", "p2"}, State: api.Aborting, Reason: rollout.ReasonFailures,
		Waves:    []api.Wave{{Size: 1, StartedAt: at(20 * time.Minute), FinishedAt: at(18 * time.Minute)}, {Size: 6, StartedAt: at(10 * time.Minute)}, {Size: 12}},
		Counts:   api.Counts{Nodes: 12, Pending: 6, Installing: 1, Updated: 3, Failed: 1, Skipped: 1},
		Settings: api.Settings{Waves: []api.WaveSpec{{Nodes: &one}, pct(50), pct(100)}, BakeSeconds: 300, MaxUnavailable: 2, RollbackOnAbort: true},
		History:  []api.RolloutEvent{{State: api.Progressing}, {State: api.Aborting, Reason: rollout.ReasonFailures}}}
	node := func(i, wave int, step api.RolloutStep, rollback, reason string) api.NodeProgress {
		return api.NodeProgress{PoolID: "p1", NodeID: fmt.Sprintf("gpu-node-%d", i), Wave: wave, Step: step, Rollback: rollback, Reason: reason}
	}
	nodes := []api.NodeProgress{node(0, 0, api.Updated, rollout.RollbackDone, ""),
		node(1, 1, api.Updated, rollout.RollbackInstalling, ""), node(2, 1, api.Failed, "", "install: sha256 mismatch"),
		node(3, 1, api.Installing, "", ""), node(4, 1, api.Skipped, "", api.ReasonNoBinary), node(5, 1, api.Updated, "", "")}
	for i := 6; i < 12; i++ {
		nodes = append(nodes, node(i, 2, api.Pending, "", ""))
	}
	var b strings.Builder
	rolloutPicture{Rollout: r, Nodes: nodes}.Draw(&b, now, true)
	want := `rollout R1 · 2.0.0 (sequence 2) · p1, p2
aborting · wave 2 of 3 · 12 nodes: 3 updated, 1 failed, 1 skipped, 1 in progress (1 installing), 6 pending
abort reason: failures: 1 failed, more than --max-failed 0 allows
waiting for: 1 node in progress to finish (those draining go back at once), then the rollback of the nodes it updated

WAVE  SIZE  STATUS   NODES
1     1     done     ↩
2     5     running  ↺✗↓–✓
3     6     pending  ······

failed: gpu-node-2 (p1, wave 2): install: sha256 mismatch

· pending  ~ draining  ↓ installing  ? verifying  ✓ updated  ✗ failed  – skipped  ↺ rolling back  ↩ rolled back  ! rollback failed
`
	if b.String() != want {
		t.Errorf("picture:\n%s\nwant:\n%s", b.String(), want)
	}
	// ASCII, the installing node done: the rollback's progress.
	nodes[3].Step = api.Updated
	r.Counts.Installing, r.Counts.Updated = 0, 4
	b.Reset()
	rolloutPicture{Rollout: r, Nodes: nodes, ASCII: true}.Draw(&b, now, true)
	for _, s := range []string{"waiting for: the rollback: 1 rolling back, 2 to go", "2     5     running  rx+-+", "3     6     pending  ......",
		". pending  ~ draining  v installing"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("ASCII picture lacks %q:\n%s", s, b.String())
		}
	}

	// Baking between waves 1 and 2, 120 nodes: groups of ten, five a line,
	// the countdown only with the clock's parts.
	r = api.Rollout{RolloutID: "R2", Version: "2.0.0", Sequence: 2, Pools: []string{"p1"}, State: api.Progressing,
		Waves:    []api.Wave{{Size: 60, StartedAt: at(10 * time.Minute), FinishedAt: at(90 * time.Second)}, {Size: 120}},
		Counts:   api.Counts{Nodes: 120, Updated: 60, Pending: 60},
		Settings: api.Settings{BakeSeconds: 300, MaxUnavailable: 4, RollbackOnAbort: true}}
	nodes = nil
	for i := range 120 {
		st := api.Updated
		if i >= 60 {
			st = api.Pending
		}
		nodes = append(nodes, node(i, i/60, st, "", ""))
	}
	b.Reset()
	p := rolloutPicture{Rollout: r, Nodes: nodes}
	p.Draw(&b, now, true)
	for _, s := range []string{"waiting for: the bake, 3m30s left, then wave 2\n",
		"1     60    done        ✓✓✓✓✓✓✓✓✓✓ ✓✓✓✓✓✓✓✓✓✓ ✓✓✓✓✓✓✓✓✓✓ ✓✓✓✓✓✓✓✓✓✓ ✓✓✓✓✓✓✓✓✓✓\n                        ✓✓✓✓✓✓✓✓✓✓\n",
		"2     60    bake 3m30s  ·········· "} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("baking picture lacks %q:\n%s", s, b.String())
		}
	}
	var early, late strings.Builder
	p.Draw(&early, now, false)
	p.Draw(&late, now.Add(time.Minute), false)
	if early.String() != late.String() || strings.Contains(early.String(), "3m30s") || !strings.Contains(early.String(), "baking") {
		t.Errorf("without the clock's parts, a minute later differs or shows the countdown:\n%s\n%s", early.String(), late.String())
	}
	// Before the reconciler walked the order, the API answers wave 0 for
	// every node: the cells go by position (the waves are prefixes of the
	// order), one in each wave, not both in wave 1.
	unwalked := api.Rollout{RolloutID: "R3", Version: "1.1.0", Sequence: 2, Pools: []string{"sim-fleet"}, State: api.Progressing,
		Waves: []api.Wave{{Size: 1}, {Size: 2}}, Counts: api.Counts{Nodes: 2, Pending: 2},
		Settings: api.Settings{MaxUnavailable: 1, RollbackOnAbort: true}}
	b.Reset()
	rolloutPicture{Rollout: unwalked, Nodes: []api.NodeProgress{node(0, 0, api.Pending, "", ""), node(1, 0, api.Pending, "", "")}}.Draw(&b, now, true)
	if s := b.String(); !strings.Contains(s, "1     1     next     ·\n2     1     pending  ·\n") {
		t.Errorf("picture before the waves' bounds are known:\n%s", s)
	}
	// Fewer nodes read than the rollout has: the cells say so.
	b.Reset()
	rolloutPicture{Rollout: r, Nodes: nodes[:70], Partial: true}.Draw(&b, now, true)
	if s := b.String(); !strings.Contains(s, "(+50 not drawn)") || !strings.Contains(s, "cells: the first 70 of 120 nodes") {
		t.Errorf("partial picture:\n%s", s)
	}
}

// The rollouts verbs' help (TestHelpAndCompletion's list covers others),
// and completion of their enum flags from the catalog.
func TestRolloutsHelp(t *testing.T) {
	var transcript strings.Builder
	for _, args := range [][]string{{"rollouts", "--help"}, {"rollouts", "create", "--help"}, {"rollouts", "watch", "--help"},
		{"rollouts", "nodes", "--help"}, {"rollouts", "abort", "--help"}} {
		out, errOut, code := bcctlRun(t, nil, args...)
		if code != 0 {
			t.Errorf("bcctl %v: exit %d %s", args, code, errOut)
		}
		transcript.WriteString("$ bcctl " + strings.Join(args, " ") + "\n" + out + "\n")
	}
	golden(t, "rollouts-help.golden", ports.ReplaceAllString(transcript.String(), "127.0.0.1:<port>"))
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"rollouts", "create", "2.0.0", "--drain-on-timeout", ""}, []string{"skip", "force"}},
		{[]string{"rollouts", "list", "--state", ""}, []string{"progressing", "rolled_back"}},
		{[]string{"rollouts", "nodes", "R", "--step", ""}, []string{"draining", "verifying"}},
	} {
		out, _, _ := bcctlRun(t, nil, append([]string{"__complete"}, c.args...)...)
		for _, s := range c.want {
			if !strings.Contains(out, s+"\n") {
				t.Errorf("completion of %v lacks %s:\n%s", c.args, s, out)
			}
		}
	}
}

// A completed rollout that left nodes behind says which and why, and
// where the version runs; one that updated every node says nothing.
func TestShortfall(t *testing.T) {
	node := func(pool string, step api.RolloutStep, reason string) api.NodeProgress {
		return api.NodeProgress{PoolID: pool, NodeID: "n", Step: step, Reason: reason}
	}
	for _, c := range []struct {
		counts  api.Counts
		nodes   []api.NodeProgress
		partial bool
		want    string
	}{
		{api.Counts{Nodes: 2, Updated: 2}, nil, false, ""},
		{api.Counts{Nodes: 2, Skipped: 2}, []api.NodeProgress{node("p", api.Skipped, "no_binary"), node("p", api.Skipped, "no_binary")}, false,
			"2 of 2 nodes skipped (no_binary): 1.1.0 runs on none of them"},
		{api.Counts{Nodes: 6, Updated: 3, Skipped: 2, Failed: 1}, []api.NodeProgress{node("p", api.Skipped, "busy"),
			node("p", api.Skipped, "not_started"), node("p", api.Failed, "install: sha256 mismatch"), node("p", api.Updated, "")}, false,
			"2 of 6 nodes skipped (1 busy, 1 not_started) and 1 failed (install): 1.1.0 runs on 3 of them"},
		{api.Counts{Nodes: 1500, Updated: 1499, Failed: 1}, nil, true, "1 of 1500 nodes failed: 1.1.0 runs on 1499 of them"},
		{api.Counts{Nodes: 1500, Updated: 1498, Skipped: 2}, []api.NodeProgress{node("p", api.Skipped, "busy")}, true,
			"2 of 1500 nodes skipped (1 busy, of the nodes drawn): 1.1.0 runs on 1498 of them"},
	} {
		r := api.Rollout{Version: "1.1.0", State: api.Completed, Counts: c.counts}
		if got := shortfall(r, c.nodes, c.partial); got != c.want {
			t.Errorf("shortfall(%+v) = %q, want %q", c.counts, got, c.want)
		}
	}
	// The picture names the pools whose baseline moved: those with an
	// updated node.
	r := api.Rollout{Version: "1.1.0", Pools: []string{"a", "b"}, State: api.Completed, Counts: api.Counts{Nodes: 2, Updated: 1, Skipped: 1}}
	if got, want := completedText(r, []api.NodeProgress{node("a", api.Updated, ""), node("b", api.Skipped, "busy")}, false),
		"1.1.0 is the baseline of a (not of b: no node updated there)"; got != want {
		t.Errorf("completedText = %q, want %q", got, want)
	}
	r.Counts = api.Counts{Nodes: 2, Skipped: 2}
	if got, want := completedText(r, nil, false), "no node was updated: 1.1.0 runs on none of them and is no pool's baseline"; got != want {
		t.Errorf("completedText = %q, want %q", got, want)
	}
}

// Reasons are never cut inside a word: the API's clipped tail is cut back
// to a word, a table cell cuts at a word, watch wraps at words.
func TestReasonText(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	clipped := string([]rune("install: download https://r.example.com/bcd: sha256 " + hash + ", the manifest says " + hash)[:199]) + "…"
	if got, want := readableReason(clipped), "install: download https://r.example.com/bcd: sha256 "+hash+", the manifest says …"; got != want {
		t.Errorf("readableReason = %q, want %q", got, want)
	}
	if got, cut := cutReason("install: sha256 mismatch"); got != "install: sha256 mismatch" || cut {
		t.Errorf("a short reason: %q %v", got, cut)
	}
	if got, cut := cutReason(clipped); got != "install: download https://r.example.com/bcd: sha256…" || !cut {
		t.Errorf("a long reason in a cell: %q %v", got, cut)
	}
	if got, _ := cutReason("install: download https://releases.example.com/bcd/3.0.0/bcd-linux-amd64: sha256 " + hash); got != "install: download https://releases.example.com/bcd/3.0.0/…" {
		t.Errorf("a long URL in a cell: %q", got)
	}
	lines := wrapWords(readableReason(clipped), 40)
	for _, l := range lines {
		if len(l) > 40 && strings.Contains(l, " ") { // only a word longer than the line may exceed it
			t.Errorf("wrapped line %q is longer than 40", l)
		}
	}
	if strings.Join(lines, " ") != readableReason(clipped) {
		t.Errorf("wrapped: %q", lines)
	}
}

// pause, resume and abort say when they changed nothing, from the state
// before the call and the answer (the API answers such a call unchanged,
// no error); a call that changed the rollout says nothing.
func TestUnchangedNote(t *testing.T) {
	for _, c := range []struct {
		method        string
		before, after api.RolloutState
		reason, want  string
	}{
		{"rollouts.pause", api.Progressing, api.Paused, "x", ""},
		{"rollouts.abort", api.Paused, api.Aborting, "", ""},
		{"rollouts.abort", "", api.Aborting, "", ""}, // the state before unknown: taken as changed
		{"rollouts.abort", api.Aborting, api.Aborting, "again", `bcctl: rollout R was already aborting: the abort changed nothing; its --reason "again" was not recorded` + "\n"},
		{"rollouts.pause", api.Aborting, api.Aborting, "", "bcctl: rollout R is aborting: the pause changed nothing (it changes a progressing rollout only)\n"},
		{"rollouts.resume", api.Aborted, api.Aborted, "", "bcctl: rollout R was already aborted, a finished rollout: the resume changed nothing\n"},
		{"rollouts.get", api.Completed, api.Completed, "", ""},
	} {
		var e strings.Builder
		c2 := &cli{errOut: &e}
		answer, _ := json.Marshal(api.RolloutResult{Rollout: api.Rollout{RolloutID: "R", State: c.after}})
		c2.unchangedNote(c.method, c.before, answer, c.reason)
		if e.String() != c.want {
			t.Errorf("%s %s → %s: %q, want %q", c.method, c.before, c.after, e.String(), c.want)
		}
	}
}
