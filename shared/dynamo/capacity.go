package dynamo

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// Capacity is the DynamoDB store of the capacity module (docs/capacity.md
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
// plus the due index (due.go) and the invariant checker's scan
// (snapshot.go). Every write is a single-item write, conditional wherever
// writers could race (capacity.Store says which are not); no item grows
// with the number of reservations, nodes, pools or tenants.
type Capacity struct {
	DB    *dynamodb.Client
	Table string
	occ   occCache // the occupancy words last seen, per hour (occupancy.go)
}

var (
	_ capacity.Store          = (*Capacity)(nil)
	_ reconcile.DueStore      = (*Capacity)(nil)
	_ capacity.SnapshotReader = (*Capacity)(nil)
)

// Item kinds (the "kind" attribute).
const (
	kindPool        = "pool"
	kindPoolView    = "poolView"
	kindQuota       = "quota"
	kindReservation = "reservation"
	kindNodeHour    = "nodehour"
	kindHour        = "hour"
)
