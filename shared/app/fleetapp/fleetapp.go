package app

import (
	"context"
	"errors"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/rollout"
)

func init() { modules["fleet"] = fleetModule }

// FleetStore is the fleet's table access (the node items); the capacity
// service reads the same items as its capacity.NodeStore.
func (a *App) FleetStore() *dynamo.Fleet { return &dynamo.Fleet{DB: a.DB, Table: a.Config.Table} }

// FleetService builds the fleet service on the app's table and clock. It
// is kept per App: its key and manifest caches live as long as the
// process (a Lambda's warm instance).
func (a *App) FleetService() *fleet.Service {
	a.fleetOnce.Do(func() {
		a.fleet = &fleet.Service{Store: a.FleetStore(), Pools: a.CapacityStore(), Calendar: a.CapacityStore(),
			Releases: releaseReader{&dynamo.Releases{DB: a.DB, Table: a.Config.Table}}, Now: a.Now, Logger: a.Logger,
			Interval: a.Config.HeartbeatInterval, ProvisionHours: a.Config.ProvisionHours, Adopter: a.CapacityService(), Table: a.Config.Table,
			Rollouts: rollout.Holds{Store: a.RolloutStore()}}
	})
	return a.fleet
}

// releaseReader reads registered releases for the fleet.
type releaseReader struct{ store *dynamo.Releases }

func (r releaseReader) Release(ctx context.Context, version string) (fleet.Release, error) {
	rel, err := r.store.Get(ctx, version)
	if errors.Is(err, rollout.ErrNotFound) {
		return fleet.Release{}, fleet.ErrNotFound
	}
	if err != nil {
		return fleet.Release{}, err
	}
	return fleet.Release{Version: rel.Version, Sequence: rel.Sequence, Digest: rel.ManifestDigest, Manifest: rel.Manifest}, nil
}

func fleetModule(_ context.Context, a *App) ([]api.Endpoint, error) {
	svc := a.FleetService()
	return []api.Endpoint{
		api.Bind(api.Lookup("nodes.register"), func(ctx context.Context, call *api.Call, in *api.RegisterNodeInput) (api.NodeResult, error) {
			register := svc.Register
			if in.Replace != nil && *in.Replace {
				register = svc.Replace
			}
			n, err := register(ctx, in.TenantID, in.PoolID, in.NodeID, in.PublicKey, in.Platform)
			return api.NodeResult{Node: n}, err
		}),
		api.Bind(api.Lookup("nodes.get"), func(ctx context.Context, call *api.Call, in *api.GetNodeInput) (api.NodeResult, error) {
			n, err := svc.Get(ctx, in.TenantID, in.PoolID, in.NodeID)
			return api.NodeResult{Node: n}, err
		}),
		api.Bind(api.Lookup("nodes.list"), func(ctx context.Context, call *api.Call, in *api.ListNodesInput) (api.ListNodesResult, error) {
			var st fleet.State
			if in.State != nil {
				var ok bool
				if st, ok = fleet.ParseState(*in.State); !ok {
					return api.ListNodesResult{}, apierr.Invalid("constraint", "state", "state must be one of %v", fleet.States)
				}
			}
			lp, err := a.page(call, in.Page, capacity.DefaultLimit, "poolId="+in.PoolID, "state="+string(st))
			if err != nil {
				return api.ListNodesResult{}, err
			}
			ns, next, err := svc.List(ctx, in.TenantID, in.PoolID, st, capacity.Page{Limit: lp.Limit, After: lp.After})
			if err != nil {
				return api.ListNodesResult{}, err
			}
			return api.ListNodesResult{Nodes: nonNil(ns), NextCursor: a.next(lp, next)}, nil
		}),
		api.Bind(api.Lookup("nodes.cordon"), func(ctx context.Context, call *api.Call, in *api.CordonNodeInput) (api.NodeResult, error) {
			n, err := svc.Cordon(ctx, in.TenantID, in.PoolID, in.NodeID, in.Reason)
			return api.NodeResult{Node: n}, err
		}),
		api.Bind(api.Lookup("nodes.uncordon"), func(ctx context.Context, call *api.Call, in *api.UncordonNodeInput) (api.NodeResult, error) {
			n, err := svc.Uncordon(ctx, in.TenantID, in.PoolID, in.NodeID)
			return api.NodeResult{Node: n}, err
		}),
		api.Bind(api.Lookup("nodes.heartbeat"), func(ctx context.Context, call *api.Call, in *api.HeartbeatInput) (api.HeartbeatResult, error) {
			return svc.Heartbeat(ctx, in.TenantID, in.PoolID, in.NodeID, in.Report)
		}),
	}, nil
}
