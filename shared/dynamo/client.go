// Package dynamo is the DynamoDB adapter: the client, a round-trip counter,
// and the stores the domain packages use, with single-item conditional writes
// only (no transactions — see docs/architecture.md). The table itself is
// defined in package schema.
package dynamo

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// NewClient returns a DynamoDB client; endpoint overrides the AWS endpoint
// (the local stack's dynalite) when not empty.
func NewClient(cfg aws.Config, endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	if endpoint != "" {
		opts = append([]func(*dynamodb.Options){func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) }}, opts...)
	}
	return dynamodb.NewFromConfig(cfg, opts...)
}

// RoundTrips counts the HTTP requests a client sends (retries included): how
// the benchmarks and tests prove the round-trip budget of each method.
type RoundTrips struct{ n atomic.Int64 }

// Count returns the requests sent so far.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

// Reset sets the count to zero.
func (r *RoundTrips) Reset() { r.n.Store(0) }

// Option installs the counter on a client.
func (r *RoundTrips) Option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("bcRoundTrips",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					r.n.Add(1)
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		})
	}
}

// key is a primary key.
func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		schema.AttrPK: &types.AttributeValueMemberS{Value: pk},
		schema.AttrSK: &types.AttributeValueMemberS{Value: sk},
	}
}

func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// errBadCursor refuses a cursor whose key lies outside the query's partition
// (the HMAC has already bound it to the method, tenant and filters).
var errBadCursor = apierr.Invalid("", "cursor", "cursor is invalid or belongs to another query")
