// Package devstack runs the local stack's real protocol servers as child
// processes: dynalite (the DynamoDB API, from npm) and local-kms (the KMS API,
// from the Go module proxy). `make run` (cmd/bc-local) and the integration
// tests use it; nothing here is mocked.
//
// Both tools are installed into the repository by `make tools`:
// node_modules/dynalite and .tools/bin/local-kms. Children run in their own
// process group and, on Linux, get SIGKILL when this process dies, so a
// crashed test binary leaves no server behind.
package devstack

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kms"
)

// Dev release key (localstack/kms-seed.yaml seeds local-kms with it). DEV
// ONLY: its private half is committed in localstack/dev-release-key.pem.
const (
	DevReleaseKeyID    = "278f4761-c52b-4cfe-934b-17412f92b146"
	DevReleaseKeyAlias = "alias/bc-release-dev"
	// DevReleaseLogKeyID signs the dev release log's checkpoints, under
	// DevReleaseLogOrigin.
	DevReleaseLogKeyID  = "5310fd85-917f-485e-9171-ebd8ed86e3e7"
	DevReleaseLogOrigin = "dev.bettercompute.local/releases"
)

// Files of the local configuration, relative to the repository root.
const (
	PolicyFile  = "localstack/policy.json"
	PinsFile    = "localstack/dev-release-pins.pem"
	KeyFile     = "localstack/dev-release-key.pem"
	KMSSeedFile = "localstack/kms-seed.yaml"
)

// DefaultRegion is the region the stack runs in when Options.Region is empty
// (the same default as the app's AWS_REGION).
const DefaultRegion = "us-east-1"

// KMSAccountID is the account in local-kms ARNs.
const KMSAccountID = "111122223333"

// ErrToolsMissing means node_modules or .tools/bin/local-kms is not installed.
var ErrToolsMissing = errors.New("local tools are not installed")

// Options configures Start.
type Options struct {
	// StateDir keeps dynalite's LevelDB (StateDir/dynamodb) and local-kms's
	// data (StateDir/kms) across runs, and the servers' ports (PortsFile):
	// a restart takes the same ports while they are free, so endpoints a
	// user exported stay valid; a state dir that remembers none (new, or
	// wiped by make clean) starts on two ports derived from its path
	// (preferredPorts), so they survive a wipe too. Empty: dynalite runs in
	// memory and local-kms in a temporary directory removed by Close, on
	// any free ports.
	StateDir string
	// KMSSeed is the path of a local-kms seed file (e.g. KMSSeedFile under
	// the root). Empty: no seed. A seed local-kms skips fails Start.
	KMSSeed string
	// Region is the KMS region (ARNs) and the clients' region; default DefaultRegion.
	Region string
	// Root is the repository root holding node_modules and .tools; default:
	// found by walking up from the working directory (Root).
	Root string
	// Logger receives the children's output (debug) and lifecycle (info).
	Logger *slog.Logger
	// StartTimeout bounds the start of both servers; default 60s.
	StartTimeout time.Duration
}

// Stack is a running pair of local servers.
type Stack struct {
	DynamoEndpoint string // http://127.0.0.1:<port>
	KMSEndpoint    string // http://127.0.0.1:<port> (local-kms, built bound to loopback)
	Region         string

	log       *slog.Logger
	children  []*child
	tmpDir    string
	lock      *os.File // held on StateDir while running
	closeOnce sync.Once
	closeErr  error
}

// Start starts dynalite and local-kms and returns once both answer real
// requests (ListTables, ListKeys). ctx bounds the start only; the servers
// run until Close.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Root == "" {
		if o.Root, err = Root(); err != nil {
			return nil, err
		}
	}
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	tools, err := findTools(o.Root)
	if err != nil {
		return nil, err
	}
	if o.KMSSeed != "" {
		if _, err := os.Stat(o.KMSSeed); err != nil {
			// local-kms would skip a missing seed silently.
			return nil, fmt.Errorf("devstack: kms seed: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()

	s := &Stack{Region: o.Region, log: o.Logger}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	dynamoDir, kmsDir := "", ""
	var last ports
	if o.StateDir != "" {
		if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
			return nil, fmt.Errorf("devstack: state dir: %w", err)
		}
		dynamoDir, kmsDir = filepath.Join(o.StateDir, "dynamodb"), filepath.Join(o.StateDir, "kms")
		for _, d := range []string{dynamoDir, kmsDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("devstack: state dir: %w", err)
			}
		}
		if s.lock, err = lockStateDir(o.StateDir); err != nil {
			return nil, err
		}
		last = readPorts(o.StateDir)
		if last.DynamoDB == 0 || last.KMS == 0 {
			last = preferredPorts(o.StateDir) // new, or wiped: make clean
		}
	} else {
		sweepTempDirs(s.log)
		if s.tmpDir, err = os.MkdirTemp("", tempPrefix); err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		if s.lock, err = lockStateDir(s.tmpDir); err != nil {
			return nil, err
		}
		kmsDir = filepath.Join(s.tmpDir, "kms")
	}

	began := time.Now()
	var wg sync.WaitGroup
	var dynErr, kmsErr error
	var dyn, km *child
	wg.Go(func() { dyn, s.DynamoEndpoint, dynErr = startDynalite(ctx, tools, dynamoDir, last.DynamoDB, s) })
	wg.Go(func() { km, s.KMSEndpoint, kmsErr = startKMS(ctx, tools, kmsDir, o.KMSSeed, last.KMS, s) })
	wg.Wait()
	for _, c := range []*child{dyn, km} {
		if c != nil {
			s.children = append(s.children, c)
		}
	}
	if err := errors.Join(dynErr, kmsErr); err != nil {
		return nil, err
	}
	if o.StateDir != "" {
		if err := writePorts(o.StateDir, ports{DynamoDB: portOf(s.DynamoEndpoint), KMS: portOf(s.KMSEndpoint)}); err != nil {
			s.log.Warn("devstack: ports not remembered", "error", err.Error())
		}
	}
	s.log.Info("devstack started", "dynamodb", s.DynamoEndpoint, "kms", s.KMSEndpoint,
		"region", s.Region, "state_dir", o.StateDir, "ms", time.Since(began).Milliseconds())
	return s, nil
}

// Close stops both servers (SIGTERM to each process group, SIGKILL after a
// grace period) and removes the temporary state. It is safe to call twice.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		for _, c := range s.children {
			errs = append(errs, c.stop(5*time.Second))
		}
		if s.tmpDir != "" {
			errs = append(errs, os.RemoveAll(s.tmpDir))
		}
		if s.lock != nil {
			errs = append(errs, s.lock.Close()) // releases the lock
		}
		s.closeErr = errors.Join(errs...)
		if len(s.children) > 0 {
			s.log.Info("devstack stopped")
		}
	})
	return s.closeErr
}

// PIDs returns the children's process ids (dynalite, local-kms).
func (s *Stack) PIDs() []int {
	var pids []int
	for _, c := range s.children {
		pids = append(pids, c.cmd.Process.Pid)
	}
	return pids
}

// Env is the app configuration that points at this stack.
func (s *Stack) Env() map[string]string {
	return map[string]string{
		"BC_DYNAMODB_ENDPOINT": s.DynamoEndpoint,
		"BC_KMS_ENDPOINT":      s.KMSEndpoint,
		"AWS_REGION":           s.Region,
	}
}

// AWSConfig is an SDK configuration for the stack: its region and static
// credentials (the local servers accept any), never a real profile.
func (s *Stack) AWSConfig() aws.Config {
	return aws.Config{Region: s.Region,
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")}
}

// DynamoDB returns a client of the stack's dynalite.
func (s *Stack) DynamoDB(opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(s.AWSConfig(), append([]func(*dynamodb.Options){
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(s.DynamoEndpoint) }}, opts...)...)
}

// KMS returns a client of the stack's local-kms.
func (s *Stack) KMS(opts ...func(*kms.Options)) *kms.Client {
	return kms.NewFromConfig(s.AWSConfig(), append([]func(*kms.Options){
		func(o *kms.Options) { o.BaseEndpoint = aws.String(s.KMSEndpoint) }}, opts...)...)
}

// DevDefaults is the dev configuration of the app under localstack/ (the
// Better IAM policy, the release pins and the seeded KMS release key), for
// the BC_* variables a user did not set. DEV ONLY.
func DevDefaults(root string) map[string]string {
	return map[string]string{
		"BC_POLICY_FILE":        filepath.Join(root, PolicyFile),
		"BC_RELEASE_PINS_FILE":  filepath.Join(root, PinsFile),
		"BC_RELEASE_KMS_KEYS":   DevReleaseKeyID,
		"BC_RELEASE_LOG_KEY":    DevReleaseLogKeyID,
		"BC_RELEASE_LOG_ORIGIN": DevReleaseLogOrigin,
	}
}

// ModulePath is the module whose go.mod marks the repository root.
const ModulePath = "github.com/bettercompute/control-plane"

// Root finds the repository root: the nearest directory at or above the
// working directory whose go.mod declares ModulePath (infra/ is a module of
// its own and is skipped).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("devstack: %w", err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("devstack: no go.mod of %s at or above the working directory", ModulePath)
		}
		dir = parent
	}
}

func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`)
		}
	}
	return ""
}

type tools struct{ node, guard, dynalite, localKMS string }

func findTools(root string) (tools, error) {
	t := tools{
		guard:    filepath.Join(root, "shared", "devstack", "dynalite-guard.js"),
		dynalite: filepath.Join(root, "node_modules", "dynalite", "cli.js"),
		localKMS: filepath.Join(root, ".tools", "bin", "local-kms"),
	}
	for _, p := range []string{t.guard, t.dynalite, t.localKMS} {
		if _, err := os.Stat(p); err != nil {
			return t, fmt.Errorf("devstack: %w: %s is missing; run `make tools`", ErrToolsMissing, p)
		}
	}
	var err error
	if t.node, err = exec.LookPath("node"); err != nil {
		return t, fmt.Errorf("devstack: %w: node is not on PATH (Node 20 or later is required)", ErrToolsMissing)
	}
	return t, nil
}

var dynaliteListening = regexp.MustCompile(`^Dynalite listening at: \S+:(\d+)$`)

// startDynalite starts dynalite on a free loopback port: prefer when it is
// free, else any. dynalite cannot listen on port 0 (its CLI treats 0 as
// "default 4567"), so a port is chosen here; when another process takes it
// first, dynalite exits with EADDRINUSE and the next attempt uses another
// port. Ready means: this child printed its listening line (so the port is
// ours) and ListTables answers.
func startDynalite(ctx context.Context, t tools, dir string, prefer int, s *Stack) (*child, string, error) {
	var lastErr error
	for attempt := 1; attempt <= 5; attempt++ {
		port := prefer
		if attempt > 1 || !portFree("127.0.0.1", port) {
			var err error
			if port, err = freePort(); err != nil {
				return nil, "", err
			}
		}
		// Through dynalite-guard.js: a client dropping a connection mid-request
		// must not end the server.
		args := []string{t.guard, t.dynalite, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"}
		if dir != "" {
			args = append(args, "--path", dir)
		}
		c, err := startChild("dynalite", t.node, args, nil, s.log, func(line string) (string, bool) {
			m := dynaliteListening.FindStringSubmatch(line)
			if m == nil {
				return "", false
			}
			return "http://127.0.0.1:" + m[1], true
		})
		if err != nil {
			return nil, "", err
		}
		endpoint, err := c.waitReady(ctx, func(ctx context.Context, endpoint string) error {
			_, err := dynamodb.NewFromConfig(s.AWSConfig(), func(o *dynamodb.Options) {
				o.BaseEndpoint = aws.String(endpoint)
				o.RetryMaxAttempts = 1
			}).ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
			return err
		})
		if err == nil {
			return c, endpoint, nil
		}
		_ = c.stop(time.Second)
		lastErr = err
		if !strings.Contains(c.output(), "EADDRINUSE") {
			break
		}
		s.log.Info("dynalite port taken; retrying", "port", port, "attempt", attempt)
	}
	return nil, "", lastErr
}

var (
	kmsStarted = regexp.MustCompile(`Local KMS started on \S*:(\d+)`)
	// local-kms logs these and goes on without the seed (or any of its keys).
	kmsSeedSkipped = regexp.MustCompile(`Error parsing YAML|Unable to read seed`)
)

// startKMS starts local-kms on prefer when that port is free, else with
// PORT=0: it binds a free port itself (on 0.0.0.0; it cannot bind loopback
// only) and logs it, so no port can be taken under it. With a fixed port it
// panics when the port is in use: should another process take prefer
// between the check and the bind, it is started again with PORT=0.
func startKMS(ctx context.Context, t tools, dataDir, seed string, prefer int, s *Stack) (*child, string, error) {
	if portFree("", prefer) {
		c, endpoint, err := startKMSOn(ctx, t, dataDir, seed, prefer, s)
		if err == nil || c == nil || !c.exited() {
			return c, endpoint, err
		}
		s.log.Info("local-kms port taken; retrying on another", "port", prefer)
	}
	return startKMSOn(ctx, t, dataDir, seed, 0, s)
}

func startKMSOn(ctx context.Context, t tools, dataDir, seed string, port int, s *Stack) (*child, string, error) {
	seedPath := filepath.Join(dataDir, "no-seed.yaml") // local-kms defaults to /init/seed.yaml
	if seed != "" {
		var err error
		if seedPath, err = filepath.Abs(seed); err != nil {
			return nil, "", fmt.Errorf("devstack: kms seed: %w", err)
		}
	}
	env := []string{"PORT=" + strconv.Itoa(port), "KMS_REGION=" + s.Region, "KMS_ACCOUNT_ID=" + KMSAccountID,
		"KMS_DATA_PATH=" + dataDir, "KMS_SEED_PATH=" + seedPath}
	var mu sync.Mutex
	var seedErr string
	c, err := startChild("local-kms", t.localKMS, nil, env, s.log, func(line string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if seedErr == "" && kmsSeedSkipped.MatchString(line) {
			seedErr = line
		}
		if m := kmsStarted.FindStringSubmatch(line); m != nil {
			return "http://127.0.0.1:" + m[1], true
		}
		return "", false
	})
	if err != nil {
		return nil, "", err
	}
	endpoint, err := c.waitReady(ctx, func(ctx context.Context, endpoint string) error {
		_, err := kms.NewFromConfig(s.AWSConfig(), func(o *kms.Options) {
			o.BaseEndpoint = aws.String(endpoint)
			o.RetryMaxAttempts = 1
		}).ListKeys(ctx, &kms.ListKeysInput{Limit: aws.Int32(1)})
		return err
	})
	if err != nil {
		return c, "", err
	}
	mu.Lock()
	defer mu.Unlock()
	if seedErr != "" {
		return c, "", fmt.Errorf("devstack: local-kms skipped the seed file %s (ECC keys must be SEC1 \"EC PRIVATE KEY\" PEM): %s", seedPath, seedErr)
	}
	return c, endpoint, nil
}

// lockStateDir takes StateDir/.lock so a second stack on the same state
// fails here, clearly, not deep inside LevelDB in both servers.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("devstack: state dir lock: %w", err)
	}
	if err := lockFile(f); err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("devstack: state dir %s is in use by another local stack (pid %s); stop it or set another BC_STATE_DIR",
			dir, strings.TrimSpace(string(owner)))
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

const tempPrefix = "bc-devstack-"

// sweepTempDirs removes the temporary state of stacks whose process died
// without Close (a killed or timed-out test binary): a temporary dir is
// locked while its stack runs, so one older than a minute whose lock can be
// taken is stale.
func sweepTempDirs(log *slog.Logger) {
	if !canLock {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			continue
		}
		if lockFile(f) == nil {
			if err := os.RemoveAll(dir); err == nil {
				log.Debug("removed stale devstack state", "dir", dir)
			}
		}
		f.Close()
	}
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the child binds it; callers detect that and retry.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("devstack: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PortsFile (under Options.StateDir) holds the ports of the last start.
const PortsFile = "ports.json"

type ports struct {
	DynamoDB int `json:"dynamodb"`
	KMS      int `json:"kms"`
}

// Derived ports (preferredPorts) are taken from [derivedBase,
// derivedBase+2*derivedSlots): below the kernels' ephemeral ranges (Linux
// 32768 and up, macOS 49152 and up), so an outgoing connection seldom
// holds one.
const (
	derivedBase  = 20000
	derivedSlots = 5000
)

// preferredPorts are the ports of a state dir (an absolute path) that
// remembers none: two neighbours derived from its path, the same after
// the dir is wiped (make clean) and seldom another state dir's. A port
// another process holds is given up for a free one, as a remembered one.
func preferredPorts(stateDir string) ports {
	sum := sha256.Sum256([]byte(stateDir))
	slot := int(binary.BigEndian.Uint32(sum[:4]) % derivedSlots)
	return ports{DynamoDB: derivedBase + 2*slot, KMS: derivedBase + 2*slot + 1}
}

// readPorts returns the ports of the last start (zero when unknown).
func readPorts(stateDir string) ports {
	var p ports
	if data, err := os.ReadFile(filepath.Join(stateDir, PortsFile)); err == nil {
		_ = json.Unmarshal(data, &p)
	}
	return p
}

func writePorts(stateDir string, p ports) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stateDir, PortsFile), append(data, '\n'), 0o644)
}

func portOf(endpoint string) int {
	i := strings.LastIndexByte(endpoint, ':')
	p, _ := strconv.Atoi(endpoint[i+1:])
	return p
}

// portFree reports whether port (1..65535) can be bound on host ("" for
// every interface) right now.
func portFree(host string, port int) bool {
	if port <= 0 || port > 65535 {
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
