// Package registry is the release domain's service: releases.register's
// protocol (register.go), the finishing of registrations a crash left
// (finish.go), the release log's appends, signing and audit (log.go,
// audit.go), and the reads of releases.list, releases.log and
// releases.prove (read.go). Each step is a named function calling one
// method of a narrow store (Store, LogStore) whose every method is one
// conditional write or one read (shared/dynamo/releasedb). The formats,
// keys and proofs it builds on are the leaf shared/release's.
package registry

import (
	"context"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/release"
)

// State is where a version's registration stands. A version's item is
// pending from the first write of a registration until that registration
// claims the head (then claimed) or is refused (then refused, and
// overwritable). A claimed item may be appended to the release log; once it
// is, and a signed checkpoint covers it, it is recorded. Only recorded
// items are listed (and so told to nodes and rollouts): nothing is told a
// release no signed checkpoint covers.
type State string

const (
	Pending  State = "pending"
	Claimed  State = "claimed"
	Recorded State = "recorded"
	Refused  State = "refused"
)

// Unfinished says a registration of this state may still be logged and
// recorded (by itself, a twin, a later claim or the reconciler).
func (s State) Unfinished() bool { return s == Pending || s == Claimed }

const (
	// ClaimWithin bounds how long after its pending write a registration
	// may still claim the head; PendingStale is when any other registration
	// may repair a pending item (finish it if the head holds it, else
	// refuse it). The gap keeps a slow claimant and a repair from ever
	// acting on the same item.
	ClaimWithin  = time.Minute
	PendingStale = 2 * time.Minute
	// RefusedRetention: refused items are deleted by TTL after this.
	RefusedRetention = 24 * time.Hour
	// FinishBatch bounds the log entries one Finish checks past the
	// recorded mark.
	FinishBatch = 64
)

// Fault points of a registration (Service.Faults), after each write; the
// log's own (FaultLogEntry, …) come from Log.Faults.
const (
	FaultReleasePending   = "release.pending"   // item put pending
	FaultReleaseClaimed   = "release.claimed"   // head claimed
	FaultReleaseMarked    = "release.marked"    // item marked claimed (may be logged)
	FaultReleaseCommitted = "release.committed" // item recorded
)

// Item is a version's registration as the store keeps it: the release (its
// Log.Index once recorded), the state, when its pending write was made and
// its log entry's leaf hash (the payload's: any registration can append a
// release another one put pending; zero on a release recorded before the
// log).
type Item struct {
	release.Release
	State     State
	PendingAt time.Time
	Leaf      tlog.Hash
}

// same says o is this very registration: the version, sequence and digest.
func (it Item) same(o Item) bool {
	return it.Version == o.Version && it.Sequence == o.Sequence && it.ManifestDigest == o.ManifestDigest
}

// Head is the channel head: the latest claimed sequence and the version
// and digest that claimed it (zero: none yet).
type Head struct {
	Sequence int64
	Version  string
	Digest   string
}

// holds says the head is it's claim.
func (h Head) holds(it Item) bool {
	return h.Sequence == it.Sequence && h.Version == it.Version && h.Digest == it.ManifestDigest
}

func headOf(it Item) Head {
	return Head{Sequence: it.Sequence, Version: it.Version, Digest: it.ManifestDigest}
}

// Store keeps the releases' items: the head, one item per version, one
// envelope per recorded version and the log's recorded mark. Every method is
// one read or one conditional write; landed false is a condition that did
// not hold (nothing written). Reads of the head and of items are
// consistent.
type Store interface {
	// PutPending writes it (state Pending) if its version has no item or a
	// refused one.
	PutPending(ctx context.Context, it Item) (landed bool, err error)
	// Item reads a version's item (ok false: none).
	Item(ctx context.Context, version string) (it Item, ok bool, err error)
	// Head reads the channel head.
	Head(ctx context.Context) (Head, error)
	// ClaimHead sets the head to h if its sequence is below h's (or there
	// is none), or it already is h (a retry); it answers the head it
	// replaced (nil: none).
	ClaimHead(ctx context.Context, h Head) (old *Head, landed bool, err error)
	// MarkClaimed moves it's item from pending (or claimed) to claimed if it
	// still is this claim (sequence and digest).
	MarkClaimed(ctx context.Context, it Item) (landed bool, err error)
	// Record moves it's item from claimed to recorded at log index, if it
	// still is this claim; the recorded item is listed from then on.
	Record(ctx context.Context, it Item, index int64) (landed bool, err error)
	// Refuse moves it's item from state from to refused, deleted by TTL at
	// expireAt, if it still is this claim.
	Refuse(ctx context.Context, it Item, from State, expireAt time.Time) (landed bool, err error)
	// PutEnvelope keeps a recorded release's envelope as sent.
	PutEnvelope(ctx context.Context, version, digest string, manifest []byte) error
	// Recorded reads a recorded release with its envelope (nil when none
	// was kept or it is of another digest); release.ErrNotFound when the
	// version is not recorded.
	Recorded(ctx context.Context, version string) (release.Release, error)
	// List reads up to limit recorded releases (≤ 0: all), highest sequence
	// first, starting after the key `after`; next is the key to continue.
	List(ctx context.Context, limit int, after map[string]string) (rs []release.Release, next map[string]string, err error)
	// RecordedMark reads the log's recorded mark: the releases of entries
	// [0, n) are recorded.
	RecordedMark(ctx context.Context) (n int64, err error)
	// MoveRecordedMark sets the mark to n if it is below n.
	MoveRecordedMark(ctx context.Context, n int64) (landed bool, err error)
}

// Service registers releases and finishes what crashed registrations
// left: releases.register, releases.list and the reconciler's release log
// step.
type Service struct {
	Store Store
	// Log is the release log every registration appends to (required to
	// register and to finish; reads do without).
	Log  *Log
	Pins *release.Pins // nil: registration is not configured (UNAVAILABLE)
	Now  func() time.Time
	// Faults is a test-only hook (nil in production): called after each
	// write of a registration; an error stops it there as a crash would.
	Faults func(point string) error
}

func (s *Service) now() time.Time {
	if s.Now == nil {
		return time.Now().UTC()
	}
	return s.Now().UTC()
}

func (s *Service) fault(point string) error {
	if s.Faults == nil {
		return nil
	}
	return s.Faults(point)
}
