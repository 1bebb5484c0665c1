// Command bc-local is `make run`: the whole control plane on one machine with
// no Docker and no AWS account. It starts dynalite and local-kms
// (shared/devstack), creates the table, serves the API through the local
// gateway (shared/localgw) on BC_LISTEN and runs the reconciler every
// BC_RECONCILE_INTERVAL, in the foreground until SIGINT or SIGTERM.
//
// Every BC_* variable of the app is honoured; unset ones default to the
// dev configuration under localstack/ (policy, release pins, the seeded
// local-kms release key: see devEnv). State lives under BC_STATE_DIR
// (default .local/); logs are text unless BC_LOG_FORMAT=json.
// BC_SIM_NODES=n also runs n reference node agents in process, registered
// and heartbeating (simfleet.go, docs/agent.md).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/cursorkey"
	"github.com/bettercompute/control-plane/shared/app/kmskeys"
	"github.com/bettercompute/control-plane/shared/app/modules"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/console"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/localgw"
	"github.com/bettercompute/control-plane/shared/logfmt"
)

func main() {
	level, err := logfmt.ParseLevel(envOr("BC_LOG_LEVEL", "info"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bc-local:", err)
		os.Exit(2)
	}
	format, err := logfmt.ParseFormat(envOr("BC_LOG_FORMAT", string(logfmt.Text)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bc-local:", err)
		os.Exit(2)
	}
	log := logfmt.New(os.Stderr, format, level)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log); err != nil {
		log.Error("bc-local", "error", err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger) error {
	root, err := devstack.Root()
	if err != nil {
		return err
	}
	cfg, err := app.ConfigFromEnv() // a bad BC_* value fails before anything starts
	if err != nil {
		return err
	}
	simNodes, err := parseSimNodes(os.Getenv("BC_SIM_NODES"))
	if err != nil {
		return err
	}
	ln, err := listen(envOr("BC_LISTEN", "127.0.0.1:8080")) // a taken port fails first
	if err != nil {
		return err
	}
	defer ln.Close()
	stateDir := envOr("BC_STATE_DIR", filepath.Join(root, ".local"))
	stack, err := devstack.Start(ctx, devstack.Options{Root: root, Region: cfg.Region, Logger: log,
		StateDir: stateDir, KMSSeed: filepath.Join(root, devstack.KMSSeedFile)})
	if err != nil {
		return err
	}
	defer stack.Close()

	for k, v := range stack.Env() {
		os.Setenv(k, v)
	}
	defaulted := devEnv(root, os.LookupEnv)
	for k, v := range defaulted {
		os.Setenv(k, v)
	}
	if os.Getenv("BC_CURSOR_KEY") == "" {
		key, err := cursorKey(filepath.Join(stateDir, "cursor.key"))
		if err != nil {
			return err
		}
		os.Setenv("BC_CURSOR_KEY", key)
	}
	if cfg, err = app.ConfigFromEnv(); err != nil {
		return err
	}
	if ttlErr, err := schema.CreateTable(ctx, stack.DynamoDB(), cfg.Table); err != nil {
		return err
	} else if ttlErr != nil {
		log.Info("table TTL not enabled (dynalite has no TTL)", "table", cfg.Table)
	}
	a, err := modules.New(ctx, cfg, cursorkey.FromSecretsManager(), kmskeys.FromKMS(), app.WithDevTokens(), app.WithLogger(log))
	if err != nil {
		return err
	}
	eps, err := a.Endpoints(ctx)
	if err != nil {
		return err
	}
	logKey, err := rolloutapp.LogKey(ctx, a.App) // what monitors and the simulated nodes pin
	if err != nil {
		return err
	}
	con, err := console.New(console.Config{Caller: console.CallerFor(a.Gateway, eps), Dev: true,
		DevPrincipals: devPrincipals(cfg.PolicyFile), Logger: log})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	reconciled := make(chan struct{})
	go func() {
		defer close(reconciled)
		localgw.Reconcile(ctx, cfg.ReconcileInterval, a.Reconcile, log)
	}()
	fmt.Println(pinReport(a.Pins(), cfg.ReleaseThreshold, defaulted)) // loaded and validated by Endpoints
	fmt.Println(localgw.Quickstart(localgw.Stack{URL: "http://" + ln.Addr().String(), DynamoEndpoint: stack.DynamoEndpoint,
		KMSEndpoint: stack.KMSEndpoint, Table: cfg.Table, Region: cfg.Region, LogVerifierKey: logKey.VerifierKey()}, time.Now()))
	log.Info("serving", "listen", ln.Addr().String(), "table", cfg.Table, "reconcile_interval", cfg.ReconcileInterval.String())
	simDone := startSimFleet(ctx, "http://"+ln.Addr().String(), simNodes, filepath.Join(stateDir, "sim-nodes"), a.Pins(), cfg.ReleaseThreshold, logKey, log)
	err = localgw.Serve(ctx, ln, localgw.Handler(a.Gateway, eps, localgw.WithHealth(a.Health), localgw.WithConsole(con)), log)
	cancel()
	<-reconciled
	<-simDone
	log.Info("stopping")
	return err
}

// listen opens the gateway's address. One another process holds (an
// earlier make run, most often) is said so, with an address that is free
// now to set instead.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	alt := "127.0.0.1:8081"
	if host, port, serr := net.SplitHostPort(addr); serr == nil {
		if p, perr := strconv.Atoi(port); perr == nil {
			alt = net.JoinHostPort(host, strconv.Itoa(p+1))
			for next := p + 1; next < p+20 && next <= 65535; next++ {
				if l, lerr := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(next))); lerr == nil {
					l.Close()
					alt = net.JoinHostPort(host, strconv.Itoa(next))
					break
				}
			}
		}
	}
	return nil, fmt.Errorf("%s is in use: stop the other process (an earlier make run?) or set BC_LISTEN=%s", addr, alt)
}

// cursorKey keeps a random cursor HMAC key in the state dir, so cursors
// survive a restart of the local stack.
func cursorKey(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return string(b), nil
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	key := hex.EncodeToString(raw[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return key, os.WriteFile(path, []byte(key), 0o600)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// devPrincipals are the principals the dev policy grants, offered by the
// console's local sign-in (none with a remote Better IAM: any name may
// still be typed).
func devPrincipals(policyFile string) []string {
	if policyFile == "" {
		return nil
	}
	p, err := iam.LoadPolicy(policyFile)
	if err != nil {
		return nil
	}
	var out []string
	for _, g := range p.Grants {
		if !slices.Contains(out, g.Principal) {
			out = append(out, g.Principal)
		}
	}
	return out
}
