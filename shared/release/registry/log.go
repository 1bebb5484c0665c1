package registry

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/release"
)

// Fault points of Append and Sign (Log.Faults), after each write.
const (
	FaultLogEntry      = "log.entry"      // entry n put, head not moved
	FaultLogHead       = "log.head"       // head moved to n+1
	FaultLogCheckpoint = "log.checkpoint" // checkpoint signed and stored
)

// maxAppendAttempts bounds an append that keeps losing index after index:
// each loss means another release was appended, so it is only reached by a
// burst of that many registrations at once (or a bug; the simulation's
// reverts end here rather than spin).
const maxAppendAttempts = 32

// ErrLogOrder is an append whose sequence is not above the last entry's:
// appends run in registration (sequence) order, so this release was
// overtaken by a later one before it was logged.
var ErrLogOrder = errors.New("registry: release log: an append out of sequence order")

// Entry is a log entry: the release it logs and the tree hashes its append
// stored (release.StoredHashes: its leaf hash, then one per subtree it
// completes).
type Entry struct {
	Version  string
	Sequence int64
	Hashes   []tlog.Hash
}

// LogStore keeps the release log: the entries, the head (the number of
// entries appended) and the latest signed checkpoint. Every method is one
// read or one conditional write; landed false is a condition that did not
// hold (nothing written).
type LogStore interface {
	// Size reads the head: entries [0, n) are appended (entry n may exist
	// too: an append that crashed before moving the head).
	Size(ctx context.Context) (n int64, err error)
	// Entry reads entry i (ok false: none).
	Entry(ctx context.Context, i int64) (e Entry, ok bool, err error)
	// PutEntry writes entry i only if there is none: the sequencing point
	// of the log, so two appends never share an index.
	PutEntry(ctx context.Context, i int64, e Entry) (landed bool, err error)
	// MoveHead moves the head from n to n+1 only if it is n (or there is
	// none and n is 0).
	MoveHead(ctx context.Context, n int64) (landed bool, err error)
	// ReadHashes reads stored hashes (one batch read).
	release.LogHashes
	// Checkpoint reads the latest signed checkpoint ("" and 0 before the
	// first).
	Checkpoint(ctx context.Context) (note string, size int64, err error)
	// PutCheckpoint stores a checkpoint of size n only over a smaller one
	// (or none).
	PutCheckpoint(ctx context.Context, n int64, note string) (landed bool, err error)
}

// Log is the release log: the entries, the tree hashes they stored, the
// head and the latest signed checkpoint, over LogStore's single-item
// conditional writes:
//
//   - Append puts entry n (n the head's) only if no entry n exists — the
//     sequencing point: two appends never share an index — then moves the
//     head n → n+1 conditioned on n. An append that finds entry n taken
//     moves the head for its writer (which may have crashed) and tries n+1,
//     so entries never leave a gap, and an append of a release already
//     logged returns its index.
//   - Sign signs the tree of the head's size and stores the checkpoint only
//     over a smaller one. Entries never change once put, so every tree of a
//     size has one root, and no two checkpoints the log signs disagree.
type Log struct {
	Store  LogStore
	Signer *release.LogSigner // nil: the log is read, never appended to or signed
	// Faults is a test-only hook (nil in production): called after each
	// write; an error stops the call there, as a crash would.
	Faults func(point string) error
}

func (l *Log) fault(point string) error {
	if l.Faults == nil {
		return nil
	}
	return l.Faults(point)
}

// Size is the number of entries the head acknowledges.
func (l *Log) Size(ctx context.Context) (int64, error) { return l.Store.Size(ctx) }

// Append logs the release (version, seq) whose entry (its DSSE payload) has
// leaf hash leaf (release.LeafHash) and returns its index. It is
// idempotent: a release already logged gets its index back, whoever logged
// it. Only the leaf hash is needed, so any registration can append a
// release another one recorded: the release item keeps it.
func (l *Log) Append(ctx context.Context, version string, seq int64, leaf tlog.Hash) (int64, error) {
	for attempt := 0; ; attempt++ {
		if attempt == maxAppendAttempts {
			return 0, fmt.Errorf("registry: release log: %s not appended after %d attempts (index taken each time)", version, attempt)
		}
		n, err := l.Store.Size(ctx)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			last, ok, err := l.Store.Entry(ctx, n-1)
			if err != nil {
				return 0, err
			}
			if !ok {
				return 0, fmt.Errorf("registry: release log: head %d but no entry %d", n, n-1)
			}
			switch {
			case last.Version == version && last.Sequence == seq:
				return n - 1, nil
			case last.Sequence >= seq:
				return l.find(ctx, version, seq, n-1)
			}
		}
		hs, err := release.StoredHashes(ctx, l.Store, n, leaf)
		if err != nil {
			return 0, err
		}
		landed, err := l.Store.PutEntry(ctx, n, Entry{Version: version, Sequence: seq, Hashes: hs})
		switch {
		case err != nil:
			return 0, err
		case !landed:
			// Entry n is taken: by this very release (a retry whose first
			// put landed) or another. Either way its head move may be
			// missing; make it, then look again.
			e, _, gerr := l.Store.Entry(ctx, n)
			if gerr != nil {
				return 0, gerr
			}
			if err := l.moveHead(ctx, n); err != nil {
				return 0, err
			}
			if e.Version == version && e.Sequence == seq {
				return n, nil
			}
			continue
		}
		if err := l.fault(FaultLogEntry); err != nil {
			return 0, err
		}
		if err := l.moveHead(ctx, n); err != nil {
			return 0, err
		}
		if err := l.fault(FaultLogHead); err != nil {
			return 0, err
		}
		return n, nil
	}
}

// moveHead moves the head from n to n+1; a head already past n is no loss.
func (l *Log) moveHead(ctx context.Context, n int64) error {
	_, err := l.Store.MoveHead(ctx, n)
	return err
}

// find is the index of (version, seq) among entries [0, last], by binary
// search on their sequences (appends run in sequence order); ErrLogOrder if
// it is not there.
func (l *Log) find(ctx context.Context, version string, seq, last int64) (int64, error) {
	lo, hi := int64(0), last
	for lo <= hi {
		mid := lo + (hi-lo)/2
		e, ok, err := l.Store.Entry(ctx, mid)
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, fmt.Errorf("registry: release log: no entry %d below the head", mid)
		}
		switch {
		case e.Sequence == seq && e.Version == version:
			return mid, nil
		case e.Sequence < seq:
			lo = mid + 1
		default:
			hi = mid - 1
		}
	}
	return 0, fmt.Errorf("%w: %s (sequence %d)", ErrLogOrder, version, seq)
}

// Sign returns a signed checkpoint of at least the head's size: the stored
// one when it is that large, else a new one over the tree of the head's
// size, stored unless a larger one was stored meanwhile (then that one).
func (l *Log) Sign(ctx context.Context) (string, int64, error) {
	n, err := l.Store.Size(ctx)
	if err != nil {
		return "", 0, err
	}
	return l.SignCovering(ctx, n)
}

// SignCovering is Sign for a caller that knows the log has at least n
// entries (an append's index + 1): a checkpoint of at least size n.
func (l *Log) SignCovering(ctx context.Context, n int64) (string, int64, error) {
	note, size, err := l.Store.Checkpoint(ctx)
	if err != nil || (note != "" && size >= n) {
		return note, size, err
	}
	root, err := release.TreeHash(ctx, l.Store, n)
	if err != nil {
		return "", 0, err
	}
	signed, err := l.Signer.Sign(release.Checkpoint{Origin: l.Signer.Key().Name, Size: n, Root: root})
	if err != nil {
		return "", 0, fmt.Errorf("release log: signing the checkpoint of size %d: %w", n, err)
	}
	landed, err := l.Store.PutCheckpoint(ctx, n, string(signed))
	if err != nil {
		return "", 0, err
	}
	if !landed {
		return l.Store.Checkpoint(ctx) // as large or larger, signed by another
	}
	if err := l.fault(FaultLogCheckpoint); err != nil {
		return "", 0, err
	}
	return string(signed), n, nil
}

// Checkpoint is the latest signed checkpoint ("" and size 0 before the
// first Sign).
func (l *Log) Checkpoint(ctx context.Context) (string, int64, error) { return l.Store.Checkpoint(ctx) }

// Entry is the release entry i logs (ok false: no entry i).
func (l *Log) Entry(ctx context.Context, i int64) (version string, seq int64, ok bool, err error) {
	e, ok, err := l.Store.Entry(ctx, i)
	return e.Version, e.Sequence, ok, err
}

// ReadHashes reads the tree's stored hashes (release.LogHashes), so the
// tree's proofs take the log itself.
func (l *Log) ReadHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error) {
	return l.Store.ReadHashes(ctx, indexes)
}
