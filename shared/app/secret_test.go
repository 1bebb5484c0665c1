package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/capacityapp"
	"github.com/bettercompute/control-plane/shared/app/cursorkey"
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
	a, err := app.New(context.Background(), cfg, cursorkey.FromSecretsManager(), app.WithLogger(slog.New(slog.DiscardHandler)))
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
	if _, err := app.New(context.Background(), cfg, cursorkey.FromSecretsManager()); err == nil || !strings.Contains(err.Error(), "BC_CURSOR_SECRET_ARN") ||
		!strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Errorf("an unknown secret: %v", err)
	}
}

// A method that pages reads its cursor key from the secret: a build that
// cannot read it (its main named no cursorkey option) refuses to start
// rather than sign cursors with the fallback key; one that does not page
// starts, since it signs none.
func TestPagingWithoutTheSecretReaderRefusesToStart(t *testing.T) {
	cfg := app.Config{Table: "t", Region: "us-east-1", PolicyFile: "../../localstack/policy.json",
		DynamoEndpoint: "http://127.0.0.1:1", CursorSecretARN: "arn:aws:secretsmanager:us-east-1:111122223333:secret:CursorKey-abc"}
	a, err := app.New(context.Background(), cfg, app.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Endpoint(context.Background(), capacityapp.Module{}.PoolsList()); err == nil || !strings.Contains(err.Error(), "cursorkey.FromSecretsManager") {
		t.Errorf("pools.list without the secret's reader: %v", err)
	}
	if _, err := a.Endpoint(context.Background(), capacityapp.Module{}.PoolsGet()); err != nil {
		t.Errorf("pools.get (no cursors) without the secret's reader: %v", err)
	}
	wrong := capacityapp.Module{}.PoolsGet()
	wrong.Name = "quotas.get" // a wiring that builds another method's endpoint
	if _, err := a.Endpoint(context.Background(), wrong); err == nil || !strings.Contains(err.Error(), "built pools.get") {
		t.Errorf("a wiring named quotas.get building pools.get: %v", err)
	}
}
