// Command releases-log is the Lambda serving releases.log.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/kmskeys"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
)

func main() {
	ctx := context.Background()
	a := app.MustFromEnv(ctx, kmskeys.FromKMS()) // the log key's public half
	lambda.Start(a.Gateway.Lambda(a.MustEndpoint(ctx, (&rolloutapp.Module{}).ReleasesLog())))
}
