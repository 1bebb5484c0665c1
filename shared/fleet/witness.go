package fleet

import (
	"context"
	"encoding/base64"
	"fmt"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/release"
)

// Log reads the release log (shared/dynamo/releasedb.Log): its latest
// signed checkpoint, its size (the entries appended, signed or not) and its
// stored hashes. Nodes witness the log: each report carries the checkpoint
// the node verified last, and witness checks it for a split view.
type Log interface {
	Checkpoint(ctx context.Context) (note string, size int64, err error)
	Size(ctx context.Context) (int64, error)
	release.LogHashes
}

// cachedCheckpoint is the latest checkpoint as a function read it, with the
// evidence computed under it (one per entry and reported size).
type cachedCheckpoint struct {
	note     string
	size     int64
	expireAt time.Time
	proofs   sync.Map // "index/from" → *DesiredLog
}

// checkpoint is the latest signed checkpoint: cached for api.CheckpointTTL,
// read again when it is older or smaller than atLeast.
func (s *Service) checkpoint(ctx context.Context, atLeast int64) (*cachedCheckpoint, error) {
	if c := s.cp.Load(); c != nil && c.size >= atLeast && s.now().Before(c.expireAt) {
		return c, nil
	}
	note, size, err := s.Log.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	c := &cachedCheckpoint{note: note, size: size, expireAt: s.now().Add(api.CheckpointTTL)}
	if old := s.cp.Load(); old != nil && old.note == note {
		c = old // keep its proofs
		c.expireAt = s.now().Add(api.CheckpointTTL)
	}
	s.cp.Store(c)
	return c, nil
}

// witness checks a node's reported checkpoint against the log's own tree:
// a root the tree of that size does not have, or a size beyond the log,
// is a split view (the evidence returned). Each size's root is read once
// per function (the tree only grows); a report that cannot be checked
// now (DynamoDB failed) is not evidence of anything.
func (s *Service) witness(ctx context.Context, rep *api.LogReport, now time.Time) *api.LogSplit {
	if rep == nil || s.Log == nil {
		return nil
	}
	root, err := s.rootAt(ctx, rep.Size)
	if err != nil {
		s.logger().Warn("heartbeat: checking a node's log checkpoint", "size", rep.Size, "error", err.Error())
		return nil
	}
	if root != nil && base64.StdEncoding.EncodeToString(root[:]) == rep.Root {
		return nil
	}
	return &api.LogSplit{Size: rep.Size, Root: rep.Root, At: now}
}

// rootAt is the log's root at size (nil: the log is smaller).
func (s *Service) rootAt(ctx context.Context, size int64) (*tlog.Hash, error) {
	if v, ok := s.roots.Load(size); ok {
		h := v.(tlog.Hash)
		return &h, nil
	}
	n, err := s.Log.Size(ctx)
	if err != nil {
		return nil, err
	}
	if size > n {
		return nil, nil
	}
	h, err := release.TreeHash(ctx, s.Log, size)
	if err != nil {
		return nil, err
	}
	s.roots.Store(size, h)
	return &h, nil
}

// evidence is the log's evidence for entry index told to a node that
// reported a checkpoint of size from (0: none): the latest checkpoint,
// the inclusion proof and the consistency proof from from. Computed once
// per checkpoint, index and from, then cached with the checkpoint. ok is
// false when no signed checkpoint covers the entry (or the node's) yet:
// then the node is told no release.
func (s *Service) evidence(ctx context.Context, index, from int64) (*api.DesiredLog, error) {
	c, err := s.checkpoint(ctx, max(index+1, from))
	if err != nil {
		return nil, err
	}
	if c.note == "" || index >= c.size || from > c.size {
		return nil, fmt.Errorf("no signed checkpoint covers entry %d and size %d yet (latest: %d)", index, from, c.size)
	}
	key := fmt.Sprintf("%d/%d", index, from)
	if v, ok := c.proofs.Load(key); ok {
		return v.(*api.DesiredLog), nil
	}
	incl, err := release.ProveInclusion(ctx, s.Log, c.size, index)
	if err != nil {
		return nil, err
	}
	cons, err := release.ProveConsistency(ctx, s.Log, from, c.size)
	if err != nil {
		return nil, err
	}
	d := &api.DesiredLog{Index: index, Checkpoint: c.note, Inclusion: release.EncodeHashes(incl),
		Consistency: release.EncodeHashes(cons)}
	c.proofs.Store(key, d)
	return d, nil
}
