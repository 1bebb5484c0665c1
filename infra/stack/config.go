package stack

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Config is what the stack takes from CDK context (`cdk.json`, `-c key=value`).
// cdk.json lists every key with its default for operators; ConfigFrom has the
// same defaults built in (TestCDKJSONDefaults keeps the two equal) except the
// placeholders a deployment must replace (jwtIssuer, jwtAudience, iamUrl).
type Config struct {
	StackName   string   // stackName
	JWTIssuer   string   // jwtIssuer: https URL of the identity provider
	JWTAudience []string // jwtAudience: string, comma-separated string or list
	// The console's sign-in endpoints when the issuer's discovery document
	// does not serve them to a browser (Cognito: its hosted domain's
	// /oauth2/authorize and /oauth2/token); empty: discovered.
	ConsoleAuthorizeURL string // consoleAuthorizeUrl
	ConsoleTokenURL     string // consoleTokenUrl

	// Better IAM: exactly one of these.
	IAMURL     string // iamUrl → BC_IAM_URL
	PolicyFile string // policyFile → BC_POLICY_FILE (a path inside the function bundle; local use)

	// releasePins (inline PEM; cdk.json) or releasePinsFile (a PEM file read at
	// synth; -c cannot carry newlines) → BC_RELEASE_PINS. May be empty: the
	// stack's KMS signing key is pinned through BC_RELEASE_KMS_KEYS.
	ReleasePins      string
	ReleaseThreshold int // releaseThreshold → BC_RELEASE_THRESHOLD

	// The signing key's policy names who may sign (releaseSignerRoleArn; empty:
	// nobody, with a warning) and who administers it (releaseKeyAdminRoleArn;
	// empty: the account, through IAM). Both are IAM role ARNs.
	ReleaseSignerRole   string
	ReleaseKeyAdminRole string

	AssetRoot string // assetRoot: folder holding <function>/bootstrap (default build)
	// Placeholders: placeholderAssets=auto synthesizes with placeholder
	// bootstraps when any is missing under AssetRoot (make synth, offline CI).
	Placeholders bool
	Architecture string // lambdaArchitecture: arm64 (default) or x86_64 (LocalStack on amd64 hosts)

	LogRetentionDays int     // logRetentionDays
	LogLevel         string  // logLevel → BC_LOG_LEVEL and Lambda's application log level: debug or info
	ThrottleRate     float64 // throttleRateLimit: steady requests per second of each route
	ThrottleBurst    float64 // throttleBurstLimit: burst of each route
	// The heartbeat route and function, sized apart from the tenant routes
	// so tenant traffic cannot starve heartbeats (docs/infrastructure.md,
	// Heartbeat capacity): heartbeatReservedConcurrency (0: none reserved),
	// heartbeatRateLimit and heartbeatBurstLimit of POST
	// /api/compute/nodes/heartbeat.
	HeartbeatReservedConcurrency int
	HeartbeatRateLimit           float64
	HeartbeatBurstLimit          int
	AlarmEmail                   string // alarmEmail: optional subscriber of the alarm topic
	// Destroy: removalPolicy=destroy deletes the table and keys with the stack
	// (LocalStack, throwaway stacks). The default retains them.
	Destroy bool
}

// Context keys, in the order cdk.json lists them.
const (
	CtxStackName         = "stackName"
	CtxJWTIssuer         = "jwtIssuer"
	CtxJWTAudience       = "jwtAudience"
	CtxIAMURL            = "iamUrl"
	CtxPolicyFile        = "policyFile"
	CtxReleasePins       = "releasePins"
	CtxReleasePinsFile   = "releasePinsFile"
	CtxReleaseThreshold  = "releaseThreshold"
	CtxReleaseSignerRole = "releaseSignerRoleArn"
	CtxReleaseKeyAdmin   = "releaseKeyAdminRoleArn"
	CtxAssetRoot         = "assetRoot"
	CtxPlaceholders      = "placeholderAssets"
	CtxArchitecture      = "lambdaArchitecture"
	CtxLogRetentionDays  = "logRetentionDays"
	CtxLogLevel          = "logLevel"
	CtxThrottleRate      = "throttleRateLimit"
	CtxThrottleBurst     = "throttleBurstLimit"
	CtxHeartbeatReserved = "heartbeatReservedConcurrency"
	CtxHeartbeatRate     = "heartbeatRateLimit"
	CtxHeartbeatBurst    = "heartbeatBurstLimit"
	CtxAlarmEmail        = "alarmEmail"
	CtxRemovalPolicy     = "removalPolicy"
	CtxConsoleAuthorize  = "consoleAuthorizeUrl"
	CtxConsoleToken      = "consoleTokenUrl"
)

// Architectures a function may be built for (lambdaArchitecture).
const (
	ArchARM64 = "arm64"
	ArchX86   = "x86_64"
)

// ConfigFrom reads Config through get (a CDK node's TryGetContext, or a map
// in tests). Values given with -c arrive as strings; cdk.json gives JSON
// types. Each concern reads and checks its own keys; every problem is
// reported at once, values that cannot be read first (in the order the keys
// are read), then values out of range.
func ConfigFrom(get func(key string) any) (Config, error) {
	c := defaultConfig()
	r := &contextReader{get: get}
	r.str(CtxStackName, &c.StackName)
	c.readIdentity(r)
	c.readRelease(r)
	c.readFunctions(r)
	c.readLimits(r)
	r.str(CtxAlarmEmail, &c.AlarmEmail)
	c.readRemoval(r)
	return c, r.err()
}

// defaultConfig is the built-in defaults (cdk.json lists the same).
func defaultConfig() Config {
	return Config{
		StackName:        "BetterCompute",
		ReleaseThreshold: 1,
		AssetRoot:        "build",
		Architecture:     ArchARM64,
		LogRetentionDays: 30,
		LogLevel:         "info",
		ThrottleRate:     50,
		ThrottleBurst:    100,

		HeartbeatReservedConcurrency: DefaultHeartbeatReservedConcurrency,
		HeartbeatRateLimit:           DefaultHeartbeatRateLimit,
		HeartbeatBurstLimit:          DefaultHeartbeatBurstLimit,
	}
}

// readIdentity: who signs the callers' tokens (an https issuer, at least
// one audience; the console signs people in there, at the endpoints its
// discovery document names unless given), and which Better IAM decides (a
// service or, for local use, an embedded policy file: exactly one).
func (c *Config) readIdentity(r *contextReader) {
	r.str(CtxJWTIssuer, &c.JWTIssuer)
	r.list(CtxJWTAudience, &c.JWTAudience)
	r.str(CtxConsoleAuthorize, &c.ConsoleAuthorizeURL)
	r.str(CtxConsoleToken, &c.ConsoleTokenURL)
	r.str(CtxIAMURL, &c.IAMURL)
	r.str(CtxPolicyFile, &c.PolicyFile)

	if u, err := url.Parse(c.JWTIssuer); c.JWTIssuer == "" || err != nil || u.Scheme != "https" || u.Host == "" {
		r.invalid(CtxJWTIssuer, "want the https URL of the token issuer, got %q", c.JWTIssuer)
	}
	if len(c.JWTAudience) == 0 {
		r.invalid(CtxJWTAudience, "want at least one audience")
	}
	if (c.IAMURL == "") == (c.PolicyFile == "") {
		r.invalid(CtxIAMURL, "set exactly one of %s (Better IAM service) and %s (embedded policy, local use)", CtxIAMURL, CtxPolicyFile)
	}
}

// readRelease: the release pins (inline, or a PEM file read now: not
// both), how many of them must sign, and the IAM roles the signing key's
// policy names.
func (c *Config) readRelease(r *contextReader) {
	r.str(CtxReleasePins, &c.ReleasePins)
	var pinsFile string
	r.str(CtxReleasePinsFile, &pinsFile)
	if pinsFile != "" {
		if b, err := os.ReadFile(pinsFile); err != nil {
			r.fail(CtxReleasePinsFile, "%v", err)
		} else if c.ReleasePins != "" {
			r.fail(CtxReleasePinsFile, "set %s or %s, not both", CtxReleasePins, CtxReleasePinsFile)
		} else {
			c.ReleasePins = strings.TrimSpace(string(b))
		}
	}
	r.integer(CtxReleaseThreshold, &c.ReleaseThreshold)
	r.str(CtxReleaseSignerRole, &c.ReleaseSignerRole)
	r.str(CtxReleaseKeyAdmin, &c.ReleaseKeyAdminRole)

	if c.ReleaseThreshold < 1 {
		r.invalid(CtxReleaseThreshold, "want an integer ≥ 1, got %d", c.ReleaseThreshold)
	}
	for key, arn := range map[string]string{CtxReleaseSignerRole: c.ReleaseSignerRole, CtxReleaseKeyAdmin: c.ReleaseKeyAdminRole} {
		if arn != "" && !roleARN.MatchString(arn) {
			r.invalid(key, "want an IAM role ARN (arn:aws:iam::<account>:role/<name>), got %q", arn)
		}
	}
}

// readFunctions: how the functions are built (their bootstraps, the
// architecture) and how they log (the level, the retention).
func (c *Config) readFunctions(r *contextReader) {
	r.str(CtxAssetRoot, &c.AssetRoot)
	r.autoOrNo(CtxPlaceholders, &c.Placeholders)
	r.str(CtxArchitecture, &c.Architecture)
	r.integer(CtxLogRetentionDays, &c.LogRetentionDays)
	r.str(CtxLogLevel, &c.LogLevel)

	if _, ok := applicationLogLevels[c.LogLevel]; !ok {
		// warn or error would drop the per-request line, which is also the
		// request's metrics record (EMF).
		r.invalid(CtxLogLevel, "want debug or info (each request's log line carries its metrics), got %q", c.LogLevel)
	}
	if c.Architecture != ArchARM64 && c.Architecture != ArchX86 {
		r.invalid(CtxArchitecture, "want %s or %s, got %q", ArchARM64, ArchX86, c.Architecture)
	}
	if _, ok := retentionDays[c.LogRetentionDays]; !ok {
		r.invalid(CtxLogRetentionDays, "want one of CloudWatch's retention periods (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, …), got %d", c.LogRetentionDays)
	}
}

// readLimits: the routes' throttling, and the heartbeat's own route and
// reserved concurrency (docs/infrastructure.md, Heartbeat capacity).
func (c *Config) readLimits(r *contextReader) {
	r.num(CtxThrottleRate, &c.ThrottleRate)
	r.num(CtxThrottleBurst, &c.ThrottleBurst)
	r.integer(CtxHeartbeatReserved, &c.HeartbeatReservedConcurrency)
	r.num(CtxHeartbeatRate, &c.HeartbeatRateLimit)
	r.integer(CtxHeartbeatBurst, &c.HeartbeatBurstLimit)

	if c.ThrottleRate <= 0 || c.ThrottleBurst <= 0 {
		r.invalid(CtxThrottleRate, "stage throttling wants positive rate and burst limits, got %v and %v", c.ThrottleRate, c.ThrottleBurst)
	}
	if c.HeartbeatReservedConcurrency < 0 {
		r.invalid(CtxHeartbeatReserved, "want an integer ≥ 0 (0: none reserved), got %d", c.HeartbeatReservedConcurrency)
	}
	if c.HeartbeatRateLimit <= 0 || c.HeartbeatBurstLimit <= 0 {
		r.invalid(CtxHeartbeatRate, "the heartbeat route wants positive rate and burst limits, got %v and %d", c.HeartbeatRateLimit, c.HeartbeatBurstLimit)
	}
}

// readRemoval: whether the table and keys go with the stack (destroy) or
// stay (retain, the default).
func (c *Config) readRemoval(r *contextReader) {
	removal := "retain"
	r.str(CtxRemovalPolicy, &removal)
	switch removal {
	case "retain":
	case "destroy":
		c.Destroy = true
	default:
		r.invalid(CtxRemovalPolicy, "want retain or destroy, got %q", removal)
	}
}

// contextReader reads context values of the types CDK hands them in
// (strings from -c, JSON types from cdk.json) and collects what is wrong:
// values that cannot be read (unread), then values read but not allowed
// (invalid), each "context <key>: …".
type contextReader struct {
	get              func(key string) any
	unread, rejected []string
}

// fail records a value that cannot be read.
func (r *contextReader) fail(key, format string, args ...any) {
	r.unread = append(r.unread, fmt.Sprintf("context %s: "+format, append([]any{key}, args...)...))
}

// invalid records a value read but not allowed.
func (r *contextReader) invalid(key, format string, args ...any) {
	r.rejected = append(r.rejected, fmt.Sprintf("context %s: "+format, append([]any{key}, args...)...))
}

// err is every problem, or nil.
func (r *contextReader) err() error {
	if errs := append(r.unread, r.rejected...); len(errs) > 0 {
		return fmt.Errorf("stack configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// str sets *dst to a non-blank string (trimmed); absent or blank leaves it.
func (r *contextReader) str(key string, dst *string) {
	switch v := r.get(key).(type) {
	case nil:
	case string:
		if v = strings.TrimSpace(v); v != "" {
			*dst = v
		}
	default:
		r.fail(key, "want a string, got %T", v)
	}
}

// num sets *dst to a number, or a string that parses as one.
func (r *contextReader) num(key string, dst *float64) {
	switch v := r.get(key).(type) {
	case nil:
	case float64:
		*dst = v
	case int:
		*dst = float64(v)
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			r.fail(key, "want a number, got %q", v)
			return
		}
		*dst = f
	default:
		r.fail(key, "want a number, got %T", v)
	}
}

// integer is num for a whole number.
func (r *contextReader) integer(key string, dst *int) {
	f := float64(*dst)
	r.num(key, &f)
	if f != float64(int(f)) {
		r.fail(key, "want an integer, got %v", f)
		return
	}
	*dst = int(f)
}

// list appends a comma-separated string, or a list of them, to *dst.
func (r *contextReader) list(key string, dst *[]string) {
	switch v := r.get(key).(type) {
	case nil:
	case string:
		*dst = splitList(v)
	case []any:
		for _, a := range v {
			s, ok := a.(string)
			if !ok {
				r.fail(key, "want strings, got %T", a)
				continue
			}
			*dst = append(*dst, splitList(s)...)
		}
	case []string:
		for _, s := range v {
			*dst = append(*dst, splitList(s)...)
		}
	default:
		r.fail(key, "want a string or a list of strings, got %T", v)
	}
}

// autoOrNo sets *dst from auto/true or no/false (a string or a JSON bool).
func (r *contextReader) autoOrNo(key string, dst *bool) {
	switch v := r.get(key).(type) {
	case nil, bool:
		*dst = v == true
	case string:
		switch strings.TrimSpace(v) {
		case "", "no", "false":
		case "auto", "true":
			*dst = true
		default:
			r.fail(key, "want auto or no, got %q", v)
		}
	default:
		r.fail(key, "want auto or no, got %T", v)
	}
}

// Heartbeat sizing defaults (docs/infrastructure.md, Heartbeat capacity):
// 100,000 nodes at the 30-s interval send 3,334 heartbeats a second; the
// route admits 1.5× that (5,000/s, also API Gateway's default account
// burst), and 300 reserved executions hold 5,000/s at a mean duration of
// up to 60 ms (3,334/s up to 90 ms) against a design duration of 50 ms.
const (
	DefaultHeartbeatReservedConcurrency = 300
	DefaultHeartbeatRateLimit           = 5000
	DefaultHeartbeatBurstLimit          = 5000
)

var roleARN = regexp.MustCompile(`^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$`)

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
