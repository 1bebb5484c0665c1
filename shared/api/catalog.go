package api

import (
	"reflect"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/release"
)

// Kind says whether a method changes state.
type Kind string

const (
	Mutation Kind = "mutation"
	Read     Kind = "read"
)

// Method is one API method: the single source of truth for its route,
// authorization, Lambda function, and reference docs.
type Method struct {
	Name       string // "<resource>.<verb>"
	Kind       Kind
	Permission string // e.g. compute:fleet:admin
	Scope      string // e.g. compute-fleet, or tenant:{tenantId}
	Module     string
	Phase      string
	Status     string // "registered" once served by this release
	Summary    string // one paragraph for the reference
	Notes      []Note // labelled paragraphs (Replay, Paging, …)
	// DecideOnDraft: the gateway does not authorize before the method; the
	// method asks Better IAM once, on the draft it wrote (reservations.create).
	DecideOnDraft bool
	Input         reflect.Type
	// Output is the result object of a 200 answer; its fields (and those
	// of the types it holds) carry `doc` tags: the reference's output table
	// and the OpenAPI response schema.
	Output reflect.Type
	// Errors are the method's own ways to fail; ErrorCases adds those of
	// every method (decoding, authentication, authorization, dependencies).
	Errors []ErrorCase
	// Actions are the AWS actions the method's Lambda may call on the table,
	// KMS and the cursor key secret; the CDK app grants exactly these (least
	// privilege).
	Actions []string
	// Indexes are where its dynamodb:Query reads: secondary index names of
	// the table, or BaseTable. The CDK app grants Query on exactly these.
	Indexes []string
}

// BaseTable in Indexes: the method queries the table itself (no index).
const BaseTable = "(table)"

// ReadsCursorKey is the action of methods that page with cursors: the
// Lambda reads the cursor key secret once, at cold start.
const ReadsCursorKey = "secretsmanager:GetSecretValue"

// ReadsKMSKeys is the action of the method that pins KMS keys (the release
// keys of BC_RELEASE_KMS_KEYS): the Lambda reads their public halves once,
// at cold start, and is the only one that links the KMS client.
const ReadsKMSKeys = "kms:GetPublicKey"

// SignsReleaseLog is the action of the method that appends to the release
// log and signs its checkpoints, and of the reconciler, which
// finishes crashed appends and audits the log: kms:Sign on the log key
// alone, never on the release signing key.
const SignsReleaseLog = "kms:Sign"

// ReadsReleaseLogKey is the action of releases.log, which answers the log
// key as a verifier key: kms:GetPublicKey on the log key alone, once, at
// cold start. It is spelt apart from ReadsKMSKeys (the same AWS action on
// the release keys) so the stack grants it on the right key.
const ReadsReleaseLogKey = "kms:GetPublicKey#log"

// ReleasesRead is the permission of the release log's reads: granted to
// auditors and tenants (read-only, on the platform's one log) as to fleet
// admins.
const ReleasesRead = "compute:releases:read"

// Note is a labelled paragraph of a method's reference page.
type Note struct{ Label, Text string }

// Resource groups methods for the reference (one page per resource).
type Resource struct {
	Name    string
	Summary string
}

// Resource returns the part of Name before the dot ("releases").
func (m *Method) Resource() string { r, _, _ := strings.Cut(m.Name, "."); return r }

// Verb returns the part of Name after the dot ("register").
func (m *Method) Verb() string { _, v, _ := strings.Cut(m.Name, "."); return v }

// Path is the HTTP route: POST /api/compute/{resource}/{verb}.
func (m *Method) Path() string { return "/api/compute/" + m.Resource() + "/" + m.Verb() }

// FunctionName is the folder under functions/ and the Lambda's logical name.
func (m *Method) FunctionName() string { return m.Resource() + "-" + m.Verb() }

// ScopeFor fills the scope template for a tenant and, for a template that
// names other input fields ("node:{poolId}/{nodeId}"), their values.
func (m *Method) ScopeFor(tenantID string, fields ...map[string]string) string {
	s := strings.ReplaceAll(m.Scope, "{tenantId}", tenantID)
	for _, f := range fields {
		for k, v := range f {
			s = strings.ReplaceAll(s, "{"+k+"}", v)
		}
	}
	return s
}

// ReconcilerFunction names the non-API Lambda (capacity.reservations).
const ReconcilerFunction = "reconciler"

// ReconcilerActions are the reconciler's AWS actions: it queries the due
// index and reads the items it names, conditionally moves reservations,
// settles and repairs quota rows, provisions and repairs calendars and
// half-created pools, sweeps managed pools' nodes and tells them what to
// bind (get, put, update; never delete); and it finishes registrations a
// crash left half done and audits the release log, appending
// and signing checkpoints with the log key (SignsReleaseLog).
var ReconcilerActions = []string{"dynamodb:Query", "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", SignsReleaseLog}

// ReconcilerIndexes are where the reconciler's Query reads: the due index,
// the table itself (a managed pool's node items, for the fleet's sweep; a
// rollout's nodes in its order) and the rollouts' progress indexes.
var ReconcilerIndexes = []string{"due", BaseTable, "bystate", "bypool"}

const (
	tenantScope = "tenant:{tenantId}"
	NodeScope   = "node:{poolId}/{nodeId}" // a node's own: what its heartbeats are authorized on
	FleetScope  = "compute-fleet"          // the scope of the fleet's methods (releases): the platform's, not a tenant's
	phase       = "v0.4"
	registered  = "registered"
)

// Resources of the reference, in order.
var ResourceDocs = []Resource{
	{Name: "releases",
		Summary: "A release is a signed build of `bcd`, the node daemon, recorded with its per-platform binaries. `register` verifies a release manifest (a DSSE envelope) under the release keys pinned in the deployment's configuration and records the release; `list` returns the recorded releases, highest sequence first; `log` and `prove` read the release log every registration appends to, for nodes, auditors and monitors to check that every node is told the same releases (docs/releases.md). Releases belong to the platform, not to a tenant: every method decides `compute:fleet:admin` on the fleet scope. Rolling a release out to nodes is not part of this API."},
	{Name: "pools",
		Summary: "A pool is a set of devices owned by one tenant, grouped per resource into nodes, whose capacity the owner offers to tenants (itself included) as quotas. Pool ids are a global namespace. `create` makes the pool and its owner's quota rows; `offer` sets another tenant's quota `max` on it; `get` and `list` return the pools a tenant owns or was offered; `usage` shows what is placed on a page of its nodes over a span; `availability` answers when a reservation could be placed."},
	{Name: "quotas",
		Summary: "A quota caps the devices of one resource that a tenant's live reservations of one pool hold charged: a `max` and a `used` counter per tenant, pool and resource. A reservation is charged its count from its admission (`reservations.create`) until it is terminal (released, or its window's end), so `used` is the sum of the counts of the tenant's `placed`, `binding` and `active` reservations — bookings for later included — and not the devices held at this moment (`pools.usage` shows those): a reservation for next week counts against `max` from the moment it is made. A missing row grants 0. `pools.create` and `pools.offer` write the rows; `reservations.create` charges them (`QUOTA_EXCEEDED` when `used + count` would pass `max`) and a reservation's end credits them. These methods read them."},
	{Name: "reservations",
		Summary: "A reservation is a tenant's claim on devices of one pool for a time window. `create` writes the request as a draft, Better IAM decides once on that draft (the request as attributes), and only an allowed draft is charged against quota and placed on devices. A reservation holds its quota charge from its admission until it is terminal, whenever its window starts; the reconciler moves it through `placed`, `binding` and `active` to `released` at the window's end (see [the state machine](README.md#reservation-states))."},
	{Name: "rollouts",
		Summary: "A rollout moves the managed nodes of some pools onto one registered release, in waves over a stable shuffled order of those nodes, gated on the nodes' own signed reports, cordoning and draining each node around the reservations on its devices first. It aborts on failures (a node's silence included) and rolls the nodes it updated back. On completion the version becomes its pools' baseline; outside rollouts no node is ever moved. Rollouts belong to the platform (`compute:fleet:admin` on the fleet scope). See docs/rollouts.md."},
	{Name: "nodes",
		Summary: "A node is one host of a pool — one of its logical nodes `<resource>-node-<k>` — running `bcd`. The pool's owner registers it with its key; from then on it is managed: it signs its heartbeats with that key, and each answer tells it which release to run and which reservations to bind or unbind. New reservations are placed on a managed node only while it is `ready` and not cordoned, and a reservation on managed nodes becomes `active` only once each of them reported it bound. Nodes that never register keep working as before (bound at once, always eligible). See docs/fleet.md."},
}

// Catalog is every method: those of phase v0.4, pools.usage of v0.5, the
// fleet's of v0.6, the release log's of v0.7 and pools.availability of v0.8.
var Catalog = []*Method{
	{Name: "releases.register", Kind: Mutation, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout",
		Summary: "Verifies a signed `bcd` release manifest under the pinned release keys and records the release; returns it with its per-platform binaries.",
		Notes: []Note{
			{"Manifest", "A DSSE envelope (DSSE v1.0.2) `{\"payloadType\": \"" + release.PayloadType + "\", \"payload\": <base64>, \"signatures\": [{\"keyid\"?: <hint>, \"sig\": <base64>}]}` whose payload is the release statement `{\"version\": SemVer, \"sequence\": 1..2^53-1, \"expires\"?: RFC 3339, \"binaries\": [{\"platform\": \"os/arch[/variant]\", \"url\": https, \"sha256\": 64 hex, \"size\": >0}]}`, decoded strictly (an unknown member is `malformed`; `sequence` must be written as an integer, not `7.0` or `7e0`). Signatures are over DSSE PAE(payloadType, payload) with ECDSA P-256/SHA-256 (an ASN.1 DER signature, as KMS returns; a raw r‖s one does not verify) or Ed25519; the manifest verifies when at least the threshold of distinct pinned keys signed it. As DSSE requires, members of the envelope or of a signature that DSSE does not define are ignored."},
			{"Keyid", "A signature's `keyid` is a hint: the signature is tried under the pinned key it names, then under every other, and counts for the one it verifies under. `bcctl sign` names each key by the hex SHA-256 of its SubjectPublicKeyInfo DER (the keyid `bcctl keygen` and `pubkey` print; `--keyid none` leaves it out, `--keyid ID` sets another). Other DSSE verifiers (go-securesystemslib, sigstore) skip a signature whose keyid differs from their verifier's: sign with `--keyid none`, or give their verifier the same keyid (docs/architecture.md, DSSE interoperability)."},
			{"Replay", "Registering a manifest whose version is already recorded with the same sequence returns the stored release (`replayed: true`); the same version with another sequence is `CONFLICT`."},
		},
		Input: reflect.TypeFor[RegisterReleaseInput](), Output: reflect.TypeFor[RegisterResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "the manifest does not verify, in this order of precedence: the envelope is malformed, its payloadType is wrong, no signature is by a pinned key (`unknown_key`, which also carries `signerKeyIds` and `pinnedKeyIds`), a signature naming a pinned key does not verify, too few pinned keys signed, the statement is malformed or a field invalid, it expired, two binaries share a platform, no binary is for linux",
				[]Detail{detail("field"), detail("reason", "malformed", release.ReasonPayloadType, release.ReasonUnknownKey, release.ReasonBadSignature, release.ReasonThreshold, release.ReasonInvalidField, release.ReasonExpired, release.ReasonDuplicatePlatform, release.ReasonNoLinuxBinary), detail("signerKeyIds"), detail("pinnedKeyIds")}},
			{apierr.InvalidInput, "the sequence is not above the latest registered one (a rollback of the release channel)",
				[]Detail{detail("field", "manifest.payload.sequence"), detail("reason", "rollback"), detail("latestSequence")}},
			{apierr.Conflict, "the version is already registered, or being registered, with another sequence",
				[]Detail{detail("version"), detail("sequence")}},
			{apierr.Unavailable, "DynamoDB failed, or KMS failed to sign the release log's checkpoint (retry: `dependency` says which; the release is recorded and logged by the retry or the next registration), or this deployment has no release keys pinned (no `dependency`)",
				[]Detail{detail("dependency")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", ReadsKMSKeys, SignsReleaseLog}},
	{Name: "releases.list", Kind: Read, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout",
		Summary: "Returns the registered releases, highest sequence first.",
		Notes:   []Note{{"", "The list is not filtered by tenant: releases belong to the platform. Without `limit` it returns every release."}},
		Input:   reflect.TypeFor[ListReleasesInput](), Output: reflect.TypeFor[ListReleasesResult](),
		Actions: []string{"dynamodb:Query", ReadsCursorKey}, Indexes: []string{"ordered"}},
	{Name: "releases.log", Kind: Read, Permission: ReleasesRead, Scope: FleetScope, Module: "rollout", Phase: "v0.7",
		Summary: "Returns the release log's latest signed checkpoint: every registered release is an entry of one append-only Merkle log (RFC 9162 hashing), in registration order.",
		Notes: []Note{
			{"Checkpoint", "A C2SP `tlog-checkpoint` (origin, size, base64 root), a C2SP `signed-note` (ECDSA P-256) by the log key, named by the origin. Pin `verifierKey` from the deployment's outputs; a monitor proves each checkpoint extends the last it verified (`releases.prove {fromSize}`; docs/releases.md)."},
		},
		Input: reflect.TypeFor[ReleaseLogInput](), Output: reflect.TypeFor[ReleaseLogResult](),
		Errors: []ErrorCase{
			{apierr.Unavailable, "DynamoDB failed, or no checkpoint is signed yet (a new deployment: the reconciler signs the empty log's on its first pass)",
				[]Detail{detail("dependency")}},
		},
		Actions: []string{"dynamodb:GetItem", ReadsReleaseLogKey}},
	{Name: "releases.prove", Kind: Read, Permission: ReleasesRead, Scope: FleetScope, Module: "rollout", Phase: "v0.7",
		Summary: "Proves a release's entry is in the release log, and that the log only grew: the latest checkpoint with an inclusion proof for `version` and a consistency proof from `fromSize`, in the tree of `size`.",
		Notes: []Note{
			{"Proofs", "Proof hashes are base64 SHA-256 hashes in the order RFC 9162 §2.1.3 (inclusion) and §2.1.4 (consistency) define, as `tlog.CheckRecord` / `tlog.CheckTree` (golang.org/x/mod/sumdb/tlog) and `proof.VerifyInclusion` / `VerifyConsistency` (transparency-dev/merkle) read them. The entry is the release's DSSE payload, exactly as signed; its leaf hash is SHA-256(0x00 ‖ payload). Without `size`, the proofs are for the returned checkpoint's tree; with it, for the tree of that size, whose root the caller holds from an earlier checkpoint. `bcctl releases verify` checks all of it offline."},
		},
		Input: reflect.TypeFor[ProveReleaseInput](), Output: reflect.TypeFor[ProveResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`size` is beyond the latest checkpoint's tree, `fromSize` beyond `size`, or the release's entry is not in the tree of `size`",
				[]Detail{detail("field", "size", "fromSize", "version"), detail("reason", "constraint"), detail("logSize")}},
			{apierr.NotFound, "no release of that version is registered", []Detail{detail("version")}},
			{apierr.Unavailable, "DynamoDB failed, or no checkpoint is signed yet", []Detail{detail("dependency")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:BatchGetItem"}},
	{Name: "pools.create", Kind: Mutation, Permission: "compute:pools:admin", Scope: tenantScope, Module: "capacity",
		Summary: "Creates a pool owned by the tenant with that many devices of each resource (device ids `<resource>-<n>`, n from 0), grouped into nodes of `nodeSize` devices (node ids `<resource>-node-<k>`, device n on node ⌊n / nodeSize⌋), and the owner's quota rows with `max` = the device count.",
		Notes: []Note{
			{"Replay", "The same request again returns the stored pool."},
		},
		Input: reflect.TypeFor[CreatePoolInput](), Output: reflect.TypeFor[PoolResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`nodeSize` names a resource that is not in `resources`, or a size out of range",
				[]Detail{detail("field", "nodeSize.<resource>"), detail("reason", "unknown_resource", "constraint")}},
			{apierr.Conflict, "the pool id belongs to another tenant (`field: poolId`; pool ids are global), or exists with another definition (`field: resources`)",
				[]Detail{detail("field", "poolId", "resources")}},
		},
		Actions: []string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem"}},
	{Name: "pools.offer", Kind: Mutation, Permission: "compute:pools:admin", Scope: tenantScope, Module: "capacity",
		Summary: "The pool's owner sets `toTenantId`'s quota `max` for one resource of the pool, creating the row with `used` 0 if missing. Lowering `max` below `used` evicts nothing; no new admission fits until `used` falls.",
		Input:   reflect.TypeFor[OfferPoolInput](), Output: reflect.TypeFor[QuotaResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "the pool has no such resource", []Detail{detail("field", "resource"), detail("reason", "unknown_resource")}},
			{apierr.NotFound, "the pool does not exist or the caller's tenant does not own it", nil},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}},
	{Name: "pools.get", Kind: Read, Permission: "compute:pools:read", Scope: tenantScope, Module: "capacity",
		Summary: "Returns a pool owned by or offered to the tenant.",
		Input:   reflect.TypeFor[GetPoolInput](), Output: reflect.TypeFor[PoolResult](),
		Errors: []ErrorCase{
			{apierr.NotFound, "the pool does not exist or is neither owned by nor offered to the tenant", nil},
		},
		Actions: []string{"dynamodb:GetItem"}},
	{Name: "pools.list", Kind: Read, Permission: "compute:pools:read", Scope: tenantScope, Module: "capacity",
		Summary: "Lists the pools owned by or offered to the tenant, by pool id.",
		Notes:   []Note{{"Paging", "A page may end before `limit` pools once the pools listed so far list " + num(PoolPageDevices) + " devices (an answer stays far below Lambda's 6 MB response limit); `nextCursor` continues."}},
		Input:   reflect.TypeFor[ListPoolsInput](), Output: reflect.TypeFor[ListPoolsResult](),
		Actions: []string{"dynamodb:Query", ReadsCursorKey}, Indexes: []string{BaseTable}},
	{Name: "pools.usage", Kind: Read, Permission: "compute:pools:read", Scope: tenantScope, Module: "capacity", Phase: "v0.5",
		Summary: "Returns a page of one resource's nodes with what is placed on them over a span (default the next " + human(MaxUsageHours*time.Hour) + "): each node's busy device intervals, and the page's totals (devices held now, nodes wholly free now and for the whole span). What `bcctl pools show` draws.",
		Notes: []Note{
			{"Visibility", "Any tenant that can see the pool sees when devices are held; only the pool's owner sees by which reservation (`reservationId`)."},
			{"Paging", "By node, at most " + num(MaxUsageNodes) + " nodes a page (default " + num(DefaultUsageNodes) + "); `nextCursor` continues with the next node. Its cost follows the page (one query per day of the span), not the pool."},
		},
		Input: reflect.TypeFor[PoolUsageInput](), Output: reflect.TypeFor[PoolUsageResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "the pool has no such resource", []Detail{detail("field", "resource"), detail("reason", "unknown_resource")}},
			{apierr.NotFound, "the pool is not visible to the tenant", nil},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:Query", ReadsCursorKey}, Indexes: []string{BaseTable}},
	{Name: "pools.availability", Kind: Read, Permission: "compute:reservations:read", Scope: tenantScope, Module: "capacity", Phase: "v0.8",
		Summary: "Answers when a reservation could be placed before it is asked for: the ranges of whole-hour starts between `from` and `to` at which a `reservations.create` of `count` devices, spread as `topology`, for a window of `hours` whole hours would be placed as the pool stands now — its calendar, its topology and its nodes' health — earliest first, with the tenant's quota beside them.",
		Notes: []Note{
			{"Booking", "An offering's every start s, from `earliestStart` to `latestStart` hour by hour, is booked by `reservations.create` with `window: {start: s, end: s + hours}`; a start earlier than now (the current hour, as the first offering may begin) is booked without `window.start` (now) and with `window.end` = `earliestStart` + hours. An offering is advice, not a hold: something booked in between may take the devices. Nodes that placement skips — cordoned, draining, unhealthy, unreachable, registered but not ready — count as unavailable for the whole search, and a node-hour holding its maximum of reservations as full."},
			{"Search", "It reads what admission keeps per UTC hour, never the pool's reservations: for each hour from the first start to the last start's window end, one query of the hour's most-free nodes (a bounded number of them) and, for an hour not yet provisioned, the map of the nodes anything is stored for — so its cost grows with the hours searched and the window's length, not with the pool's size, how busy it is or how many reservations it holds (docs/capacity.md, When can I get it?). Where that bounded read cannot decide a start (more free nodes than it reads, none of them free for the whole window) the start is left out and `partial` is true; a start is never offered where the search did not find devices a create would take."},
			{"Visibility", "The answer names no reservation, tenant or principal: only ranges of starts and node counts."},
		},
		Input: reflect.TypeFor[PoolAvailabilityInput](), Output: reflect.TypeFor[PoolAvailabilityResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "the pool has no such resource (`unknown_resource`), `topology` is neither `node` nor `any`, `to` is before `from` or more than " + human(MaxAvailabilitySpan) + " after it, or `from` is more than " + human(MaxLeadTime) + " ahead",
				[]Detail{detail("field", "resource", "topology", "from", "to"), detail("reason", "unknown_resource", "constraint")}},
			{apierr.NotFound, "the pool does not exist or is neither owned by nor offered to the tenant", nil},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"}, Indexes: []string{"fit", "bypool"}},
	{Name: "quotas.get", Kind: Read, Permission: "compute:quotas:read", Scope: tenantScope, Module: "capacity",
		Summary: "Returns the tenant's quota for one pool and resource: `max`, and `used`, the counts its live reservations hold charged (from admission until terminal, future bookings included; not the devices held now). A missing row is `max 0, used 0` (a missing row grants 0), not `NOT_FOUND`, so it reveals nothing about pools the tenant cannot see.",
		Input:   reflect.TypeFor[GetQuotaInput](), Output: reflect.TypeFor[QuotaResult](),
		Actions: []string{"dynamodb:GetItem"}},
	{Name: "quotas.list", Kind: Read, Permission: "compute:quotas:read", Scope: tenantScope, Module: "capacity",
		Summary: "Lists the tenant's quota rows, optionally for one pool; a row with `max` 0 is listed too.",
		Input:   reflect.TypeFor[ListQuotasInput](), Output: reflect.TypeFor[ListQuotasResult](),
		Actions: []string{"dynamodb:Query", ReadsCursorKey}, Indexes: []string{BaseTable}},
	{Name: "reservations.create", Kind: Mutation, Permission: "compute:reservations:create", Scope: tenantScope, Module: "capacity", DecideOnDraft: true,
		Summary: "Writes the request as a draft, asks Better IAM once on the draft (the request as attributes), then charges quota and places the reservation on free devices; returns it `placed` with its `deviceIds`.",
		Notes: []Note{
			{"Order", "Only the request's shape is checked before the draft is written; the decision comes before anything that depends on the pool, so a denied caller learns nothing about the tenant's pools. Quota is checked before capacity."},
			{"Replay", "A retry with the same tenant, principal and `clientToken` gets the first answer: the reservation as it is now, or the first answer's error with the same `details.reservationId`. The same token with a different request (pool, resource, count, topology, window as sent) is `CONFLICT`."},
			{"Placement", "Best fit: a count that fits a node goes on the fullest node that still holds it, so whole nodes stay whole. Windows are half-open `[start, end)`: adjacent windows do not overlap."},
		},
		Input: reflect.TypeFor[CreateReservationInput](), Output: reflect.TypeFor[ReservationResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`topology` is neither `node` nor `any`", []Detail{detail("field", "topology"), detail("reason", "constraint")}},
			{apierr.InvalidInput, "the window breaks a rule (`details.rule`); checked before the draft is written",
				[]Detail{detail("field", "window.start", "window.end"), detail("reason", "constraint"), detail("rule", RuleEnum.Strings()...)}},
			{apierr.InvalidInput, "allowed, but the pool has no such resource: the reservation is `rejected` (`reason: invalid`)",
				[]Detail{detail("field", "resource"), detail("reason", "unknown_resource"), detail("reservationId")}},
			{apierr.PermissionDenied, "Better IAM denied the draft: the reservation is `denied`", []Detail{detail("reservationId"), detail("reason")}},
			{apierr.NotFound, "allowed, but the pool is not visible to the tenant: the reservation is `rejected` (`reason: invalid`)", []Detail{detail("reservationId")}},
			{apierr.Conflict, "the `clientToken` was used for another request", []Detail{detail("field", "clientToken")}},
			{apierr.CapacityExhausted, "no set of free devices fits the window (`capacity`), or they are free but not on few enough nodes (`topology`): the reservation is `rejected`, no quota left charged",
				[]Detail{detail("reservationId"), detail("reason", ReasonCapacity, ReasonTopology), detail("poolDevices")}},
			{apierr.QuotaExceeded, "`used + count` would pass the quota's `max`: the reservation is `rejected` (`reason: quota`)",
				[]Detail{detail("reservationId"), detail("requested"), detail("used"), detail("max"), detail("poolDevices")}},
			{apierr.Unavailable, "a dependency failed, the first request with this `clientToken` is still in flight, more than " + num(MaxInFlight) + " creates of one quota row are in flight at once, or placement stayed contended; retry (with the same `clientToken`, to get the same reservation)",
				[]Detail{detail("dependency"), detail("reservationId")}},
		},
		Actions: []string{"dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, Indexes: []string{"fit", "cap", BaseTable}},
	{Name: "reservations.get", Kind: Read, Permission: "compute:reservations:read", Scope: tenantScope, Module: "capacity",
		Summary: "Returns one of the tenant's reservations, in any state.",
		Input:   reflect.TypeFor[GetReservationInput](), Output: reflect.TypeFor[ReservationResult](),
		Errors: []ErrorCase{
			{apierr.NotFound, "no such reservation for this tenant (another tenant's id included), or it was deleted after its retention", nil},
		},
		Actions: []string{"dynamodb:GetItem"}},
	{Name: "reservations.list", Kind: Read, Permission: "compute:reservations:read", Scope: tenantScope, Module: "capacity",
		Summary: "Lists the tenant's reservations, newest first, optionally filtered by pool and state. Denied, rejected and expired reservations — refusals and creates that never finished, which a caller could make in bulk — are listed only when `state` names their state; a state-filtered list reads only that state's reservations, never the tenant's whole history.",
		Input:   reflect.TypeFor[ListReservationsInput](), Output: reflect.TypeFor[ListReservationsResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`state` is not a reservation state", []Detail{detail("field", "state"), detail("reason", "constraint")}},
		},
		Actions: []string{"dynamodb:Query", ReadsCursorKey}, Indexes: []string{"ordered", "bystate", "bypool"}},
	{Name: "reservations.release", Kind: Mutation, Permission: "compute:reservations:release", Scope: tenantScope, Module: "capacity",
		Summary: "Moves a non-terminal reservation to `released` (`releasedBy: \"tenant\"`), then credits its quota and frees its devices before answering. Releasing a `draft` is allowed: it fences the create in flight, and gives its quota back at once (the create, finding the fence, undoes what it wrote). A terminal reservation is returned unchanged, after finishing what a give-back cut short: its devices are free when the retry answers, and its quota too, unless the writer that ended it is still crediting it (seconds) or, that writer gone, the reconciler's sweep holds it (within two minutes). Released reservations are kept for 90 days.",
		Input:   reflect.TypeFor[ReleaseReservationInput](), Output: reflect.TypeFor[ReservationResult](),
		Errors: []ErrorCase{
			{apierr.NotFound, "no such reservation for this tenant (another tenant's id included)", nil},
			{apierr.Unavailable, "a dependency failed, or the reservation kept changing state under the release; retry", []Detail{detail("dependency")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}},
	{Name: "nodes.register", Kind: Mutation, Permission: "compute:pools:admin", Scope: tenantScope, Module: "fleet", Phase: "v0.6",
		Summary: "Registers one of the pool's nodes with its public key and platform; from then on it is managed (see the resource). A registered node is not placed on until its first healthy heartbeat.",
		Notes: []Note{
			{"Replay", "The same registration again returns the stored node; the same node with another key or platform is `CONFLICT`, unless `replace` is true."},
			{"Replace", "With `replace: true` the owner replaces a registered node's key and platform (a host re-imaged, a key lost) in one conditional write: the node keeps its reservations, the bindings it is told and its cordon; its counter restarts (the new key's first report is accepted from counter 1); and it is `registered` — out of placement and counted out of service from the moment this answers — until a heartbeat under the new key is accepted. Reports signed by the old key are `bad_signature` from then on. The same replacement again (the key and platform already stored) returns the node unchanged: the counter is not restarted twice. For a node not registered yet it registers it."},
		},
		Input: reflect.TypeFor[RegisterNodeInput](), Output: reflect.TypeFor[NodeResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`nodeId` is not one of the pool's nodes, or `publicKey` is not one PEM ECDSA P-256 or Ed25519 public key", []Detail{detail("field", "nodeId", "publicKey"), detail("reason", "constraint")}},
			{apierr.NotFound, "the pool does not exist or the tenant does not own it (`field: poolId`)", []Detail{detail("field", "poolId")}},
			{apierr.Conflict, "without `replace`, the node is registered with another key or platform", []Detail{detail("field", "publicKey", "platform"), detail("keyId"), detail("platform")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}},
	{Name: "nodes.get", Kind: Read, Permission: "compute:pools:read", Scope: tenantScope, Module: "fleet", Phase: "v0.6",
		Summary: "Returns one registered node of a pool the tenant owns, with the bindings it is told now.",
		Input:   reflect.TypeFor[GetNodeInput](), Output: reflect.TypeFor[NodeResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`nodeId` is not one of the pool's nodes", []Detail{detail("field", "nodeId"), detail("reason", "constraint")}},
			{apierr.NotFound, "the pool does not exist or the tenant does not own it (`field: poolId`; a tenant offered the pool sees none of its nodes), or the node is not registered (`field: nodeId`)", []Detail{detail("field", "poolId", "nodeId")}},
		},
		Actions: []string{"dynamodb:GetItem"}},
	{Name: "nodes.list", Kind: Read, Permission: "compute:pools:read", Scope: tenantScope, Module: "fleet", Phase: "v0.6",
		Summary: "Lists the registered nodes of a pool the tenant owns, by resource and node index, optionally of one state.",
		Input:   reflect.TypeFor[ListNodesInput](), Output: reflect.TypeFor[ListNodesResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`state` is not a node state", []Detail{detail("field", "state"), detail("reason", "constraint")}},
			{apierr.NotFound, "the pool does not exist or the tenant does not own it (`field: poolId`)", []Detail{detail("field", "poolId")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem", ReadsCursorKey}, Indexes: []string{BaseTable, "bystate"}},
	{Name: "nodes.cordon", Kind: Mutation, Permission: "compute:pools:admin", Scope: tenantScope, Module: "fleet", Phase: "v0.6",
		Summary: "Sets the operator's cordon on a node: once this answers, no new reservation is placed on it; what it already holds is untouched. Idempotent (a cordoned node is returned as it is).",
		Input:   reflect.TypeFor[CordonNodeInput](), Output: reflect.TypeFor[NodeResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`nodeId` is not one of the pool's nodes", []Detail{detail("field", "nodeId"), detail("reason", "constraint")}},
			{apierr.NotFound, "the pool does not exist or the tenant does not own it (`field: poolId`), or the node is not registered (`field: nodeId`)", []Detail{detail("field", "poolId", "nodeId")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}},
	{Name: "nodes.uncordon", Kind: Mutation, Permission: "compute:pools:admin", Scope: tenantScope, Module: "fleet", Phase: "v0.6",
		Summary: "Lifts the operator's cordon (never a rollout's): the node is placed on again once it is `ready` and no rollout holds it. Idempotent.",
		Input:   reflect.TypeFor[UncordonNodeInput](), Output: reflect.TypeFor[NodeResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`nodeId` is not one of the pool's nodes", []Detail{detail("field", "nodeId"), detail("reason", "constraint")}},
			{apierr.NotFound, "the pool does not exist or the tenant does not own it (`field: poolId`), or the node is not registered (`field: nodeId`)", []Detail{detail("field", "poolId", "nodeId")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}},
	{Name: "nodes.heartbeat", Kind: Mutation, Permission: "compute:nodes:report", Scope: NodeScope, Module: "fleet", Phase: "v0.6",
		Summary: "A node's signed report of its health, running release and bindings; the answer says what it should run and bind. `tenantId` is the pool's owner.",
		Notes: []Note{
			{"Report", "A DSSE envelope (the encoding of release manifests) with payloadType `" + ReportPayloadType + "`, signed by the node's registered key, whose payload is the report `{\"poolId\", \"nodeId\", \"counter\": 1..2^53-1, \"at\": RFC 3339, \"running\": {\"version\", \"sequence\"} | null, \"install\"?: {\"version\", \"state\": installing|installed|failed, \"reason\"?}, \"health\": {\"devicesExpected\", \"devicesVisible\", \"checks\": [{\"name\", \"ok\", \"detail\"?}] (at most " + num(MaxChecks) + ")}, \"bindings\": [{\"reservationId\", \"state\": bound|unbound|failed, \"reason\"?}] (at most " + num(MaxBindings) + "), \"log\"?: {\"size\", \"root\"}}`, decoded strictly (`log`: the release log checkpoint the node verified last, its root base64). The node's state follows: `unhealthy` when fewer devices are visible than expected or a check failed, else `ready`; `unreachable` after " + num(UnreachableAfter) + " idle intervals without an accepted heartbeat."},
			{"Answer", "`desired.bindings` lists every unbind before any bind: a device's previous holder is scrubbed before the next is given it. `nextHeartbeatSeconds` is " + human(BusyInterval) + " while the node has a binding it has not reported done, the idle interval (" + human(DefaultInterval) + " by default) otherwise."},
			{"Cost", "One conditional write; warm, no read (the node's key is cached for " + human(KeyCacheTTL) + " and the write is conditioned on it), cold one read of the node (and one of a release the node runs, once per function). The release log adds nothing in steady state: a node's reported checkpoint is checked against the log's root at that size once per function and size, and `desired.release.log` is computed once per checkpoint, entry and reported size and cached (the checkpoint is read again after " + human(CheckpointTTL) + ", or at once for a release or a reported size beyond it). A heartbeat refused because its node is not registered also reads the pool, to say which of the two is missing."},
			{"Witness", "A node that reports a `log` root the log never had at that size (or a size beyond the log) shows `log.consistent: false` with the first such report as `log.splitView`, counts in the sweep's `NodesSplitView` metric (alarmed), and is told no release (`desired.release: null`) until it is re-registered with a new key. A release is told only with `desired.release.log`, once a signed checkpoint covers its entry; the agent installs it only once that verifies (docs/releases.md)."},
		},
		Input: reflect.TypeFor[HeartbeatInput](), Output: reflect.TypeFor[HeartbeatResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "the report is refused: the envelope is malformed or of another payloadType, no signature verifies under the node's registered key (`bad_signature`), the payload is malformed or a field invalid, its `poolId`/`nodeId` are not the request's (`mismatch`), or its `at` is more than " + human(MaxSkew) + " from the server's clock (`stale`)",
				[]Detail{detail("field"), detail("reason", ReasonMalformed, ReasonPayloadType, ReasonBadSignature, ReasonInvalidField, ReasonMismatch, ReasonReportStale), detail("keyId")}},
			{apierr.NotFound, "`tenantId` does not own the pool, or the pool does not exist (`field: poolId`: one answer for both, so a caller learns nothing of another tenant's pools), or the node is not registered in the tenant's pool (`field: nodeId`)", []Detail{detail("field", "poolId", "nodeId")}},
			{apierr.Conflict, "the report's counter is not above the last accepted one (a replay)", []Detail{detail("field", "report.payload.counter"), detail("reason", ReasonReplay), detail("latestCounter")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:BatchGetItem"}},
	{Name: "rollouts.create", Kind: Mutation, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout", Phase: "v0.6",
		Summary: "Creates a rollout of a registered release onto the managed nodes of some pools, in waves, gated on the nodes' own signed reports; the reconciler `fleet.rollouts` drives it (docs/rollouts.md).",
		Notes: []Note{
			{"Nodes", "The rollout's nodes are its pools' managed nodes when it is created, in a stable shuffled order (a hash of the rollout and the node), so every wave samples every pool; wave k takes the first nodes of that order up to its cumulative size. A node running the version already counts as updated; one whose platform has no binary in the release is skipped (`no_binary`)."},
			{"Failures", "It aborts once the failed nodes are more than `maxFailedNodes`: with 0 at the first failure, with 2 at the third. A node that sends no healthy report of the target within `progressDeadlineSeconds` of its install has failed: silence is failure."},
			{"Drain", "A node is cordoned, then installs once no non-terminal reservation on its devices overlaps [now, now + progressDeadlineSeconds); after `drain.waitSeconds` it is skipped (`busy`), or, with `onTimeout: force`, installs anyway and each overlapping reservation's history says `disrupted` with the rollout's id. A tenant's reservation is never disturbed otherwise."},
			{"Replay", "A retry with the same tenant, principal and `clientToken` gets the same rollout; the same token with another request is `CONFLICT`."},
		},
		Input: reflect.TypeFor[CreateRolloutInput](), Output: reflect.TypeFor[RolloutResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "the release expired (`expired`), the pools have no managed node (`no_nodes`, field `pools`), no managed node of the pools has a binary for its platform in the release (`no_binary`, field `version`), a pool is named twice, a wave gives both or neither of `nodes` and `percent`, covers fewer nodes than the one before or (the last) not every node, or `drain.onTimeout` is neither `skip` nor `force`",
				[]Detail{detail("field", "version", "pools", "waves[i]", "drain.onTimeout"), detail("reason", release.ReasonExpired, ReasonNoNodes, ReasonNoBinary, "constraint")}},
			{apierr.NotFound, "the version is not registered, or a pool does not exist (`poolId`)", []Detail{detail("poolId")}},
			{apierr.Conflict, "a pool is in another rollout that is not finished (`rolloutId`), or the `clientToken` was used for another request", []Detail{detail("rolloutId"), detail("field", "clientToken")}},
			{apierr.Unavailable, "a dependency failed (`dependency`), or the create took longer than the reconciler's staleness limit and the reconciler abandoned it (no `dependency`); retry with the same `clientToken`", []Detail{detail("dependency")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"}, Indexes: []string{BaseTable}},
	{Name: "rollouts.get", Kind: Read, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout", Phase: "v0.6",
		Summary: "Returns a rollout: its waves, state, counts of its nodes by step (as of the reconciler's last pass), settings and timeline.",
		Input:   reflect.TypeFor[GetRolloutInput](), Output: reflect.TypeFor[RolloutResult](),
		Errors:  []ErrorCase{{apierr.NotFound, "no such rollout", nil}},
		Actions: []string{"dynamodb:GetItem"}},
	{Name: "rollouts.list", Kind: Read, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout", Phase: "v0.6",
		Summary: "Lists rollouts, newest first, optionally of one state. Rollouts belong to the platform: the list is not filtered by tenant.",
		Input:   reflect.TypeFor[ListRolloutsInput](), Output: reflect.TypeFor[ListRolloutsResult](),
		Errors:  []ErrorCase{{apierr.InvalidInput, "`state` is not a rollout state", []Detail{detail("field", "state"), detail("reason", "constraint")}}},
		Actions: []string{"dynamodb:Query", "dynamodb:BatchGetItem", ReadsCursorKey}, Indexes: []string{"ordered", "bystate"}},
	{Name: "rollouts.nodes", Kind: Read, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout", Phase: "v0.6",
		Summary: "Lists a rollout's nodes in its order, optionally of one step: each node's wave, step, reason, the release it ran when the rollout took it, and its rollback. Once it ends, unstarted nodes are `skipped`.",
		Input:   reflect.TypeFor[RolloutNodesInput](), Output: reflect.TypeFor[RolloutNodesResult](),
		Errors: []ErrorCase{
			{apierr.InvalidInput, "`step` is not a node step", []Detail{detail("field", "step"), detail("reason", "constraint")}},
			{apierr.NotFound, "no such rollout", nil},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem", ReadsCursorKey}, Indexes: []string{BaseTable, "bystate"}},
	{Name: "rollouts.pause", Kind: Mutation, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout", Phase: "v0.6",
		Summary: "Pauses a progressing rollout: no node starts once this answers (it waits for a pass starting nodes to finish); those in progress finish. A paused or terminal rollout is returned unchanged.",
		Input:   reflect.TypeFor[ChangeRolloutInput](), Output: reflect.TypeFor[RolloutResult](),
		Errors: []ErrorCase{
			{apierr.NotFound, "no such rollout", nil},
			{apierr.Unavailable, "a dependency failed (`dependency`), or a reconciler pass kept starting nodes for 5 seconds (no `dependency`); retry", []Detail{detail("dependency")}},
		},
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem"}},
	{Name: "rollouts.resume", Kind: Mutation, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout", Phase: "v0.6",
		Summary: "Resumes a paused rollout. Any other is returned unchanged.",
		Input:   reflect.TypeFor[ChangeRolloutInput](), Output: reflect.TypeFor[RolloutResult](),
		Errors:  []ErrorCase{{apierr.NotFound, "no such rollout", nil}},
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem"}},
	{Name: "rollouts.abort", Kind: Mutation, Permission: "compute:fleet:admin", Scope: FleetScope, Module: "rollout", Phase: "v0.6",
		Summary: "Aborts a progressing or paused rollout: nodes not yet installing go back (uncordoned), installing ones finish or time out; then, with `rollbackOnAbort`, every node it updated is sent back to the release it ran before, under the same `maxUnavailable` (`rolled_back` once each reported it running or failed to), else `aborted`. An aborting or terminal rollout is returned unchanged.",
		Input:   reflect.TypeFor[ChangeRolloutInput](), Output: reflect.TypeFor[RolloutResult](),
		Errors:  []ErrorCase{{apierr.NotFound, "no such rollout", nil}},
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem"}},
}

func init() {
	for _, m := range Catalog {
		if m.Phase == "" {
			m.Phase = phase
		}
		if m.Status == "" {
			m.Status = registered
		}
	}
}

// Lookup finds a method by name ("releases.register").
func Lookup(name string) *Method {
	for _, m := range Catalog {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// LookupPath finds a method by its HTTP path.
func LookupPath(path string) *Method {
	for _, m := range Catalog {
		if m.Path() == path {
			return m
		}
	}
	return nil
}
