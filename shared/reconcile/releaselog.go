package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// ReleaseLog is the release log's step of each pass (the release domain's
// registry.Service): what a crash left of a registration is finished, then
// the log audits itself.
type ReleaseLog interface {
	// Finish finishes a registration a crash left half done (the release
	// logged, a checkpoint signed over it, the release recorded); finished
	// says it had something to do.
	Finish(ctx context.Context) (finished bool, err error)
	// Audit makes sure a signed checkpoint covers the log's head, then
	// checks that the stored tree's root at that checkpoint's size is the
	// root it signs. A finding is an error that is a LogAuditFinding; any
	// other error is a dependency's (nothing was compared).
	Audit(ctx context.Context) (size int64, err error)
}

// LogAuditFinding is an Audit error that found the log wrong, rather than
// a dependency failing (registry.LogAuditError).
type LogAuditFinding interface {
	error
	// AuditFinding is the checkpoint's size, the root it signs and the
	// stored tree's root at that size (base64; "" where unknown).
	AuditFinding() (size int64, signedRoot, treeRoot string)
}

// LogStepTimeout bounds the release log's step of a pass (a few reads, at
// most one finished registration and one KMS Sign).
const LogStepTimeout = 10 * time.Second

// releaseLog runs the release log's step after the pass's items: a failure
// is counted in Errors and logged, never the pass's error; a finding sets
// LogAuditFailed and logs an ERROR line with the size and both roots.
func (rc *Reconciler) releaseLog(ctx context.Context, res *PassResult) {
	if rc.Log == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, LogStepTimeout)
	defer cancel()
	log := rc.logger()
	finished, err := rc.Log.Finish(ctx)
	switch {
	case err != nil:
		// The audit still runs: it reads what is stored, whatever the
		// registration left.
		res.Errors++
		log.Warn("release log: finishing a registration", "error", err.Error())
	case finished:
		res.LogFinished++
	}
	size, err := rc.Log.Audit(ctx)
	res.LogSize = size
	var f LogAuditFinding
	switch {
	case errors.As(err, &f):
		res.LogAuditFailed = 1
		size, signed, tree := f.AuditFinding()
		log.LogAttrs(ctx, slog.LevelError, "release log audit failed",
			slog.Int64("size", size), slog.String("checkpointRoot", signed), slog.String("treeRoot", tree),
			slog.String("error", err.Error()))
	case err != nil:
		res.Errors++
		log.Warn("release log: audit", "error", err.Error())
	}
}
