// Command pools-availability is the Lambda serving pools.availability.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/capacityapp"
)

func main() {
	ctx := context.Background()
	a := app.MustFromEnv(ctx)
	lambda.Start(a.Gateway.Lambda(a.MustEndpoint(ctx, capacityapp.Module{}.PoolsAvailability())))
}
