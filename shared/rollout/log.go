package rollout

import (
	"context"
	"errors"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/releaselog"
)

// LogStore reads the release log (SPEC §4.8): its latest signed checkpoint
// ("" before the first is signed) and the tree's stored hashes.
type LogStore interface {
	Checkpoint(ctx context.Context) (note string, size int64, err error)
	releaselog.Hashes
}

// Log serves releases.log and releases.prove: reads only, so neither ever
// signs (the functions that append do, and the reconciler signs the empty
// log's checkpoint).
type Log struct {
	Store    LogStore
	Releases LogIndexes
}

// LogIndexes finds a recorded release's entry (ErrNotFound: not recorded;
// ok false: recorded before the log).
type LogIndexes interface {
	LogIndex(ctx context.Context, version string) (index int64, ok bool, err error)
}

// Proof is releases.prove's answer.
type Proof struct {
	Checkpoint  string
	Index       *int64
	Inclusion   []tlog.Hash
	Consistency []tlog.Hash
}

// Latest is the latest signed checkpoint and its size.
func (l *Log) Latest(ctx context.Context) (string, int64, error) {
	note, size, err := l.Store.Checkpoint(ctx)
	if err != nil {
		return "", 0, apierr.Dependency("dynamodb", err)
	}
	if note == "" {
		return "", 0, apierr.New(apierr.Unavailable, "the release log has no signed checkpoint yet: the reconciler signs the empty log's on its first pass; retry")
	}
	return note, size, nil
}

// Prove proves version's entry in the tree of size (nil: the latest
// checkpoint's), and that tree's consistency with the tree of fromSize.
// Sizes beyond the log are INVALID_INPUT, as is a version whose entry the
// tree of size does not hold yet.
func (l *Log) Prove(ctx context.Context, version *string, size, fromSize *int64) (Proof, error) {
	note, latest, err := l.Latest(ctx)
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
		if out.Consistency, err = releaselog.ProveConsistency(ctx, l.Store, *fromSize, n); err != nil {
			return Proof{}, apierr.Dependency("dynamodb", err)
		}
	}
	if version != nil {
		i, logged, err := l.Releases.LogIndex(ctx, *version)
		if errors.Is(err, ErrNotFound) || (err == nil && !logged) {
			return Proof{}, apierr.New(apierr.NotFound, "release %q is not registered", *version).With("version", *version)
		}
		if err != nil {
			return Proof{}, apierr.Dependency("dynamodb", err)
		}
		if i >= n {
			return Proof{}, beyond(latest, "version", "release %s is entry %d: not in the tree of size %d", *version, i, n)
		}
		out.Index = &i
		if out.Inclusion, err = releaselog.ProveInclusion(ctx, l.Store, n, i); err != nil {
			return Proof{}, apierr.Dependency("dynamodb", err)
		}
	}
	return out, nil
}

func beyond(latest int64, field, format string, args ...any) *apierr.Error {
	return apierr.Invalid("constraint", field, field+": "+format, args...).With("logSize", latest)
}
