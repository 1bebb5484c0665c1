// Package dynamo is the DynamoDB adapter: the client, a round-trip counter,
// and the stores the domain packages use, with single-item conditional writes
// only (no transactions — see docs/architecture.md). The table itself is
// defined in package schema.
package dynamo

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/bettercompute/control-plane/shared/meter"
)

// NewClient returns a DynamoDB client; endpoint overrides the AWS endpoint
// (the local stack's dynalite) when not empty. Every client meters its
// requests into the meter.Meter of the request's context, if any.
func NewClient(cfg aws.Config, endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	opts = append([]func(*dynamodb.Options){Metered}, opts...)
	if endpoint != "" {
		opts = append([]func(*dynamodb.Options){func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) }}, opts...)
	}
	return dynamodb.NewFromConfig(cfg, opts...)
}

// Metered asks DynamoDB for the capacity every request consumes
// (ReturnConsumedCapacity TOTAL) and records it, with each round trip, into
// the meter.Meter the request's context carries.
func Metered(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		err := s.Initialize.Add(middleware.InitializeMiddlewareFunc("bcConsumedCapacity",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				write := askCapacity(in.Parameters)
				out, md, err := next.HandleInitialize(ctx, in)
				recordConsumed(meter.From(ctx), write, out.Result)
				return out, md, err
			}), middleware.After)
		if err != nil {
			return err
		}
		return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("bcMeterCalls",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				meter.From(ctx).Call()
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	})
}

// recordConsumed adds the capacity an operation's result reports to m (nil: none).
func recordConsumed(m *meter.Meter, write bool, result any) {
	if m == nil {
		return
	}
	for _, c := range consumed(result) {
		if c.CapacityUnits != nil {
			m.Consumed(*c.CapacityUnits, write)
		}
	}
}

// askCapacity sets ReturnConsumedCapacity on an operation's input and
// reports whether the operation writes.
func askCapacity(params any) (write bool) {
	total := types.ReturnConsumedCapacityTotal
	switch in := params.(type) {
	case *dynamodb.GetItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.BatchGetItemInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.QueryInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.ScanInput:
		in.ReturnConsumedCapacity = total
	case *dynamodb.PutItemInput:
		in.ReturnConsumedCapacity = total
		return true
	case *dynamodb.UpdateItemInput:
		in.ReturnConsumedCapacity = total
		return true
	case *dynamodb.DeleteItemInput:
		in.ReturnConsumedCapacity = total
		return true
	case *dynamodb.BatchWriteItemInput:
		in.ReturnConsumedCapacity = total
		return true
	}
	return false
}

// consumed returns the ConsumedCapacity an operation's output reports.
func consumed(result any) []types.ConsumedCapacity {
	switch out := result.(type) {
	case *dynamodb.GetItemOutput:
		return ptrs(out.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		return ptrs(out.ConsumedCapacity)
	case *dynamodb.ScanOutput:
		return ptrs(out.ConsumedCapacity)
	case *dynamodb.PutItemOutput:
		return ptrs(out.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		return ptrs(out.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		return ptrs(out.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		return out.ConsumedCapacity
	case *dynamodb.BatchWriteItemOutput:
		return out.ConsumedCapacity
	}
	return nil
}

func ptrs(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}

// RoundTrips counts the HTTP requests a client sends (retries included) and
// how many of them were made one after another: how the benchmarks and
// tests prove the round-trip budget of each method.
type RoundTrips struct {
	// Latency is added to every request (a network's, so that calls sent
	// at once are in flight at once however the goroutines are scheduled:
	// Depth then measures the code's chain, not the machine's load).
	Latency time.Duration

	n     atomic.Int64
	mu    sync.Mutex
	spans [][2]time.Time // each request's send and answer
}

// Count returns the requests sent so far.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

// Depth returns the longest chain of requests each sent after the one
// before it was answered: the round trips a caller waited for in a row
// (requests in flight at once count once).
func (r *RoundTrips) Depth() int {
	r.mu.Lock()
	spans := slices.Clone(r.spans)
	r.mu.Unlock()
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[1].Compare(b[1]) })
	depth := make([]int, len(spans))
	best := 0
	for i, s := range spans {
		depth[i] = 1
		for j := range i {
			if !spans[j][1].After(s[0]) {
				depth[i] = max(depth[i], depth[j]+1)
			}
		}
		best = max(best, depth[i])
	}
	return best
}

// Reset sets the count to zero.
func (r *RoundTrips) Reset() {
	r.n.Store(0)
	r.mu.Lock()
	r.spans = nil
	r.mu.Unlock()
}

// Option installs the counter on a client.
func (r *RoundTrips) Option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("bcRoundTrips",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					r.n.Add(1)
					sent := time.Now()
					if r.Latency > 0 {
						time.Sleep(r.Latency)
					}
					out, md, err := next.HandleFinalize(ctx, in)
					r.mu.Lock()
					r.spans = append(r.spans, [2]time.Time{sent, time.Now()})
					r.mu.Unlock()
					return out, md, err
				}), middleware.After)
		})
	}
}

func key(pk, sk string) map[string]types.AttributeValue { return Key(pk, sk) }

func isConditionFailed(err error) bool { return ConditionFailed(err) }

// whenConditionFails is the tail of a conditional write: a failed
// condition becomes lost (the domain's ErrStale, or nil where losing
// means another writer already did it), any other error stays as is.
func whenConditionFails(err, lost error) error {
	if isConditionFailed(err) {
		return lost
	}
	return err
}

var errBadCursor = ErrBadCursor

// MeterAll records every request of a client into m, whatever the request's
// context carries (benchmarks total a run's cost with it).
func MeterAll(m *meter.Meter) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("bcMeterAll",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					write := askCapacity(in.Parameters)
					out, md, err := next.HandleInitialize(ctx, in)
					m.Call()
					recordConsumed(m, write, out.Result)
					return out, md, err
				}), middleware.After)
		})
	}
}
