// Command reconciler is the reconciler (capacity.reservations, the fleet
// sweep and fleet.rollouts, shared/reconcile): an EventBridge schedule
// (rate(1 minute)) invokes one bounded pass, which also settles and audits
// the release log, signing its checkpoints with the log key (kmskeys).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/bettercompute/control-plane/shared/app/kmskeys"
	"github.com/bettercompute/control-plane/shared/app/modules"
)

func main() {
	a := modules.MustFromEnv(context.Background(), kmskeys.FromKMS())
	lambda.Start(func(ctx context.Context, _ events.EventBridgeEvent) error { return a.Reconcile(ctx) })
}
