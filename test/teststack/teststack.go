// Package teststack starts the whole control plane inside a test: the app
// (shared/app) on a fresh table of the shared local servers
// (shared/devstack), behind the local gateway (shared/localgw) on an
// httptest server — what `make run` serves, in process. The end-to-end,
// black-box and benchmark suites under test/ run against it; each keeps its
// own TestMain calling devstack.Main.
package teststack

import (
	"bytes"
	"context"
	"crypto"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/cursorkey"
	"github.com/bettercompute/control-plane/shared/app/kmskeys"
	"github.com/bettercompute/control-plane/shared/app/modules"
	"github.com/bettercompute/control-plane/shared/console"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/localgw"
	"github.com/bettercompute/control-plane/shared/release"
)

// Stack is a running control plane.
type Stack struct {
	URL       string          // the local gateway
	App       *modules.App    // the app it serves, every module wired
	Endpoints []api.Endpoint  // every catalog method, in catalog order
	Dev       *devstack.Stack // the local servers (dynalite, local-kms)
}

// Pins are the release keys a stack trusts, replacing the default: the dev
// pins file (localstack/dev-release-pins.pem).
type Pins struct {
	Keys    []crypto.PublicKey // written to a PEM file of the test
	KMSKeys []string           // KMS key ids on local-kms, e.g. devstack.DevReleaseKeyID
}

// Option adjusts a stack before it starts.
type Option func(*setup)

type setup struct {
	now       func() time.Time
	decider   iam.Decider
	pins      *Pins
	cursorKey string
	appOpts   []app.Option
	configs   []func(*app.Config)
}

// WithClock replaces time.Now in the app (see Clock).
func WithClock(now func() time.Time) Option { return func(s *setup) { s.now = now } }

// WithDecider replaces the dev policy file (localstack/policy.json).
func WithDecider(d iam.Decider) Option { return func(s *setup) { s.decider = d } }

// WithPins replaces the dev pins file: only p is pinned.
func WithPins(p Pins) Option { return func(s *setup) { s.pins = &p } }

// WithConfig adjusts the app's configuration before it starts (e.g. the
// heartbeat interval).
func WithConfig(f func(*app.Config)) Option {
	return func(s *setup) { s.configs = append(s.configs, f) }
}

// WithCursorKey sets the app's cursor key (default "teststack").
func WithCursorKey(k string) Option { return func(s *setup) { s.cursorKey = k } }

// WithAppOptions adds app options, e.g. app.WithDynamoOptions(rt.Option()).
func WithAppOptions(opts ...app.Option) Option {
	return func(s *setup) { s.appOpts = append(s.appOpts, opts...) }
}

// Start starts the app on a fresh table behind the local gateway, accepting
// dev tokens ("Bearer dev:<principal>"); the server stops when tb ends.
func Start(tb testing.TB, opts ...Option) *Stack {
	tb.Helper()
	s := setup{cursorKey: "teststack"}
	for _, o := range opts {
		o(&s)
	}
	dev := devstack.Shared(tb)
	root, err := devstack.Root()
	if err != nil {
		tb.Fatal(err)
	}
	cfg := app.Config{Table: devstack.NewTable(tb, dev), Region: dev.Region,
		DynamoEndpoint: dev.DynamoEndpoint, KMSEndpoint: dev.KMSEndpoint,
		ReleaseThreshold: 1, CursorKey: s.cursorKey,
		ReleaseLogKey: devstack.DevReleaseLogKeyID, ReleaseLogOrigin: devstack.DevReleaseLogOrigin}
	appOpts := []app.Option{app.WithDevTokens(), app.WithLogger(slog.New(slog.DiscardHandler))}
	if s.decider != nil {
		appOpts = append(appOpts, app.WithDecider(s.decider))
	} else {
		cfg.PolicyFile = filepath.Join(root, devstack.PolicyFile)
	}
	if s.pins != nil {
		cfg.ReleaseKMSKeys = s.pins.KMSKeys
		if len(s.pins.Keys) > 0 {
			cfg.PinsFile = WritePins(tb, s.pins.Keys...)
		}
	} else {
		cfg.PinsFile = filepath.Join(root, devstack.PinsFile)
	}
	if s.now != nil {
		appOpts = append(appOpts, app.WithClock(s.now))
	}
	for _, f := range s.configs {
		f(&cfg)
	}
	a, err := modules.New(context.Background(), cfg, append(append(appOpts, cursorkey.FromSecretsManager(), kmskeys.FromKMS()), s.appOpts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	eps, err := a.Endpoints(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	// The console refreshes live pages every second here (5 s deployed):
	// tests watch them move without waiting.
	con, err := console.New(console.Config{Caller: console.CallerFor(a.Gateway, eps), Dev: true, Now: s.now, Poll: time.Second,
		DevPrincipals: []string{"admin", "alice", "ops", "auditor"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(localgw.Handler(a.Gateway, eps, localgw.WithHealth(a.Health), localgw.WithConsole(con)))
	tb.Cleanup(srv.Close)
	return &Stack{URL: srv.URL, App: a, Endpoints: eps, Dev: dev}
}

// WritePins writes keys as a PEM bundle (a pins file) in tb's temporary
// directory and returns its path.
func WritePins(tb testing.TB, keys ...crypto.PublicKey) string {
	tb.Helper()
	var pem bytes.Buffer
	for _, k := range keys {
		p, err := release.MarshalPublicKeyPEM(k)
		if err != nil {
			tb.Fatal(err)
		}
		pem.Write(p)
	}
	path := filepath.Join(tb.TempDir(), "pins.pem")
	if err := os.WriteFile(path, pem.Bytes(), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// DevReleaseKey is the dev release signing key (devstack.KeyFile), the one the
// dev pins file pins.
func DevReleaseKey(tb testing.TB) crypto.Signer {
	tb.Helper()
	return LoadKey(tb, devstack.KeyFile)
}

// LoadKey reads a private key file (PEM); a relative path is taken from the
// repository root (go test runs in the package's directory).
func LoadKey(tb testing.TB, path string) crypto.Signer {
	tb.Helper()
	if !filepath.IsAbs(path) {
		root, err := devstack.Root()
		if err != nil {
			tb.Fatal(err)
		}
		path = filepath.Join(root, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	k, err := release.ParsePrivateKeyPEM(data)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}
