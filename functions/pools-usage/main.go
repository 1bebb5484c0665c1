// Command pools-usage is the Lambda serving pools.usage.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/capacityapp"
	"github.com/bettercompute/control-plane/shared/app/cursorkey"
)

func main() {
	ctx := context.Background()
	a := app.MustFromEnv(ctx, cursorkey.FromSecretsManager())
	lambda.Start(a.Gateway.Lambda(a.MustEndpoint(ctx, capacityapp.Module{}.PoolsUsage())))
}
