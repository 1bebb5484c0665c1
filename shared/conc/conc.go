// Package conc holds the two concurrency shapes every package uses: a
// bounded fan-out and a sleep that ends with its context. One copy each,
// so their error and cancellation behaviour is the same everywhere.
package conc

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/errgroup"
)

// Each runs fn(0..n-1), at most limit at once (limit ≤ 1: in order, in
// the caller's goroutine — the deterministic simulations' mode). Every
// call started runs to its end and its error is kept; once ctx is done no
// more are started. It returns every error, joined, with ctx's.
func Each(ctx context.Context, n, limit int, fn func(i int) error) error {
	errs := make([]error, n+1)
	if limit <= 1 || n <= 1 {
		for i := range n {
			if ctx.Err() != nil {
				break
			}
			errs[i] = fn(i)
		}
	} else {
		var g errgroup.Group
		g.SetLimit(limit)
		for i := range n {
			if ctx.Err() != nil {
				break
			}
			g.Go(func() error { errs[i] = fn(i); return nil })
		}
		_ = g.Wait() // the calls return nil: their errors are in errs
	}
	errs[n] = ctx.Err()
	return errors.Join(errs...)
}

// Sleep waits d, or until ctx is done (its error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
