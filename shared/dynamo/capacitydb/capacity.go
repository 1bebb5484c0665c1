// Package capacitydb is the capacity module's store on DynamoDB: pools,
// tenants' views of them, quota rows, reservations and the node-hour
// calendar, each method one conditional write or one read (or a bounded
// batch of them) on the table's core (package dynamo).
package capacitydb

import (
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/capacity"
)

// Store is the DynamoDB store of the capacity module (docs/capacity.md
// has every item kind with its worst-case size):
//
//	pk                            sk                  item (file)
//	POOL#<poolId>                 #POOL               the pool: global id claim (pool.go)
//	TENANT#<tenant>               POOL#<poolId>       a tenant's view of a pool (poolview.go)
//	TENANT#<tenant>               QUOTA#<pool>#<res>  quota row: max, used, free, charges and credits in flight (quota.go)
//	TENANT#<tenant>               RES#<id>            reservation (reservation.go)
//	CAL#<pool>#<res>#<yyyymmddhh> N#<node>            one node's allocations of one hour (nodehour.go)
//	CAL#<pool>#<res>#<yyyymmddhh> #HOUR               the hour is provisioned (nodehour.go)
//
// plus the invariant checker's scan (snapshot.go). Every write is a
// single-item write, conditional wherever writers could race
// (capacity.Store says which are not); no item grows with the number of
// reservations, nodes, pools or tenants.
type Store struct {
	DB    *dynamodb.Client
	Table string
	occ   occCache // the occupancy words last seen, per hour (occupancy.go)
}

var (
	_ capacity.Store          = (*Store)(nil)
	_ capacity.SnapshotReader = (*Store)(nil)
)

// ReservationFrom, PoolFrom and QuotaRowFrom decode an item of their kind
// (the due index's reader dispatches on the kind attribute).
func ReservationFrom(item map[string]types.AttributeValue) (capacity.Reservation, error) {
	var it reservationItem
	err := attributevalue.UnmarshalMap(item, &it)
	return it.reservation(), err
}

func PoolFrom(item map[string]types.AttributeValue) (capacity.Pool, error) {
	var it poolItem
	err := attributevalue.UnmarshalMap(item, &it)
	return it.pool(), err
}

func QuotaRowFrom(item map[string]types.AttributeValue) (capacity.QuotaRow, error) {
	var it quotaItem
	err := attributevalue.UnmarshalMap(item, &it)
	return it.row(), err
}
