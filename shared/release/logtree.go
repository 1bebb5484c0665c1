package release

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// LogHashes reads the tree's stored hashes, numbered as tlog.StoredHashIndex
// numbers them (the store: shared/dynamo/releasedb).
type LogHashes interface {
	ReadHashes(ctx context.Context, indexes []int64) ([]tlog.Hash, error)
}

func reader(ctx context.Context, h LogHashes) tlog.HashReader {
	return tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) { return h.ReadHashes(ctx, ix) })
}

// StoredHashes are the hashes that appending the entry of leaf hash leaf
// (LeafHash) at index n stores: leaf, then one per complete subtree it
// closes (1 + the trailing ones of n; at most 64). They read at most that
// many hashes of earlier entries.
func StoredHashes(ctx context.Context, h LogHashes, n int64, leaf tlog.Hash) ([]tlog.Hash, error) {
	return tlog.StoredHashesForRecordHash(n, leaf, reader(ctx, h))
}

// Owner is the entry whose append stored hash index i, and i's position in
// that entry's StoredHashes.
func Owner(i int64) (entry int64, pos int) {
	level, k := tlog.SplitStoredHashIndex(i)
	entry = (k+1)<<level - 1
	return entry, int(i - tlog.StoredHashIndex(0, entry))
}

// TreeHash is the root of the tree of the first size entries.
func TreeHash(ctx context.Context, h LogHashes, size int64) (tlog.Hash, error) {
	return tlog.TreeHash(size, reader(ctx, h))
}

// ProveInclusion proves entry index is in the tree of size (RFC 9162 §2.1.3).
func ProveInclusion(ctx context.Context, h LogHashes, size, index int64) ([]tlog.Hash, error) {
	if index < 0 || index >= size {
		return nil, fmt.Errorf("entry %d is not in a tree of size %d", index, size)
	}
	return tlog.ProveRecord(size, index, reader(ctx, h))
}

// ProveConsistency proves the tree of size from is a prefix of the tree of
// size to (RFC 9162 §2.1.4).
func ProveConsistency(ctx context.Context, h LogHashes, from, to int64) ([]tlog.Hash, error) {
	if from < 0 || from > to {
		return nil, fmt.Errorf("no consistency proof from size %d to %d", from, to)
	}
	if from == 0 || from == to {
		return nil, nil // every tree extends the empty one; a tree is its own prefix
	}
	return tlog.ProveTree(to, from, reader(ctx, h))
}

// EncodeHashes is hashes as a proof travels in JSON: base64, in order (an
// empty proof is an empty list, never null).
func EncodeHashes(hs []tlog.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = base64.StdEncoding.EncodeToString(h[:])
	}
	return out
}

// DecodeHashes reads a proof's base64 hashes (ErrProof: one is not a
// base64 SHA-256 hash).
func DecodeHashes(ss []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(ss))
	for i, s := range ss {
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || len(b) != tlog.HashSize {
			return nil, fmt.Errorf("%w: hash %d is not a base64 SHA-256 hash", ErrProof, i)
		}
		copy(out[i][:], b)
	}
	return out, nil
}

// Errors of VerifyEvidence, each a reason a node refuses a release (install failed:
// log).
var (
	ErrCheckpointSignature = errors.New("checkpoint signature")   // not signed by the pinned log key, or another origin
	ErrStale               = errors.New("checkpoint older")       // smaller than the checkpoint the node stored
	ErrConsistency         = errors.New("consistency")            // not an extension of the stored checkpoint's tree
	ErrInclusion           = errors.New("inclusion")              // the release's entry is not in the checkpoint's tree
	ErrProof               = errors.New("malformed log evidence") // a hash that is not 32 bytes, an index beyond the size
)

// Evidence is what a node is told with a release: the signed checkpoint,
// the release's index and its inclusion proof in that checkpoint's tree,
// and the consistency proof from the checkpoint the node reported.
type Evidence struct {
	Checkpoint  []byte
	Index       int64
	Inclusion   []tlog.Hash
	Consistency []tlog.Hash
}

// VerifyEvidence checks ev for entry (the release's DSSE payload) under the pinned
// key, against stored, the last checkpoint the node verified (nil: none
// yet). On success it returns the checkpoint to store in its place.
func VerifyEvidence(key LogKey, stored *Checkpoint, ev Evidence, entry []byte) (Checkpoint, error) {
	c, err := key.Open(ev.Checkpoint)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrCheckpointSignature, err)
	}
	if stored != nil {
		switch {
		case c.Size < stored.Size:
			return Checkpoint{}, fmt.Errorf("%w: size %d, the stored checkpoint's is %d", ErrStale, c.Size, stored.Size)
		case c.Size == stored.Size && c.Root != stored.Root:
			return Checkpoint{}, fmt.Errorf("%w: a different root at size %d (a fork)", ErrConsistency, c.Size)
		case c.Size > stored.Size && stored.Size > 0:
			if err := tlog.CheckTree(ev.Consistency, c.Size, c.Root, stored.Size, stored.Root); err != nil {
				return Checkpoint{}, fmt.Errorf("%w: from size %d to %d: %v", ErrConsistency, stored.Size, c.Size, err)
			}
		}
	}
	if ev.Index < 0 || ev.Index >= c.Size {
		return Checkpoint{}, fmt.Errorf("%w: entry %d in a tree of size %d", ErrProof, ev.Index, c.Size)
	}
	if err := tlog.CheckRecord(ev.Inclusion, c.Size, c.Root, ev.Index, LeafHash(entry)); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: entry %d in size %d: %v", ErrInclusion, ev.Index, c.Size, err)
	}
	return c, nil
}
