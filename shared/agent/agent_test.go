package agent

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
)

func step(t *testing.T, a *Agent) api.HeartbeatResult {
	t.Helper()
	res, err := a.Step(context.Background())
	if err != nil {
		t.Fatalf("step: %v", err)
	}
	return res
}

// The report: signed by the node key, strictly valid, its counter the
// clock's microseconds and rising even when the clock stands still; the
// health from the driver against the node's device count.
func TestStepReport(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	f := newFixture(t, fake.srv.URL, node)
	step(t, f.agent)
	rep := fake.last()
	if rep.Counter != t0.UnixMicro() || !rep.At.Equal(t0) || rep.Running != nil || rep.Install != nil {
		t.Errorf("first report: %+v", rep)
	}
	if h := rep.Health; h.DevicesExpected != 8 || h.DevicesVisible != 8 || !h.Healthy() {
		t.Errorf("health: %+v", h)
	}
	step(t, f.agent) // the clock did not move
	if got := fake.last().Counter; got != t0.UnixMicro()+1 {
		t.Errorf("second counter %d, want %d", got, t0.UnixMicro()+1)
	}
	f.driver.SetVisible(6)
	f.driver.SetCheck("nvlink", false, "link 3 down")
	f.clock.Advance(time.Second)
	step(t, f.agent)
	rep = fake.last()
	if rep.Counter != t0.Add(time.Second).UnixMicro() {
		t.Errorf("counter after a second: %d", rep.Counter)
	}
	h := rep.Health
	if h.DevicesExpected != 8 || h.DevicesVisible != 6 || h.Healthy() || len(h.Checks) != 2 ||
		h.Checks[1].Name != "nvlink" || h.Checks[1].OK || *h.Checks[1].Detail != "link 3 down" {
		t.Errorf("unhealthy report: %+v", h)
	}
}

// The previous holder's unbind, then (only once a report saying it unbound
// was accepted) the next holder's bind of the same devices; a bind sharing
// no device with a pending unbind at once; each reported the next step; an
// unbound reservation no longer listed is forgotten, a bound one kept.
func TestStepBindingsInOrder(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	f := newFixture(t, fake.srv.URL, node)
	handover := []api.DesiredBinding{unbind("r0", "gpu-0", "gpu-1"), bind("r1", "gpu-1", "gpu-2"), bind("r2", "gpu-5")}
	fake.answers(
		[]api.DesiredBinding{bind("r0", "gpu-0", "gpu-1")},
		handover,
		handover,
		[]api.DesiredBinding{bind("r1", "gpu-1", "gpu-2"), bind("r2", "gpu-5")},
		[]api.DesiredBinding{},
	)
	all := []string{"bind r0", "unbind r0", "bind r2", "bind r1"}
	for i, w := range []struct {
		report []string // the report the step sent
		driver []string // the driver's calls once it acted on the answer
	}{
		{[]string{}, []string{"bind r0"}},
		// r0 scrubbed, r2 bound at once; r1 waits for r0's unbound to be accepted.
		{[]string{"r0 bound"}, []string{"bind r0", "unbind r0", "bind r2"}},
		// The report said r0 unbound and the answer still lists r1's bind.
		{[]string{"r0 unbound", "r2 bound"}, all},
		{[]string{"r0 unbound", "r1 bound", "r2 bound"}, all}, // still listed: still said
		{[]string{"r1 bound", "r2 bound"}, all},               // r0 no longer listed and said: forgotten
		{[]string{"r1 bound", "r2 bound"}, all},               // no longer listed but held: still said
	} {
		step(t, f.agent)
		if got := words(fake.last()); !slices.Equal(got, w.report) {
			t.Fatalf("report %d: %v, want %v", i, got, w.report)
		}
		if got := ops(f.driver); !slices.Equal(got, w.driver) {
			t.Fatalf("driver after step %d: %v, want %v", i, got, w.driver)
		}
	}
}

// The next holder is bound only after a report saying the previous one
// unbound was accepted: a step whose answer was lost (the report may or
// may not have been accepted) binds nothing, the next accepted one does.
func TestStepBindsTheNextHolderOnlyAfterAnAcceptedUnbound(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	f := newFixture(t, fake.srv.URL, node)
	n := 0
	fake.script(func(api.Report) (int, any) {
		n++
		res := answer(5)
		switch n {
		case 1:
			res.Desired.Bindings = []api.DesiredBinding{bind("r0", "gpu-0", "gpu-1")}
		case 3:
			return 503, apierr.New(apierr.Unavailable, "the answer was lost")
		default:
			res.Desired.Bindings = []api.DesiredBinding{unbind("r0", "gpu-0", "gpu-1"), bind("r1", "gpu-0", "gpu-1")}
		}
		return 200, res
	})
	step(t, f.agent)
	step(t, f.agent)
	if got, want := ops(f.driver), []string{"bind r0", "unbind r0"}; !slices.Equal(got, want) {
		t.Fatalf("after the handover's first answer: %v, want %v", got, want)
	}
	if _, err := f.agent.Step(context.Background()); apierr.CodeOf(err) != apierr.Unavailable {
		t.Fatalf("step: %v, want the UNAVAILABLE", err)
	}
	if got, want := words(fake.last()), []string{"r0 unbound"}; !slices.Equal(got, want) {
		t.Fatalf("the lost step's report: %v, want %v", got, want)
	}
	if got, want := ops(f.driver), []string{"bind r0", "unbind r0"}; !slices.Equal(got, want) {
		t.Fatalf("after a lost answer: %v, want %v", got, want)
	}
	step(t, f.agent)
	if got, want := words(fake.last()), []string{"r0 unbound"}; !slices.Equal(got, want) {
		t.Fatalf("the accepted report: %v, want %v", got, want)
	}
	if got, want := ops(f.driver), []string{"bind r0", "unbind r0", "bind r1"}; !slices.Equal(got, want) {
		t.Fatalf("after the accepted unbound: %v, want %v", got, want)
	}
	step(t, f.agent)
	if got, want := words(fake.last()), []string{"r0 unbound", "r1 bound"}; !slices.Equal(got, want) {
		t.Errorf("then: %v, want %v", got, want)
	}
}

// An unbind of a reservation the node never bound (a tombstone: released
// before this node bound it) is scrubbed and answered unbound, and the
// next holder of its devices waits for that word to be accepted like any
// other; a reservation the same answer says to unbind is never bound,
// whatever the order the answer lists them in.
func TestStepTombstonesAndUnbindsWin(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	f := newFixture(t, fake.srv.URL, node)
	fake.answers([]api.DesiredBinding{
		bind("r9", "gpu-6"), unbind("r9", "gpu-6"), // listed out of order: the unbind wins
		unbind("r7", "gpu-3"), bind("r8", "gpu-3"), // r7: a tombstone
	})
	step(t, f.agent)
	if got, want := ops(f.driver), []string{"unbind r9", "unbind r7"}; !slices.Equal(got, want) {
		t.Fatalf("first answer: driver %v, want %v", got, want)
	}
	step(t, f.agent)
	if got, want := words(fake.last()), []string{"r9 unbound", "r7 unbound"}; !slices.Equal(got, want) {
		t.Fatalf("report: %v, want %v", got, want)
	}
	if got, want := ops(f.driver), []string{"unbind r9", "unbind r7", "bind r8"}; !slices.Equal(got, want) {
		t.Fatalf("second answer: driver %v, want %v", got, want)
	}
	step(t, f.agent)
	if got, want := words(fake.last()), []string{"r9 unbound", "r7 unbound", "r8 bound"}; !slices.Equal(got, want) {
		t.Errorf("report: %v, want %v", got, want)
	}
	if got, want := ops(f.driver), []string{"unbind r9", "unbind r7", "bind r8"}; !slices.Equal(got, want) {
		t.Errorf("third answer: driver %v, want %v", got, want)
	}
	if held := f.driver.Held(); len(held) != 1 || !slices.Equal(held["r8"], []string{"gpu-3"}) {
		t.Errorf("driver holds %v", held)
	}
}

// A bind of a device another reservation still holds waits, unreported,
// until that holder's unbind is listed and done; a failed bind is reported
// failed with its reason and tried again.
func TestStepPendingAndFailedBinds(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	f := newFixture(t, fake.srv.URL, node)
	// r0 holds gpu-1 from before (the agent restarted; the driver did not).
	if err := f.driver.Bind(context.Background(), "r0", "acme", []string{"gpu-1"}); err != nil {
		t.Fatal(err)
	}
	fake.answers(
		[]api.DesiredBinding{bind("r1", "gpu-1")},
		[]api.DesiredBinding{unbind("r0", "gpu-1"), bind("r1", "gpu-1")},
	)
	step(t, f.agent) // r1 refused: gpu-1 is r0's
	step(t, f.agent) // r0 unbound; r1 waits for that word to be accepted
	if got := words(fake.last()); len(got) != 0 {
		t.Fatalf("a pending bind was reported: %v", got)
	}
	step(t, f.agent)
	if got, want := words(fake.last()), []string{"r0 unbound"}; !slices.Equal(got, want) {
		t.Fatalf("after the unbind: %v, want %v", got, want)
	}
	step(t, f.agent)
	if got, want := words(fake.last()), []string{"r0 unbound", "r1 bound"}; !slices.Equal(got, want) {
		t.Fatalf("after the unbound was accepted: %v, want %v", got, want)
	}

	f.driver.FailBinds(errors.New("nvidia-smi: device busy"))
	fake.answers([]api.DesiredBinding{bind("r2", "gpu-5")})
	step(t, f.agent)
	step(t, f.agent)
	rep := fake.last()
	i := slices.IndexFunc(rep.Bindings, func(b api.ReportedBinding) bool { return b.ReservationID == "r2" })
	if i < 0 || rep.Bindings[i].State != api.BindFailed || !strings.Contains(*rep.Bindings[i].Reason, "device busy") {
		t.Fatalf("failed bind: %+v", rep.Bindings)
	}
	f.driver.FailBinds(nil)
	step(t, f.agent)
	step(t, f.agent)
	if got := words(fake.last()); !slices.Contains(got, "r2 bound") {
		t.Errorf("after the driver healed: %v", got)
	}
}

// A replay: Step returns the CONFLICT and the next report's counter is
// past the server's latest.
func TestStepReplayMovesTheCounter(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	f := newFixture(t, fake.srv.URL, node)
	latest := t0.Add(time.Hour).UnixMicro() // another life's counter, with a clock ahead
	fake.script(func(rep api.Report) (int, any) {
		if rep.Counter <= latest {
			return 409, apierr.New(apierr.Conflict, "replay").With("reason", api.ReasonReplay).With("latestCounter", latest)
		}
		return 200, answer(30)
	})
	_, err := f.agent.Step(context.Background())
	if e := apierr.As(err); e == nil || e.Code != apierr.Conflict {
		t.Fatalf("step: %v, want the CONFLICT", err)
	}
	step(t, f.agent)
	if got := fake.last().Counter; got != latest+1 {
		t.Errorf("counter %d, want %d", got, latest+1)
	}
}

// The release in the answer: installed in the background; the next report
// says installing while it runs, then installed with the new version
// running; a refused release is reported failed and not tried again.
func TestStepInstallsTheDesiredRelease(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	site := newBinarySite(t)
	f := newFixture(t, fake.srv.URL, node, func(c *Config) { c.HTTP = site.srv.Client() })
	e := &installEnv{fixture: f, site: site}
	st, _ := e.statement("1.1.0", 2)
	rel := desired(t, st, f.release)
	gate := make(chan struct{})
	site.serve = func(w http.ResponseWriter, r *http.Request) bool { <-gate; return false }
	fake.script(func(rep api.Report) (int, any) {
		res := answer(5)
		res.Desired.Release = f.told(t, rel, rep)
		return 200, res
	})
	step(t, f.agent) // starts the install, held at the download
	step(t, f.agent)
	if in := fake.last().Install; in == nil || in.State != api.InstallInstalling || in.Version != "1.1.0" {
		t.Fatalf("during the install: %+v", in)
	}
	close(gate)
	if err := f.agent.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	step(t, f.agent)
	rep := fake.last()
	if rep.Install == nil || rep.Install.State != api.InstallInstalled || rep.Running == nil || rep.Running.Version != "1.1.0" {
		t.Fatalf("after the install: install %+v running %+v", rep.Install, rep.Running)
	}

	// A release signed by a key the node does not pin.
	st2, _ := e.statement("1.2.0", 3)
	bad := desired(t, st2, newKey(t))
	fake.script(func(rep api.Report) (int, any) {
		res := answer(5)
		res.Desired.Release, res.Desired.FloorSequence = f.told(t, bad, rep), 2
		return 200, res
	})
	step(t, f.agent)
	if err := f.agent.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := site.downloads()
	for range 3 {
		step(t, f.agent)
		f.clock.Advance(2 * RetryInstallAfter)
	}
	rep = fake.last()
	if rep.Install == nil || rep.Install.State != api.InstallFailed || !strings.Contains(*rep.Install.Reason, "unknown_key") ||
		rep.Running == nil || rep.Running.Version != "1.1.0" {
		t.Fatalf("after the refusal: install %+v running %+v", rep.Install, rep.Running)
	}
	if site.downloads() != before {
		t.Errorf("a refused release was tried again")
	}
}

// A release installed before, asked again later (a rollout's rollback, or
// a rollout back to it), is installed again; a refused one is tried again
// once an answer named another release in between.
func TestStepInstallsAReleaseAskedAgain(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	site := newBinarySite(t)
	f := newFixture(t, fake.srv.URL, node, func(c *Config) { c.HTTP = site.srv.Client() })
	e := &installEnv{fixture: f, site: site}
	st1, _ := e.statement("1.1.0", 2)
	st2, _ := e.statement("1.2.0", 3)
	v1, v2 := desired(t, st1, f.release), desired(t, st2, f.release)
	ask := func(rel api.DesiredRelease, floor int64) *api.Report {
		t.Helper()
		fake.script(func(rep api.Report) (int, any) {
			res := answer(5)
			res.Desired.Release, res.Desired.FloorSequence = f.told(t, rel, rep), floor
			return 200, res
		})
		step(t, f.agent)
		if err := f.agent.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		step(t, f.agent)
		rep := fake.last()
		return &rep
	}
	for i, c := range []struct {
		rel   api.DesiredRelease
		floor int64
		want  string
	}{{v1, 0, "1.1.0"}, {v2, 2, "1.2.0"}, {v1, 2, "1.1.0"}, {v2, 2, "1.2.0"}} {
		if rep := ask(c.rel, c.floor); rep.Running == nil || rep.Running.Version != c.want {
			t.Fatalf("step %d: running %+v, install %+v, want %s", i, rep.Running, rep.Install, c.want)
		}
	}
	// Refused (below the floor), then another release, then the same again
	// with a floor it meets: installed.
	st3, _ := e.statement("1.3.0", 4)
	v3 := desired(t, st3, f.release)
	if rep := ask(v3, 5); rep.Install == nil || rep.Install.State != api.InstallFailed {
		t.Fatalf("below the floor: %+v", rep.Install)
	}
	if rep := ask(v1, 2); rep.Running == nil || rep.Running.Version != "1.1.0" {
		t.Fatalf("back to 1.1.0: %+v", rep.Running)
	}
	if rep := ask(v3, 2); rep.Running == nil || rep.Running.Version != "1.3.0" {
		t.Fatalf("1.3.0 asked again within its floor: running %+v, install %+v", rep.Running, rep.Install)
	}
}

// New refuses a state dir it cannot make or write (installs would fail
// only at the first release), and makes a missing one.
func TestNewChecksStateDir(t *testing.T) {
	node := newKey(t)
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(dir string) Config {
		return Config{Client: client.New("http://127.0.0.1:1", "dev:fleet-agent"), TenantID: "acme", PoolID: "p1", NodeID: "gpu-node-0",
			Key: node, Platform: "linux/amd64", Devices: 8, Driver: NewRecordingDriver(8), StateDir: dir}
	}
	var sd *StateDirError
	if _, err := New(cfg(filepath.Join(file, "state"))); !errors.As(err, &sd) || sd.Dir != filepath.Join(file, "state") {
		t.Errorf("a state dir under a file: %v", err)
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(base, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if _, err := New(cfg(ro)); !errors.As(err, &sd) || !errors.Is(err, fs.ErrPermission) {
			t.Errorf("a read-only state dir: %v", err)
		}
	}
	fresh := filepath.Join(base, "a", "b")
	if _, err := New(cfg(fresh)); err != nil {
		t.Fatalf("a missing state dir: %v", err)
	}
	if entries, err := os.ReadDir(fresh); err != nil || len(entries) != 0 {
		t.Errorf("the state dir after New: %v %v (made, and the write check left nothing)", entries, err)
	}
}
