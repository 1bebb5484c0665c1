package registry

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/release"
)

// List is releases.list: up to limit releases (0: all), highest sequence
// first, starting after the key `after`; next is the key to continue from.
func (s *Service) List(ctx context.Context, limit int, after map[string]string) ([]release.Release, map[string]string, error) {
	rs, next, err := s.Store.List(ctx, limit, after)
	if rs == nil && err == nil {
		rs = []release.Release{}
	}
	return rs, next, err
}

// Reader serves releases.log and releases.prove: reads only, so neither
// ever signs (the functions that append do, and the reconciler signs the
// empty log's checkpoint).
type Reader struct {
	Log   LogStore
	Items Items
}

// Items reads a version's item alone (Store.Item), and the recorded
// release with its envelope (Store.Recorded): releases.prove answers a
// version's entry, the envelope's payload, so that anyone can check its
// inclusion from the answer alone.
type Items interface {
	Item(ctx context.Context, version string) (it Item, ok bool, err error)
	Recorded(ctx context.Context, version string) (release.Release, error)
}

// Proof is releases.prove's answer.
type Proof struct {
	Checkpoint  string
	Index       *int64
	Entry       []byte // with a version: the release's entry (its DSSE payload)
	Inclusion   []tlog.Hash
	Consistency []tlog.Hash
}

// Latest is releases.log: the latest signed checkpoint and its size.
func (r *Reader) Latest(ctx context.Context) (string, int64, error) {
	note, size, err := r.Log.Checkpoint(ctx)
	if err != nil {
		return "", 0, apierr.Dependency("dynamodb", err)
	}
	if note == "" {
		return "", 0, apierr.New(apierr.Unavailable, "the release log has no signed checkpoint yet: the reconciler signs the empty log's on its first pass; retry")
	}
	return note, size, nil
}

// Prove is releases.prove: version's entry in the tree of size (nil: the
// latest checkpoint's), and that tree's consistency with the tree of
// fromSize. Sizes beyond the log are INVALID_INPUT, as is a version whose
// entry the tree of size does not hold yet.
func (r *Reader) Prove(ctx context.Context, version *string, size, fromSize *int64) (Proof, error) {
	note, latest, err := r.Latest(ctx)
	if err != nil {
		return Proof{}, err
	}
	out := Proof{Checkpoint: note}
	n := latest
	if size != nil {
		if *size > latest {
			return Proof{}, beyond(latest, "size", "size %d is beyond the log: its latest checkpoint is of size %d", *size, latest)
		}
		n = *size
	}
	if fromSize != nil {
		if *fromSize > n {
			return Proof{}, beyond(latest, "fromSize", "fromSize %d is beyond size %d", *fromSize, n)
		}
		if out.Consistency, err = release.ProveConsistency(ctx, r.Log, *fromSize, n); err != nil {
			return Proof{}, apierr.Dependency("dynamodb", err)
		}
	}
	if version != nil {
		rel, err := r.Items.Recorded(ctx, *version)
		if errors.Is(err, release.ErrNotFound) || (err == nil && rel.Log == nil) {
			return Proof{}, apierr.New(apierr.NotFound, "release %q is not registered", *version).With("version", *version)
		}
		if err != nil {
			return Proof{}, apierr.Dependency("dynamodb", err)
		}
		i := rel.Log.Index
		if out.Entry, err = dsse.Payload(rel.Manifest); err != nil {
			return Proof{}, fmt.Errorf("release %s: its recorded envelope: %w", *version, err)
		}
		if i >= n {
			return Proof{}, beyond(latest, "version", "release %s is entry %d: not in the tree of size %d", *version, i, n)
		}
		out.Index = &i
		if out.Inclusion, err = release.ProveInclusion(ctx, r.Log, n, i); err != nil {
			return Proof{}, apierr.Dependency("dynamodb", err)
		}
	}
	return out, nil
}

func beyond(latest int64, field, format string, args ...any) *apierr.Error {
	return apierr.Invalid("constraint", field, field+": "+format, args...).With("logSize", latest)
}

// Get is a recorded release with its envelope (release.ErrNotFound: the
// version is not recorded).
func (s *Service) Get(ctx context.Context, version string) (release.Release, error) {
	return s.Store.Recorded(ctx, version)
}
