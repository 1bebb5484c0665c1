package dynamo

// The table's layout, shared by every module's store: the partitions more
// than one store writes to, and the item kinds (the `kind` attribute every
// item carries, which the due index's reader and the invariant checker's
// scan dispatch on). Each store's own sort keys are in its package.
//
//	pk                            sk                  item                                      store
//	POOL#<poolId>                 #POOL               the pool: global id claim                 capacitydb
//	POOL#<poolId>                 NODE#<res>#<k>      a registered node                         fleetdb
//	POOL#<poolId>                 #FLEET              the pool's fleet: baseline, sweep         fleetdb
//	POOL#<poolId>                 #ROLLOUT            the pool's rollout claim                  rolloutdb
//	TENANT#<tenant>               POOL#<poolId>       a tenant's view of a pool                 capacitydb
//	TENANT#<tenant>               QUOTA#<pool>#<res>  quota row                                 capacitydb
//	TENANT#<tenant>               RES#<id>            reservation                               capacitydb
//	CAL#<pool>#<res>#<yyyymmddhh> N#<node> | #HOUR    a node's allocations of one hour, the map capacitydb
//	ROLLOUT                       R#<id>              a rollout                                 rolloutdb
//	ROLLOUT#<id>                  N#<order>#…         one node's progress in a rollout          rolloutdb
//	RELEASE / RLOG                …                   releases and the release log              (releases)

// PoolPK is the partition of a pool's items (its claim, nodes, fleet and
// rollout claim).
func PoolPK(id string) string { return "POOL#" + id }

// TenantPK is the partition of a tenant's items (pool views, quota rows,
// reservations): a tenant's get or list can never reach another's.
func TenantPK(t string) string { return "TENANT#" + t }

// Item kinds.
const (
	KindPool        = "pool"
	KindPoolView    = "poolView"
	KindQuota       = "quota"
	KindReservation = "reservation"
	KindNodeHour    = "nodehour"
	KindHour        = "hour"
	KindNode        = "node"
	KindFleet       = "fleet"
	KindRollout     = "rollout"
)
