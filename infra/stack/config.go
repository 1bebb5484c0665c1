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
// in tests). Values given with -c arrive as strings; cdk.json gives JSON types.
func ConfigFrom(get func(key string) any) (Config, error) {
	c := Config{
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
	var errs []string
	fail := func(key, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("context %s: "+format, append([]any{key}, args...)...))
	}
	str := func(key string, dst *string) {
		switch v := get(key).(type) {
		case nil:
		case string:
			if v = strings.TrimSpace(v); v != "" {
				*dst = v
			}
		default:
			fail(key, "want a string, got %T", v)
		}
	}
	num := func(key string, dst *float64) {
		switch v := get(key).(type) {
		case nil:
		case float64:
			*dst = v
		case int:
			*dst = float64(v)
		case string:
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				fail(key, "want a number, got %q", v)
				return
			}
			*dst = f
		default:
			fail(key, "want a number, got %T", v)
		}
	}
	integer := func(key string, dst *int) {
		f := float64(*dst)
		num(key, &f)
		if f != float64(int(f)) {
			fail(key, "want an integer, got %v", f)
			return
		}
		*dst = int(f)
	}

	str(CtxStackName, &c.StackName)
	str(CtxJWTIssuer, &c.JWTIssuer)
	switch v := get(CtxJWTAudience).(type) {
	case nil:
	case string:
		c.JWTAudience = splitList(v)
	case []any:
		for _, a := range v {
			s, ok := a.(string)
			if !ok {
				fail(CtxJWTAudience, "want strings, got %T", a)
				continue
			}
			c.JWTAudience = append(c.JWTAudience, splitList(s)...)
		}
	case []string:
		for _, s := range v {
			c.JWTAudience = append(c.JWTAudience, splitList(s)...)
		}
	default:
		fail(CtxJWTAudience, "want a string or a list of strings, got %T", v)
	}
	str(CtxIAMURL, &c.IAMURL)
	str(CtxPolicyFile, &c.PolicyFile)
	str(CtxReleasePins, &c.ReleasePins)
	var pinsFile string
	str(CtxReleasePinsFile, &pinsFile)
	if pinsFile != "" {
		if b, err := os.ReadFile(pinsFile); err != nil {
			fail(CtxReleasePinsFile, "%v", err)
		} else if c.ReleasePins != "" {
			fail(CtxReleasePinsFile, "set %s or %s, not both", CtxReleasePins, CtxReleasePinsFile)
		} else {
			c.ReleasePins = strings.TrimSpace(string(b))
		}
	}
	integer(CtxReleaseThreshold, &c.ReleaseThreshold)
	str(CtxReleaseSignerRole, &c.ReleaseSignerRole)
	str(CtxReleaseKeyAdmin, &c.ReleaseKeyAdminRole)
	str(CtxAssetRoot, &c.AssetRoot)
	switch v := get(CtxPlaceholders).(type) {
	case nil, bool:
		c.Placeholders = v == true
	case string:
		switch strings.TrimSpace(v) {
		case "", "no", "false":
		case "auto", "true":
			c.Placeholders = true
		default:
			fail(CtxPlaceholders, "want auto or no, got %q", v)
		}
	default:
		fail(CtxPlaceholders, "want auto or no, got %T", v)
	}
	str(CtxArchitecture, &c.Architecture)
	integer(CtxLogRetentionDays, &c.LogRetentionDays)
	str(CtxLogLevel, &c.LogLevel)
	num(CtxThrottleRate, &c.ThrottleRate)
	num(CtxThrottleBurst, &c.ThrottleBurst)
	integer(CtxHeartbeatReserved, &c.HeartbeatReservedConcurrency)
	num(CtxHeartbeatRate, &c.HeartbeatRateLimit)
	integer(CtxHeartbeatBurst, &c.HeartbeatBurstLimit)
	str(CtxAlarmEmail, &c.AlarmEmail)
	str(CtxConsoleAuthorize, &c.ConsoleAuthorizeURL)
	str(CtxConsoleToken, &c.ConsoleTokenURL)
	removal := "retain"
	str(CtxRemovalPolicy, &removal)

	if u, err := url.Parse(c.JWTIssuer); c.JWTIssuer == "" || err != nil || u.Scheme != "https" || u.Host == "" {
		fail(CtxJWTIssuer, "want the https URL of the token issuer, got %q", c.JWTIssuer)
	}
	if len(c.JWTAudience) == 0 {
		fail(CtxJWTAudience, "want at least one audience")
	}
	if (c.IAMURL == "") == (c.PolicyFile == "") {
		fail(CtxIAMURL, "set exactly one of %s (Better IAM service) and %s (embedded policy, local use)", CtxIAMURL, CtxPolicyFile)
	}
	if c.ReleaseThreshold < 1 {
		fail(CtxReleaseThreshold, "want an integer ≥ 1, got %d", c.ReleaseThreshold)
	}
	for key, arn := range map[string]string{CtxReleaseSignerRole: c.ReleaseSignerRole, CtxReleaseKeyAdmin: c.ReleaseKeyAdminRole} {
		if arn != "" && !roleARN.MatchString(arn) {
			fail(key, "want an IAM role ARN (arn:aws:iam::<account>:role/<name>), got %q", arn)
		}
	}
	if _, ok := applicationLogLevels[c.LogLevel]; !ok {
		// warn or error would drop the per-request line, which is also the
		// request's metrics record (EMF).
		fail(CtxLogLevel, "want debug or info (each request's log line carries its metrics), got %q", c.LogLevel)
	}
	if c.Architecture != ArchARM64 && c.Architecture != ArchX86 {
		fail(CtxArchitecture, "want %s or %s, got %q", ArchARM64, ArchX86, c.Architecture)
	}
	if _, ok := retentionDays[c.LogRetentionDays]; !ok {
		fail(CtxLogRetentionDays, "want one of CloudWatch's retention periods (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, …), got %d", c.LogRetentionDays)
	}
	if c.ThrottleRate <= 0 || c.ThrottleBurst <= 0 {
		fail(CtxThrottleRate, "stage throttling wants positive rate and burst limits, got %v and %v", c.ThrottleRate, c.ThrottleBurst)
	}
	if c.HeartbeatReservedConcurrency < 0 {
		fail(CtxHeartbeatReserved, "want an integer ≥ 0 (0: none reserved), got %d", c.HeartbeatReservedConcurrency)
	}
	if c.HeartbeatRateLimit <= 0 || c.HeartbeatBurstLimit <= 0 {
		fail(CtxHeartbeatRate, "the heartbeat route wants positive rate and burst limits, got %v and %d", c.HeartbeatRateLimit, c.HeartbeatBurstLimit)
	}
	switch removal {
	case "retain":
	case "destroy":
		c.Destroy = true
	default:
		fail(CtxRemovalPolicy, "want retain or destroy, got %q", removal)
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("stack configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	return c, nil
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
