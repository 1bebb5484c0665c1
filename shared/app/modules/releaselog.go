package modules

import (
	"context"
	"sync"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/reconcile"
	"github.com/bettercompute/control-plane/shared/release/registry"
)

// passLog is the reconciler's release log step (reconcile.ReleaseLog): the
// release domain's service with the log of BC_RELEASE_LOG_KEY
// (rolloutapp.ReleaseLog),
// built on the first pass that needs it — reading the log key's public key
// from KMS — and kept for the process's later passes. A build that failed
// (KMS unreachable) fails that pass's step and is tried again by the next.
type passLog struct {
	a  *app.App
	mu sync.Mutex
	rs *registry.Service
}

func (l *passLog) releases(ctx context.Context) (*registry.Service, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rs != nil {
		return l.rs, nil
	}
	// The signer keeps the context it is built with for its later Signs
	// (without its cancellation): build it on a context of this pass's
	// deadline only, not of its values (a test's meter, say).
	bctx := context.Background()
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		bctx, cancel = context.WithDeadline(bctx, dl)
		defer cancel()
	}
	log, err := rolloutapp.ReleaseLog(bctx, l.a)
	if err != nil {
		return nil, err
	}
	l.rs = &registry.Service{Store: rolloutapp.ReleaseStore(l.a), Log: log, Now: l.a.Now}
	return l.rs, nil
}

// Finish implements reconcile.ReleaseLog (registry.Service.Finish).
func (l *passLog) Finish(ctx context.Context) (bool, error) {
	rs, err := l.releases(ctx)
	if err != nil {
		return false, err
	}
	return rs.Finish(ctx)
}

// Audit implements reconcile.ReleaseLog (registry.Service.Audit).
func (l *passLog) Audit(ctx context.Context) (int64, error) {
	rs, err := l.releases(ctx)
	if err != nil {
		return 0, err
	}
	return rs.Audit(ctx)
}

var (
	_ reconcile.ReleaseLog      = (*passLog)(nil)
	_ reconcile.ReleaseLog      = (*registry.Service)(nil)
	_ reconcile.LogAuditFinding = (*registry.LogAuditError)(nil)
)
