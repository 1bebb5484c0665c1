package api

import (
	"github.com/bettercompute/control-plane/shared/release"
)

// The result objects of the methods: each method's Output in the
// catalog. Their `doc` tags, and those of the types they carry (types_*.go,
// and the release types of package release), are the reference's output
// tables and the OpenAPI document's response schemas. nodes.heartbeat's
// answer, HeartbeatResult, is in types_fleet.go with the rest of what the
// node agent speaks.

// Releases.

type RegisterResult struct {
	Release  release.Release  `json:"release" doc:"the recorded release (the stored one on a replay)"`
	Replayed bool             `json:"replayed" doc:"true when this version was already recorded with this sequence and the stored release is returned unchanged"`
	Log      release.LogEntry `json:"log" doc:"the release's entry in the release log and a signed checkpoint covering it"`
}

type ListReleasesResult struct {
	Releases   []release.Release `json:"releases" doc:"registered releases, highest sequence first"`
	NextCursor string            `json:"nextCursor,omitempty" doc:"present when more releases follow: send it as cursor (with the same filters) for the next page"`
}

type ReleaseLogResult struct {
	Checkpoint  string `json:"checkpoint" doc:"the latest signed checkpoint (C2SP tlog-checkpoint, signed note)"`
	Size        int64  `json:"size" doc:"its tree size"`
	VerifierKey string `json:"verifierKey" doc:"the log's C2SP verifier key"`
}

type ProveResult struct {
	Checkpoint  string   `json:"checkpoint" doc:"the latest signed checkpoint"`
	Index       *int64   `json:"index,omitempty" doc:"with version: its entry (from 0)"`
	Entry       string   `json:"entry,omitempty" doc:"with version: the entry itself, base64 — the release's DSSE payload exactly as signed (SHA-256 of it is the release's manifestDigest; its leaf hash is SHA-256(0x00 ‖ entry)), so its inclusion checks from this answer alone"`
	Inclusion   []string `json:"inclusion,omitzero" doc:"with version: its inclusion proof in the tree of size (base64 hashes)"`
	Consistency []string `json:"consistency,omitzero" doc:"with fromSize: the consistency proof from fromSize to size (base64 hashes)"`
}

// Pools and quotas.

type PoolResult struct {
	Pool Pool `json:"pool" doc:"the pool"`
}

type ListPoolsResult struct {
	Pools      []Pool `json:"pools" doc:"pools owned by or offered to the tenant, by pool id"`
	NextCursor string `json:"nextCursor,omitempty" doc:"present when more pools follow: send it as cursor for the next page"`
}

type PoolUsageResult struct {
	Usage      Usage  `json:"usage" doc:"a page of the resource's nodes and what is placed on them over the span"`
	NextCursor string `json:"nextCursor,omitempty" doc:"present when more nodes follow: send it as cursor (with the same poolId, resource, from and hours) for the next page"`
}

type PoolAvailabilityResult struct {
	Availability Availability `json:"availability" doc:"when the request could be placed: its offerings, the tenant's quota, and whether the search looked everywhere"`
}

type QuotaResult struct {
	Quota Quota `json:"quota" doc:"the quota row (a missing row reads as max 0, used 0)"`
}

type ListQuotasResult struct {
	Quotas     []Quota `json:"quotas" doc:"the tenant's quota rows, by pool and resource"`
	NextCursor string  `json:"nextCursor,omitempty" doc:"present when more rows follow: send it as cursor (with the same poolId) for the next page"`
}

// Reservations.

type ReservationResult struct {
	Reservation Reservation `json:"reservation" doc:"the reservation as it is now"`
}

type ListReservationsResult struct {
	Reservations []Reservation `json:"reservations" doc:"the tenant's reservations, newest first (createdAt descending, ties by id descending); denied ones only when state is denied"`
	NextCursor   string        `json:"nextCursor,omitempty" doc:"present when more reservations follow: send it as cursor (with the same poolId and state) for the next page"`
}

// Nodes.

type NodeResult struct {
	Node Node `json:"node" doc:"the node"`
}

type ListNodesResult struct {
	Nodes      []Node `json:"nodes" doc:"the pool's registered nodes, by resource and node index"`
	NextCursor string `json:"nextCursor,omitempty" doc:"present when more nodes follow: send it as cursor for the next page"`
}

// Rollouts.

type RolloutResult struct {
	Rollout Rollout `json:"rollout" doc:"the rollout"`
}

type ListRolloutsResult struct {
	Rollouts   []Rollout `json:"rollouts" doc:"rollouts, newest first"`
	NextCursor string    `json:"nextCursor,omitempty" doc:"present when more rollouts follow: send it as cursor for the next page"`
}

type RolloutNodesResult struct {
	Nodes      []NodeProgress `json:"nodes" doc:"the rollout's nodes, in its order"`
	NextCursor string         `json:"nextCursor,omitempty" doc:"present when more nodes follow: send it as cursor for the next page"`
}
