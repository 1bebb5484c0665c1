package dynamo_test

import (
	"context"
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

func deleteItem(ctx context.Context, s *dynamo.Releases, pk, sk string) error {
	_, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: map[string]types.AttributeValue{
		schema.AttrPK: &types.AttributeValueMemberS{Value: pk}, schema.AttrSK: &types.AttributeValueMemberS{Value: sk}}})
	return err
}
