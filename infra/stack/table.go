package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/jsii-runtime-go"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// TableSchema is the single table's keys and indexes in CDK's terms,
// converted from schema.Definition — the one definition the local stack also
// creates its table from.
type TableSchema struct {
	PartitionKey, SortKey *awsdynamodb.Attribute
	LocalIndexes          []*awsdynamodb.LocalSecondaryIndexProps
	GlobalIndexes         []*awsdynamodb.GlobalSecondaryIndexProps
}

// SchemaFrom converts a CreateTable input. It refuses what it cannot carry
// over faithfully rather than deploy a table that differs from the local one.
func SchemaFrom(def *dynamodb.CreateTableInput) (TableSchema, error) {
	var s TableSchema
	if def.BillingMode != types.BillingModePayPerRequest {
		return s, fmt.Errorf("table definition: billing mode %q, the stack deploys PAY_PER_REQUEST", def.BillingMode)
	}
	attrTypes := map[string]awsdynamodb.AttributeType{}
	for _, a := range def.AttributeDefinitions {
		var t awsdynamodb.AttributeType
		switch a.AttributeType {
		case types.ScalarAttributeTypeS:
			t = awsdynamodb.AttributeType_STRING
		case types.ScalarAttributeTypeN:
			t = awsdynamodb.AttributeType_NUMBER
		case types.ScalarAttributeTypeB:
			t = awsdynamodb.AttributeType_BINARY
		default:
			return s, fmt.Errorf("table definition: attribute %s has type %q", aws.ToString(a.AttributeName), a.AttributeType)
		}
		attrTypes[aws.ToString(a.AttributeName)] = t
	}
	keys := func(where string, ks []types.KeySchemaElement) (hash, rng *awsdynamodb.Attribute, err error) {
		for _, k := range ks {
			name := aws.ToString(k.AttributeName)
			t, ok := attrTypes[name]
			if !ok {
				return nil, nil, fmt.Errorf("table definition: %s key %s has no attribute definition", where, name)
			}
			attr := &awsdynamodb.Attribute{Name: jsii.String(name), Type: t}
			switch k.KeyType {
			case types.KeyTypeHash:
				hash = attr
			case types.KeyTypeRange:
				rng = attr
			}
		}
		if hash == nil {
			return nil, nil, fmt.Errorf("table definition: %s has no partition key", where)
		}
		return hash, rng, nil
	}
	projection := func(where string, p *types.Projection) (awsdynamodb.ProjectionType, *[]*string, error) {
		if p == nil {
			return awsdynamodb.ProjectionType_ALL, nil, nil
		}
		switch p.ProjectionType {
		case types.ProjectionTypeAll, "":
			return awsdynamodb.ProjectionType_ALL, nil, nil
		case types.ProjectionTypeKeysOnly:
			return awsdynamodb.ProjectionType_KEYS_ONLY, nil, nil
		case types.ProjectionTypeInclude:
			return awsdynamodb.ProjectionType_INCLUDE, jsii.Strings(p.NonKeyAttributes...), nil
		}
		return "", nil, fmt.Errorf("table definition: %s has projection %q", where, p.ProjectionType)
	}

	var err error
	if s.PartitionKey, s.SortKey, err = keys("table", def.KeySchema); err != nil {
		return s, err
	}
	for _, ix := range def.LocalSecondaryIndexes {
		name := aws.ToString(ix.IndexName)
		_, sk, err := keys("index "+name, ix.KeySchema)
		if err != nil {
			return s, err
		}
		if sk == nil {
			return s, fmt.Errorf("table definition: local index %s has no sort key", name)
		}
		pt, nonKey, err := projection("index "+name, ix.Projection)
		if err != nil {
			return s, err
		}
		s.LocalIndexes = append(s.LocalIndexes, &awsdynamodb.LocalSecondaryIndexProps{
			IndexName: jsii.String(name), SortKey: sk, ProjectionType: pt, NonKeyAttributes: nonKey,
		})
	}
	for _, ix := range def.GlobalSecondaryIndexes {
		name := aws.ToString(ix.IndexName)
		pk, sk, err := keys("index "+name, ix.KeySchema)
		if err != nil {
			return s, err
		}
		pt, nonKey, err := projection("index "+name, ix.Projection)
		if err != nil {
			return s, err
		}
		s.GlobalIndexes = append(s.GlobalIndexes, &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName: jsii.String(name), PartitionKey: pk, SortKey: sk, ProjectionType: pt, NonKeyAttributes: nonKey,
		})
	}
	return s, nil
}

// newTable creates the single table: on-demand, point-in-time recovery,
// encrypted with the customer-managed key, TTL on schema.AttrTTL.
func newTable(s *Stack, key awskms.Key, removal awscdk.RemovalPolicy, protect bool) (awsdynamodb.Table, error) {
	ts, err := SchemaFrom(schema.Definition("better-compute"))
	if err != nil {
		return nil, err
	}
	t := awsdynamodb.NewTable(s.Stack, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey: ts.PartitionKey,
		SortKey:      ts.SortKey,
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:          awsdynamodb.TableEncryption_CUSTOMER_MANAGED,
		EncryptionKey:       key,
		TimeToLiveAttribute: jsii.String(schema.AttrTTL),
		RemovalPolicy:       removal,
		DeletionProtection:  jsii.Bool(protect),
	})
	for _, ix := range ts.LocalIndexes {
		t.AddLocalSecondaryIndex(ix)
	}
	for _, ix := range ts.GlobalIndexes {
		t.AddGlobalSecondaryIndex(ix)
	}
	return t, nil
}
