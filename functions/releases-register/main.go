// Command releases-register is the Lambda serving releases.register.
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
	a := app.MustFromEnv(ctx, kmskeys.FromKMS())
	lambda.Start(a.Gateway.Lambda(a.MustEndpoint(ctx, (&rolloutapp.Module{}).ReleasesRegister())))
}
