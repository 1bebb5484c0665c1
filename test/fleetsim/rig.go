package fleetsim

// The rollout side of the harness, shared by the agent refusal table
// (refusals_test.go) and the rollout simulation (rolloutsim.go): a stack
// with its own release key pinned, a TLS site serving release binaries (the
// agents' downloads), releases signed and registered through
// releases.register, and reference agents whose state dir says what they
// run and whose starter is a health probe the test controls.

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/agent"
	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/conc"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

// platformTenant is the tenant releases and rollouts are called under.
const platformTenant = "platform"

// rig is a control plane whose release pins are one key of the test's
// (relKey), with a site of binaries.
type rig struct {
	st     *teststack.Stack
	logs   *requestLog
	admin  *client.Client
	relKey crypto.Signer
	pins   *release.Pins // the agents' usual pins: relKey, threshold 1
	site   *site
}

func newRig(tb testing.TB, interval time.Duration, opts ...teststack.Option) *rig {
	tb.Helper()
	policy, err := iam.ParsePolicy([]byte(`{"grants": [
	  {"principal": "admin", "permissions": ["*"], "scopes": ["*"]},
	  {"principal": "fleet-agent", "permissions": ["compute:nodes:report"], "scopes": ["node:*"]}]}`))
	if err != nil {
		tb.Fatal(err)
	}
	relKey, err := dsse.GenerateKey(dsse.AlgEd25519)
	if err != nil {
		tb.Fatal(err)
	}
	pins, err := release.NewPins([]crypto.PublicKey{relKey.Public()}, 1)
	if err != nil {
		tb.Fatal(err)
	}
	logs := &requestLog{}
	st := teststack.Start(tb, append([]teststack.Option{teststack.WithDecider(policy),
		teststack.WithPins(teststack.Pins{Keys: []crypto.PublicKey{relKey.Public()}}),
		teststack.WithConfig(func(c *app.Config) { c.HeartbeatInterval = interval }),
		teststack.WithAppOptions(app.WithLogger(slog.New(logs)))}, opts...)...)
	admin := client.New(st.URL, "dev:admin")
	admin.HTTP.Timeout = 2 * time.Minute // the test's own calls: a busy machine answers slowly, not wrongly
	return &rig{st: st, logs: logs, admin: admin, relKey: relKey, pins: pins, site: newSite(tb)}
}

// post calls method as the admin; a non-200 answer is an error.
func (h *rig) post(ctx context.Context, method string, in, out any) error {
	return post(ctx, h.admin, method, in, out)
}

// post calls method through c; a non-200 answer is an error. An
// UNAVAILABLE answer (503: a dependency contended, or a flow out of its
// deadline on a loaded machine) is retried as the API asks a client to,
// after a pause that doubles, up to 6 tries.
func post(ctx context.Context, c *client.Client, method string, in, out any) error {
	body, _ := json.Marshal(in)
	var resp *client.Response
	var err error
	for try, pause := 1, 200*time.Millisecond; ; try, pause = try+1, pause*2 {
		if resp, err = c.Do(ctx, method, body); err != nil {
			return err
		}
		if resp.Status != 503 || try == 6 {
			break
		}
		if err := conc.Sleep(ctx, pause); err != nil { // a client's backoff, not a wait for a state
			return err
		}
	}
	if resp.Status != 200 {
		return fmt.Errorf("%s: HTTP %d %s", method, resp.Status, resp.Body)
	}
	if out != nil {
		return json.Unmarshal(resp.Body, out)
	}
	return nil
}

func (h *rig) must(tb testing.TB, method string, in, out any) {
	tb.Helper()
	if err := h.post(context.Background(), method, in, out); err != nil {
		tb.Fatal(err)
	}
}

// binaryData is release version's "binary": what the starter probes.
func binaryData(version string) []byte {
	return []byte("#!bcd " + version + "\n" + strings.Repeat("x", 200))
}

// binary puts version's binary for platform on the site and describes it.
func (h *rig) binary(version, platform string) release.Binary {
	data := binaryData(version)
	path := "/bcd-" + version + "-" + strings.ReplaceAll(platform, "/", "-")
	sum := sha256.Sum256(data)
	return release.Binary{Platform: platform, URL: h.site.put(path, data), SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// statement is version (sequence seq) with a binary for each platform
// (default linux/amd64) on the site.
func (h *rig) statement(version string, seq int64, platforms ...string) release.Statement {
	if len(platforms) == 0 {
		platforms = []string{"linux/amd64"}
	}
	st := release.Statement{Version: version, Sequence: seq}
	for _, p := range platforms {
		st.Binaries = append(st.Binaries, h.binary(version, p))
	}
	return st
}

// sign is st's manifest signed by signers (default the rig's key).
func (h *rig) sign(tb testing.TB, st release.Statement, signers ...crypto.Signer) []byte {
	tb.Helper()
	if len(signers) == 0 {
		signers = []crypto.Signer{h.relKey}
	}
	env, err := release.SignEnvelope(payloadOf(st), signers...)
	if err != nil {
		tb.Fatal(err)
	}
	return env
}

// payloadOf is st as a manifest's payload (no expires member without one:
// the statement's field is not nullable).
func payloadOf(st release.Statement) []byte {
	b, _ := json.Marshal(struct {
		Version  string           `json:"version"`
		Sequence int64            `json:"sequence"`
		Expires  *time.Time       `json:"expires,omitempty"`
		Binaries []release.Binary `json:"binaries"`
	}{st.Version, st.Sequence, st.Expires, st.Binaries})
	return b
}

// register registers a manifest through releases.register (the registry
// verifies it under the platform's pins).
func (h *rig) register(tb testing.TB, manifest []byte) release.Release {
	tb.Helper()
	var out struct{ Release release.Release }
	h.must(tb, "releases.register", map[string]any{"tenantId": platformTenant, "manifest": json.RawMessage(manifest)}, &out)
	return out.Release
}

// site is a TLS server of release binaries (the agents download over
// https only).
type site struct {
	srv   *httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	hits  map[string]int
}

func newSite(tb testing.TB) *site {
	s := &site{files: map[string][]byte{}, hits: map[string]int{}}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		data, ok := s.files[r.URL.Path]
		s.hits[r.URL.Path]++
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
	}))
	tb.Cleanup(s.srv.Close)
	return s
}

// put serves data at path and returns its URL.
func (s *site) put(path string, data []byte) string {
	s.mu.Lock()
	s.files[path] = data
	s.mu.Unlock()
	return s.srv.URL + path
}

func (s *site) downloads(path string) int { s.mu.Lock(); defer s.mu.Unlock(); return s.hits[path] }

// starter is the agents' health probe: a binary is healthy when it is the
// release's (the bytes name its version), unless the test made that
// version unhealthy on this node. Every start is recorded.
type starter struct {
	mu     sync.Mutex
	fail   map[string]string // version → why it does not come up healthy
	starts []start
}

type start struct {
	version string
	at      time.Time
	err     error
}

func (s *starter) Start(_ context.Context, path string, v api.Version) error {
	data, err := os.ReadFile(path)
	if err == nil && !bytes.HasPrefix(data, []byte("#!bcd "+v.Version+"\n")) {
		err = fmt.Errorf("%s is not release %s", path, v.Version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.fail[v.Version]; err == nil && why != "" {
		err = errors.New(why)
	}
	s.starts = append(s.starts, start{v.Version, time.Now(), err})
	return err
}

// failOn makes version come up unhealthy on this node.
func (s *starter) failOn(version, why string) {
	s.mu.Lock()
	if s.fail == nil {
		s.fail = map[string]string{}
	}
	s.fail[version] = why
	s.mu.Unlock()
}

func (s *starter) log() []start {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]start(nil), s.starts...)
}

// simNode is one registered node and its reference agent.
type simNode struct {
	pool, id, platform string
	key                crypto.Signer
	dir                string
	pins               *release.Pins
	driver             *agent.RecordingDriver
	starter            *starter
	apiURL             string          // what its agent talks to (default the stack's gateway)
	logKey             *release.LogKey // the log key it pins (default the stack's dev log key)
	agent              *agent.Agent
	cancel             context.CancelFunc
	done               chan struct{}
}

func (n *simNode) ref() string { return n.pool + "/" + n.id }

// node registers node id in pool (platform, default linux/amd64) and
// prepares its agent: a state dir saying it runs `running` (nil: none),
// that release's binary installed, pins (nil: the rig's).
func (h *rig) node(tb testing.TB, pool, id, platform string, running *api.Version, pins *release.Pins) *simNode {
	tb.Helper()
	n, err := h.newNode(pool, id, platform, running, pins, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// newNode is node without tb (safe off the test's goroutine): dir is the
// agent's state dir.
func (h *rig) newNode(pool, id, platform string, running *api.Version, pins *release.Pins, dir string) (*simNode, error) {
	if platform == "" {
		platform = "linux/amd64"
	}
	if pins == nil {
		pins = h.pins
	}
	key, _ := dsse.GenerateKey(dsse.AlgEd25519)
	pem, _ := dsse.MarshalPublicKeyPEM(key.Public())
	if err := h.post(context.Background(), "nodes.register", map[string]any{"tenantId": "acme", "poolId": pool, "nodeId": id,
		"publicKey": string(pem), "platform": platform}, nil); err != nil {
		return nil, err
	}
	n := &simNode{pool: pool, id: id, platform: platform, key: key, dir: dir, pins: pins,
		driver: agent.NewRecordingDriver(8), starter: &starter{}}
	if running != nil {
		// What an agent leaves behind once it installed a release: its
		// binary and a state file naming it (agent.StateFile).
		bin := filepath.Join(n.dir, running.Version, agent.BinaryName)
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(bin, binaryData(running.Version), 0o755); err != nil {
			return nil, err
		}
		state, _ := json.Marshal(map[string]any{"running": running, "previous": nil})
		if err := os.WriteFile(filepath.Join(n.dir, agent.StateFile), state, 0o644); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// run starts (or restarts: a new process on the same state dir) n's agent;
// it sleeps the answers' intervals × scale (1: real time).
func (h *rig) run(tb testing.TB, ctx context.Context, n *simNode, scale float64) {
	tb.Helper()
	url, logKey := cmp.Or(n.apiURL, h.st.URL), n.logKey
	if logKey == nil {
		logKey = devstack.DevLogKey(tb)
	}
	a, err := agent.New(agent.Config{Client: client.New(url, "dev:fleet-agent"), TenantID: "acme", PoolID: n.pool, NodeID: n.id,
		Key: n.key, Pins: n.pins, LogKey: logKey, Platform: n.platform, Devices: 8, Driver: n.driver, StateDir: n.dir,
		HTTP: h.site.srv.Client(), Starter: n.starter,
		Sleep: func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(time.Duration(float64(d) * scale))
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	if err != nil {
		tb.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	n.agent, n.cancel, n.done = a, cancel, make(chan struct{})
	go func() { defer close(n.done); _ = a.Run(actx) }()
}

// stop stops n's agent and waits for it (and its install, if any).
func (n *simNode) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	<-n.done
	_ = n.agent.Wait(context.Background())
	n.cancel = nil
}

// getNode is nodes.get's node.
func (h *rig) getNode(tb testing.TB, pool, id string) api.Node {
	tb.Helper()
	var out struct{ Node api.Node }
	h.must(tb, "nodes.get", map[string]any{"tenantId": "acme", "poolId": pool, "nodeId": id}, &out)
	return out.Node
}

// getRollout is rollouts.get's rollout.
func (h *rig) getRollout(ctx context.Context, id string) (api.Rollout, error) {
	var out struct{ Rollout api.Rollout }
	err := h.post(ctx, "rollouts.get", map[string]any{"tenantId": platformTenant, "rolloutId": id}, &out)
	return out.Rollout, err
}

// rolloutNodes is every node of a rollout (rollouts.nodes, page by page).
func (h *rig) rolloutNodes(tb testing.TB, id string) []api.NodeProgress {
	tb.Helper()
	var all []api.NodeProgress
	cursor := ""
	for {
		in := map[string]any{"tenantId": platformTenant, "rolloutId": id, "limit": 1000}
		if cursor != "" {
			in["cursor"] = cursor
		}
		var out struct {
			Nodes      []api.NodeProgress
			NextCursor string
		}
		h.must(tb, "rollouts.nodes", in, &out)
		all = append(all, out.Nodes...)
		if out.NextCursor == "" {
			return all
		}
		cursor = out.NextCursor
	}
}
