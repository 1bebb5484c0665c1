// Command releases-list is the Lambda serving releases.list.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/cursorkey"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
)

func main() {
	ctx := context.Background()
	a := app.MustFromEnv(ctx, cursorkey.FromSecretsManager())
	lambda.Start(a.Gateway.Lambda(a.MustEndpoint(ctx, (&rolloutapp.Module{}).ReleasesList())))
}
