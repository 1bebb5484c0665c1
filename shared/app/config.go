// Package app wires the control plane from its configuration: AWS clients,
// the Better IAM decider, the domain services and their API endpoints. The
// Lambda mains and the local gateway build the very same endpoints here.
package app

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/logfmt"
)

// Config is everything the control plane reads from its environment (BC_*).
type Config struct {
	Table          string // BC_TABLE
	Region         string // AWS_REGION
	DynamoEndpoint string // BC_DYNAMODB_ENDPOINT: a local DynamoDB API (dynalite)
	KMSEndpoint    string // BC_KMS_ENDPOINT: a local KMS API (local-kms)

	PolicyFile string // BC_POLICY_FILE: embedded Better IAM policy
	IAMURL     string // BC_IAM_URL: remote Better IAM

	PinsFile         string   // BC_RELEASE_PINS_FILE: PEM bundle of release public keys
	Pins             string   // BC_RELEASE_PINS: the same, inline
	ReleaseKMSKeys   []string // BC_RELEASE_KMS_KEYS: comma-separated KMS key ids pinned too
	ReleaseThreshold int      // BC_RELEASE_THRESHOLD (default 1)
	// ReleaseLogKey (BC_RELEASE_LOG_KEY): the KMS key (ECC_NIST_P256) that
	// signs the release log's checkpoints; registration needs it.
	ReleaseLogKey string
	// ReleaseLogOrigin (BC_RELEASE_LOG_ORIGIN): the log's origin, the
	// checkpoints' first line and the log key's name in notes.
	ReleaseLogOrigin string

	CursorKey string // BC_CURSOR_KEY: HMAC key for pagination cursors
	// CursorSecretARN (BC_CURSOR_SECRET_ARN): a Secrets Manager secret whose
	// string is the cursor key, read once at start (deployed list functions).
	CursorSecretARN string
	SecretsEndpoint string // BC_SECRETSMANAGER_ENDPOINT: a local Secrets Manager API

	ReconcileInterval time.Duration // BC_RECONCILE_INTERVAL (local gateway; default 5s)
	// ProvisionHours (BC_PROVISION_HOURS): how many hours ahead the
	// reconciler keeps every pool's node-hours stored (default
	// capacity.ProvisionHours).
	ProvisionHours int
	// HeartbeatInterval (BC_HEARTBEAT_INTERVAL, a Go duration, whole
	// seconds ≥ 5s): the idle interval nodes are told (default
	// fleet.DefaultInterval); a node is unreachable after three of them.
	HeartbeatInterval time.Duration
	LogLevel          slog.Level    // BC_LOG_LEVEL: debug, info (default; the zero Level), warn, error
	LogFormat         logfmt.Format // BC_LOG_FORMAT: json (default) or text
}

// ConfigFromEnv reads Config; a malformed value is an error at start.
func ConfigFromEnv() (Config, error) {
	c := Config{
		Table:          envOr("BC_TABLE", "better-compute"),
		Region:         envOr("AWS_REGION", os.Getenv("AWS_DEFAULT_REGION")),
		DynamoEndpoint: os.Getenv("BC_DYNAMODB_ENDPOINT"),
		KMSEndpoint:    os.Getenv("BC_KMS_ENDPOINT"),
		PolicyFile:     os.Getenv("BC_POLICY_FILE"),
		IAMURL:         os.Getenv("BC_IAM_URL"),
		PinsFile:       os.Getenv("BC_RELEASE_PINS_FILE"),
		Pins:           os.Getenv("BC_RELEASE_PINS"),
		CursorKey:      os.Getenv("BC_CURSOR_KEY"),
	}
	c.CursorSecretARN, c.SecretsEndpoint = os.Getenv("BC_CURSOR_SECRET_ARN"), os.Getenv("BC_SECRETSMANAGER_ENDPOINT")
	c.ReleaseLogKey, c.ReleaseLogOrigin = os.Getenv("BC_RELEASE_LOG_KEY"), os.Getenv("BC_RELEASE_LOG_ORIGIN")
	if c.ReleaseLogKey != "" && c.ReleaseLogOrigin == "" {
		return c, fmt.Errorf("BC_RELEASE_LOG_ORIGIN must name the release log when BC_RELEASE_LOG_KEY is set")
	}
	for _, k := range strings.Split(os.Getenv("BC_RELEASE_KMS_KEYS"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			c.ReleaseKMSKeys = append(c.ReleaseKMSKeys, k)
		}
	}
	var err error
	if c.ReleaseThreshold, err = strconv.Atoi(envOr("BC_RELEASE_THRESHOLD", "1")); err != nil || c.ReleaseThreshold < 1 {
		return c, fmt.Errorf("BC_RELEASE_THRESHOLD must be an integer ≥ 1, got %q", os.Getenv("BC_RELEASE_THRESHOLD"))
	}
	if c.ReconcileInterval, err = time.ParseDuration(envOr("BC_RECONCILE_INTERVAL", "5s")); err != nil || c.ReconcileInterval <= 0 {
		return c, fmt.Errorf("BC_RECONCILE_INTERVAL must be a positive Go duration, got %q", os.Getenv("BC_RECONCILE_INTERVAL"))
	}
	if c.ProvisionHours, err = strconv.Atoi(envOr("BC_PROVISION_HOURS", strconv.Itoa(capacity.ProvisionHours))); err != nil ||
		c.ProvisionHours < 1 || c.ProvisionHours > 24*api.MaxLeadDays {
		return c, fmt.Errorf("BC_PROVISION_HOURS must be an integer 1..%d, got %q", 24*api.MaxLeadDays, os.Getenv("BC_PROVISION_HOURS"))
	}
	if c.HeartbeatInterval, err = time.ParseDuration(envOr("BC_HEARTBEAT_INTERVAL", api.DefaultInterval.String())); err != nil ||
		c.HeartbeatInterval < api.BusyInterval || c.HeartbeatInterval%time.Second != 0 || c.HeartbeatInterval > time.Hour {
		return c, fmt.Errorf("BC_HEARTBEAT_INTERVAL must be a Go duration of whole seconds from %s to 1h, got %q", api.BusyInterval, os.Getenv("BC_HEARTBEAT_INTERVAL"))
	}
	if c.LogLevel, err = logfmt.ParseLevel(envOr("BC_LOG_LEVEL", "info")); err != nil {
		return c, err
	}
	if c.LogFormat, err = logfmt.ParseFormat(envOr("BC_LOG_FORMAT", string(logfmt.JSON))); err != nil {
		return c, err
	}
	if c.LogFormat == logfmt.Text && os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != "" {
		// CloudWatch filters by level and extracts the metrics from JSON lines only.
		return c, fmt.Errorf("BC_LOG_FORMAT=text is for local runs; Lambda needs json")
	}
	if c.CursorKey != "" && c.CursorSecretARN != "" {
		return c, fmt.Errorf("set one of BC_CURSOR_KEY and BC_CURSOR_SECRET_ARN, not both")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
