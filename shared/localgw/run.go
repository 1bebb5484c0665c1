package localgw

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ShutdownGrace is how long requests in flight may finish after ctx ends.
const ShutdownGrace = 10 * time.Second

// Serve serves h on ln until ctx ends, then shuts down gracefully: new
// connections are refused and requests in flight get ShutdownGrace.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// PassTimeout bounds one reconciler pass (the Lambda's timeout in AWS).
const PassTimeout = 30 * time.Second

// Reconcile runs pass now and then every interval until ctx ends, as the
// EventBridge schedule does in AWS. A failed pass is logged and the next one
// runs on time: passes are idempotent. A pass may take PassTimeout or
// interval, whichever is longer; a tick that falls during a pass is skipped.
func Reconcile(ctx context.Context, interval time.Duration, pass func(context.Context) error, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(interval, PassTimeout))
		start := time.Now()
		err := pass(pctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Error("reconcile", "error", err.Error(), "ms", time.Since(start).Milliseconds())
		case err == nil:
			logger.Debug("reconcile", "ms", time.Since(start).Milliseconds())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
