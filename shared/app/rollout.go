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

// releasePins loads the release pins once, at start: the PEM bundle (file
// and/or inline) and the public keys of the configured KMS keys. Any
// problem, including a threshold above the number of pins, fails the start.
func (a *App) releasePins(ctx context.Context) (*rollout.Pins, error) {
	var keys []crypto.PublicKey
	add := func(source string, pem []byte) error {
		ks, err := rollout.ParsePEMBundle(pem)
		if err != nil {
			return fmt.Errorf("%s: %w", source, err)
		}
		keys = append(keys, ks...)
		return nil
	}
	if f := a.Config.PinsFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("BC_RELEASE_PINS_FILE: %w", err)
		}
		if err := add("BC_RELEASE_PINS_FILE", data); err != nil {
			return nil, err
		}
	}
	if a.Config.Pins != "" {
		if err := add("BC_RELEASE_PINS", []byte(a.Config.Pins)); err != nil {
			return nil, err
		}
	}
	for _, id := range a.Config.ReleaseKMSKeys {
		pub, err := kmssign.PublicKey(ctx, a.KMS, id)
		if err != nil {
			return nil, fmt.Errorf("BC_RELEASE_KMS_KEYS: %w", err)
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no release pins: set BC_RELEASE_PINS_FILE, BC_RELEASE_PINS or BC_RELEASE_KMS_KEYS")
	}
	pins, err := rollout.NewPins(keys, a.Config.ReleaseThreshold)
	if err != nil {
		return nil, fmt.Errorf("release pins: %w", err)
	}
	return pins, nil
}
