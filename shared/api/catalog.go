package api

import (
	"reflect"
	"strings"
)

// Kind says whether a method changes state.
type Kind string

const (
	Mutation Kind = "mutation"
	Read     Kind = "read"
)

// Method is one API method: the single source of truth for its route,
// authorization, Lambda function, and reference docs (SPEC §4).
type Method struct {
	Name       string // "<resource>.<verb>"
	Kind       Kind
	Permission string // e.g. compute:fleet:admin
	Scope      string // e.g. compute-fleet, or tenant:{tenantId}
	Module     string
	Phase      string
	Status     string // "registered" once served by this release
	Summary    string // one paragraph for the reference
	Notes      []Note // labelled paragraphs (Replay, Errors, …)
	// DecideOnDraft: the gateway does not authorize before the method; the
	// method asks Better IAM once, on the draft it wrote (reservations.create).
	DecideOnDraft bool
	Input         reflect.Type
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

// Note is a labelled paragraph of a method's reference page.
type Note struct{ Label, Text string }

// Resource groups methods for the reference (one page per resource).
type Resource struct {
	Name    string
	Summary string
	Guide   string
}

// Resource returns the part of Name before the dot ("releases").
func (m *Method) Resource() string { r, _, _ := strings.Cut(m.Name, "."); return r }

// Verb returns the part of Name after the dot ("register").
func (m *Method) Verb() string { _, v, _ := strings.Cut(m.Name, "."); return v }

// Path is the HTTP route: POST /api/compute/{resource}/{verb}.
func (m *Method) Path() string { return "/api/compute/" + m.Resource() + "/" + m.Verb() }

// FunctionName is the folder under functions/ and the Lambda's logical name.
func (m *Method) FunctionName() string { return m.Resource() + "-" + m.Verb() }

// ScopeFor fills the scope template for a tenant.
func (m *Method) ScopeFor(tenantID string) string {
	return strings.ReplaceAll(m.Scope, "{tenantId}", tenantID)
}

// ReconcilerFunction names the non-API Lambda (capacity.reservations).
const ReconcilerFunction = "reconciler"

// ReconcilerActions are the reconciler's AWS actions: it queries the due
// index, reads and conditionally moves reservations, and repairs quota rows,
// calendars and half-created pools (get, put, update; never delete).
var ReconcilerActions = []string{"dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}

// ReconcilerIndexes are where the reconciler's Query reads: the due index.
var ReconcilerIndexes = []string{"due"}

const (
	tenantScope = "tenant:{tenantId}"
	fleetScope  = "compute-fleet"
	phase       = "v0.4"
	registered  = "registered"
)

// Resources of the reference, in order.
var ResourceDocs = []Resource{
	{Name: "releases", Guide: "/docs/guides/rollouts",
		Summary: "Releases are signed bcd builds the platform may roll out to its nodes. A release is registered from a signed manifest, which must verify under the release key pins given to `rolloutModule`, and rollouts can then target its version. Both methods decide `compute:fleet:admin` on the fleet scope."},
	{Name: "pools", Guide: "/docs/guides/capacity/pools",
		Summary: "A pool is a set of devices owned by one tenant, which offers its capacity to tenants (itself included) as quotas. Pool ids are a global namespace. `create` makes the pool and its owner's quota rows; `offer` sets another tenant's quota `max` on it."},
	{Name: "quotas", Guide: "/docs/guides/capacity/quotas-and-usage",
		Summary: "A quota caps how much of one resource a tenant may hold in one pool at the same time, as a `max` and a `used` counter per tenant, pool and resource. A missing row grants 0; `pools.create` and `pools.offer` create the rows, and admissions charge them with `QUOTA_EXCEEDED` when a request does not fit."},
	{Name: "reservations", Guide: "/docs/guides/capacity/reservations",
		Summary: "A reservation is a tenant's claim on devices of one pool for a time window. `create` first writes the request as a draft, Better IAM decides once on that draft with the request as attributes, and only an allowed draft is charged against quota and placed. A reservation holds its quota charge until it reaches a terminal state, and the `capacity.reservations` reconciler drives it through `placed`, `binding` and `active` to `released`."},
}

// Catalog is every method of phase v0.4 (SPEC §4).
var Catalog = []*Method{
	{Name: "releases.register", Kind: Mutation, Permission: "compute:fleet:admin", Scope: fleetScope, Module: "rollout",
		Summary: "Verifies a signed bcd release manifest under the configured release pins and records the release; returns it with its per-platform binaries.",
		Notes: []Note{
			{"Manifest", "A DSSE envelope `{\"payloadType\": \"application/vnd.bettercompute.release.v1+json\", \"payload\": <base64>, \"signatures\": [{\"keyid\": <hex SHA-256 of the signer's SubjectPublicKeyInfo DER>, \"sig\": <base64>}]}` whose payload is the release statement `{\"version\": SemVer, \"sequence\": 1..2^53-1, \"expires\"?: RFC 3339, \"binaries\": [{\"platform\": \"os/arch[/variant]\", \"url\": https, \"sha256\": 64 hex, \"size\": >0}]}`. Signatures are over DSSE PAE(payloadType, payload) with ECDSA P-256/SHA-256 or Ed25519; it verifies when at least the threshold of distinct pinned keys signed it."},
			{"Replay", "Registering a manifest whose version is already recorded with the same sequence returns the stored release (`replayed: true`); the same version with another sequence is `CONFLICT`."},
			{"Errors", "`INVALID_INPUT` when the manifest does not verify (`details.reason` says why: `malformed`, `payload_type`, `unknown_key`, `bad_signature`, `threshold`, `invalid_field`, `expired`), when its sequence is not above the latest registered one (a rollback of the release channel, `details.reason` is `rollback`), when it lists several binaries for one platform (`duplicate_platform`), or when it lists no Linux binary (`no_linux_binary`)."},
		},
		Input:   reflect.TypeFor[RegisterReleaseInput](),
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "kms:GetPublicKey"}},
	{Name: "releases.list", Kind: Read, Permission: "compute:fleet:admin", Scope: fleetScope, Module: "rollout",
		Summary: "Returns every registered release, highest sequence first.",
		Notes:   []Note{{"", "The list is not filtered by tenant: releases belong to the platform. Without `limit` it returns every release."}},
		Input:   reflect.TypeFor[ListReleasesInput](),
		Actions: []string{"dynamodb:Query", ReadsCursorKey}, Indexes: []string{"ordered"}},
	{Name: "pools.create", Kind: Mutation, Permission: "compute:pools:admin", Scope: tenantScope, Module: "capacity",
		Summary: "Creates a pool owned by the tenant with that many devices of each resource (device ids `<resource>-<n>`, n from 0), and the owner's quota rows with `max` = the device count.",
		Notes: []Note{
			{"Replay", "The same request again returns the stored pool."},
			{"Errors", "`CONFLICT` when the pool id exists with another definition or belongs to another tenant (pool ids are global); `INVALID_INPUT` for an empty `resources`."},
		},
		Input:   reflect.TypeFor[CreatePoolInput](),
		Actions: []string{"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem"}},
	{Name: "pools.offer", Kind: Mutation, Permission: "compute:pools:admin", Scope: tenantScope, Module: "capacity",
		Summary: "The pool's owner sets `toTenantId`'s quota `max` for one resource of the pool, creating the row with `used` 0 if missing. Lowering `max` below `used` evicts nothing; no new admission fits until `used` falls.",
		Notes:   []Note{{"Errors", "`NOT_FOUND` when the caller does not own the pool; `INVALID_INPUT` when the resource is not in the pool."}},
		Input:   reflect.TypeFor[OfferPoolInput](),
		Actions: []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}},
	{Name: "pools.get", Kind: Read, Permission: "compute:pools:read", Scope: tenantScope, Module: "capacity",
		Summary: "Returns a pool owned by or offered to the tenant.",
		Notes:   []Note{{"Errors", "`NOT_FOUND` when the pool does not exist or is neither owned by nor offered to the tenant."}},
		Input:   reflect.TypeFor[GetPoolInput](),
		Actions: []string{"dynamodb:GetItem"}},
	{Name: "pools.list", Kind: Read, Permission: "compute:pools:read", Scope: tenantScope, Module: "capacity",
		Summary: "Lists the pools owned by or offered to the tenant.",
		Input:   reflect.TypeFor[ListPoolsInput](),
		Actions: []string{"dynamodb:Query", ReadsCursorKey}, Indexes: []string{BaseTable}},
	{Name: "pools.usage", Kind: Read, Permission: "compute:pools:read", Scope: tenantScope, Module: "capacity", Phase: "v0.5",
		Summary: "Returns a page of one resource's nodes with what is placed on them over a span (default the next 24 hours): each node's busy device intervals, and the page's totals (devices held now, nodes wholly free now and for the whole span). What `bc pools show` draws.",
		Notes: []Note{
			{"Visibility", "Any tenant that can see the pool sees when devices are held; only the pool's owner sees by which reservation (`reservationId`)."},
			{"Paging", "By node, at most 100 nodes a page; `nextCursor` continues with the next node. Its cost follows the page (one query per day of the span), not the pool."},
			{"Errors", "`NOT_FOUND` when the pool is not visible to the tenant; `INVALID_INPUT` for a resource not in the pool."},
		},
		Input:   reflect.TypeFor[PoolUsageInput](),
		Actions: []string{"dynamodb:GetItem", "dynamodb:Query", ReadsCursorKey}, Indexes: []string{BaseTable}},
	{Name: "quotas.get", Kind: Read, Permission: "compute:quotas:read", Scope: tenantScope, Module: "capacity",
		Summary: "Returns the tenant's quota for one pool and resource; a missing row is `max 0, used 0` (a missing row grants 0), not `NOT_FOUND`.",
		Input:   reflect.TypeFor[GetQuotaInput](),
		Actions: []string{"dynamodb:GetItem"}},
	{Name: "quotas.list", Kind: Read, Permission: "compute:quotas:read", Scope: tenantScope, Module: "capacity",
		Summary: "Lists the tenant's quota rows, optionally for one pool.",
		Input:   reflect.TypeFor[ListQuotasInput](),
		Actions: []string{"dynamodb:Query", ReadsCursorKey}, Indexes: []string{BaseTable}},
	{Name: "reservations.create", Kind: Mutation, Permission: "compute:reservations:create", Scope: tenantScope, Module: "capacity", DecideOnDraft: true,
		Summary: "Writes the request as a draft, asks Better IAM once on the draft (the request as attributes), then charges quota and places the reservation on free devices; returns it `placed` with its `deviceIds`.",
		Notes: []Note{
			{"Replay", "A retry with the same tenant and `clientToken` returns the first reservation (or the first answer's error); the same token with a different request is `CONFLICT`."},
			{"Errors", "`NOT_FOUND` when the pool is not visible to the tenant; `INVALID_INPUT` for a resource not in the pool or a bad window; `PERMISSION_DENIED` (reservation `denied`), `QUOTA_EXCEEDED` and `CAPACITY_EXHAUSTED` (reservation `rejected`) carry `details.reservationId`."},
		},
		Input:   reflect.TypeFor[CreateReservationInput](),
		Actions: []string{"dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, Indexes: []string{"fit", BaseTable}},
	{Name: "reservations.get", Kind: Read, Permission: "compute:reservations:read", Scope: tenantScope, Module: "capacity",
		Summary: "Returns one of the tenant's reservations; another tenant's id is `NOT_FOUND`.",
		Input:   reflect.TypeFor[GetReservationInput](),
		Actions: []string{"dynamodb:GetItem"}},
	{Name: "reservations.list", Kind: Read, Permission: "compute:reservations:read", Scope: tenantScope, Module: "capacity",
		Summary: "Lists the tenant's reservations, newest first, optionally filtered by pool and state.",
		Input:   reflect.TypeFor[ListReservationsInput](),
		Actions: []string{"dynamodb:Query", ReadsCursorKey}, Indexes: []string{"ordered"}},
	{Name: "reservations.release", Kind: Mutation, Permission: "compute:reservations:release", Scope: tenantScope, Module: "capacity",
		Summary: "Moves a non-terminal reservation to `released` (`releasedBy: \"tenant\"`), then credits its quota and frees its devices before answering; a terminal reservation is returned unchanged.",
		Input:   reflect.TypeFor[ReleaseReservationInput](),
		Actions: []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}},
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
