package app

import (
	"log/slog"
	"testing"

	"github.com/bettercompute/control-plane/shared/logfmt"
)

func TestConfigRefusesBadValues(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"log level verbose":     {"BC_LOG_LEVEL": "verbose"},
		"log level with offset": {"BC_LOG_LEVEL": "info+2"},
		"log format yaml":       {"BC_LOG_FORMAT": "yaml"},
		"text logs in Lambda":   {"BC_LOG_FORMAT": "text", "AWS_LAMBDA_FUNCTION_NAME": "bc-pools-get"},
		"threshold 0":           {"BC_RELEASE_THRESHOLD": "0"},
		"interval not duration": {"BC_RECONCILE_INTERVAL": "5"},
		"two cursor keys":       {"BC_CURSOR_KEY": "k", "BC_CURSOR_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:1:secret:k"},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v)
			}
			if _, err := ConfigFromEnv(); err == nil {
				t.Errorf("%v accepted", env)
			}
		})
	}
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "Error": slog.LevelError} {
		if got, err := logfmt.ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v", in, got, err)
		}
	}
	for in, want := range map[string]logfmt.Format{"json": logfmt.JSON, "Text": logfmt.Text} {
		if got, err := logfmt.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %v, %v", in, got, err)
		}
	}
}

// JSON is the default: what Lambda and CloudWatch read.
func TestConfigLogFormatDefault(t *testing.T) {
	t.Setenv("BC_LOG_FORMAT", "")
	if c, err := ConfigFromEnv(); err != nil || c.LogFormat != logfmt.JSON {
		t.Errorf("default log format %q, %v", c.LogFormat, err)
	}
}
