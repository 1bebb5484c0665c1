package rollout

import (
	"context"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// The limits the catalog's tags quote by name.
var _ = strictjson.RegisterLimits(map[string]int64{"rollout.MaxPools": api.MaxPools, "rollout.MaxWaves": api.MaxWaves})

// Releases is what rollouts read of the release domain: a recorded release
// with its manifest (nil when the registration stored none), ErrNotFound
// when the version is not recorded (shared/dynamo/releasedb).
type Releases interface {
	Get(ctx context.Context, version string) (release.Release, error)
}

// Audit records who created a rollout: the release domain's record of a
// caller.
type Audit = release.Audit

// ErrNotFound: no rollout, progress item or recorded release of that id —
// the release domain's sentinel, so a store of either answers one error.
var ErrNotFound = release.ErrNotFound

// ReasonExpired refuses a rollout of a release whose statement expired:
// the statement's own reason.
const ReasonExpired = release.ReasonExpired
