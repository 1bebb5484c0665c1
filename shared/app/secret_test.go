package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/cursor"
	"github.com/bettercompute/control-plane/test/secretsapi"
)

// A deployed list function reads its cursor key from Secrets Manager once,
// at start; a secret it cannot read stops the start with a clear error.
func TestCursorKeyFromSecretsManager(t *testing.T) {
	const arn = "arn:aws:secretsmanager:us-east-1:111122223333:secret:CursorKey-abc"
	sm := secretsapi.Start(t, map[string]string{arn: "the-cursor-key"})
	cfg := app.Config{Table: "t", Region: "us-east-1", PolicyFile: "../../localstack/policy.json",
		DynamoEndpoint: "http://127.0.0.1:1", CursorSecretARN: arn, SecretsEndpoint: sm.URL}
	a, err := app.New(context.Background(), cfg, app.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if sm.Reads() != 1 {
		t.Errorf("%d secret reads at start, want 1", sm.Reads())
	}
	binding := cursor.Binding("pools.list", "acme")
	token := cursor.New([]byte("the-cursor-key")).Encode(binding, map[string]string{"sk": "POOL#p1"})
	if after, err := a.Cursors.Decode(token, binding); err != nil || after["sk"] != "POOL#p1" {
		t.Errorf("a cursor made with the secret's key: %v %v", after, err)
	}

	cfg.CursorSecretARN = arn + "-gone"
	if _, err := app.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "BC_CURSOR_SECRET_ARN") ||
		!strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Errorf("an unknown secret: %v", err)
	}
}
