// Command bcd-agent is the reference node agent: bcd's control-plane side
// (shared/agent), run on a host of a pool (docs/agent.md). It signs the
// node's heartbeats with the node key, binds and unbinds reservations
// through the reference driver (which records what a real one would do),
// and installs the release it is told to run only after verifying it under
// its own release pins.
//
//	bcd-agent keygen --out node.pem     make a node key; print what to register
//	bcd-agent once                      one heartbeat; print the answer as JSON
//	bcd-agent run                       heartbeat until SIGINT or SIGTERM
//
// Every flag has a BC_* variable (shown in --help). Exit codes: 0 success
// (run: stopped by a signal); 1 the API answered an error; 2 a bad command
// line; 3 the API could not be reached; 4 a local failure (a file, a key).
package main

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/agent"
	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/logfmt"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Exit codes (the package comment and docs/agent.md).
const (
	exitOK          = 0
	exitAPIError    = 1
	exitUsage       = 2
	exitUnreachable = 3
	exitLocal       = 4
)

func main() {
	// The signal is the context's cause, so run says which one stopped it.
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		signal.Stop(sigs) // a second Ctrl-C kills it
		cancel(stopped{s})
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	os.Exit(code)
}

// stopped is the signal that ended run.
type stopped struct{ sig os.Signal }

func (s stopped) Error() string {
	switch s.sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.sig.String()
}

// agentWords: the agent's token is its own variable's (a hint names it).
var agentWords = client.Words{Token: "BC_AGENT_TOKEN (or --token)"}

// Local development's principals (localstack/policy.json): the node
// principal an agent runs as, and the admin it must not run as.
const (
	devNodeToken  = "dev:fleet-agent"
	devAdminToken = "dev:admin"
)

// options are the command line, after the BC_* defaults.
type options struct {
	apiURL, token, tenant, pool, node string
	key, pinsFile, platform           string
	logKey                            string
	stateDir, journal                 string
	logFormat, logLevel               string
	threshold, devices                int

	out, errOut io.Writer
	getenv      func(string) string
	log         *slog.Logger  // set by agent()
	pins        *release.Pins // the pins loaded (nil: installs disabled)
}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) int {
	o := &options{out: out, errOut: errOut, getenv: getenv}
	root := o.root()
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(errOut)
	err := root.ExecuteContext(ctx)
	return o.report(err)
}

func (o *options) env(key, def string) string {
	if v := o.getenv(key); v != "" {
		return v
	}
	return def
}

// envInt is an integer variable; a malformed one is reported when the
// flags are checked (cobra would only show the default).
func (o *options) envInt(key string, def int, bad *error) int {
	v := o.getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		*bad = usageErr(fmt.Errorf("%s=%q is not an integer", key, v))
		return def
	}
	return n
}

func (o *options) root() *cobra.Command {
	var envErr error
	root := &cobra.Command{
		Use:   "bcd-agent",
		Short: "The reference node agent: signed heartbeats, bindings, verified installs",
		Long: `bcd-agent is bcd's control-plane side on one node (docs/agent.md): it heartbeats signed
reports to nodes.heartbeat, binds and unbinds the reservations the answers list (through the
reference driver, which records what a real one would do), and installs the release it is told to
run only after verifying it under its own pins.

Exit codes: 0 success (run: stopped by a signal); 1 the API answered an error; 2 a bad command
line; 3 the API could not be reached; 4 a local failure (a file, a key).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return envErr
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&o.apiURL, "api-url", o.env("BC_API_URL", "http://127.0.0.1:8080"), "API base URL ($BC_API_URL)")
	// No default shown: --help must never print a token. The agent has a
	// variable of its own, so make run's export block (BC_TOKEN=dev:admin,
	// bcctl's) does not make it run as the admin.
	pf.StringVar(&o.token, "token", "", "bearer token granted compute:nodes:report on node:<pool>/<node>: a JWT, or dev:<principal> on the local gateway ($BC_AGENT_TOKEN; neither set: "+devNodeToken+", the local node principal; bcctl's BC_TOKEN is not read)")
	pf.StringVar(&o.tenant, "tenant", o.getenv("BC_TENANT"), "the pool's owner ($BC_TENANT)")
	pf.StringVar(&o.pool, "pool", o.getenv("BC_POOL"), "the node's pool ($BC_POOL)")
	pf.StringVar(&o.node, "node", o.getenv("BC_NODE"), "the node: <resource>-node-<k> ($BC_NODE)")
	pf.StringVar(&o.key, "key", o.getenv("BC_NODE_KEY"), "the node's private key, PEM (keygen writes one) ($BC_NODE_KEY)")
	pf.StringVar(&o.pinsFile, "pins-file", o.getenv("BC_AGENT_PINS_FILE"), "release keys the node trusts, a PEM bundle; none: installs disabled ($BC_AGENT_PINS_FILE)")
	pf.StringVar(&o.logKey, "log-key", o.getenv("BC_AGENT_LOG_KEY"), "the release log's verifier key (bcctl pubkey --log-origin prints it; make run exports it as BC_RELEASE_LOG_VKEY): required with --pins-file, the node installs only what the log includes ($BC_AGENT_LOG_KEY)")
	pf.IntVar(&o.threshold, "threshold", o.envInt("BC_AGENT_THRESHOLD", 1, &envErr), "distinct pinned keys that must sign a release ($BC_AGENT_THRESHOLD)")
	pf.StringVar(&o.platform, "platform", o.env("BC_PLATFORM", runtime.GOOS+"/"+runtime.GOARCH), "os/arch[/variant], as registered and as in release manifests ($BC_PLATFORM)")
	pf.IntVar(&o.devices, "devices", o.envInt("BC_AGENT_DEVICES", 8, &envErr), "devices the node should see: its pool's node size ($BC_AGENT_DEVICES)")
	pf.StringVar(&o.stateDir, "state-dir", o.env("BC_AGENT_STATE_DIR", "/var/lib/bcd-agent"), "installed binaries (<dir>/<version>/bcd) and what runs ($BC_AGENT_STATE_DIR)")
	pf.StringVar(&o.journal, "journal", o.getenv("BC_AGENT_JOURNAL"), "append the driver's binds and unbinds to this file, a JSON object a line ($BC_AGENT_JOURNAL)")
	pf.StringVar(&o.logFormat, "log-format", o.env("BC_LOG_FORMAT", "json"), "json or text ($BC_LOG_FORMAT)")
	pf.StringVar(&o.logLevel, "log-level", o.env("BC_LOG_LEVEL", "info"), "debug, info, warn or error ($BC_LOG_LEVEL)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	root.AddCommand(o.runCommand(), o.onceCommand(), o.keygenCommand())
	return root
}

func (o *options) runCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Heartbeat on the interval each answer gives, until SIGINT or SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, closeFn, err := o.agent()
			if err != nil {
				return err
			}
			defer closeFn()
			installs := "disabled (no --pins-file)"
			if o.pins != nil {
				installs = fmt.Sprintf("%s, threshold %d", strictjson.Plural(len(o.pins.KeyIDs()), "pinned key"), o.pins.Threshold())
			}
			// Said at once, so an agent that is up never looks hung for its
			// first interval.
			o.log.Info("bcd-agent running", "tenant", o.tenant, "pool", o.pool, "node", o.node, "api_url", o.apiURL,
				"interval", "each answer's nextHeartbeatSeconds (idle 30s by default)", "state_dir", o.stateDir,
				"platform", o.platform, "installs", installs)
			ctx := cmd.Context()
			err = a.Run(ctx)
			if !errors.Is(err, context.Canceled) {
				return err
			}
			by := "its context ended"
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				by = cause.Error()
			}
			o.log.Info("bcd-agent stopped", "by", by)
			return nil
		},
	}
}

// firstHeartbeat logs the outcome of run's first heartbeat: up and what it
// was told, or why not (run keeps trying).
func (o *options) firstHeartbeat(res api.HeartbeatResult, err error) {
	if err == nil {
		running := "none"
		if r := res.Node.Running; r != nil {
			running = r.Version
		}
		o.log.Info("first heartbeat accepted", "node_state", string(res.Node.State), "running", running,
			"next_heartbeat_s", res.NextHeartbeatSeconds)
		return
	}
	// The heartbeat failed line before this one has the details and hint.
	o.log.Error("first heartbeat failed; retrying with backoff", "error", err.Error())
}

func (o *options) onceCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "once",
		Short: "Send one heartbeat, act on the answer (an install included) and print it as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, closeFn, err := o.agent()
			if err != nil {
				return err
			}
			defer closeFn()
			res, err := a.Step(cmd.Context())
			if err != nil {
				return fromAPI(err)
			}
			if err := a.Wait(cmd.Context()); err != nil {
				return err
			}
			enc := json.NewEncoder(o.out)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		},
	}
}

func (o *options) keygenCommand() *cobra.Command {
	var out, alg string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen --out FILE [--alg ecdsa-p256|ed25519] [--force]",
		Short: "Make a node key (mode 0600); print its keyid, public PEM and the nodes.register call",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				return usageErr(errors.New("keygen: --out is required"))
			}
			k, err := dsse.GenerateKey(alg)
			if err != nil {
				return usageErr(err)
			}
			pem, err := dsse.MarshalPrivateKeyPEM(k)
			if err != nil {
				return localErr(err)
			}
			if err := dsse.WriteKeyFile(out, pem, force, "a node key"); err != nil {
				return localErr(err)
			}
			return o.printRegistration(k.Public(), out)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the private key to (PKCS#8 PEM, mode 0600)")
	cmd.Flags().StringVar(&alg, "alg", dsse.AlgECDSAP256, "ecdsa-p256 or ed25519")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing key file (the node must then be registered again, under its new key)")
	return cmd
}

// printRegistration prints the keyid and public PEM, and the nodes.register
// body that registers the node under them (the pool's owner sends it).
func (o *options) printRegistration(pub crypto.PublicKey, keyFile string) error {
	id, err := dsse.KeyID(pub)
	if err != nil {
		return localErr(err)
	}
	pem, err := dsse.MarshalPublicKeyPEM(pub)
	if err != nil {
		return localErr(err)
	}
	body, err := json.Marshal(map[string]string{"tenantId": orPlaceholder(o.tenant, "<pool owner>"),
		"poolId": orPlaceholder(o.pool, "<pool>"), "nodeId": orPlaceholder(o.node, "<resource>-node-<k>"),
		"publicKey": string(pem), "platform": o.platform})
	if err != nil {
		return localErr(err)
	}
	fmt.Fprintf(o.out, "keyid %s\n%s\nRegister the node as the pool's owner (compute:pools:admin on its tenant):\n", id, pem)
	fmt.Fprintf(o.out, "  bcctl nodes register %s --pool %s --key %s --platform %s\n", orPlaceholder(o.node, "<resource>-node-<k>"),
		orPlaceholder(o.pool, "<pool>"), keyFile, o.platform)
	fmt.Fprintf(o.out, "or POST /api/compute/nodes/register with the body\n  %s\n", body)
	return nil
}

func orPlaceholder(v, placeholder string) string {
	if v == "" {
		return placeholder
	}
	return v
}

// agent builds the agent the flags describe; closeFn closes the journal.
func (o *options) agent() (a *agent.Agent, closeFn func(), err error) {
	for _, f := range [][2]string{{"--tenant", o.tenant}, {"--pool", o.pool}, {"--node", o.node}, {"--key", o.key}} {
		if f[1] == "" {
			return nil, nil, usageErr(fmt.Errorf("%s is required (or its BC_* variable: see --help)", f[0]))
		}
	}
	level, err := logfmt.ParseLevel(o.logLevel)
	if err != nil {
		return nil, nil, usageErr(err)
	}
	format, err := logfmt.ParseFormat(o.logFormat)
	if err != nil {
		return nil, nil, usageErr(err)
	}
	log := logfmt.New(o.errOut, format, level)
	o.log = log
	token, err := o.resolveToken()
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(o.key)
	if err != nil {
		return nil, nil, localErr(err)
	}
	key, err := dsse.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, nil, localErr(fmt.Errorf("--key %s: %w", o.key, err))
	}
	var pins *release.Pins
	var logKey *release.LogKey
	if o.logKey != "" {
		k, err := release.ParseVerifierKey(o.logKey)
		if err != nil {
			return nil, nil, usageErr(fmt.Errorf("--log-key (BC_AGENT_LOG_KEY): %w", err))
		}
		logKey = &k
	}
	if o.pinsFile != "" {
		if logKey == nil {
			return nil, nil, usageErr(errors.New("--pins-file without --log-key (BC_AGENT_LOG_KEY): the node installs only releases the release log includes, so it pins the log's key too (bcctl pubkey --kms-key <log key> --log-origin <origin> prints it)"))
		}
		if pins, err = loadPins(o.pinsFile, o.threshold); err != nil {
			return nil, nil, localErr(err)
		}
		o.pins = pins
	} else {
		log.Warn("no --pins-file: installs are disabled (a release the node is told to run is reported failed)")
	}
	driver := agent.NewRecordingDriver(o.devices)
	closeFn = func() {}
	if o.journal != "" {
		c, err := driver.OpenJournal(o.journal)
		if err != nil {
			return nil, nil, localErr(err)
		}
		closeFn = func() { c.Close() }
	}
	a, err = agent.New(agent.Config{Client: client.New(o.apiURL, token), TenantID: o.tenant, PoolID: o.pool, NodeID: o.node,
		Key: key, Pins: pins, LogKey: logKey, Platform: o.platform, Devices: o.devices, Driver: driver, StateDir: o.stateDir, Logger: log,
		Words: agentWords, FirstHeartbeat: o.firstHeartbeat})
	var sd *agent.StateDirError
	switch {
	case errors.As(err, &sd):
		closeFn()
		return nil, nil, localErr(fmt.Errorf("--state-dir %s (BC_AGENT_STATE_DIR): %w\n    The agent keeps the binaries it installs and state.json there, so it checks at start that it may write it: "+
			"run it as a user who may (its service's), or give --state-dir a directory it may write (e.g. --state-dir $HOME/.local/state/bcd-agent)", o.stateDir, sd.Err))
	case err != nil:
		closeFn()
		return nil, nil, usageErr(err)
	}
	return a, closeFn, nil
}

// resolveToken is the bearer token: --token, else BC_AGENT_TOKEN, else the
// local node principal. bcctl's BC_TOKEN is never read (make run exports
// it as dev:admin for bcctl); the local admin is refused outright, since a
// node's key and token should let it report for itself and nothing more.
func (o *options) resolveToken() (string, error) {
	token := o.token
	if token == "" {
		token = o.getenv("BC_AGENT_TOKEN")
	}
	if token == "" {
		token = devNodeToken
		if o.getenv("BC_TOKEN") != "" {
			o.log.Warn("BC_TOKEN is bcctl's token and the agent does not read it: set BC_AGENT_TOKEN (or --token) for the agent's own; using " + devNodeToken)
		}
	}
	if strings.TrimSpace(token) == devAdminToken {
		return "", usageErr(fmt.Errorf("--token (or BC_AGENT_TOKEN) is %s, the local gateway's admin (granted everything): an agent runs as a node principal, "+
			"granted compute:nodes:report on its node and nothing more\n    Locally that is %s, the default: leave --token and BC_AGENT_TOKEN unset "+
			"(localstack/policy.json grants it node:*); deployed, a JWT whose principal Better IAM grants that one permission", devAdminToken, devNodeToken))
	}
	return token, nil
}

// loadPins reads a PEM bundle of release keys with a threshold.
func loadPins(path string, threshold int) (*release.Pins, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := release.ParsePEMBundle(data)
	if err != nil {
		return nil, fmt.Errorf("--pins-file %s: %w", path, err)
	}
	return release.NewPins(keys, threshold)
}

// usageError is a bad command line (exit 2), localError a local failure
// (exit 4), unreachable a transport failure talking to the API (exit 3).
type (
	usageError  struct{ error }
	localError  struct{ error }
	unreachable struct{ error }
)

func usageErr(err error) error { return usageError{err} }
func localErr(err error) error { return localError{err} }

// fromAPI is an API call's error: the API's own, or unreachable.
func fromAPI(err error) error {
	if apierr.As(err) != nil {
		return err
	}
	return unreachable{err}
}

// report prints err and returns the exit code.
func (o *options) report(err error) int {
	var (
		ue usageError
		le localError
		ae *apierr.Error
		un unreachable
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(o.errOut, "bcd-agent: %v\n", err)
		return exitUsage
	case errors.As(err, &le):
		fmt.Fprintf(o.errOut, "bcd-agent: %v\n", err)
		return exitLocal
	case errors.As(err, &ae):
		// As bcctl prints it: the code, the details' numbers, what to do.
		client.Explain(o.errOut, ae, agent.HeartbeatCall(o.tenant, o.pool, o.node), agentWords)
		return exitAPIError
	case errors.As(err, &un):
		fmt.Fprintf(o.errOut, "bcd-agent: cannot reach the API at %s: %v\n", o.apiURL, err)
		return exitUnreachable
	default: // cobra's: an unknown command or flag
		fmt.Fprintf(o.errOut, "bcd-agent: %v\n", err)
		return exitUsage
	}
}
