package registry_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo/releasedb"
	"github.com/bettercompute/control-plane/shared/release/registry"
)

// The domain's tests run over the real store (shared/dynamo/releasedb) on
// the shared local stack's dynalite and local-kms.

// TestMain shares one local stack (dynalite, local-kms) across the package.
func TestMain(m *testing.M) { devstack.Main(m) }

// headSeq reads the release channel head's sequence (0 when there is
// none): the tests' view of what registrations keep to themselves.
func headSeq(t *testing.T, s *registry.Service) int64 {
	t.Helper()
	h, err := s.Store.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h.Sequence
}

// db and table are the log's store's client and table, for a test that
// edits items straight in the table, as someone holding it could.
func db(l *registry.Log) *dynamodb.Client { return l.Store.(*releasedb.Log).DB }
func table(l *registry.Log) string        { return l.Store.(*releasedb.Log).Table }
