// Package schema is the single table's definition: key and index names and
// the CreateTable input. The stores (package dynamo), the local stack and the
// CDK app all read it; it depends on nothing of the project, so the CDK
// module stays independent of the domain packages.
package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute and index names of the single table. The local stack creates the
// table from Definition; the CDK app reads the same constants.
const (
	AttrPK    = "pk"  // partition key (S)
	AttrSK    = "sk"  // sort key (S)
	AttrLSK   = "lsk" // local sort key of IndexOrdered (S): per-entity order
	AttrDueSh = "dueShard"
	AttrDueAt = "dueAt"
	AttrTTL   = "expiresAt" // epoch seconds; DynamoDB TTL deletes expired items
	AttrFit   = "fit"       // sort key (N) of IndexFit
	AttrCap   = "cap"       // sort key (N) of IndexCap
	AttrState = "ssk"       // sort key (S) of IndexState
	AttrPool  = "psk"       // sort key (S) of IndexPool

	// IndexOrdered (LSI on pk, lsk): releases by sequence, reservations by
	// creation time.
	IndexOrdered = "ordered"
	// IndexFit (sparse LSI on pk, fit): a resource's node-hours of one hour,
	// ordered by how many devices are untouched — where a create finds its
	// candidates, the fullest that may fit first, in one consistent Query;
	// it projects FitProjected.
	IndexFit = "fit"
	// IndexCap (sparse LSI on pk, cap; keys only): the same node-hours
	// ordered by how many devices no allocation holds for the whole hour —
	// what a refusal is proved with; the key is all it reads.
	IndexCap = "cap"
	// IndexState (sparse LSI on pk, ssk; keys only): a tenant's
	// reservations by state, newest first — a state-filtered list reads
	// that state's reservations, never the tenant's whole history.
	IndexState = "bystate"
	// IndexPool (sparse LSI on pk, psk; keys only): a tenant's listed
	// reservations by pool, newest first.
	IndexPool = "bypool"
	// IndexDue (sparse GSI on dueShard, dueAt; keys only): what the
	// reconciler queries, then reads the items it names (a write that does
	// not move an item's due time costs the index nothing).
	IndexDue = "due"
	// DueShards is how many partitions the due index spreads over.
	DueShards = 8
)

// Definition is the CreateTable input for the table named name.
func Definition(name string) *dynamodb.CreateTableInput {
	s := types.ScalarAttributeTypeS
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrPK), AttributeType: s},
			{AttributeName: aws.String(AttrSK), AttributeType: s},
			{AttributeName: aws.String(AttrLSK), AttributeType: s},
			{AttributeName: aws.String(AttrDueSh), AttributeType: s},
			{AttributeName: aws.String(AttrDueAt), AttributeType: s},
			{AttributeName: aws.String(AttrFit), AttributeType: types.ScalarAttributeTypeN},
			{AttributeName: aws.String(AttrCap), AttributeType: types.ScalarAttributeTypeN},
			{AttributeName: aws.String(AttrState), AttributeType: s},
			{AttributeName: aws.String(AttrPool), AttributeType: s},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrSK), KeyType: types.KeyTypeRange},
		},
		LocalSecondaryIndexes: []types.LocalSecondaryIndex{{
			IndexName: aws.String(IndexOrdered),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrLSK), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}, {
			IndexName: aws.String(IndexFit),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrFit), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: FitProjected},
		},
			keysOnlyLSI(IndexCap, AttrCap), keysOnlyLSI(IndexState, AttrState), keysOnlyLSI(IndexPool, AttrPool)},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(IndexDue),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrDueSh), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrDueAt), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		}},
	}
}

// FitProjected are the attributes IndexFit carries besides the keys: what
// a placement on a candidate's untouched devices needs — its layout, the
// touched mask, the devices' versions and the entry count — not its
// entries, so a candidate costs the same however busy its node is.
var FitProjected = []string{"kind", "pool", "resource", "hour", "node", "size", "ns", "devices", "tm", "v", "n"}

// keysOnlyLSI is a local index on (pk, sort) that projects only the keys.
func keysOnlyLSI(name, sort string) types.LocalSecondaryIndex {
	return types.LocalSecondaryIndex{
		IndexName: aws.String(name),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(sort), KeyType: types.KeyTypeRange},
		},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
	}
}

// IndexNames are the names of the table's secondary indexes, local and
// global, as Definition declares them.
func IndexNames() []string {
	def := Definition("x")
	var names []string
	for _, ix := range def.LocalSecondaryIndexes {
		names = append(names, *ix.IndexName)
	}
	for _, ix := range def.GlobalSecondaryIndexes {
		names = append(names, *ix.IndexName)
	}
	return names
}

// CreateTable creates the table if it does not exist and waits until it is
// active. TTL is enabled where the server supports it (dynalite does not:
// that is reported, not fatal, so local runs work).
func CreateTable(ctx context.Context, c *dynamodb.Client, name string) (ttlErr error, err error) {
	_, err = c.CreateTable(ctx, Definition(name))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return nil, fmt.Errorf("create table %s: %w", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50e6, 500e6 // 50ms..500ms
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 60e9); err != nil {
		return nil, fmt.Errorf("wait for table %s: %w", name, err)
	}
	_, ttlErr = c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(AttrTTL), Enabled: aws.Bool(true)},
	})
	return ttlErr, nil
}
