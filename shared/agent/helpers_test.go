package agent

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fakeAPI answers nodes.heartbeat as the API would be asked: it opens the
// envelope under the node's key and decodes the report strictly (as the
// API does), keeps every report, and answers what the test scripts.
type fakeAPI struct {
	t    *testing.T
	srv  *httptest.Server
	pins *dsse.Pins

	mu      sync.Mutex
	reports []api.Report
	answer  func(rep api.Report) (int, any) // status and body
}

func newFakeAPI(t *testing.T, node crypto.Signer) *fakeAPI {
	t.Helper()
	pins, err := dsse.NewPins([]crypto.PublicKey{node.Public()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{t: t, pins: pins, answer: func(api.Report) (int, any) { return 200, answer(30) }}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/compute/nodes/heartbeat" || r.Header.Get("Authorization") != "Bearer dev:fleet-agent" {
		http.Error(w, "unexpected request "+r.URL.Path, http.StatusTeapot)
		return
	}
	var in struct {
		TenantID string          `json:"tenantId"`
		PoolID   string          `json:"poolId"`
		NodeID   string          `json:"nodeId"`
		Report   json.RawMessage `json:"report"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &in); err != nil || in.TenantID != "acme" || in.PoolID != "p1" || in.NodeID != "gpu-node-0" {
		http.Error(w, fmt.Sprintf("bad request %s: %v", body, err), http.StatusTeapot)
		return
	}
	opened, err := f.pins.Open(in.Report, dsse.Want{PayloadType: api.ReportPayloadType, Field: "report"})
	if err != nil {
		http.Error(w, err.Error(), http.StatusTeapot)
		return
	}
	rep, err := fleet.ParseReport(opened.Payload)
	if err != nil {
		http.Error(w, err.Error(), http.StatusTeapot)
		return
	}
	f.mu.Lock()
	f.reports = append(f.reports, rep)
	status, out := f.answer(rep)
	f.mu.Unlock()
	if e, ok := out.(*apierr.Error); ok {
		out = map[string]any{"error": e, "requestId": "r"}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(out)
}

// script sets the answer.
func (f *fakeAPI) script(fn func(rep api.Report) (int, any)) {
	f.mu.Lock()
	f.answer = fn
	f.mu.Unlock()
}

// answers answers each heartbeat with the desired bindings given, one per
// heartbeat (the last one again once they run out).
func (f *fakeAPI) answers(lists ...[]api.DesiredBinding) {
	n := 0
	f.script(func(api.Report) (int, any) {
		res := answer(5)
		res.Desired.Bindings = lists[min(n, len(lists)-1)]
		n++
		return 200, res
	})
}

// last is the last report received.
func (f *fakeAPI) last() api.Report {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reports) == 0 {
		f.t.Fatal("no report received")
	}
	return f.reports[len(f.reports)-1]
}

func answer(next int) api.HeartbeatResult {
	return api.HeartbeatResult{Desired: api.Desired{Bindings: []api.DesiredBinding{}}, NextHeartbeatSeconds: next}
}

func bind(id string, devices ...string) api.DesiredBinding {
	return api.DesiredBinding{ReservationID: id, TenantID: "acme", DeviceIDs: devices, Action: api.ActionBind}
}

func unbind(id string, devices ...string) api.DesiredBinding {
	return api.DesiredBinding{ReservationID: id, TenantID: "acme", DeviceIDs: devices, Action: api.ActionUnbind}
}

// words is a report's bindings as "id state" strings, in order.
func words(rep api.Report) []string {
	out := []string{}
	for _, b := range rep.Bindings {
		out = append(out, b.ReservationID+" "+b.State)
	}
	return out
}

// ops is a driver's events as "op id" strings, in order.
func ops(d *RecordingDriver) []string {
	out := []string{}
	for _, e := range d.Events() {
		out = append(out, e.Op+" "+e.ReservationID)
	}
	return out
}

func newKey(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := dsse.GenerateKey(dsse.AlgEd25519)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fixture is an agent of node p1/gpu-node-0 (8 devices, linux/amd64) on a
// RecordingDriver, talking to url, on a clock the test moves, trusting
// the release key.
type fixture struct {
	agent   *Agent
	driver  *RecordingDriver
	clock   *teststack.Clock
	node    crypto.Signer
	release crypto.Signer // the pinned release key
	starter *fakeStarter
	dir     string
	log     *testLog // the release log the answers prove releases in (its key pinned)
}

func newFixture(t *testing.T, url string, node crypto.Signer, adjust ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{driver: NewRecordingDriver(8), clock: teststack.NewClock(t0), node: node,
		release: newKey(t), starter: &fakeStarter{unhealthy: map[string]error{}}, dir: t.TempDir(), log: newTestLog(t)}
	f.driver.SetNow(f.clock.Now)
	f.starter.dir = f.dir
	pins, err := release.NewPins([]crypto.PublicKey{f.release.Public()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Client: client.New(url, "dev:fleet-agent"), TenantID: "acme", PoolID: "p1", NodeID: "gpu-node-0",
		Key: node, Pins: pins, LogKey: f.log.key(), Platform: "linux/amd64", Devices: 8, Driver: f.driver, StateDir: f.dir,
		Starter: f.starter, Now: f.clock.Now, Rand: func() float64 { return 0.5 },
		Sleep: func(context.Context, time.Duration) error { t.Fatal("Step does not sleep"); return nil }}
	for _, fn := range adjust {
		fn(&cfg)
	}
	if f.agent, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

// fakeStarter records what it starts; a binary path in unhealthy does not
// start healthy.
type fakeStarter struct {
	mu        sync.Mutex
	started   []string // "<version> <path relative to the state dir>"
	unhealthy map[string]error
	dir       string
}

func (s *fakeStarter) Start(_ context.Context, path string, v api.Version) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rel, _ := filepath.Rel(s.dir, path)
	s.started = append(s.started, v.Version+" "+rel)
	return s.unhealthy[v.Version]
}

func (s *fakeStarter) starts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.started...)
}

// binarySite serves release binaries over TLS: path → bytes.
type binarySite struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits int
	// serve writes a path's answer (default: the file's bytes).
	files map[string][]byte
	serve func(w http.ResponseWriter, r *http.Request) bool
}

func newBinarySite(t *testing.T) *binarySite {
	s := &binarySite{files: map[string][]byte{}}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits++
		serve := s.serve
		data, ok := s.files[r.URL.Path]
		s.mu.Unlock()
		if serve != nil && serve(w, r) {
			return
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *binarySite) downloads() int { s.mu.Lock(); defer s.mu.Unlock(); return s.hits }

// put serves data at path and returns the binary entry of a statement.
func (s *binarySite) put(path, platform string, data []byte) release.Binary {
	s.mu.Lock()
	s.files[path] = data
	s.mu.Unlock()
	sum := sha256.Sum256(data)
	return release.Binary{Platform: platform, URL: s.srv.URL + path, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// desired signs a statement with signers and names it as an answer would.
func desired(t *testing.T, st release.Statement, signers ...crypto.Signer) api.DesiredRelease {
	t.Helper()
	m := map[string]any{"version": st.Version, "sequence": st.Sequence, "binaries": st.Binaries}
	if st.Expires != nil { // the statement has no null expiry: absent or a time
		m["expires"] = st.Expires.Format(time.RFC3339)
	}
	payload, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	env, err := release.SignEnvelope(payload, signers...)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload)
	return api.DesiredRelease{Version: st.Version, Sequence: st.Sequence, ManifestDigest: "sha256:" + hex.EncodeToString(sum[:]), Manifest: env}
}
