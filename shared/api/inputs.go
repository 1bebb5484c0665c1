package api

import (
	"time"

	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Input patterns, registered once and referenced by name from `bc` tags.
var (
	TenantIDPattern      = strictjson.RegisterPattern("tenantId", `^[A-Za-z0-9._:-]{1,128}$`)
	PoolIDPattern        = strictjson.RegisterPattern("poolId", `^[a-z0-9][a-z0-9-]{0,62}$`)
	ResourcePattern      = strictjson.RegisterPattern("resource", `^[a-z0-9][a-z0-9._-]{0,62}$`)
	ReservationIDPattern = strictjson.RegisterPattern("reservationId", `^[A-Za-z0-9_-]{1,64}$`)
	NodeIDPattern        = strictjson.RegisterPattern("nodeId", `^[a-z0-9][a-z0-9._-]{0,62}-node-(0|[1-9][0-9]{0,5})$`)
)

// Tenant is embedded in every input: the tenant the caller acts as.
type Tenant struct {
	TenantID string `json:"tenantId" bc:"required,max=128,pattern=tenantId"`
}

// ActingTenant returns the tenant id (lets the gateway read it from any input).
func (t Tenant) ActingTenant() string { return t.TenantID }

// Page is embedded in every list input.
type Page struct {
	Limit  *int    `json:"limit,omitempty" bc:"min=1,max=1000"`
	Cursor *string `json:"cursor,omitempty" bc:"min=1,max=4096"`
}

// Releases.

type RegisterReleaseInput struct {
	Tenant
	Manifest strictjson.Object `json:"manifest" bc:"required,doc=the signed release: a DSSE envelope (see Manifest)" shape:"dsse"`
}

type ListReleasesInput struct {
	Tenant
	Page
}

type ReleaseLogInput struct {
	Tenant
}

type ProveReleaseInput struct {
	Tenant
	Version  *string `json:"version,omitempty" bc:"min=1,max=128,doc=a release to prove"`
	Size     *int64  `json:"size,omitempty" bc:"min=0,max=9007199254740991,strictint,doc=the tree size (default: the latest checkpoint's)"`
	FromSize *int64  `json:"fromSize,omitempty" bc:"min=0,max=9007199254740991,strictint,doc=prove consistency from this size"`
}

// Pools and quotas.

// Resources maps a resource name to its device count.
type Resources map[string]int

// ValueBounds bounds each device count (strictjson reads it).
func (Resources) ValueBounds() (int64, int64) { return 1, 100_000 }

// NodeSizes maps a resource name to its devices per node.
type NodeSizes map[string]int

// ValueBounds bounds each node size (strictjson reads it).
func (NodeSizes) ValueBounds() (int64, int64) { return 1, 64 }

type CreatePoolInput struct {
	Tenant
	PoolID    string    `json:"poolId" bc:"required,pattern=poolId"`
	Resources Resources `json:"resources" bc:"required,min=1,max=capacity.MaxResources,pattern=resource,doc=devices of each resource"`
	NodeSize  NodeSizes `json:"nodeSize,omitempty" bc:"max=capacity.MaxResources,pattern=resource,doc=devices per node of each resource (default ${capacity.DefaultNodeSize})"`
}

type OfferPoolInput struct {
	Tenant
	PoolID     string `json:"poolId" bc:"required,pattern=poolId"`
	ToTenantID string `json:"toTenantId" bc:"required,max=128,pattern=tenantId"`
	Resource   string `json:"resource" bc:"required,pattern=resource"`
	Max        int64  `json:"max" bc:"required,min=0,max=capacity.MaxQuota"`
}

type GetPoolInput struct {
	Tenant
	PoolID string `json:"poolId" bc:"required,pattern=poolId"`
}

type ListPoolsInput struct {
	Tenant
	Page
}

type PoolUsageInput struct {
	Tenant
	PoolID   string     `json:"poolId" bc:"required,pattern=poolId"`
	Resource string     `json:"resource" bc:"required,pattern=resource"`
	From     *time.Time `json:"from,omitempty" bc:"doc=start of the span; defaults to now"`
	Hours    *int       `json:"hours,omitempty" bc:"min=1,max=capacity.MaxUsageHours,doc=length of the span in hours (default ${capacity.MaxUsageHours})"`
	Limit    *int       `json:"limit,omitempty" bc:"min=1,max=capacity.MaxUsageNodes,doc=nodes per page (default ${capacity.DefaultUsageNodes})"`
	Cursor   *string    `json:"cursor,omitempty" bc:"min=1,max=4096"`
}

// PoolAvailabilityInput asks when a reservation of count devices for
// hours whole hours could be placed, its start between from and to.
type PoolAvailabilityInput struct {
	Tenant
	PoolID   string     `json:"poolId" bc:"required,pattern=poolId"`
	Resource string     `json:"resource" bc:"required,pattern=resource"`
	Count    int        `json:"count" bc:"required,min=1,max=capacity.MaxCount,doc=how many devices (as reservations.create's count)"`
	Hours    int        `json:"hours" bc:"required,min=1,max=capacity.MaxAvailabilityHours,doc=the window's length in whole hours"`
	Topology *string    `json:"topology,omitempty" enum:"topology" bc:"doc=how the devices are spread over nodes as reservations.create's (default node)"`
	From     *time.Time `json:"from,omitempty" bc:"doc=the earliest start (default now; an earlier time counts as now); a time within an hour rounds up to the next whole hour"`
	To       *time.Time `json:"to,omitempty" bc:"doc=the latest start (default from + ${capacity.DefaultAvailabilitySpan}; at most from + ${capacity.MaxAvailabilitySpan})"`
	Limit    *int       `json:"limit,omitempty" bc:"min=1,max=capacity.MaxOfferings,doc=the most offerings answered (default ${capacity.DefaultOfferings})"`
}

type GetQuotaInput struct {
	Tenant
	PoolID   string `json:"poolId" bc:"required,pattern=poolId"`
	Resource string `json:"resource" bc:"required,pattern=resource"`
}

type ListQuotasInput struct {
	Tenant
	PoolID *string `json:"poolId,omitempty" bc:"pattern=poolId"`
	Page
}

// Reservations.

// ReservationWindow is reservations.create's window (Window is the one
// answered).
type ReservationWindow struct {
	Start *time.Time `json:"start,omitempty" bc:"doc=defaults to now; at most ${capacity.MaxStartSkew} in the past and ${capacity.MaxLeadTime} ahead"`
	End   time.Time  `json:"end" bc:"required,doc=after start; at most ${capacity.MaxWindow} after it"`
}

type CreateReservationInput struct {
	Tenant
	PoolID      string            `json:"poolId" bc:"required,pattern=poolId"`
	Resource    string            `json:"resource" bc:"required,pattern=resource"`
	Count       int               `json:"count" bc:"required,min=1,max=capacity.MaxCount"`
	Window      ReservationWindow `json:"window" bc:"required"`
	Topology    *string           `json:"topology,omitempty" enum:"topology" bc:"doc=how to spread the devices over nodes (default node)"`
	ClientToken *string           `json:"clientToken,omitempty" bc:"min=1,max=64,doc=idempotency token (per tenant and principal)"`
}

type GetReservationInput struct {
	Tenant
	ReservationID string `json:"reservationId" bc:"required,pattern=reservationId"`
}

type ListReservationsInput struct {
	Tenant
	PoolID *string `json:"poolId,omitempty" bc:"pattern=poolId"`
	State  *string `json:"state,omitempty" enum:"state" bc:"doc=only reservations in this state (denied and rejected and expired ones are listed only this way)"`
	Page
}

type ReleaseReservationInput struct {
	Tenant
	ReservationID string `json:"reservationId" bc:"required,pattern=reservationId"`
}

// Nodes.

// NodeRef names one node of a pool.
type NodeRef struct {
	PoolID string `json:"poolId" bc:"required,pattern=poolId"`
	NodeID string `json:"nodeId" bc:"required,pattern=nodeId,doc=one of the pool's nodes: <resource>-node-<k>"`
}

type RegisterNodeInput struct {
	Tenant
	NodeRef
	PublicKey string `json:"publicKey" bc:"required,max=4096,doc=the node's key: one PEM PUBLIC KEY block (ECDSA P-256 or Ed25519)"`
	Platform  string `json:"platform" bc:"required,max=64,pattern=platform,doc=os/arch or os/arch/variant (lowercase) as in release manifests"`
	Replace   *bool  `json:"replace,omitempty" bc:"doc=replace the key and platform of a registered node (a host re-imaged or a key lost) instead of refusing them (default false)"`
}

type GetNodeInput struct {
	Tenant
	NodeRef
}

type ListNodesInput struct {
	Tenant
	PoolID string  `json:"poolId" bc:"required,pattern=poolId"`
	State  *string `json:"state,omitempty" enum:"nodeState" bc:"doc=only nodes in this state"`
	Page
}

type CordonNodeInput struct {
	Tenant
	NodeRef
	Reason string `json:"reason" bc:"required,min=1,max=256,doc=why (shown with the node)"`
}

type UncordonNodeInput struct {
	Tenant
	NodeRef
}

type HeartbeatInput struct {
	Tenant
	NodeRef
	Report strictjson.Object `json:"report" bc:"required,doc=the node's signed report: a DSSE envelope (see Report)" shape:"dsse"`
}

// ScopeFields fills the node's own scope, node:{poolId}/{nodeId}.
func (in HeartbeatInput) ScopeFields() map[string]string {
	return map[string]string{"poolId": in.PoolID, "nodeId": in.NodeID}
}

// Rollouts.

// RolloutDrain is rollouts.create's drain.
type RolloutDrain struct {
	WaitSeconds *int    `json:"waitSeconds,omitempty" bc:"min=0,max=604800,doc=how long a node may wait for reservations on its devices (default 3600)"`
	OnTimeout   *string `json:"onTimeout,omitempty" enum:"onTimeout" bc:"doc=then skip the node or force the install (default skip)"`
}

type CreateRolloutInput struct {
	Tenant
	Version                 string        `json:"version" bc:"required,min=1,max=128,doc=a registered release's version"`
	Pools                   []string      `json:"pools" bc:"required,min=1,max=rollout.MaxPools,doc=the pools whose managed nodes it takes"`
	Waves                   []WaveSpec    `json:"waves" bc:"required,min=1,max=rollout.MaxWaves,doc=cumulative: each covers at least as many nodes as the one before; the last covers every node"`
	BakeSeconds             *int          `json:"bakeSeconds,omitempty" bc:"min=0,max=86400,doc=the wait after a wave is done before the next starts (default 300)"`
	MaxUnavailable          *int          `json:"maxUnavailable,omitempty" bc:"min=1,max=1000000,doc=nodes of its pools out of service at once (not ready or cordoned: those already out included; default 1)"`
	MaxFailedNodes          *int          `json:"maxFailedNodes,omitempty" bc:"min=0,max=1000000,doc=it aborts once more nodes than this failed (default 0: at the first)"`
	ProgressDeadlineSeconds *int          `json:"progressDeadlineSeconds,omitempty" bc:"min=60,max=86400,doc=how long a node may take from install to a healthy report of the target: silence is failure (default 900)"`
	Drain                   *RolloutDrain `json:"drain,omitempty" bc:"doc=draining around reservations"`
	RollbackOnAbort         *bool         `json:"rollbackOnAbort,omitempty" bc:"doc=on abort send every updated node back to the release it ran before (default true)"`
	ClientToken             *string       `json:"clientToken,omitempty" bc:"min=1,max=64,doc=idempotency token (per tenant and principal)"`
}

type GetRolloutInput struct {
	Tenant
	RolloutID string `json:"rolloutId" bc:"required,pattern=reservationId"`
}

type ListRolloutsInput struct {
	Tenant
	State *string `json:"state,omitempty" enum:"rolloutState" bc:"doc=only rollouts in this state"`
	Page
}

type RolloutNodesInput struct {
	Tenant
	RolloutID string  `json:"rolloutId" bc:"required,pattern=reservationId"`
	Step      *string `json:"step,omitempty" enum:"rolloutStep" bc:"doc=only nodes in this step"`
	Page
}

type ChangeRolloutInput struct {
	Tenant
	RolloutID string  `json:"rolloutId" bc:"required,pattern=reservationId"`
	Reason    *string `json:"reason,omitempty" bc:"min=1,max=256,doc=why (recorded in its history)"`
}
