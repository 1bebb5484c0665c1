package client

import (
	"context"
	"iter"
)

// pages follows a list method's cursors: it calls call with in, yields the
// page, and goes on with the page's next cursor until there is none or the
// consumer stops. An error is yielded once and ends the iteration.
func pages[In, Out any](ctx context.Context, in In, cursor func(*In) **string,
	call func(context.Context, *In) (*Out, error), next func(*Out) string) iter.Seq2[*Out, error] {
	return func(yield func(*Out, error) bool) {
		for {
			out, err := call(ctx, &in)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(out, nil) {
				return
			}
			n := next(out)
			if n == "" {
				return
			}
			*cursor(&in) = &n
		}
	}
}
