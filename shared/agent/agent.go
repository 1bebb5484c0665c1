// Package agent is the reference node agent (docs/agent.md): bcd's
// control-plane side, as a library. It holds the node's key and its own
// release pins, heartbeats signed reports (nodes.heartbeat), unbinds and
// binds reservations through a pluggable Driver (a device's next holder
// only after its report of the previous holder's unbound was accepted),
// and installs the release it is told to run only after verifying it under
// its own pins (Install). cmd/bcd-agent runs it on a host; make run's
// simulated fleet runs it in process.
package agent

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Config is an agent's configuration. Client, TenantID, PoolID, NodeID,
// Key, Driver and StateDir are required.
type Config struct {
	Client   *client.Client // the API (base URL and the node's token)
	TenantID string         // the pool's owner
	PoolID   string
	NodeID   string
	Key      crypto.Signer // the node key it was registered with
	// Pins are the release keys the node trusts, with their threshold
	// (release.NewPins); nil disables installs: a release it is told to
	// run is reported failed.
	Pins *release.Pins
	// LogKey is the release log's key and origin the node trusts
	// (release.ParseVerifierKey of the log's verifier key): it installs
	// only a release whose checkpoint verifies under it, extends the
	// checkpoint it stored and includes the release. Required
	// with Pins.
	LogKey   *release.LogKey
	Platform string // os/arch[/variant], as registered
	Devices  int    // the devices the node should see (devicesExpected)
	Driver   Driver
	StateDir string // binaries: <StateDir>/<version>/bcd, and state.json

	HTTP    *http.Client // downloads (default: 10-minute timeout)
	Starter Starter      // starts an installed binary (default ExecStarter)
	Now     func() time.Time
	Logger  *slog.Logger
	// Sleep and Rand pace Run (defaults: a timer, math/rand/v2): tests
	// inject them so no test sleeps.
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64 // in [0, 1)
	// Words are how the program names its token (and fields) in the hint
	// Run logs with a failed heartbeat (client.Hint); zero: generic.
	Words client.Words
	// FirstHeartbeat, when set, is told the outcome of Run's first
	// heartbeat (after a replay's retry), so a program can say it is up
	// rather than look hung for an interval; the library logs nothing of
	// it (make run's simulated fleet runs hundreds of agents).
	FirstHeartbeat func(res api.HeartbeatResult, err error)
}

// StateDirError is a state dir the agent cannot make or write: it would
// fail only at the first install, so New refuses it at start.
type StateDirError struct {
	Dir string
	Err error
}

func (e *StateDirError) Error() string { return fmt.Sprintf("agent: state dir %s: %v", e.Dir, e.Err) }
func (e *StateDirError) Unwrap() error { return e.Err }

// checkStateDir makes dir if it is missing and checks a file can be
// written in it (installs write binaries and state.json there).
func checkStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &StateDirError{Dir: dir, Err: err}
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return &StateDirError{Dir: dir, Err: err}
	}
	f.Close()
	return os.Remove(f.Name())
}

// Agent is one node's agent. Step and Run must not be called concurrently.
type Agent struct {
	cfg Config
	log *slog.Logger

	counter int64 // the last counter sent
	// words: its word on each reservation it was told about (or holds);
	// held: what the driver bound and has not unbound; reported: the
	// words an accepted report carried (an unlisted word is forgotten
	// once one did).
	words    map[string]api.ReportedBinding
	held     map[string]bool
	order    []string // the last answer's reservations, in its order
	reported map[string]string

	mu      sync.Mutex // guards what an install in progress writes
	running *api.Version
	install *api.Install
	retryAt map[string]time.Time // release (version@digest) → not before
	asked   string               // the release the last answer named
	busy    chan struct{}        // closed when the install in progress ends
	// checkpoint is the release log checkpoint it verified last (nil:
	// none yet), note its signed text: what its reports witness.
	checkpoint *release.Checkpoint
	note       string
}

// New checks the configuration and reads what the node runs from the
// state dir.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("agent: no API client")
	case cfg.TenantID == "" || cfg.PoolID == "" || cfg.NodeID == "":
		return nil, errors.New("agent: tenant, pool and node are required")
	case cfg.Key == nil:
		return nil, errors.New("agent: no node key")
	case cfg.Driver == nil:
		return nil, errors.New("agent: no driver")
	case cfg.StateDir == "":
		return nil, errors.New("agent: no state dir")
	case cfg.Devices < 0 || cfg.Devices > 64:
		return nil, fmt.Errorf("agent: devices %d: must be 0..64", cfg.Devices)
	case cfg.Pins != nil && cfg.LogKey == nil:
		return nil, errors.New("agent: release pins without a release log key: a node installs only what the log includes")
	}
	if _, err := dsse.KeyID(cfg.Key.Public()); err != nil {
		return nil, fmt.Errorf("agent: node key: %w", err)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Minute}
	}
	if cfg.Starter == nil {
		cfg.Starter = ExecStarter{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkStateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	st, err := loadState(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("pool", cfg.PoolID, "node", cfg.NodeID),
		words: map[string]api.ReportedBinding{}, held: map[string]bool{},
		reported: map[string]string{}, running: st.Running, retryAt: map[string]time.Time{}}
	if st.Checkpoint != "" {
		// Verified again at every start: a state file edited, or a log
		// key changed under it, is not witnessed as if verified.
		if cfg.LogKey == nil {
			return nil, fmt.Errorf("agent: %s holds a release log checkpoint but no log key is pinned", filepath.Join(cfg.StateDir, StateFile))
		}
		c, err := cfg.LogKey.Open([]byte(st.Checkpoint))
		if err != nil {
			return nil, fmt.Errorf("agent: the stored release log checkpoint does not verify under the pinned log key (%v): an operator must look before this node installs again", err)
		}
		a.checkpoint, a.note = &c, st.Checkpoint
	}
	return a, nil
}

// Checkpoint is the release log checkpoint the node verified last (nil:
// none).
func (a *Agent) Checkpoint() *release.Checkpoint {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.checkpoint
}

// Running is the release the node runs (nil: none).
func (a *Agent) Running() *api.Version {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running
}

// Step is one heartbeat: it builds and signs the report, sends it, and acts
// on the answer: the bindings (every unbind, then the binds: see bindings),
// then the release (an install runs in the background under ctx: see Wait).
// A CONFLICT replay moves the counter past the server's, so the next Step
// is accepted.
func (a *Agent) Step(ctx context.Context) (api.HeartbeatResult, error) {
	rep := a.report(ctx)
	payload, err := json.Marshal(rep)
	if err != nil {
		return api.HeartbeatResult{}, err
	}
	env, err := dsse.Sign(api.ReportPayloadType, payload, a.cfg.Key)
	if err != nil {
		return api.HeartbeatResult{}, err
	}
	a.counter = rep.Counter
	out, err := a.cfg.Client.NodesHeartbeat(ctx, &api.HeartbeatInput{Tenant: api.Tenant{TenantID: a.cfg.TenantID},
		NodeRef: api.NodeRef{PoolID: a.cfg.PoolID, NodeID: a.cfg.NodeID}, Report: strictjson.Object(env)})
	if err != nil {
		if latest, ok := replayed(err); ok {
			a.counter = max(a.counter, latest)
		}
		return api.HeartbeatResult{}, err
	}
	for _, b := range rep.Bindings {
		a.reported[b.ReservationID] = b.State
	}
	a.bindings(ctx, out.Desired.Bindings)
	a.release(ctx, out.Desired)
	return *out, nil
}

// report is the report of now: counter = max(last+1, now in µs), so it
// rises across restarts without state.
func (a *Agent) report(ctx context.Context) api.Report {
	now := a.cfg.Now().UTC()
	h := a.cfg.Driver.Health(ctx)
	checks := h.Checks
	if len(checks) > api.MaxChecks {
		checks = checks[:api.MaxChecks]
	}
	if checks == nil {
		checks = []api.Check{}
	}
	a.mu.Lock()
	running, install, cp := a.running, a.install, a.checkpoint
	a.mu.Unlock()
	rep := api.Report{PoolID: a.cfg.PoolID, NodeID: a.cfg.NodeID, Counter: max(a.counter+1, now.UnixMicro()), At: now,
		Running: running, Install: install, Bindings: a.reportBindings(),
		Health: api.Health{DevicesExpected: a.cfg.Devices, DevicesVisible: h.Visible, Checks: checks}}
	if cp != nil {
		rep.Log = &api.LogReport{Size: cp.Size, Root: base64.StdEncoding.EncodeToString(cp.Root[:])}
	}
	return rep
}

// replayed reads a CONFLICT replay's latestCounter.
func replayed(err error) (int64, bool) {
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != apierr.Conflict || e.Details["reason"] != api.ReasonReplay {
		return 0, false
	}
	switch v := e.Details["latestCounter"].(type) {
	case float64:
		return int64(v), true
	case int64:
		return v, true
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	}
	return 0, false
}
