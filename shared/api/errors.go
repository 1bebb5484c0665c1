package api

import (
	"slices"
	"strings"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// ErrorCase is one way a method fails: the code (its HTTP status is
// apierr.HTTPStatus's), when, and the keys its details carry.
type ErrorCase struct {
	Code    apierr.Code
	When    string
	Details []Detail
}

// Detail is one key of an error's details. Values, for a key with fixed
// values, lists the ones this case uses (a `field`'s paths, a `reason`'s
// words); every value of an enumerated key is documented by its enum.
type Detail struct {
	Key    string
	Values []string
}

func detail(key string, values ...string) Detail { return Detail{Key: key, Values: values} }

// DetailKey documents a key of error details: its JSON type and meaning.
type DetailKey struct {
	Key  string
	Type string // JSON Schema type: string, integer or array (of strings)
	Enum *Enum  // the documented values, for keys with fixed values
	Doc  string
}

// DetailKeys is every key an error's details may carry.
var DetailKeys = []DetailKey{
	{Key: "field", Type: "string", Doc: "the JSON path of the input member at fault, from the request root with dots and `[i]` (`window.end`, `manifest.payload.binaries[0].url`)"},
	{Key: "reason", Type: "string", Doc: "why, as a word: for `INVALID_INPUT` a value of invalidReason, for `CAPACITY_EXHAUSTED` `capacity` or `topology` (the reservation's reason), for `PERMISSION_DENIED` the decision's reason when Better IAM gave one"},
	{Key: "rule", Type: "string", Enum: RuleEnum, Doc: "the window rule a reservation's window breaks"},
	{Key: "reservationId", Type: "string", Doc: "the reservation the create wrote: terminal (`denied`, `rejected`) after a refusal, still a `draft` after `UNAVAILABLE` (retry with the same `clientToken`)"},
	{Key: "requested", Type: "integer", Doc: "the count asked for"},
	{Key: "used", Type: "integer", Doc: "the quota row's `used` when the admission was refused: the counts the tenant's live reservations hold charged, future bookings included (first answer only; a replay carries `requested`)"},
	{Key: "max", Type: "integer", Doc: "the quota row's `max` when the admission was refused (first answer only)"},
	{Key: "poolDevices", Type: "integer", Doc: "the pool's devices of the resource, when the count asked for is larger: no window or quota ever fits it (first answer only)"},
	{Key: "dependency", Type: "string", Enum: DependencyEnum, Doc: "the dependency that failed; absent when the object was contended instead"},
	{Key: "latestSequence", Type: "integer", Doc: "the release channel's latest registered sequence: a new release needs a higher one"},
	{Key: "version", Type: "string", Doc: "the version that is already registered (or being registered); for `releases.prove`, the version that is not"},
	{Key: "logSize", Type: "integer", Doc: "the release log's size at its latest signed checkpoint"},
	{Key: "sequence", Type: "integer", Doc: "the sequence that version is registered (or being registered) with"},
	{Key: "signerKeyIds", Type: "array", Doc: "the keyids the envelope's signatures name"},
	{Key: "pinnedKeyIds", Type: "array", Doc: "the keyids of the pinned release keys (hex SHA-256 of each key's SubjectPublicKeyInfo DER)"},
	{Key: "path", Type: "string", Doc: "the path of a request no route serves (local gateway only)"},
	{Key: "keyId", Type: "string", Doc: "the keyid of the node's registered key (hex SHA-256 of its SubjectPublicKeyInfo DER)"},
	{Key: "platform", Type: "string", Doc: "the platform the node is registered with"},
	{Key: "rolloutId", Type: "string", Doc: "the rollout that holds the pool (not finished)"},
	{Key: "poolId", Type: "string", Doc: "the pool that does not exist"},
	{Key: "latestCounter", Type: "integer", Doc: "the counter of the node's last accepted report: the next report needs a higher one"},
}

// LookupDetailKey finds a documented details key (nil when there is none).
func LookupDetailKey(key string) *DetailKey {
	for i := range DetailKeys {
		if DetailKeys[i].Key == key {
			return &DetailKeys[i]
		}
	}
	return nil
}

// decodeReasons are what strict decoding and the body limit answer.
var decodeReasons = []string{"malformed", "too_large", ReasonContentType, "too_deep", "unknown_field", "duplicate_key", "type", "required", "constraint"}

// Errors every method can answer, before and after its own.
var (
	errDecode = ErrorCase{apierr.InvalidInput,
		"the body is over " + bytesHuman(MaxBody) + ", is declared as another `Content-Type` than `application/json`, is not one JSON object, or breaks the input table: an unknown member, a duplicate key, a wrong type or `null`, a missing required member, a broken constraint, nesting deeper than " + num(strictjson.MaxDepth) + " levels (`field` is absent for problems of the whole body)",
		[]Detail{detail("field"), detail("reason", decodeReasons...)}}
	errCursor = ErrorCase{apierr.InvalidInput,
		"the cursor was tampered with, or belongs to another method, tenant or set of filters",
		[]Detail{detail("field", "cursor")}}
	errUnauthenticated = ErrorCase{apierr.Unauthenticated, "no bearer token, an invalid one, or `Bearer dev:` with an empty principal", nil}
	errDenied          = ErrorCase{apierr.PermissionDenied, "Better IAM decided deny for the method's permission on its scope", []Detail{detail("reason")}}
	errUnavailable     = ErrorCase{apierr.Unavailable, "a dependency failed; retry", []Detail{detail("dependency")}}
	errInternal        = ErrorCase{apierr.Internal, "a bug (quote the `requestId`)", nil}
)

// ErrorCases is every way m fails, in the order of their HTTP status: the
// decoding and authentication errors of every method, the method's own
// (Errors), and UNAVAILABLE and INTERNAL.
func (m *Method) ErrorCases() []ErrorCase {
	out := []ErrorCase{errDecode}
	if m.Pages() {
		out = append(out, errCursor)
	}
	out = append(out, errUnauthenticated)
	if !m.DecideOnDraft { // its own PERMISSION_DENIED carries the draft
		out = append(out, errDenied)
	}
	out = append(out, m.Errors...)
	if !slices.ContainsFunc(m.Errors, func(e ErrorCase) bool { return e.Code == apierr.Unavailable }) {
		out = append(out, errUnavailable)
	}
	out = append(out, errInternal)
	slices.SortStableFunc(out, func(a, b ErrorCase) int { return apierr.HTTPStatus(a.Code) - apierr.HTTPStatus(b.Code) })
	return out
}

// Pages reports whether m's input takes a cursor (a list method).
func (m *Method) Pages() bool {
	for _, f := range strictjson.Fields(m.Input) {
		if f.Name == "cursor" {
			return true
		}
	}
	return false
}

// ErrorStatuses lists the HTTP statuses m answers with errors, ascending,
// each with its codes.
func (m *Method) ErrorStatuses() []StatusCodes {
	var out []StatusCodes
	for _, e := range m.ErrorCases() {
		s := apierr.HTTPStatus(e.Code)
		if len(out) == 0 || out[len(out)-1].Status != s {
			out = append(out, StatusCodes{Status: s})
		}
		last := &out[len(out)-1]
		if !slices.Contains(last.Codes, e.Code) {
			last.Codes = append(last.Codes, e.Code)
		}
	}
	return out
}

// StatusCodes is one HTTP status and the codes answered with it.
type StatusCodes struct {
	Status int
	Codes  []apierr.Code
}

// describeDetails writes a case's details for a table cell.
func describeDetails(ds []Detail) string {
	var parts []string
	for _, d := range ds {
		p := "`" + d.Key + "`"
		if len(d.Values) > 0 {
			vs := make([]string, len(d.Values))
			for i, v := range d.Values {
				vs[i] = "`" + v + "`"
			}
			p += " (" + strings.Join(vs, ", ") + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}
