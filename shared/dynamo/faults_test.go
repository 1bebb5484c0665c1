package dynamo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
)

// While down, every request fails before the server, once (not retried by
// the SDK); afterwards requests reach the server again.
func TestFaultsDown(t *testing.T) {
	s := devstack.Shared(t)
	table := devstack.NewTable(t, s)
	f := dynamo.NewFaults(1)
	db := s.DynamoDB(f.Option())
	describe := func() error {
		_, err := db.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		return err
	}
	f.SetDown(true)
	if err := describe(); !errors.Is(err, dynamo.ErrInjected) {
		t.Fatalf("down: %v, want an injected fault", err)
	}
	if calls, before, after := f.Counts(); calls != 1 || before != 1 || after != 0 {
		t.Errorf("down: %d calls, %d failed before and %d after the server; want 1, 1, 0 (no retry)", calls, before, after)
	}
	f.SetDown(false)
	if err := describe(); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
