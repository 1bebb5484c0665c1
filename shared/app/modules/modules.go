// Package modules is the composition root of the processes that serve
// every module: the reconciler (whose pass runs the capacity, fleet and
// rollout steps), the local gateway behind `make run`, the doc generator
// and the tests that stand up the whole control plane. A Lambda serving one
// method names its own module instead (functions/<method>/main.go).
package modules

import (
	"context"
	"sync"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/capacityapp"
	"github.com/bettercompute/control-plane/shared/app/fleetapp"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/dynamo/duedb"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/dynamo/rolloutdb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/reconcile"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// App is the core with every module wired on it.
type App struct {
	*app.App
	Capacity capacityapp.Module
	Fleet    *fleetapp.Module
	Rollout  *rolloutapp.Module

	log   *passLog   // the reconciler's release log step, kept across passes
	noLog *sync.Once // says once that there is none (no BC_RELEASE_LOG_KEY)
}

// Wire puts every module on the core a.
func Wire(a *app.App) *App {
	return &App{App: a, Fleet: &fleetapp.Module{}, Rollout: &rolloutapp.Module{}, log: &passLog{a: a}, noLog: &sync.Once{}}
}

// New builds the core from cfg and wires every module on it: the local
// gateway and the tests, which serve every method and so name the readers
// those methods need (cursorkey.FromSecretsManager, kmskeys.FromKMS) in
// opts — this package imports neither, so the reconciler links neither
// client (a Go package's init is linked wherever it is imported).
func New(ctx context.Context, cfg app.Config, opts ...app.Option) (*App, error) {
	a, err := app.New(ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	return Wire(a), nil
}

// MustFromEnv is app.MustFromEnv with every module wired, for the
// reconciler: it serves no method, so it reads no cursor key; it signs the
// release log's checkpoints, so its main names kmskeys.FromKMS in opts.
func MustFromEnv(ctx context.Context, opts ...app.Option) *App {
	return Wire(app.MustFromEnv(ctx, opts...))
}

// List is the modules in the order their endpoints are built.
func (a *App) List() []app.Module { return []app.Module{a.Capacity, a.Fleet, a.Rollout} }

// Served reports whether a build of every module serves m (the doc
// generator: a method of no module is answered NOT_IMPLEMENTED).
func Served(m *api.Method) bool {
	return app.Served(capacityapp.Module{}, &fleetapp.Module{}, &rolloutapp.Module{})(m)
}

// Endpoints builds every catalog method's endpoint, in catalog order.
func (a *App) Endpoints(ctx context.Context) ([]api.Endpoint, error) {
	return a.App.Endpoints(ctx, a.List()...)
}

// Pins are the release pins the rollout module loaded (rolloutapp.Module.Pins).
func (a *App) Pins() []rolloutapp.Pin { return a.Rollout.Pins() }

// CapacityService is capacityapp.Service.
func (a *App) CapacityService() *capacity.Service { return capacityapp.Service(a.App) }

// CapacityStore is capacityapp.Store.
func (a *App) CapacityStore() *capacitydb.Store { return capacityapp.Store(a.App) }

// FleetService is the fleet module's service (one per App).
func (a *App) FleetService() *fleet.Service { return a.Fleet.Service(a.App) }

// FleetStore is fleetapp.Store.
func (a *App) FleetStore() *fleetdb.Store { return fleetapp.Store(a.App) }

// RolloutStore is rolloutapp.Store.
func (a *App) RolloutStore() *rolloutdb.Store { return rolloutapp.Store(a.App) }

// Rollouts is rolloutapp.Rollouts.
func (a *App) Rollouts() *rollout.Rollouts { return rolloutapp.Rollouts(a.App) }

// RolloutReconciler builds fleet.rollouts on the fleet module's service.
func (a *App) RolloutReconciler() *rollout.Reconciler {
	return rolloutapp.Reconciler(a.App, a.FleetService())
}

// Reconciler builds the reconciler's pass over every domain's steps:
// capacity.reservations (reservations, pools, quota rows), the fleet's
// sweeps and fleet.rollouts, then the release log's finishing and audit
// when BC_RELEASE_LOG_KEY names the log key — a deployment
// from before the log has none, and its first pass says so once.
func (a *App) Reconciler() *reconcile.Reconciler {
	rc := &reconcile.Reconciler{
		Due:      &duedb.Store{DB: a.DB, Table: a.Config.Table},
		Capacity: &capacity.Steps{Service: a.CapacityService(), ProvisionHours: a.Config.ProvisionHours},
		Fleet:    a.FleetService(),
		Rollouts: a.RolloutReconciler(),
		Logger:   a.Logger,
	}
	if a.Config.ReleaseLogKey != "" {
		rc.Log = a.log
	} else {
		a.noLog.Do(func() {
			a.Logger.Warn("no release log key (BC_RELEASE_LOG_KEY): the reconciler neither settles nor audits the release log")
		})
	}
	return rc
}

// The domains' steps the pass calls.
var (
	_ reconcile.FleetSweeper    = (*fleet.Service)(nil)
	_ reconcile.RolloutAdvancer = (*rollout.Reconciler)(nil)
)

// Reconcile runs one reconciler pass and logs its summary (with the Lag
// metric). Items that failed are counted and retried by the next pass; only
// a failed read of the due index fails the pass.
func (a *App) Reconcile(ctx context.Context) error {
	res, err := a.Reconciler().Pass(ctx)
	res.Log(ctx, a.Logger, a.Config.Table)
	return err
}
