package app

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/cursor"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/logfmt"
)

// App holds the clients every module shares.
type App struct {
	Config  Config
	AWS     aws.Config
	DB      *dynamodb.Client
	KMS     *kms.Client
	Gateway *api.Gateway
	Cursors *cursor.Codec
	Logger  *slog.Logger
	Now     func() time.Time

	// only names the one method a Lambda serves ("" for all): modules skip
	// start-up work (like fetching KMS pins) that method does not need.
	only string
	// cursorFallback: no cursor key was configured (see New).
	cursorFallback bool
	// pins: the release pins loaded at start (Pins).
	pins []Pin
	// fleet is the fleet service, built once (FleetService).
	fleet     *fleet.Service
	fleetOnce sync.Once
}

// serves reports whether this process serves method name.
func (a *App) serves(name string) bool { return a.only == "" || a.only == name }

// Option adjusts an App before its modules are built (tests, the local gateway).
type Option func(*options)

type options struct {
	devTokens bool
	dynamoOpt []func(*dynamodb.Options)
	decider   iam.Decider
	now       func() time.Time
	logger    *slog.Logger
	awsCfg    *aws.Config
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
	if cfg.CursorSecretARN != "" {
		if key, err = readSecret(ctx, *awsCfg, cfg); err != nil {
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
	}
	a.KMS = kms.NewFromConfig(*awsCfg, func(ko *kms.Options) {
		if cfg.KMSEndpoint != "" {
			ko.BaseEndpoint = aws.String(cfg.KMSEndpoint)
		}
	})
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

// readSecret reads the cursor key from Secrets Manager (a cold start's one
// extra round trip, only in the functions that page).
func readSecret(ctx context.Context, awsCfg aws.Config, cfg Config) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sm := secretsmanager.NewFromConfig(awsCfg, func(o *secretsmanager.Options) {
		if cfg.SecretsEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.SecretsEndpoint)
		}
	})
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(cfg.CursorSecretARN)})
	if err != nil {
		return nil, fmt.Errorf("BC_CURSOR_SECRET_ARN: reading the cursor key: %w", err)
	}
	if aws.ToString(out.SecretString) == "" {
		return nil, fmt.Errorf("BC_CURSOR_SECRET_ARN: secret %s holds no string", cfg.CursorSecretARN)
	}
	return []byte(*out.SecretString), nil
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
// table, KMS lists one key — so the local gateway's /healthz reports a dead
// server instead of answering 200 regardless.
func (a *App) Health(ctx context.Context) error {
	if _, err := a.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(a.Config.Table)}); err != nil {
		return apierr.Dependency("dynamodb", err)
	}
	if _, err := a.KMS.ListKeys(ctx, &kms.ListKeysInput{Limit: aws.Int32(1)}); err != nil {
		return apierr.Dependency("kms", err)
	}
	return nil
}

// module builds the endpoints of one catalog module.
type module func(ctx context.Context, a *App) ([]api.Endpoint, error)

// modules maps a catalog Module to its builder; a module missing here is
// answered NOT_IMPLEMENTED from the catalog.
var modules = map[string]module{}

// Endpoints builds every catalog method's endpoint, in catalog order.
func (a *App) Endpoints(ctx context.Context) ([]api.Endpoint, error) {
	built := map[string]api.Endpoint{}
	for name, build := range modules {
		eps, err := build(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", name, err)
		}
		for _, ep := range eps {
			built[ep.Method.Name] = ep
		}
	}
	out := make([]api.Endpoint, 0, len(api.Catalog))
	for _, m := range api.Catalog {
		a.warnCursorKey(m)
		ep, ok := built[m.Name]
		if !ok {
			ep = api.NotServed(m)
		}
		out = append(out, ep)
	}
	return out, nil
}

// Endpoint builds only the module that serves method name (one Lambda).
func (a *App) Endpoint(ctx context.Context, name string) (api.Endpoint, error) {
	m := api.Lookup(name)
	if m == nil {
		return api.Endpoint{}, fmt.Errorf("no method %q in the catalog", name)
	}
	a.warnCursorKey(m)
	build, ok := modules[m.Module]
	if !ok {
		return api.NotServed(m), nil
	}
	a.only = name
	defer func() { a.only = "" }()
	eps, err := build(ctx, a)
	if err != nil {
		return api.Endpoint{}, err
	}
	for _, ep := range eps {
		if ep.Method == m {
			return ep, nil
		}
	}
	return api.NotServed(m), nil
}

// MustEndpoint is Endpoint for mains.
func (a *App) MustEndpoint(ctx context.Context, name string) api.Endpoint {
	ep, err := a.Endpoint(ctx, name)
	if err != nil {
		a.Logger.Error("start", "method", name, "error", err.Error())
		os.Exit(1)
	}
	return ep
}

// Reconcile runs one reconciler pass (capacity.reservations). Until the
// capacity module registers one it does nothing.
func (a *App) Reconcile(ctx context.Context) error {
	if reconcile == nil {
		return nil
	}
	return reconcile(ctx, a)
}

// reconcile is set by the capacity module's wiring.
var reconcile func(ctx context.Context, a *App) error

// Served reports whether this build serves method m (its module is wired).
func Served(m *api.Method) bool {
	_, ok := modules[m.Module]
	return ok
}

// listPage is a list request's page: its limit, where to start, and the
// binding its cursors are tied to (the method, the tenant, the filters).
type listPage struct {
	Limit   int
	After   map[string]string // nil: the first page
	binding string
}

// page decodes a list's limit (def when absent) and cursor.
func (a *App) page(call *api.Call, p api.Page, def int, filters ...string) (listPage, error) {
	lp := listPage{Limit: def, binding: cursor.Binding(call.Method.Name, call.TenantID, filters...)}
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

// next is the cursor of the page after this one ("" when there is none).
func (a *App) next(lp listPage, last map[string]string) string {
	return a.Cursors.Encode(lp.binding, last)
}
