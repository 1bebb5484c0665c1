// Package cursorkey reads the pagination cursors' HMAC key from Secrets
// Manager (BC_CURSOR_SECRET_ARN) once, at start: the option the mains of
// the methods that page with cursors name (api.ReadsCursorKey), so no
// other function links the Secrets Manager client.
package cursorkey

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/bettercompute/control-plane/shared/app"
)

// FromSecretsManager reads the key from the secret BC_CURSOR_SECRET_ARN
// names (BC_SECRETSMANAGER_ENDPOINT: a local Secrets Manager API).
func FromSecretsManager() app.Option { return app.WithCursorKeyReader(read) }

// read is a cold start's one extra round trip.
func read(ctx context.Context, awsCfg aws.Config, cfg app.Config) ([]byte, error) {
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
