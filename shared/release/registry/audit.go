package registry

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/bettercompute/control-plane/shared/release"
)

// ErrLogAudit marks what an audit of the release log found wrong (a
// LogAuditError), as opposed to a dependency that failed before anything
// was compared.
var ErrLogAudit = errors.New("registry: release log audit failed")

// LogAuditError is an audit's finding: the stored checkpoint does not open
// under the log's own key, disagrees with its item, claims more entries
// than the log has, or — the audit proper — the stored tree's root at the
// checkpoint's size is not the root the checkpoint signs.
type LogAuditError struct {
	Size   int64      // the checkpoint's size (its item's when the note did not open)
	Signed *tlog.Hash // the root the checkpoint signs (nil: it did not open)
	Tree   *tlog.Hash // the stored tree's root at Size (nil: not computed)
	Reason string
}

func (e *LogAuditError) Error() string {
	return fmt.Sprintf("%v: %s (size %d, checkpoint root %s, tree root %s)", ErrLogAudit, e.Reason, e.Size, rootText(e.Signed), rootText(e.Tree))
}

// Is makes errors.Is(err, ErrLogAudit) hold.
func (e *LogAuditError) Is(target error) bool { return target == ErrLogAudit }

// AuditFinding is the size and both roots, base64 ("" where unknown): what
// the reconciler logs (reconcile.LogAuditFinding).
func (e *LogAuditError) AuditFinding() (size int64, signedRoot, treeRoot string) {
	return e.Size, rootText(e.Signed), rootText(e.Tree)
}

func rootText(h *tlog.Hash) string {
	if h == nil {
		return ""
	}
	return h.String()
}

// Audit holds the stored tree to the latest signed checkpoint: the note
// opens under the log's own key (Signer.Key), its size is its item's and
// at most the head's, and the tree of that size, recomputed from the
// stored hashes, has the root the checkpoint signs. It returns the
// checkpoint's size (0, nil before the first Sign: nothing is signed yet).
// A finding is a *LogAuditError (ErrLogAudit); any other error is a
// dependency's, and nothing was compared. Cost: the checkpoint and the head
// (two reads) and the tree's hashes (one batch read of at most log2(size)
// + 1 entries).
func (l *Log) Audit(ctx context.Context) (int64, error) {
	note, n, err := l.Store.Checkpoint(ctx)
	if err != nil || note == "" {
		return 0, err
	}
	return l.audit(ctx, note, n)
}

// audit is Audit of the checkpoint note whose item says size n.
func (l *Log) audit(ctx context.Context, note string, n int64) (int64, error) {
	cp, err := l.Signer.Key().Open([]byte(note))
	if err != nil {
		return n, &LogAuditError{Size: n, Reason: fmt.Sprintf("the stored checkpoint does not open under the log key %s: %v", l.Signer.Key().Name, err)}
	}
	if cp.Size != n {
		return cp.Size, &LogAuditError{Size: cp.Size, Signed: &cp.Root, Reason: fmt.Sprintf("the checkpoint signs size %d, its item says %d", cp.Size, n)}
	}
	head, err := l.Store.Size(ctx)
	if err != nil {
		return cp.Size, fmt.Errorf("release log audit: reading the head: %w", err)
	}
	if cp.Size > head {
		return cp.Size, &LogAuditError{Size: cp.Size, Signed: &cp.Root, Reason: fmt.Sprintf("the checkpoint signs size %d, the log's head is %d", cp.Size, head)}
	}
	tree, err := release.TreeHash(ctx, l.Store, cp.Size)
	if err != nil {
		return cp.Size, fmt.Errorf("release log audit: the tree of size %d: %w", cp.Size, err)
	}
	if tree != cp.Root {
		return cp.Size, &LogAuditError{Size: cp.Size, Signed: &cp.Root, Tree: &tree, Reason: "the stored tree's root is not the signed checkpoint's"}
	}
	return cp.Size, nil
}

// Audit is the reconciler's check of the log each pass, after Finish: a
// checkpoint covering the head is signed if none is (an empty log's of
// size 0 included: Log.Sign), then the stored tree is held to it
// (Log.Audit). Without a log it does nothing.
func (s *Service) Audit(ctx context.Context) (int64, error) {
	if s.Log == nil {
		return 0, nil
	}
	note, n, err := s.Log.Sign(ctx)
	if err != nil {
		return 0, fmt.Errorf("release log: signing a checkpoint over the head: %w", err)
	}
	return s.Log.audit(ctx, note, n)
}
