package rollout

import (
	"context"
	"errors"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
)

// Store records releases. Implementations enforce the channel ordering with
// conditional writes (docs/architecture.md, Release ordering).
type Store interface {
	// Register records r unless its version exists. It answers the stored
	// release and replayed=true when the version is recorded with the same
	// sequence; CONFLICT when it is recorded with another sequence;
	// INVALID_INPUT (reason rollback) when r.Sequence is not above the head.
	Register(ctx context.Context, r Release) (stored Release, replayed bool, err error)
	// Get reads a recorded release with its manifest (nil when the
	// registration stored none); ErrNotFound when the version is not
	// recorded.
	Get(ctx context.Context, version string) (Release, error)
	// List returns up to limit releases (limit ≤ 0: all), highest sequence
	// first, starting after the key `after`; next is the key to continue from.
	List(ctx context.Context, limit int, after map[string]string) (rs []Release, next map[string]string, err error)
}

// Service is the rollout module.
type Service struct {
	Store Store
	Pins  *Pins // nil: registration is not configured (UNAVAILABLE)
	Now   func() time.Time
}

// ErrNotFound: no recorded release of that version.
var ErrNotFound = errors.New("rollout: release not found")

// Register verifies manifest (a DSSE envelope) and records the release.
func (s *Service) Register(ctx context.Context, manifest []byte, by Audit) (Release, bool, error) {
	if s.Pins == nil {
		return Release{}, false, apierr.New(apierr.Unavailable, "no release pins are configured")
	}
	now := s.Now().UTC()
	v, err := s.Pins.Verify(manifest, now)
	if err != nil {
		return Release{}, false, err
	}
	st := v.Statement
	r := Release{
		Version:        st.Version,
		Sequence:       st.Sequence,
		Binaries:       st.Binaries,
		ManifestDigest: v.Digest,
		Signers:        v.Signers,
		RegisteredAt:   now.Truncate(time.Millisecond),
		RegisteredBy:   by,
		Manifest:       manifest,
		Payload:        v.Payload,
	}
	if st.Expires != nil {
		e := st.Expires.UTC()
		r.Expires = &e
	}
	return s.Store.Register(ctx, r)
}

// List returns up to limit releases (0: all), highest sequence first,
// starting after the key `after`; next is the key to continue from.
func (s *Service) List(ctx context.Context, limit int, after map[string]string) ([]Release, map[string]string, error) {
	rs, next, err := s.Store.List(ctx, limit, after)
	if rs == nil && err == nil {
		rs = []Release{}
	}
	return rs, next, err
}
