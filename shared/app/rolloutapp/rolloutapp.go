// Package rolloutapp wires the rollout module (releases and rollouts) on
// the app's core: what a rollout function's main names. The release
// methods are served by the release domain (shared/release/registry) on
// its store (shared/dynamo/releasedb); the rollout methods by
// shared/rollout. releases.register
// pins the keys of BC_RELEASE_KMS_KEYS through the core's KMS reader
// (shared/app/kmskeys, named by that method's main alone).
package rolloutapp

import (
	"context"
	"crypto"
	"encoding/base64"
	"fmt"
	"os"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/dynamo/rolloutdb"
	"github.com/bettercompute/control-plane/shared/paging"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/capacityapp"
	"github.com/bettercompute/control-plane/shared/app/fleetapp"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/release/registry"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// Module is the rollout module's wiring; it keeps the release pins its
// start loaded (Pins).
type Module struct {
	pins []Pin
}

// Name is the catalog's module name.
func (*Module) Name() string { return "rollout" }

// Methods are the release and rollout methods' wirings, in catalog order.
func (m *Module) Methods() []app.Method {
	return []app.Method{m.ReleasesRegister(), m.ReleasesList(), m.ReleasesLog(), m.ReleasesProve(), m.RolloutsCreate(), m.RolloutsGet(), m.RolloutsList(),
		m.RolloutsNodes(), m.RolloutsPause(), m.RolloutsResume(), m.RolloutsAbort()}
}

// releases is the release domain's service on its store (no log: reads do
// without; releases.register adds it).
func releases(a *app.App) *registry.Service {
	return &registry.Service{Store: ReleaseStore(a), Now: a.Now}
}

// ReleaseStore is the release domain's store of the table.
func ReleaseStore(a *app.App) *releasedb.Releases {
	return &releasedb.Releases{DB: a.DB, Table: a.Config.Table}
}

// LogStore is the release log's store of the table.
func LogStore(a *app.App) *releasedb.Log {
	return &releasedb.Log{DB: a.DB, Table: a.Config.Table}
}

// ReleasesRegister is releases.register: its start loads the release pins.
func (m *Module) ReleasesRegister() app.Method {
	return app.Method{Name: "releases.register", Build: func(ctx context.Context, a *app.App) (api.Endpoint, error) {
		svc := releases(a)
		pins, err := m.releasePins(ctx, a)
		if err != nil {
			return api.Endpoint{}, err
		}
		svc.Pins = pins
		log, err := ReleaseLog(ctx, a)
		if err != nil {
			return api.Endpoint{}, err
		}
		svc.Log = log
		return api.Bind(api.Lookup("releases.register"), func(ctx context.Context, call *api.Call, in *api.RegisterReleaseInput) (api.RegisterResult, error) {
			r, replayed, err := svc.Register(ctx, in.Manifest, release.Audit{TenantID: call.TenantID, Principal: call.Principal})
			if err != nil {
				return api.RegisterResult{}, err
			}
			out := api.RegisterResult{Release: r, Replayed: replayed}
			if r.Log != nil {
				out.Log = *r.Log
			}
			return out, nil
		}), nil
	}}
}

// ReleaseLog is the release log, signing checkpoints with the KMS key of
// BC_RELEASE_LOG_KEY under BC_RELEASE_LOG_ORIGIN: what registration
// appends to (a start without it fails).
func ReleaseLog(ctx context.Context, a *app.App) (*registry.Log, error) {
	if a.Config.ReleaseLogKey == "" {
		return nil, fmt.Errorf("no release log key: set BC_RELEASE_LOG_KEY (and BC_RELEASE_LOG_ORIGIN)")
	}
	ks, err := a.KMSSigner(ctx, a.Config.ReleaseLogKey)
	if err != nil {
		return nil, fmt.Errorf("BC_RELEASE_LOG_KEY: %w", err)
	}
	signer, err := release.NewLogSigner(a.Config.ReleaseLogOrigin, ks)
	if err != nil {
		return nil, fmt.Errorf("BC_RELEASE_LOG_KEY: %w", err)
	}
	return &registry.Log{Store: LogStore(a), Signer: signer}, nil
}

// LogKey is the release log's key as nodes and monitors pin it (its
// verifier key: LogKey(…).VerifierKey()).
func LogKey(ctx context.Context, a *app.App) (release.LogKey, error) {
	l, err := ReleaseLog(ctx, a)
	if err != nil {
		return release.LogKey{}, err
	}
	return l.Signer.Key(), nil
}

// ReleasesList is releases.list.
func (m *Module) ReleasesList() app.Method {
	return app.Method{Name: "releases.list", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		svc := releases(a)
		return api.Bind(api.Lookup("releases.list"), func(ctx context.Context, call *api.Call, in *api.ListReleasesInput) (api.ListReleasesResult, error) {
			// Without a limit: every release.
			rs, next, err := app.List(a, call, in.Page, 0, func(pg paging.Page) ([]release.Release, map[string]string, error) {
				return svc.List(ctx, pg.Limit, pg.After)
			})
			return api.ListReleasesResult{Releases: rs, NextCursor: next}, err
		}), nil
	}}
}

// logReader is the release log's read side: no signer (releases.log and
// releases.prove never sign).
func logReader(a *app.App) *registry.Reader {
	return &registry.Reader{Log: LogStore(a), Items: ReleaseStore(a)}
}

// ReleasesLog is releases.log.
func (m *Module) ReleasesLog() app.Method {
	return app.Method{Name: "releases.log", Build: func(ctx context.Context, a *app.App) (api.Endpoint, error) {
		l := logReader(a)
		// The log key's public half, read once (kms:GetPublicKey): the
		// answer names the key its checkpoints verify under.
		key, err := LogKey(ctx, a)
		if err != nil {
			return api.Endpoint{}, err
		}
		vkey := key.VerifierKey()
		return api.Bind(api.Lookup("releases.log"), func(ctx context.Context, _ *api.Call, _ *api.ReleaseLogInput) (api.ReleaseLogResult, error) {
			note, size, err := l.Latest(ctx)
			return api.ReleaseLogResult{Checkpoint: note, Size: size, VerifierKey: vkey}, err
		}), nil
	}}
}

// ReleasesProve is releases.prove.
func (m *Module) ReleasesProve() app.Method {
	return app.Method{Name: "releases.prove", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		l := logReader(a)
		return api.Bind(api.Lookup("releases.prove"), func(ctx context.Context, _ *api.Call, in *api.ProveReleaseInput) (api.ProveResult, error) {
			p, err := l.Prove(ctx, in.Version, in.Size, in.FromSize)
			if err != nil {
				return api.ProveResult{}, err
			}
			// A proof asked for is a list, [] when it needs no hash; one not
			// asked for is left out.
			out := api.ProveResult{Checkpoint: p.Checkpoint, Index: p.Index}
			if p.Entry != nil {
				out.Entry = base64.StdEncoding.EncodeToString(p.Entry)
			}
			if in.Version != nil {
				out.Inclusion = release.EncodeHashes(p.Inclusion)
			}
			if in.FromSize != nil {
				out.Consistency = release.EncodeHashes(p.Consistency)
			}
			return out, nil
		}), nil
	}}
}

// Store is the rollouts' table access.
func Store(a *app.App) *rolloutdb.Store {
	return &rolloutdb.Store{DB: a.DB, Table: a.Config.Table}
}

// Rollouts builds the rollouts service.
func Rollouts(a *app.App) *rollout.Rollouts {
	return &rollout.Rollouts{Store: Store(a), Releases: ReleaseStore(a),
		Pools: capacityapp.Store(a), Now: a.Now, Logger: a.Logger, Table: a.Config.Table}
}

// Reconciler builds fleet.rollouts, run by the reconciler's pass; cordons
// is the fleet service the pass cordons nodes through.
func Reconciler(a *app.App, cordons *fleet.Service) *rollout.Reconciler {
	return &rollout.Reconciler{Store: Store(a), Releases: ReleaseStore(a),
		Nodes: fleetapp.Store(a), Cordons: cordons, Calendar: capacityapp.Store(a), Now: a.Now, Logger: a.Logger, Table: a.Config.Table}
}

// rolloutMethod is a rollout method's wiring: bind builds its handler on
// the rollouts service.
func rolloutMethod(name string, bind func(a *app.App, svc *rollout.Rollouts) api.Endpoint) app.Method {
	return app.Method{Name: name, Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		return bind(a, Rollouts(a)), nil
	}}
}

// change binds pause, resume or abort.
func change(name string, do func(svc *rollout.Rollouts, ctx context.Context, id, reason string) (api.Rollout, error)) app.Method {
	return rolloutMethod(name, func(_ *app.App, svc *rollout.Rollouts) api.Endpoint {
		return api.Bind(api.Lookup(name), func(ctx context.Context, call *api.Call, in *api.ChangeRolloutInput) (api.RolloutResult, error) {
			r, err := do(svc, ctx, in.RolloutID, app.Deref(in.Reason))
			return api.RolloutResult{Rollout: r}, err
		})
	})
}

// RolloutsCreate is rollouts.create.
func (*Module) RolloutsCreate() app.Method {
	return rolloutMethod("rollouts.create", func(_ *app.App, svc *rollout.Rollouts) api.Endpoint {
		return api.Bind(api.Lookup("rollouts.create"), func(ctx context.Context, call *api.Call, in *api.CreateRolloutInput) (api.RolloutResult, error) {
			req := rollout.CreateRequest{Version: in.Version, Pools: in.Pools, Waves: in.Waves, BakeSeconds: in.BakeSeconds,
				MaxUnavailable: in.MaxUnavailable, MaxFailedNodes: in.MaxFailedNodes, ProgressDeadlineSeconds: in.ProgressDeadlineSeconds,
				RollbackOnAbort: in.RollbackOnAbort, ClientToken: app.Deref(in.ClientToken),
				By: rollout.Audit{TenantID: call.TenantID, Principal: call.Principal}}
			if in.Drain != nil {
				req.DrainWaitSeconds, req.DrainOnTimeout = in.Drain.WaitSeconds, in.Drain.OnTimeout
			}
			r, err := svc.Create(ctx, req)
			return api.RolloutResult{Rollout: r}, err
		})
	})
}

// RolloutsGet is rollouts.get.
func (*Module) RolloutsGet() app.Method {
	return rolloutMethod("rollouts.get", func(_ *app.App, svc *rollout.Rollouts) api.Endpoint {
		return api.Bind(api.Lookup("rollouts.get"), func(ctx context.Context, call *api.Call, in *api.GetRolloutInput) (api.RolloutResult, error) {
			r, err := svc.Get(ctx, in.RolloutID)
			return api.RolloutResult{Rollout: r}, err
		})
	})
}

// RolloutsList is rollouts.list.
func (*Module) RolloutsList() app.Method {
	return rolloutMethod("rollouts.list", func(a *app.App, svc *rollout.Rollouts) api.Endpoint {
		return api.Bind(api.Lookup("rollouts.list"), func(ctx context.Context, call *api.Call, in *api.ListRolloutsInput) (api.ListRolloutsResult, error) {
			st, err := app.Enum("state", in.State, api.ParseRolloutState, api.RolloutStates)
			if err != nil {
				return api.ListRolloutsResult{}, err
			}
			rs, next, err := app.List(a, call, in.Page, paging.DefaultLimit, func(pg paging.Page) ([]api.Rollout, map[string]string, error) {
				return svc.List(ctx, st, pg)
			}, "state="+string(st))
			return api.ListRolloutsResult{Rollouts: rs, NextCursor: next}, err
		})
	})
}

// RolloutsNodes is rollouts.nodes.
func (*Module) RolloutsNodes() app.Method {
	return rolloutMethod("rollouts.nodes", func(a *app.App, svc *rollout.Rollouts) api.Endpoint {
		return api.Bind(api.Lookup("rollouts.nodes"), func(ctx context.Context, call *api.Call, in *api.RolloutNodesInput) (api.RolloutNodesResult, error) {
			st, err := app.Enum("step", in.Step, api.ParseRolloutStep, api.RolloutSteps)
			if err != nil {
				return api.RolloutNodesResult{}, err
			}
			ns, next, err := app.List(a, call, in.Page, paging.DefaultLimit, func(pg paging.Page) ([]api.NodeProgress, map[string]string, error) {
				ns, next, err := svc.Nodes(ctx, in.RolloutID, st, pg.Limit, pg.After["k"])
				if next == "" {
					return ns, nil, err
				}
				return ns, map[string]string{"k": next}, err
			}, "rolloutId="+in.RolloutID, "step="+string(st))
			return api.RolloutNodesResult{Nodes: ns, NextCursor: next}, err
		})
	})
}

// RolloutsPause is rollouts.pause.
func (*Module) RolloutsPause() app.Method {
	return change("rollouts.pause", (*rollout.Rollouts).Pause)
}

// RolloutsResume is rollouts.resume.
func (*Module) RolloutsResume() app.Method {
	return change("rollouts.resume", (*rollout.Rollouts).Resume)
}

// RolloutsAbort is rollouts.abort.
func (*Module) RolloutsAbort() app.Method {
	return change("rollouts.abort", (*rollout.Rollouts).Abort)
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
func ReleasePins(ctx context.Context, a *app.App) ([]Pin, error) {
	var pins []Pin
	add := func(variable, from string, keys ...crypto.PublicKey) error {
		for _, k := range keys {
			id, err := release.KeyID(k)
			if err != nil {
				return fmt.Errorf("%s: %w", variable, err)
			}
			pins = append(pins, Pin{KeyID: id, Variable: variable, From: from, Key: k})
		}
		return nil
	}
	bundle := func(variable, from string, pem []byte) error {
		ks, err := release.ParsePEMBundle(pem)
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
		pub, err := a.PublicKey(ctx, id)
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
// the build of releases.register); nil before, or when this process does
// not serve releases.register.
func (m *Module) Pins() []Pin { return m.pins }

// releasePins loads the release pins once, at start, and keeps them (Pins).
// Any problem, including a threshold above the number of distinct pinned
// keys, fails the start.
func (m *Module) releasePins(ctx context.Context, a *app.App) (*release.Pins, error) {
	pins, err := ReleasePins(ctx, a)
	if err != nil {
		return nil, err
	}
	m.pins = pins
	if len(pins) == 0 {
		return nil, fmt.Errorf("no release pins: set BC_RELEASE_PINS_FILE, BC_RELEASE_PINS or BC_RELEASE_KMS_KEYS")
	}
	keys := make([]crypto.PublicKey, len(pins))
	for i, p := range pins {
		keys[i] = p.Key
	}
	ps, err := release.NewPins(keys, a.Config.ReleaseThreshold)
	if err != nil {
		return nil, fmt.Errorf("release pins: %w", err)
	}
	return ps, nil
}
