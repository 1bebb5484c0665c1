// Package fleetapp wires the fleet module (nodes, heartbeats) on the app's
// core: what a fleet function's main names. It links the capacity service
// (adoption) and the rollouts' store (holds), not the rollout module's KMS.
package fleetapp

import (
	"context"
	"errors"
	"sync"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/capacityapp"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/dynamo/rolloutdb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/paging"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// Module is the fleet module's wiring. Its service is built once, the
// first time it is asked for: its key and manifest caches live as long as
// the process (a Lambda's warm instance).
type Module struct {
	once sync.Once
	svc  *fleet.Service
}

// Name is the catalog's module name.
func (*Module) Name() string { return "fleet" }

// Store is the fleet's table access (the node items); the capacity
// service reads the same items as its capacity.NodeStore.
func Store(a *app.App) *fleetdb.Store { return &fleetdb.Store{DB: a.DB, Table: a.Config.Table} }

// Service is the fleet service on the app's table and clock, built once
// per Module.
func (m *Module) Service(a *app.App) *fleet.Service {
	m.once.Do(func() {
		m.svc = &fleet.Service{Store: Store(a), Pools: capacityapp.Store(a), Calendar: capacityapp.Store(a),
			Releases: releaseReader{&releasedb.Releases{DB: a.DB, Table: a.Config.Table}}, Log: &releasedb.Log{DB: a.DB, Table: a.Config.Table},
			Now: a.Now, Logger: a.Logger,
			Interval: a.Config.HeartbeatInterval, ProvisionHours: a.Config.ProvisionHours, Adopter: capacityapp.Service(a).Bindings(), Table: a.Config.Table,
			Rollouts: rollout.Holds{Store: &rolloutdb.Store{DB: a.DB, Table: a.Config.Table}}}
	})
	return m.svc
}

// releaseReader reads registered releases for the fleet.
type releaseReader struct{ store *releasedb.Releases }

func (r releaseReader) Release(ctx context.Context, version string) (fleet.NodeRelease, error) {
	rel, err := r.store.Recorded(ctx, version)
	if errors.Is(err, release.ErrNotFound) {
		return fleet.NodeRelease{}, fleet.ErrNotFound
	}
	if err != nil {
		return fleet.NodeRelease{}, err
	}
	out := fleet.NodeRelease{Version: rel.Version, Sequence: rel.Sequence, Digest: rel.ManifestDigest, Manifest: rel.Manifest}
	if rel.Log != nil {
		i := rel.Log.Index
		out.LogIndex = &i
	}
	return out, nil
}

// Methods are the fleet methods' wirings, in catalog order; they share
// the module's service (its caches).
func (m *Module) Methods() []app.Method {
	return []app.Method{m.NodesRegister(), m.NodesGet(), m.NodesList(), m.NodesCordon(), m.NodesUncordon(), m.NodesHeartbeat()}
}

// NodesRegister is nodes.register.
func (m *Module) NodesRegister() app.Method {
	return app.Method{Name: "nodes.register", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		svc := m.Service(a)
		return api.Bind(api.Lookup("nodes.register"), func(ctx context.Context, call *api.Call, in *api.RegisterNodeInput) (api.NodeResult, error) {
			register := svc.Register
			if in.Replace != nil && *in.Replace {
				register = svc.Replace
			}
			n, err := register(ctx, in.TenantID, in.PoolID, in.NodeID, in.PublicKey, in.Platform)
			return api.NodeResult{Node: n}, err
		}), nil
	}}
}

// NodesGet is nodes.get.
func (m *Module) NodesGet() app.Method {
	return app.Method{Name: "nodes.get", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		svc := m.Service(a)
		return api.Bind(api.Lookup("nodes.get"), func(ctx context.Context, call *api.Call, in *api.GetNodeInput) (api.NodeResult, error) {
			n, err := svc.Get(ctx, in.TenantID, in.PoolID, in.NodeID)
			return api.NodeResult{Node: n}, err
		}), nil
	}}
}

// NodesList is nodes.list.
func (m *Module) NodesList() app.Method {
	return app.Method{Name: "nodes.list", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		svc := m.Service(a)
		return api.Bind(api.Lookup("nodes.list"), func(ctx context.Context, call *api.Call, in *api.ListNodesInput) (api.ListNodesResult, error) {
			st, err := app.Enum("state", in.State, api.ParseNodeState, api.NodeStates)
			if err != nil {
				return api.ListNodesResult{}, err
			}
			ns, next, err := app.List(a, call, in.Page, paging.DefaultLimit, func(pg paging.Page) ([]api.Node, map[string]string, error) {
				return svc.List(ctx, in.TenantID, in.PoolID, st, pg)
			}, "poolId="+in.PoolID, "state="+string(st))
			return api.ListNodesResult{Nodes: ns, NextCursor: next}, err
		}), nil
	}}
}

// NodesCordon is nodes.cordon.
func (m *Module) NodesCordon() app.Method {
	return app.Method{Name: "nodes.cordon", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		svc := m.Service(a)
		return api.Bind(api.Lookup("nodes.cordon"), func(ctx context.Context, call *api.Call, in *api.CordonNodeInput) (api.NodeResult, error) {
			n, err := svc.Cordon(ctx, in.TenantID, in.PoolID, in.NodeID, in.Reason)
			return api.NodeResult{Node: n}, err
		}), nil
	}}
}

// NodesUncordon is nodes.uncordon.
func (m *Module) NodesUncordon() app.Method {
	return app.Method{Name: "nodes.uncordon", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		svc := m.Service(a)
		return api.Bind(api.Lookup("nodes.uncordon"), func(ctx context.Context, call *api.Call, in *api.UncordonNodeInput) (api.NodeResult, error) {
			n, err := svc.Uncordon(ctx, in.TenantID, in.PoolID, in.NodeID)
			return api.NodeResult{Node: n}, err
		}), nil
	}}
}

// NodesHeartbeat is nodes.heartbeat.
func (m *Module) NodesHeartbeat() app.Method {
	return app.Method{Name: "nodes.heartbeat", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		svc := m.Service(a)
		return api.Bind(api.Lookup("nodes.heartbeat"), func(ctx context.Context, call *api.Call, in *api.HeartbeatInput) (api.HeartbeatResult, error) {
			return svc.Heartbeat(ctx, in.TenantID, in.PoolID, in.NodeID, in.Report)
		}), nil
	}}
}
