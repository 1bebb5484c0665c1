package agent

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/release"
)

// otherSigner is a log key of origin that the node does not pin.
func otherSigner(t *testing.T, origin string) *release.LogSigner { return newLogSigner(t, origin) }

// The agent's refusal table for the release log: the node has
// installed 1.1.0 under a checkpoint of size 1; the log then grows by 1.2.0
// and 1.3.0, and each case tells it 1.3.0 with evidence one way false. Each
// is refused as "log: <reason>" before anything is downloaded, and the
// stored checkpoint stays what it was. The last case is the truth, and
// installs.
func TestInstallLogRefusals(t *testing.T) {
	e := newInstallEnv(t)
	st1, _ := e.statement("1.1.0", 2)
	if err := e.install(t, desired(t, st1, e.release), 0); err != nil {
		t.Fatal(err)
	}
	stored := e.agent.Checkpoint()
	if stored == nil || stored.Size != 1 {
		t.Fatalf("stored checkpoint after the first install: %+v", stored)
	}
	st2, _ := e.statement("1.2.0", 3)
	e.logged(t, desired(t, st2, e.release), 1) // logged, never installed
	st3, _ := e.statement("1.3.0", 4)
	truth := e.logged(t, desired(t, st3, e.release), 1) // size 3, consistency from 1
	v1 := &api.Version{Version: "1.1.0", Sequence: 2}
	starts := len(e.starter.starts())
	untouched := func(t *testing.T) {
		t.Helper()
		if _, err := os.Stat(e.agent.binaryPath("1.3.0")); !os.IsNotExist(err) {
			t.Errorf("1.3.0 was downloaded (%v)", err)
		}
		if got := e.agent.Running(); !equalVersion(got, v1) || len(e.starter.starts()) != starts {
			t.Errorf("running %+v, starts %v", got, e.starter.starts())
		}
	}

	// A fork: the same log key (or whoever holds it) signs another history
	// of size 3 in which 1.3.0 is included: a table rewritten under the
	// agent.
	fork := &testLog{signer: e.log.signer}
	forkedEntry := []byte(`{"version":"0.9.0","sequence":1,"binaries":[]}`) // a history that never had 1.1.0 first
	fork.evidence(t, forkedEntry, 0)
	fork.evidence(t, payloadOf(t, desired(t, st2, e.release).Manifest), 0)
	forked := fork.evidence(t, payloadOf(t, truth.Manifest), 1)

	// The proof of entry 2 in a tree of size 4 (the log one entry later).
	later := &testLog{signer: e.log.signer, entries: append([][]byte(nil), e.log.entries...), hashes: append(e.log.hashes[:0:0], e.log.hashes...)}
	later.evidence(t, []byte(`{"version":"1.4.0"}`), 0)
	proof4, err := release.ProveInclusion(context.Background(), later, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	at4 := release.EncodeHashes(proof4)

	for _, c := range []struct {
		name  string
		alter func(d *api.DesiredLog)
		want  string
	}{
		{"no evidence", nil, "log: the answer carries no release log evidence"},
		{"forged checkpoint (another key)", func(d *api.DesiredLog) {
			d.Checkpoint = resign(t, otherSigner(t, testOrigin), d.Checkpoint)
		}, "log: checkpoint signature"},
		{"wrong origin", func(d *api.DesiredLog) {
			d.Checkpoint = resign(t, otherSigner(t, "elsewhere.example/releases"), strings.Replace(d.Checkpoint, testOrigin, "elsewhere.example/releases", 1))
		}, "log: checkpoint signature"},
		{"truncated log (a checkpoint of size 0, validly signed)", func(d *api.DesiredLog) {
			d.Checkpoint, d.Inclusion, d.Consistency = e.log.checkpoint(t, 0), nil, nil
		}, "log: checkpoint older"},
		{"forked log (the same key, another history)", func(d *api.DesiredLog) { *d = *forked }, "log: consistency"},
		{"proof for another size (of size 4, with the checkpoint of size 3)", func(d *api.DesiredLog) { d.Inclusion = at4 }, "log: inclusion"},
		{"another entry's index", func(d *api.DesiredLog) { d.Index = 1 }, "log: inclusion"},
		{"consistency dropped", func(d *api.DesiredLog) { d.Consistency = []string{} }, "log: consistency"},
		{"malformed proof hash", func(d *api.DesiredLog) { d.Inclusion = []string{"not base64"} }, "log: inclusion: malformed log evidence"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := truth
			if c.alter == nil {
				d.Log = nil
			} else {
				ev := *truth.Log
				ev.Inclusion = append([]string(nil), ev.Inclusion...)
				c.alter(&ev)
				d.Log = &ev
			}
			refusedWith(t, e.agent.Install(context.Background(), d, 2), c.want)
			untouched(t)
			if got := e.agent.Checkpoint(); *got != *stored {
				t.Errorf("stored checkpoint %+v, want %+v kept", got, stored)
			}
		})
	}
	// An entry changed after logging: 1.3.0's statement as told is not the
	// entry the log holds (its binary moved), under the truth's evidence.
	changed := st3
	changed.Binaries = append(changed.Binaries[:0:0], st3.Binaries...)
	changed.Binaries[1].URL += "?moved"
	d := desired(t, changed, e.release)
	d.Log = truth.Log
	refusedWith(t, e.agent.Install(context.Background(), d, 2), "log: inclusion")
	untouched(t)

	// A replayed older checkpoint: the node stores size 3 by installing the
	// truth; then 1.2.0 is told under the size-2 checkpoint, validly
	// signed and proved.
	if err := e.agent.Install(context.Background(), truth, 2); err != nil {
		t.Fatalf("the truth: %v", err)
	}
	if c := e.agent.Checkpoint(); c.Size != 3 {
		t.Fatalf("stored after the truth: %+v", c)
	}
	older := desired(t, st2, e.release)
	older.Log = &api.DesiredLog{Index: 1, Checkpoint: e.log.checkpoint(t, 2), Inclusion: []string{}, Consistency: []string{}}
	refusedWith(t, e.agent.Install(context.Background(), older, 2), "log: checkpoint older")
}

// resign signs note's checkpoint text again with s (dropping its
// signature).
func resign(t *testing.T, s *release.LogSigner, note string) string {
	t.Helper()
	text := note[:strings.Index(note, "\n\n")+1]
	c, err := release.ParseCheckpoint([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	c.Origin = s.Key().Name
	signed, err := s.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}

// The stored checkpoint is the node's witness: its reports carry it, a
// restart verifies it again (and refuses a state file whose checkpoint the
// pinned log key did not sign), and a checkpoint told with the release the
// node runs advances it.
func TestCheckpointWitness(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	site := newBinarySite(t)
	f := newFixture(t, fake.srv.URL, node, func(c *Config) { c.HTTP = site.srv.Client() })
	e := &installEnv{fixture: f, site: site}
	st1, _ := e.statement("1.1.0", 2)
	rel := desired(t, st1, f.release)
	fake.script(func(rep api.Report) (int, any) {
		res := answer(5)
		res.Desired.Release = f.told(t, rel, rep)
		return 200, res
	})
	step(t, f.agent)
	if err := f.agent.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	step(t, f.agent)
	rep := fake.last()
	cp := f.agent.Checkpoint()
	if rep.Log == nil || cp == nil || rep.Log.Size != 1 || rep.Log.Root != base64.StdEncoding.EncodeToString(cp.Root[:]) {
		t.Fatalf("report log %+v, stored %+v", rep.Log, cp)
	}
	// The log grows; the answers keep telling 1.1.0, now under size 3:
	// the node verifies and stores it without installing anything.
	st2, _ := e.statement("1.2.0", 3)
	st3, _ := e.statement("1.3.0", 4)
	e.logged(t, desired(t, st2, f.release), 0)
	e.logged(t, desired(t, st3, f.release), 0)
	step(t, f.agent)
	step(t, f.agent)
	if rep := fake.last(); rep.Log == nil || rep.Log.Size != 3 {
		t.Fatalf("after the log grew: report log %+v", rep.Log)
	}
	if starts := f.starter.starts(); len(starts) != 1 {
		t.Fatalf("started %v", starts)
	}

	// A restart on the same state dir reports the same checkpoint.
	again, err := New(f.agent.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c := again.Checkpoint(); c == nil || *c != *f.agent.Checkpoint() {
		t.Fatalf("after a restart: %+v", c)
	}
	// A state file whose checkpoint another key signed is refused at start.
	path := filepath.Join(f.dir, StateFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := loadState(f.dir)
	forged := resign(t, otherSigner(t, testOrigin), st.Checkpoint)
	st.Checkpoint = forged
	if err := saveState(f.dir, st); err != nil {
		t.Fatal(err)
	}
	if _, err := New(f.agent.cfg); err == nil || !strings.Contains(err.Error(), "does not verify under the pinned log key") {
		t.Fatalf("a forged stored checkpoint: %v", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// Pins without a log key are refused: a node installs only what the
	// log includes.
	cfg := f.agent.cfg
	cfg.LogKey = nil
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "without a release log key") {
		t.Fatalf("pins without a log key: %v", err)
	}
}
