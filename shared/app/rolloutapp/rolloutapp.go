package app

import (
	"context"
	"crypto"
	"fmt"
	"os"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/rollout"
)

func init() { modules["rollout"] = rolloutModule }

func rolloutModule(ctx context.Context, a *App) ([]api.Endpoint, error) {
	svc := &rollout.Service{Store: &dynamo.Releases{DB: a.DB, Table: a.Config.Table}, Now: a.Now}
	if a.serves("releases.register") {
		pins, err := a.releasePins(ctx)
		if err != nil {
			return nil, err
		}
		svc.Pins = pins
	}
	register := api.Bind(api.Lookup("releases.register"), func(ctx context.Context, call *api.Call, in *api.RegisterReleaseInput) (api.RegisterResult, error) {
		r, replayed, err := svc.Register(ctx, in.Manifest, rollout.Audit{TenantID: call.TenantID, Principal: call.Principal})
		if err != nil {
			return api.RegisterResult{}, err
		}
		return api.RegisterResult{Release: r, Replayed: replayed}, nil
	})
	list := api.Bind(api.Lookup("releases.list"), func(ctx context.Context, call *api.Call, in *api.ListReleasesInput) (api.ListReleasesResult, error) {
		lp, err := a.page(call, in.Page, 0) // without limit: every release
		if err != nil {
			return api.ListReleasesResult{}, err
		}
		rs, next, err := svc.List(ctx, lp.Limit, lp.After)
		if err != nil {
			return api.ListReleasesResult{}, err
		}
		return api.ListReleasesResult{Releases: rs, NextCursor: a.next(lp, next)}, nil
	})
	return append([]api.Endpoint{register, list}, rolloutEndpoints(a)...), nil
}

// RolloutStore is the rollouts' table access.
func (a *App) RolloutStore() *dynamo.Rollouts {
	return &dynamo.Rollouts{DB: a.DB, Table: a.Config.Table}
}

// Rollouts builds the rollouts service.
func (a *App) Rollouts() *rollout.Rollouts {
	return &rollout.Rollouts{Store: a.RolloutStore(), Releases: &dynamo.Releases{DB: a.DB, Table: a.Config.Table},
		Pools: a.CapacityStore(), Now: a.Now, Logger: a.Logger, Table: a.Config.Table}
}

// RolloutReconciler builds fleet.rollouts, run by the reconciler's pass.
func (a *App) RolloutReconciler() *rollout.Reconciler {
	return &rollout.Reconciler{Store: a.RolloutStore(), Releases: &dynamo.Releases{DB: a.DB, Table: a.Config.Table},
		Nodes: a.FleetStore(), Cordons: a.FleetService(), Calendar: a.CapacityStore(), Now: a.Now, Logger: a.Logger, Table: a.Config.Table}
}

func rolloutEndpoints(a *App) []api.Endpoint {
	svc := a.Rollouts()
	change := func(name string, fn func(ctx context.Context, id, reason string) (rollout.Rollout, error)) api.Endpoint {
		return api.Bind(api.Lookup(name), func(ctx context.Context, call *api.Call, in *api.ChangeRolloutInput) (api.RolloutResult, error) {
			r, err := fn(ctx, in.RolloutID, deref(in.Reason))
			return api.RolloutResult{Rollout: r}, err
		})
	}
	return []api.Endpoint{
		api.Bind(api.Lookup("rollouts.create"), func(ctx context.Context, call *api.Call, in *api.CreateRolloutInput) (api.RolloutResult, error) {
			req := rollout.CreateRequest{Version: in.Version, Pools: in.Pools, Waves: in.Waves, BakeSeconds: in.BakeSeconds,
				MaxUnavailable: in.MaxUnavailable, MaxFailedNodes: in.MaxFailedNodes, ProgressDeadlineSeconds: in.ProgressDeadlineSeconds,
				RollbackOnAbort: in.RollbackOnAbort, ClientToken: deref(in.ClientToken),
				By: rollout.Audit{TenantID: call.TenantID, Principal: call.Principal}}
			if in.Drain != nil {
				req.DrainWaitSeconds, req.DrainOnTimeout = in.Drain.WaitSeconds, in.Drain.OnTimeout
			}
			r, err := svc.Create(ctx, req)
			return api.RolloutResult{Rollout: r}, err
		}),
		api.Bind(api.Lookup("rollouts.get"), func(ctx context.Context, call *api.Call, in *api.GetRolloutInput) (api.RolloutResult, error) {
			r, err := svc.Get(ctx, in.RolloutID)
			return api.RolloutResult{Rollout: r}, err
		}),
		api.Bind(api.Lookup("rollouts.list"), func(ctx context.Context, call *api.Call, in *api.ListRolloutsInput) (api.ListRolloutsResult, error) {
			var st rollout.State
			if in.State != nil {
				var ok bool
				if st, ok = rollout.ParseState(*in.State); !ok {
					return api.ListRolloutsResult{}, apierr.Invalid("constraint", "state", "state must be one of %v", rollout.States)
				}
			}
			lp, err := a.page(call, in.Page, capacity.DefaultLimit, "state="+string(st))
			if err != nil {
				return api.ListRolloutsResult{}, err
			}
			rs, next, err := svc.List(ctx, st, capacity.Page{Limit: lp.Limit, After: lp.After})
			if err != nil {
				return api.ListRolloutsResult{}, err
			}
			return api.ListRolloutsResult{Rollouts: nonNil(rs), NextCursor: a.next(lp, next)}, nil
		}),
		api.Bind(api.Lookup("rollouts.nodes"), func(ctx context.Context, call *api.Call, in *api.RolloutNodesInput) (api.RolloutNodesResult, error) {
			var st rollout.Step
			if in.Step != nil {
				var ok bool
				if st, ok = rollout.ParseStep(*in.Step); !ok {
					return api.RolloutNodesResult{}, apierr.Invalid("constraint", "step", "step must be one of %v", rollout.Steps)
				}
			}
			lp, err := a.page(call, in.Page, capacity.DefaultLimit, "rolloutId="+in.RolloutID, "step="+string(st))
			if err != nil {
				return api.RolloutNodesResult{}, err
			}
			ns, next, err := svc.Nodes(ctx, in.RolloutID, st, lp.Limit, lp.After["k"])
			if err != nil {
				return api.RolloutNodesResult{}, err
			}
			var cur map[string]string
			if next != "" {
				cur = map[string]string{"k": next}
			}
			return api.RolloutNodesResult{Nodes: nonNil(ns), NextCursor: a.next(lp, cur)}, nil
		}),
		change("rollouts.pause", svc.Pause),
		change("rollouts.resume", svc.Resume),
		change("rollouts.abort", svc.Abort),
	}
}

// Pin is one configured release key and the setting that pinned it.
type Pin struct {
	KeyID    string
	Variable string // BC_RELEASE_PINS_FILE, BC_RELEASE_PINS or BC_RELEASE_KMS_KEYS
	From     string // the file's path or the KMS key id ("" inline)
	Key      crypto.PublicKey
}

// ReleasePins reads every configured release key in configuration order:
// the PEM bundle (file, then inline), then the public keys of the KMS keys.
// A key configured twice is listed twice (it counts once).
func (a *App) ReleasePins(ctx context.Context) ([]Pin, error) {
	var pins []Pin
	add := func(variable, from string, keys ...crypto.PublicKey) error {
		for _, k := range keys {
			id, err := rollout.KeyID(k)
			if err != nil {
				return fmt.Errorf("%s: %w", variable, err)
			}
			pins = append(pins, Pin{KeyID: id, Variable: variable, From: from, Key: k})
		}
		return nil
	}
	bundle := func(variable, from string, pem []byte) error {
		ks, err := rollout.ParsePEMBundle(pem)
		if err != nil {
			return fmt.Errorf("%s: %w", variable, err)
		}
		return add(variable, from, ks...)
	}
	if f := a.Config.PinsFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("BC_RELEASE_PINS_FILE: %w", err)
		}
		if err := bundle("BC_RELEASE_PINS_FILE", f, data); err != nil {
			return nil, err
		}
	}
	if a.Config.Pins != "" {
		if err := bundle("BC_RELEASE_PINS", "", []byte(a.Config.Pins)); err != nil {
			return nil, err
		}
	}
	for _, id := range a.Config.ReleaseKMSKeys {
		pub, err := kmssign.PublicKey(ctx, a.KMS, id)
		if err != nil {
			return nil, fmt.Errorf("BC_RELEASE_KMS_KEYS: %w", err)
		}
		if err := add("BC_RELEASE_KMS_KEYS", id, pub); err != nil {
			return nil, err
		}
	}
	return pins, nil
}

// Pins are the release pins the start loaded (ReleasePins, read once by
// Endpoints or Endpoint for releases.register); nil before, or when this
// process does not serve releases.register.
func (a *App) Pins() []Pin { return a.pins }

// releasePins loads the release pins once, at start, and keeps them (Pins).
// Any problem, including a threshold above the number of distinct pinned
// keys, fails the start.
func (a *App) releasePins(ctx context.Context) (*rollout.Pins, error) {
	pins, err := a.ReleasePins(ctx)
	if err != nil {
		return nil, err
	}
	a.pins = pins
	if len(pins) == 0 {
		return nil, fmt.Errorf("no release pins: set BC_RELEASE_PINS_FILE, BC_RELEASE_PINS or BC_RELEASE_KMS_KEYS")
	}
	keys := make([]crypto.PublicKey, len(pins))
	for i, p := range pins {
		keys[i] = p.Key
	}
	ps, err := rollout.NewPins(keys, a.Config.ReleaseThreshold)
	if err != nil {
		return nil, fmt.Errorf("release pins: %w", err)
	}
	return ps, nil
}
