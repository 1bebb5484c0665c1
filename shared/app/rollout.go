package app

import (
	"context"
	"crypto"
	"fmt"
	"os"

	"github.com/bettercompute/control-plane/shared/api"
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
	return []api.Endpoint{register, list}, nil
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
