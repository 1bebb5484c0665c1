package dynamo_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// TestMain shares one local stack (dynalite, local-kms) across the package.
func TestMain(m *testing.M) { devstack.Main(m) }

// headSeq reads the release channel head's sequence straight from the table
// (0 when there is none): the tests' view of what the store keeps hidden.
func headSeq(t *testing.T, s *dynamo.Releases) int64 {
	t.Helper()
	out, err := s.DB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			schema.AttrPK: &types.AttributeValueMemberS{Value: "RELEASE"}, schema.AttrSK: &types.AttributeValueMemberS{Value: "#HEAD"}}})
	if err != nil {
		t.Fatal(err)
	}
	n, ok := out.Item["seq"].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
