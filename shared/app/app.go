package app

import (
	"context"
	"crypto"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/cursor"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/logfmt"
	"github.com/bettercompute/control-plane/shared/paging"
)

// App is the core every module shares: configuration, the AWS config, the
// DynamoDB client, the gateway, cursors and the logger. It knows no module:
// each main names the one method it serves (a Method of its module's
// wiring, built on this core), so a function links only that method's code
// and its dependencies — KMS only where releases are registered, Secrets
// Manager only where a method pages.
type App struct {
	Config  Config
	AWS     aws.Config
	DB      *dynamodb.Client
	Gateway *api.Gateway
	Cursors *cursor.Codec
	Logger  *slog.Logger
	Now     func() time.Time

	// keys reads KMS keys' public halves (WithPublicKeys); nil: not linked.
	keys PublicKeys
	// cursorFallback: no cursor key was configured (see New).
	cursorFallback bool
	// cursorUnread: BC_CURSOR_SECRET_ARN is set but this process was built
	// without a reader for it (see WithCursorKeyReader).
	cursorUnread bool
}

// Option adjusts an App before its modules are built (tests, the local gateway).
type Option func(*options)

type options struct {
	devTokens bool
	dynamoOpt []func(*dynamodb.Options)
	decider   iam.Decider
	now       func() time.Time
	logger    *slog.Logger
	awsCfg    *aws.Config
	readKey   KeyReader
	keys      func(aws.Config, Config) PublicKeys
}

// KeyReader reads the cursor key named by BC_CURSOR_SECRET_ARN
// (shared/app/cursorkey: from Secrets Manager).
type KeyReader func(ctx context.Context, awsCfg aws.Config, cfg Config) ([]byte, error)

// WithCursorKeyReader reads the cursor key with r when BC_CURSOR_SECRET_ARN
// is set: what the mains of the methods that page name, so the others do
// not link Secrets Manager.
func WithCursorKeyReader(r KeyReader) Option { return func(o *options) { o.readKey = r } }

// PublicKeys reads the public halves of KMS keys (shared/app/kmskeys): what
// releases.register pins from BC_RELEASE_KMS_KEYS.
type PublicKeys interface {
	PublicKey(ctx context.Context, keyID string) (crypto.PublicKey, error)
	// Signer signs with KMS key id (kms:Sign): the release log's key.
	Signer(ctx context.Context, keyID string) (crypto.Signer, error)
	// Health asks KMS one cheap question (the local gateway's /healthz).
	Health(ctx context.Context) error
}

// WithPublicKeys reads KMS public keys with the reader newKeys builds on
// the AWS config: what the main of releases.register names (and the local
// gateway), so no other function links the KMS client.
func WithPublicKeys(newKeys func(aws.Config, Config) PublicKeys) Option {
	return func(o *options) { o.keys = newKeys }
}

// PublicKey reads KMS key id's public half, or says which option the build
// lacks.
func (a *App) PublicKey(ctx context.Context, id string) (crypto.PublicKey, error) {
	if a.keys == nil {
		return nil, fmt.Errorf("KMS key %s: this build reads no KMS keys: its main must name kmskeys.FromKMS", id)
	}
	return a.keys.PublicKey(ctx, id)
}

// KMSSigner is a signer on KMS key id (the release log's checkpoint key), or
// says which option the build lacks.
func (a *App) KMSSigner(ctx context.Context, id string) (crypto.Signer, error) {
	if a.keys == nil {
		return nil, fmt.Errorf("KMS key %s: this build signs with no KMS key: its main must name kmskeys.FromKMS", id)
	}
	return a.keys.Signer(ctx, id)
}

// WithDevTokens lets the gateway accept "Bearer dev:<principal>" (local only).
func WithDevTokens() Option { return func(o *options) { o.devTokens = true } }

// WithDynamoOptions adds DynamoDB client options (e.g. a RoundTrips counter).
func WithDynamoOptions(f ...func(*dynamodb.Options)) Option {
	return func(o *options) { o.dynamoOpt = append(o.dynamoOpt, f...) }
}

// WithDecider replaces the configured Better IAM backend.
func WithDecider(d iam.Decider) Option { return func(o *options) { o.decider = d } }

// WithClock replaces time.Now (tests move time without sleeping).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithAWSConfig replaces the credentials-from-environment configuration
// (the CLI passes the SDK's full default chain: profiles, SSO, …).
func WithAWSConfig(c aws.Config) Option { return func(o *options) { o.awsCfg = &c } }

// WithLogger replaces the logger on stderr (BC_LOG_FORMAT, BC_LOG_LEVEL).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// FromEnv builds an App from BC_* variables.
func FromEnv(ctx context.Context, opts ...Option) (*App, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg, opts...)
}

// MustFromEnv is FromEnv for mains: a bad configuration stops the process
// with one JSON line saying why (in Lambda, an init failure: the runtime
// exits and Lambda reports Runtime.ExitError).
func MustFromEnv(ctx context.Context, opts ...Option) *App {
	a, err := FromEnv(ctx, opts...)
	if err != nil {
		newLogger(logfmt.JSON, slog.LevelError).Error("configuration", "error", err.Error())
		os.Exit(1)
	}
	return a
}

// newLogger is the logger on stderr in the configured format (logfmt).
func newLogger(f logfmt.Format, level slog.Level) *slog.Logger {
	return logfmt.New(os.Stderr, f, level)
}

// New builds an App from cfg.
func New(ctx context.Context, cfg Config, opts ...Option) (*App, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	logger := o.logger
	if logger == nil {
		logger = newLogger(cfg.LogFormat, cfg.LogLevel)
	}
	awsCfg := o.awsCfg
	if awsCfg == nil {
		awsCfg = lambdaAWSConfig(cfg)
	}
	var err error
	decider := o.decider
	if decider == nil {
		if decider, err = newDecider(cfg); err != nil {
			return nil, err
		}
	}
	key := []byte(cfg.CursorKey)
	unread := cfg.CursorSecretARN != "" && o.readKey == nil
	if cfg.CursorSecretARN != "" && o.readKey != nil {
		if key, err = o.readKey(ctx, *awsCfg, cfg); err != nil {
			return nil, err
		}
	}
	fallback := len(key) == 0
	if fallback {
		// Cross-tenant safety never rests on this key (every query is bound to
		// the caller's partition); it only makes tampering detectable.
		sum := sha256.Sum256([]byte("bc-cursor:" + cfg.Table))
		key = sum[:]
	}
	now := o.now
	if now == nil {
		now = time.Now
	}
	a := &App{
		Config:  cfg,
		AWS:     *awsCfg,
		DB:      dynamo.NewClient(*awsCfg, cfg.DynamoEndpoint, o.dynamoOpt...),
		Gateway: &api.Gateway{Decider: decider, Logger: logger, AllowDevTokens: o.devTokens, Table: cfg.Table},
		Cursors: cursor.New(key),
		Logger:  logger,
		Now:     now,

		cursorFallback: fallback,
		cursorUnread:   unread,
	}
	if o.keys != nil {
		a.keys = o.keys(*awsCfg, cfg)
	}
	return a, nil
}

// lambdaAWSConfig reads credentials from the environment, which is where
// Lambda puts them. Not linking the SDK's config loader (profiles, SSO, STS,
// IMDS) keeps every bootstrap smaller and its cold start shorter. Against
// local servers any credentials do.
func lambdaAWSConfig(cfg Config) *aws.Config {
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" && (cfg.DynamoEndpoint != "" || cfg.KMSEndpoint != "") {
		id, secret = "local", "local"
	}
	return &aws.Config{
		Region:      cfg.Region,
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, secret, os.Getenv("AWS_SESSION_TOKEN"))),
	}
}

// warnCursorKey says, where a method pages with cursors, that no key was
// configured.
func (a *App) warnCursorKey(m *api.Method) {
	if a.cursorFallback && slices.Contains(m.Actions, api.ReadsCursorKey) {
		a.Logger.Warn("no cursor key (BC_CURSOR_KEY or BC_CURSOR_SECRET_ARN); cursors are keyed by the table name", "method", m.Name)
		a.cursorFallback = false // once
	}
}

func newDecider(cfg Config) (iam.Decider, error) {
	switch {
	case cfg.IAMURL != "" && cfg.PolicyFile != "":
		return nil, fmt.Errorf("set one of BC_IAM_URL and BC_POLICY_FILE, not both")
	case cfg.IAMURL != "":
		return iam.NewClient(cfg.IAMURL), nil
	case cfg.PolicyFile != "":
		return iam.LoadPolicy(cfg.PolicyFile)
	}
	return nil, fmt.Errorf("no Better IAM configured: set BC_IAM_URL or BC_POLICY_FILE")
}

// Health asks each dependency one cheap question — DynamoDB describes the
// table, KMS lists a key where this build reads KMS keys —
// so the local gateway's /healthz reports a dead server instead of
// answering 200 regardless.
func (a *App) Health(ctx context.Context) error {
	if _, err := a.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(a.Config.Table)}); err != nil {
		return apierr.Dependency("dynamodb", err)
	}
	if a.keys != nil {
		if err := a.keys.Health(ctx); err != nil {
			return apierr.Dependency("kms", err)
		}
	}
	return nil
}

// Method is one catalog method's wiring: its name and how its endpoint is
// built on the core. A Lambda's main names the one it serves, and since
// nothing else refers to the others the linker leaves their code (their
// services, stores and item mappings) out of that bootstrap.
type Method struct {
	Name  string
	Build func(ctx context.Context, a *App) (api.Endpoint, error)
}

// Module is one catalog module's wiring (shared/app/capacityapp,
// fleetapp, rolloutapp): the Methods whose catalog Module is its Name. Only
// the processes that serve every module (shared/app/modules) hold one.
type Module interface {
	Name() string
	Methods() []Method
}

// Endpoints builds every catalog method's endpoint, in catalog order; a
// method whose module is not among mods is answered NOT_IMPLEMENTED.
func (a *App) Endpoints(ctx context.Context, mods ...Module) ([]api.Endpoint, error) {
	built := map[string]api.Endpoint{}
	for _, mod := range mods {
		for _, m := range mod.Methods() {
			ep, err := a.Endpoint(ctx, m)
			if err != nil {
				return nil, fmt.Errorf("module %s: %w", mod.Name(), err)
			}
			if ep.Method.Module != mod.Name() {
				return nil, fmt.Errorf("method %s is of module %s, not %s", m.Name, ep.Method.Module, mod.Name())
			}
			built[m.Name] = ep
		}
	}
	out := make([]api.Endpoint, 0, len(api.Catalog))
	for _, m := range api.Catalog {
		ep, ok := built[m.Name]
		if !ok {
			ep = api.NotServed(m)
		}
		out = append(out, ep)
	}
	return out, nil
}

// Endpoint builds m's endpoint (one Lambda serves one).
func (a *App) Endpoint(ctx context.Context, m Method) (api.Endpoint, error) {
	cm := api.Lookup(m.Name)
	if cm == nil {
		return api.Endpoint{}, fmt.Errorf("no method %q in the catalog", m.Name)
	}
	a.warnCursorKey(cm)
	if a.cursorUnread && slices.Contains(cm.Actions, api.ReadsCursorKey) {
		return api.Endpoint{}, fmt.Errorf("%s pages with cursors but this build reads no BC_CURSOR_SECRET_ARN: its main must name cursorkey.FromSecretsManager", m.Name)
	}
	ep, err := m.Build(ctx, a)
	if err != nil {
		return api.Endpoint{}, fmt.Errorf("%s: %w", m.Name, err)
	}
	if ep.Method != cm {
		return api.Endpoint{}, fmt.Errorf("the wiring of %s built %s's endpoint", m.Name, ep.Method.Name)
	}
	return ep, nil
}

// MustEndpoint is Endpoint for mains.
func (a *App) MustEndpoint(ctx context.Context, m Method) api.Endpoint {
	ep, err := a.Endpoint(ctx, m)
	if err != nil {
		a.Logger.Error("start", "method", m.Name, "error", err.Error())
		os.Exit(1)
	}
	return ep
}

// Served reports, for the doc generator, whether a build of mods serves m.
func Served(mods ...Module) func(m *api.Method) bool {
	return func(m *api.Method) bool {
		return slices.ContainsFunc(mods, func(mod Module) bool { return mod.Name() == m.Module })
	}
}

// ListPage is a list request's page: its limit, where to start, and the
// binding its cursors are tied to (the method, the tenant, the filters).
type ListPage struct {
	Limit   int
	After   map[string]string // nil: the first page
	binding string
}

// Page decodes a list's limit (def when absent) and cursor.
func (a *App) Page(call *api.Call, p api.Page, def int, filters ...string) (ListPage, error) {
	lp := ListPage{Limit: def, binding: cursor.Binding(call.Method.Name, call.TenantID, filters...)}
	if p.Limit != nil {
		lp.Limit = *p.Limit
	}
	if p.Cursor != nil {
		after, err := a.Cursors.Decode(*p.Cursor, lp.binding)
		if err != nil {
			return lp, err
		}
		lp.After = after
	}
	return lp, nil
}

// Next is the cursor of the page after this one ("" when there is none).
func (a *App) Next(lp ListPage, last map[string]string) string {
	return a.Cursors.Encode(lp.binding, last)
}

// List is every list method's shape: the request's page decoded (def:
// its limit when absent; the cursor bound to the method, the tenant and
// filters), one page listed, and the items (never null) with the next
// page's cursor ("" after the last).
func List[T any](a *App, call *api.Call, p api.Page, def int, list func(paging.Page) ([]T, map[string]string, error), filters ...string) ([]T, string, error) {
	lp, err := a.Page(call, p, def, filters...)
	if err != nil {
		return nil, "", err
	}
	items, last, err := list(paging.Page{Limit: lp.Limit, After: lp.After})
	if err != nil {
		return nil, "", err
	}
	return NonNil(items), a.Next(lp, last), nil
}

// Enum parses a request's optional enum field: the zero value when it is
// absent, INVALID_INPUT naming the allowed values when it is none of them.
func Enum[T ~string](field string, raw *string, parse func(string) (T, bool), values any) (T, error) {
	var zero T
	if raw == nil {
		return zero, nil
	}
	v, ok := parse(*raw)
	if !ok {
		return zero, apierr.Invalid("constraint", field, "%s must be one of %v", field, values)
	}
	return v, nil
}

// Deref is *p, or the zero value when p is nil (an optional input field).
func Deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// NonNil makes an empty list encode as [] rather than null.
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// EndpointsOf builds the endpoints of the named methods of mods, by name:
// what a process that calls several methods in process serves (the web
// console). A name no module wires is an error.
func (a *App) EndpointsOf(ctx context.Context, names []string, mods ...Module) (map[string]api.Endpoint, error) {
	out := make(map[string]api.Endpoint, len(names))
	for _, mod := range mods {
		for _, m := range mod.Methods() {
			if !slices.Contains(names, m.Name) {
				continue
			}
			ep, err := a.Endpoint(ctx, m)
			if err != nil {
				return nil, err
			}
			out[m.Name] = ep
		}
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("no module wires %s", n)
		}
	}
	return out, nil
}
