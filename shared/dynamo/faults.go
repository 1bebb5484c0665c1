package dynamo

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// Faults makes a chosen fraction of a client's requests fail, for chaos and
// fault tests: half before the request reaches the server (nothing
// happened), half after it was served (it happened, the caller cannot know).
// Half of the failures are retryable, as a reset connection is, so the SDK's
// retries meet them too — including a conditional write retried after it
// succeeded. It is installed as a finalize-step middleware, inside the
// SDK's retry loop, on each attempt. SetDown fails every request instead,
// as an unreachable DynamoDB does.
type Faults struct {
	mu   sync.Mutex
	rate float64
	down bool
	rng  *rand.Rand

	calls, before, after atomic.Int64
}

// NewFaults returns an injector failing nothing until SetRate; seed fixes
// its sequence of choices.
func NewFaults(seed uint64) *Faults {
	return &Faults{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// SetRate sets the fraction of requests to fail (0 stops injecting).
func (f *Faults) SetRate(r float64) { f.mu.Lock(); f.rate = r; f.mu.Unlock() }

// SetDown makes every request fail before it reaches the server and not
// retryably (the caller sees the failure at once, without the SDK's
// retries), until SetDown(false); the rate's choices are not drawn meanwhile.
func (f *Faults) SetDown(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

// Counts returns the requests seen and the failures injected before and
// after the server.
func (f *Faults) Counts() (calls, before, after int64) {
	return f.calls.Load(), f.before.Load(), f.after.Load()
}

// ErrInjected is what an injected failure wraps.
var ErrInjected = errors.New("dynamo: injected fault")

type injected struct {
	retryable bool
	served    bool
}

func (e injected) Error() string {
	where := "before the server"
	if e.served {
		where = "after the server"
	}
	return ErrInjected.Error() + " (" + where + ")"
}
func (e injected) Unwrap() error        { return ErrInjected }
func (e injected) RetryableError() bool { return e.retryable }

// roll decides the fate of one request: fail or not, where, retryable.
func (f *Faults) roll() (fail, served, retryable bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return true, false, false
	}
	if f.rate <= 0 || f.rng.Float64() >= f.rate {
		return false, false, false
	}
	return true, f.rng.IntN(2) == 0, f.rng.IntN(2) == 0
}

// Option installs the injector on a client.
func (f *Faults) Option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("bcFaults",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					f.calls.Add(1)
					fail, served, retryable := f.roll()
					if !fail {
						return next.HandleFinalize(ctx, in)
					}
					if served {
						if _, _, err := next.HandleFinalize(ctx, in); err != nil {
							return middleware.FinalizeOutput{}, middleware.Metadata{}, err
						}
						f.after.Add(1)
					} else {
						f.before.Add(1)
					}
					return middleware.FinalizeOutput{}, middleware.Metadata{}, injected{retryable: retryable, served: served}
				}), middleware.After)
		})
	}
}
