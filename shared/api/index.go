package api

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/paging"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// LocalServer is where `make run` serves the API (BC_LISTEN's default).
const LocalServer = "http://127.0.0.1:8080"

// WireRules are the decoding rules a client's own validation needs beyond
// the schemas: the reference's wire conventions and the OpenAPI document's
// description both state them.
var WireRules = []string{
	"A request body is read as JSON. A `Content-Type` header, when sent, must be `application/json` (parameters allowed; a `charset` other than UTF-8 is not): " +
		"anything else — such as the `application/x-www-form-urlencoded` that `curl -d` sends unless told otherwise — is `INVALID_INPUT` with `details.reason: content_type`. " +
		"A request without a `Content-Type` is read as JSON.",
	"An integer member takes any integral JSON number, as JSON Schema's `integer` does: `4`, `4.0` and `4e0` are the same count, `4.5` is `INVALID_INPUT` (`reason: type`). " +
		"The one exception is the release statement inside a manifest's signed payload, whose `sequence` must be written as an integer (`7`, not `7.0` or `7e0`).",
	"Times are RFC 3339 strings with `Z` or an offset (fractional seconds allowed; `t` and `z` may be lowercase, as RFC 3339 allows); answers give them in UTC.",
	"A release manifest is a DSSE envelope (DSSE v1.0.2). As that specification requires, members the envelope or a signature does not define are ignored " +
		"(a Sigstore bundle's `cert`, an extension); duplicate keys, wrong types and a missing `payloadType`, `payload`, `signatures` or `sig` are still `INVALID_INPUT` (`reason: malformed`). " +
		"The release statement in the payload is decoded as strictly as a request.",
}

// Index renders docs/reference/README.md: the methods, the conventions
// every method shares, the reservation state machine, the limits and the
// documented values — all read from the catalog and the domain's constants.
func Index(served func(*Method) bool) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# API reference\n\nGenerated from the method catalog (`shared/api/catalog.go`) by `make docs`; a test fails when a page is stale. " +
		"The same catalog generates [openapi.json](../openapi.json) (OpenAPI 3.1) and the typed Go client (`shared/client/methods.go`).\n\n")

	p("| Method | Kind | Authorization | Phase | Status | Does |\n|---|---|---|---|---|---|\n")
	for _, r := range ResourceDocs {
		for _, m := range r.Methods() {
			p("| [`%s`](%s.md#%s) | %s | `%s` @ `%s` | %s | %s | %s |\n", m.Name, r.Name, m.Verb(), m.Kind, m.Permission, m.Scope,
				m.Phase, status(m, served), cell(m.Brief()))
		}
	}

	tenant := fieldOf(reflect.TypeFor[Tenant](), "tenantId")
	p("\n## Wire conventions\n\n")
	p("- Every method is `POST /api/compute/{resource}/{verb}` with a JSON body (`Content-Type: application/json`); the answer is JSON. "+
		"Locally (`make run`) the base URL is `%s`.\n", LocalServer)
	p("- The raw body is at most %s (else `INVALID_INPUT`, `details.reason: too_large`). Decoding is strict at every depth: an unknown member, a duplicate key, `null`, "+
		"a wrong JSON type, trailing data or nesting deeper than %d levels is `INVALID_INPUT` with `details.field` naming the member by its JSON path "+
		"(`window.end`, `manifest.payload.binaries[0].url`); only a DSSE envelope's own unknown members are ignored (below).\n", bytesHuman(MaxBody), strictjson.MaxDepth)
	p("- Every input has `tenantId`: the tenant the caller acts as, required, at most %d characters, matching `%s`. Every capacity method is scoped to it.\n",
		*tenant.Max, TenantIDPattern)
	for _, r := range WireRules {
		p("- %s\n", r)
	}
	p("- Success is HTTP 200 with the method's result object (each method's Output table). Every answer carries an `x-request-id` header, the same id as an error's `requestId`.\n")

	p("\n## Authentication\n\n")
	p("- In AWS, API Gateway's JWT authorizer checks `Authorization: Bearer <JWT>`; the principal is the token's `sub` claim.\n")
	p("- The local gateway (`make run`) also accepts `Authorization: Bearer dev:<principal>` (a non-empty principal); the Lambdas behind API Gateway never do.\n")
	p("- Checks run in this order: authentication (`UNAUTHENTICATED`) → decoding and validation (`INVALID_INPUT`) → authorization: Better IAM decides the method's " +
		"`permission @ scope`, the scope filled with the input's `tenantId` (`PERMISSION_DENIED`; no decision is `UNAVAILABLE`) → the method. " +
		"`reservations.create` is the exception: it writes a draft first and Better IAM decides once, on the draft.\n")

	p("\n## Errors\n\nAn error is its HTTP status and the envelope\n\n```json\n{\"error\": {\"code\": \"QUOTA_EXCEEDED\", \"message\": \"…\", \"details\": {\"reservationId\": \"…\", \"requested\": 4, \"used\": 6, \"max\": 8}}, \"requestId\": \"…\"}\n```\n\n")
	p("`message` is for people and may change; `code` and `details` are the contract. `details` is always an object (empty when there is nothing to add). Each method's Errors table lists its cases.\n\n")
	p("| Code | HTTP | When |\n|---|---|---|\n")
	for _, c := range apierr.Codes {
		p("| `%s` | %d | %s |\n", c, apierr.HTTPStatus(c), cell(CodeDoc(c)))
	}
	p("\n`NOT_IMPLEMENTED` answers only a catalog method whose module a build does not serve (none in this release). A path no method serves is `404` (the local gateway answers `NOT_FOUND` with `details.path`; another HTTP method than POST is `405`, `INVALID_INPUT` with `reason: method_not_allowed`).\n\n")
	p("### Details keys\n\n| Key | Type | Meaning |\n|---|---|---|\n")
	for _, k := range DetailKeys {
		d := k.Doc
		if k.Enum != nil {
			d += "; one of " + enumValues(k.Enum)
		}
		typ := k.Type
		if typ == "array" {
			typ = "array of string"
		}
		p("| `%s` | %s | %s |\n", k.Key, typ, cell(d))
	}

	page := fieldOf(reflect.TypeFor[Page](), "limit")
	cur := fieldOf(reflect.TypeFor[Page](), "cursor")
	usage := fieldOf(reflect.TypeFor[PoolUsageInput](), "limit")
	p("\n## Pagination\n\n")
	p("- List methods take an optional `limit` (%d..%d, default %d) and `cursor` (an opaque string of at most %s characters). "+
		"An answer with more to come carries `nextCursor`: send it back as `cursor`, with the same filters, for the next page; an answer without it is the last page.\n",
		*page.Min, *page.Max, paging.DefaultLimit, num(*cur.Max))
	p("- `releases.list` without `limit` returns every release. `pools.usage` pages by node: `limit` is %d..%d nodes (default %d).\n",
		*usage.Min, *usage.Max, DefaultUsageNodes)
	p("- A cursor is bound to the method, the caller's tenant and the filters (not to `limit`). One that was tampered with or belongs to another query is `INVALID_INPUT` with `details.field: cursor`; it never reveals another tenant's data.\n")
	p("- The typed Go client follows cursors for you: `<Method>Pages` returns an iterator over the pages.\n")

	token := fieldOf(reflect.TypeFor[CreateReservationInput](), "clientToken")
	p("\n## Idempotency\n\n")
	p("- `reservations.create` takes an optional `clientToken` (1..%d characters), scoped to the tenant **and** the principal: a retry with the same token gets the first answer "+
		"(the reservation as it is now, or the same error with the same `details.reservationId`); the same token with another request (pool, resource, count, topology, window as sent) is `CONFLICT` "+
		"(`details.field: clientToken`). No other principal can claim or block a token.\n", *token.Max)
	p("- `pools.create` with the same request again returns the stored pool; `releases.register` of a version already recorded with the same sequence returns it with `replayed: true`.\n")
	p("- `reservations.release` of a terminal reservation returns it unchanged. Retry `UNAVAILABLE`; retry a create with the same `clientToken`, so that it cannot be made twice.\n")

	p("\n## Reservation states\n\n")
	p("Every transition is a conditional write on the expected state; states only move forward. A reservation holds its quota charge and devices until it is terminal.\n\n")
	p("```mermaid\nstateDiagram-v2\n    [*] --> %s\n", Draft)
	for _, s := range ReservationStates {
		for _, t := range ReservationStates {
			if s.CanMoveTo(t) {
				p("    %s --> %s\n", s, t)
			}
		}
	}
	for _, s := range ReservationStates {
		if s.Terminal() {
			p("    %s --> [*]\n", s)
		}
	}
	p("```\n\n| State | Terminal | Moves to | Meaning |\n|---|---|---|---|\n")
	for _, s := range ReservationStates {
		var to []string
		for _, t := range ReservationStates {
			if s.CanMoveTo(t) {
				to = append(to, "`"+string(t)+"`")
			}
		}
		p("| `%s` | %s | %s | %s |\n", s, yesNo(s.Terminal()), strings.Join(to, ", "), cell(stateDocs[s]))
	}
	p("\nThe reconciler (every minute in AWS) moves `placed` → `binding` once `window.start` has come, `binding` → `active` once the devices are bound, "+
		"`active` → `released` (`releasedBy: window_end`) once `window.end` has passed (straight from any live state if the whole window passed), and a draft older than %s → `expired`.\n",
		human(StaleAfter))

	p("\n## Limits\n\n| Limit | Value |\n|---|---|\n")
	stmt := reflect.TypeFor[release.Statement]()
	bin := reflect.TypeFor[release.Binary]()
	limits := [][2]string{
		{"request body", bytesHuman(MaxBody)},
		{"JSON nesting", fmt.Sprintf("%d levels", strictjson.MaxDepth)},
		{"`tenantId`", fmt.Sprintf("1..%d characters, `%s`", *tenant.Max, TenantIDPattern)},
		{"`poolId`", fmt.Sprintf("`%s`", PoolIDPattern)},
		{"resource name", fmt.Sprintf("`%s`", ResourcePattern)},
		{"resources per pool", fmt.Sprintf("1..%d", MaxResources)},
		{"devices per resource", fmt.Sprintf("1..%s", num(MaxDevicesPerResource))},
		{"`nodeSize`", fmt.Sprintf("1..%d devices (default %d)", MaxNodeSize, DefaultNodeSize)},
		{"devices a pool lists inline", fmt.Sprintf("%s in all (`devicesListed`)", num(InlineDevices))},
		{"quota `max`", fmt.Sprintf("0..%s", num(MaxQuota))},
		{"reservation `count`", fmt.Sprintf("1..%s", num(MaxCount))},
		{"reservation window", "at most " + human(MaxWindow) + ", half-open `[start, end)`"},
		{"`window.start`", fmt.Sprintf("at most %s ahead and at most %s in the past (default: now)", human(MaxLeadTime), human(MaxStartSkew))},
		{"`clientToken`", fmt.Sprintf("1..%d characters", *token.Max)},
		{"creates of one quota row in flight at once", fmt.Sprintf("%d (one more answers `UNAVAILABLE`; retry)", MaxInFlight)},
		{"a draft without an outcome", "expires after " + human(StaleAfter)},
		{"rejected and expired reservations", "kept " + human(Retention)},
		{"denied reservations", "kept " + human(DeniedRetention) + ", listed only with `state: denied`"},
		{"`pools.usage` span", fmt.Sprintf("1..%d hours (default %d), at most %d nodes a page", MaxUsageHours, MaxUsageHours, MaxUsageNodes)},
		{"list `limit`", fmt.Sprintf("%d..%d (default %d)", *page.Min, *page.Max, paging.DefaultLimit)},
		{"a `pools.list` page", fmt.Sprintf("ends early once its pools list %s devices", num(PoolPageDevices))},
		{"release `version`", fmt.Sprintf("SemVer 2.0, at most %d characters", *fieldOf(stmt, "version").Max)},
		{"release `sequence`", fmt.Sprintf("%d..%s", *fieldOf(stmt, "sequence").Min, num(*fieldOf(stmt, "sequence").Max))},
		{"release binaries", fmt.Sprintf("%d..%d, one per platform, at least one for linux; `url` https, at most %s characters", *fieldOf(stmt, "binaries").Min, *fieldOf(stmt, "binaries").Max, num(*fieldOf(bin, "url").Max))},
	}
	for _, l := range limits {
		p("| %s | %s |\n", l[0], cell(l[1]))
	}

	p("\n## Values\n\nThe values of enumerated fields and details, and what each means.\n")
	for _, e := range Enums {
		if e == StateEnum {
			continue // the state machine above
		}
		p("\n### %s\n\n| Value | Meaning |\n|---|---|\n", e.Name)
		for _, v := range e.Values {
			p("| `%s` | %s |\n", v.Value, cell(v.Doc))
		}
	}
	return b.String()
}

// fieldOf returns the member name of struct t as strictjson reads it.
func fieldOf(t reflect.Type, name string) strictjson.Field {
	for _, f := range strictjson.Fields(t) {
		if f.Name == name {
			return f
		}
	}
	panic(fmt.Sprintf("api: %v has no member %q", t, name))
}

// Brief is the first sentence of m's summary: the index's and the OpenAPI
// operation's summary, the typed client's comment.
func (m *Method) Brief() string {
	if i := strings.Index(m.Summary, ". "); i >= 0 {
		return m.Summary[:i+1]
	}
	return m.Summary
}
