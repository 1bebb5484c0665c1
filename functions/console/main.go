// Command console is the Lambda serving the web console under /console/
// (shared/console): its pages call the methods of api.ConsoleMethods in
// process, through the gateway, with the viewer's credentials.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/capacityapp"
	"github.com/bettercompute/control-plane/shared/app/cursorkey"
	"github.com/bettercompute/control-plane/shared/app/fleetapp"
	"github.com/bettercompute/control-plane/shared/app/kmskeys"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/console"
)

func main() {
	ctx := context.Background()
	a := app.MustFromEnv(ctx, cursorkey.FromSecretsManager(), kmskeys.FromKMS())
	eps, err := a.EndpointsOf(ctx, api.ConsoleMethods, capacityapp.Module{}, &fleetapp.Module{}, &rolloutapp.Module{})
	var c *console.Console
	if err == nil {
		c, err = console.New(console.Config{Caller: &console.Caller{Gateway: a.Gateway, Endpoints: eps}, OIDC: console.OIDCFromEnv(), Logger: a.Logger})
	}
	if err != nil {
		a.Logger.Error("start", "function", api.ConsoleFunction, "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(console.Lambda(c))
}
