// Command nodes-register is the Lambda serving nodes.register.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/fleetapp"
)

func main() {
	ctx := context.Background()
	a := app.MustFromEnv(ctx)
	lambda.Start(a.Gateway.Lambda(a.MustEndpoint(ctx, (&fleetapp.Module{}).NodesRegister())))
}
