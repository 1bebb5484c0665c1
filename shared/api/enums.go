package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Enum is a documented set of string values. A field of an input or output
// type names one with an `enum:"<Name>"` tag; error details name them too.
// The values are the contract's constants (types_*.go), which the domains
// write, so the docs cannot drift from what the code writes (tests in this
// package check the constants against the source under shared/).
type Enum struct {
	Name   string
	Values []EnumValue
}

// EnumValue is one value and what it means.
type EnumValue struct{ Value, Doc string }

// Strings returns the values.
func (e *Enum) Strings() []string {
	out := make([]string, len(e.Values))
	for i, v := range e.Values {
		out[i] = v.Value
	}
	return out
}

// Doc returns the meaning of value v ("" when it is not a value).
func (e *Enum) Doc(v string) string {
	for _, ev := range e.Values {
		if ev.Value == v {
			return ev.Doc
		}
	}
	return ""
}

// stateDocs says what each reservation state means; terminal states are
// marked from ReservationState.Terminal.
var stateDocs = map[ReservationState]string{
	Draft: "written by `reservations.create` before Better IAM decides; the create is charging quota and placing it. " +
		"A draft with no outcome after " + human(StaleAfter) + " expires",
	Denied:   "Better IAM denied the create; kept " + human(DeniedRetention) + " and listed only when `state: \"denied\"` is asked for",
	Rejected: "allowed, but refused: `reason` says why; holds nothing; kept " + human(Retention),
	Placed:   "quota charged and devices assigned (`deviceIds`, `nodeIds`); waiting for `window.start`",
	Binding:  "the window started; the devices are being bound to the tenant",
	Active:   "the devices are bound and in use until `window.end`",
	Released: "ended by the tenant or at the window's end (`releasedBy`); its quota is credited and its devices freed; kept as history",
	Expired:  "a draft that got no outcome within " + human(StaleAfter) + " (a create that crashed or was abandoned), fenced by the reconciler with `reason: \"stale\"`; kept " + human(Retention),
}

// Enums of the API, by the name their tags use.
var (
	StateEnum = &Enum{Name: "state", Values: stateValues()}

	ReasonEnum = &Enum{Name: "reason", Values: []EnumValue{
		{ReasonQuota, "the count did not fit the tenant's quota (`used + count > max`): the create answered `QUOTA_EXCEEDED`"},
		{ReasonCapacity, "not enough devices of the resource are free for the whole window: `CAPACITY_EXHAUSTED`"},
		{ReasonTopology, "enough devices are free, but not on few enough nodes for topology `node`: `CAPACITY_EXHAUSTED`"},
		{ReasonInvalid, "the pool is not visible to the tenant (`NOT_FOUND`) or has no such resource (`INVALID_INPUT`)"},
		{ReasonStale, "an expired draft: the create got no outcome within " + human(StaleAfter)},
		{ReasonNodeUnreachable, "a history entry: a node holding its devices was not ready (unreachable, unhealthy, or it reported the bind failed) while it was binding"},
		{ReasonReplaced, "a history entry: it was moved onto free ready devices of the same shape (new `deviceIds`, quota unchanged, the old devices freed)"},
		{ReasonDisrupted, "a history entry: a rollout installed a release on one of its nodes while it held them (a forced drain)"},
	}}

	ReleasedByEnum = &Enum{Name: "releasedBy", Values: []EnumValue{
		{ReleasedByTenant, "the tenant called `reservations.release`"},
		{ReleasedByEnd, "the reconciler, once `window.end` had passed"},
	}}

	TopologyEnum = &Enum{Name: "topology", Values: []EnumValue{
		{OnNodes, "a count of at most the resource's node size on exactly one node, a larger count on ⌈count / nodeSize⌉ whole nodes (the default)"},
		{AnyDevices, "any free devices, on any number of nodes"},
	}}

	// InvalidReasonEnum: details.reason of INVALID_INPUT.
	InvalidReasonEnum = &Enum{Name: "invalidReason", Values: []EnumValue{
		{"malformed", "the body (or the manifest's envelope or statement) is not well-formed JSON of the expected shape, has trailing data, is not UTF-8, or a base64 field does not decode"},
		{"too_large", "the raw body is over " + bytesHuman(MaxBody)},
		{ReasonContentType, "the request's `Content-Type` is not `application/json` (or names a charset other than UTF-8)"},
		{"too_deep", "arrays and objects nest deeper than " + strconv.Itoa(strictjson.MaxDepth) + " levels"},
		{"unknown_field", "a member the input does not define (`details.field` names it)"},
		{"duplicate_key", "a member name appears twice in one object"},
		{"type", "a value of the wrong JSON type, `null` included"},
		{"required", "a required member is missing"},
		{"constraint", "a value breaks a rule of the field: length, range, pattern, number of entries, an enum, or a window rule (`details.rule`)"},
		{"unknown_resource", "the pool has no such resource"},
		{release.ReasonPayloadType, "the envelope's payloadType is not `" + release.PayloadType + "`"},
		{release.ReasonUnknownKey, "no signature is by a pinned release key"},
		{release.ReasonBadSignature, "a signature names a pinned key but does not verify under it, and fewer than the threshold verified; for a node report: no signature verifies under the node's registered key"},
		{release.ReasonThreshold, "fewer distinct pinned keys signed than the threshold requires"},
		{release.ReasonInvalidField, "a field of the release statement (or the node report) is missing, of the wrong type or breaks its rule (`details.field` names it)"},
		{ReasonNoNodes, "the rollout's pools have no managed node"},
		{ReasonNoBinary, "no managed node of the rollout's pools has a binary for its platform in the release"},
		{release.ReasonExpired, "the statement's `expires` has passed"},
		{release.ReasonDuplicatePlatform, "several binaries for one platform"},
		{release.ReasonNoLinuxBinary, "no binary for os `linux`"},
		{"rollback", "the sequence is not above the latest registered one (`details.latestSequence`)"},
		{ReasonMismatch, "a node report's `poolId` or `nodeId` is not the request's"},
		{ReasonReportStale, "a node report's `at` is more than " + human(MaxSkew) + " from the server's clock"},
		{"method_not_allowed", "the local gateway was sent an HTTP method other than POST (status 405)"},
		{"not_api_gateway_event", "a Lambda function was invoked with something other than an API Gateway HTTP API event (never through the API)"},
	}}

	// RuleEnum: details.rule of a refused reservation window.
	RuleEnum = &Enum{Name: "rule", Values: []EnumValue{
		{"start_in_past", "`window.start` is more than " + human(MaxStartSkew) + " in the past"},
		{"start_too_far_ahead", "`window.start` is more than " + human(MaxLeadTime) + " ahead"},
		{"end_in_past", "`window.start` was omitted (now) and `window.end` is not after now"},
		{"end_before_start", "`window.end` is not after `window.start`"},
		{"window_too_long", "the window lasts more than " + human(MaxWindow)},
	}}

	// DependencyEnum: details.dependency of UNAVAILABLE.
	DependencyEnum = &Enum{Name: "dependency", Values: []EnumValue{
		{"dynamodb", "the table did not answer or refused the request (throttling included)"},
		{"kms", "KMS did not answer"},
		{"better-iam", "no decision could be had from Better IAM (the call fails closed)"},
	}}
)

// Enums of the fleet.
var (
	NodeStateEnum = &Enum{Name: "nodeState", Values: []EnumValue{
		{string(Registered), "registered, no heartbeat yet: not placed on"},
		{string(Ready), "its last report was healthy: placed on unless cordoned"},
		{string(Unhealthy), "its last report saw fewer devices than expected, or a check failed: not placed on; reservations starting on it are moved"},
		{string(Unreachable), "no accepted heartbeat for " + num(UnreachableAfter) + " idle intervals: not placed on; reservations starting on it are moved"},
	}}
	CordonByEnum = &Enum{Name: "cordonBy", Values: []EnumValue{
		{ByOperator, "`nodes.cordon`; `nodes.uncordon` lifts it"},
		{ByRollout, "a rollout draining the node; the rollout lifts it"},
	}}
	BindActionEnum = &Enum{Name: "bindAction", Values: []EnumValue{
		{ActionBind, "give the reservation's tenant its devices (after the previous holder's unbind)"},
		{ActionUnbind, "take them back and scrub them"},
	}}
	BindingStateEnum = &Enum{Name: "bindingState", Values: []EnumValue{
		{BindBound, "the node gave the tenant the devices"},
		{BindUnbound, "the node took them back and scrubbed them"},
		{BindFailed, "the node could not bind them (the reservation is moved when it can be)"},
	}}
	InstallStateEnum = &Enum{Name: "installState", Values: []EnumValue{
		{InstallInstalling, "downloading and verifying the release"},
		{InstallInstalled, "running it"},
		{InstallFailed, "it did not verify or did not start healthy: the node runs its previous release"},
	}}
)

// Enums of rollouts.
var (
	RolloutStateEnum = &Enum{Name: "rolloutState", Values: []EnumValue{
		{string(Progressing), "waves are running"},
		{string(Paused), "no node starts; those in progress finish"},
		{string(Completed), "terminal: every node updated, failed within the limit or skipped; the version is its pools' baseline"},
		{string(Aborting), "aborted (by `rollouts.abort` or failures over `maxFailedNodes`): nodes not installing go back, then updated ones are rolled back"},
		{string(Aborted), "terminal: aborted without rollback"},
		{string(RolledBack), "terminal: every node it updated reported the release it ran before running (or failed to)"},
	}}
	RolloutStepEnum = &Enum{Name: "rolloutStep", Values: []EnumValue{
		{string(Pending), "not started"},
		{string(Draining), "cordoned by the rollout, waiting for reservations on its devices"},
		{string(Installing), "told the release: verifying it under its own pins, downloading, installing"},
		{string(Verifying), "installed: waiting for a healthy report running it"},
		{string(Updated), "running the version, healthy"},
		{string(Failed), "the install failed, the node reported unhealthy, or it was silent past the deadline"},
		{string(Skipped), "not installed: no binary for its platform, busy past the drain's wait, or the rollout ended first"},
	}}
	OnTimeoutEnum = &Enum{Name: "onTimeout", Values: []EnumValue{
		{OnTimeoutSkip, "skip the node (`skipped`, reason `busy`)"},
		{OnTimeoutForce, "install anyway; each overlapping reservation's history says `disrupted`"},
	}}
)

// Enums lists every enum, in the order the docs show them.
var Enums = []*Enum{StateEnum, ReasonEnum, ReleasedByEnum, TopologyEnum, InvalidReasonEnum, RuleEnum, DependencyEnum,
	NodeStateEnum, CordonByEnum, BindActionEnum, BindingStateEnum, InstallStateEnum, RolloutStateEnum, RolloutStepEnum, OnTimeoutEnum}

// LookupEnum finds an enum by name (nil when there is none).
func LookupEnum(name string) *Enum {
	for _, e := range Enums {
		if e.Name == name {
			return e
		}
	}
	return nil
}

func stateValues() []EnumValue {
	out := make([]EnumValue, 0, len(ReservationStates))
	for _, s := range ReservationStates {
		doc := stateDocs[s]
		if s.Terminal() {
			doc = "terminal: " + doc
		}
		out = append(out, EnumValue{string(s), doc})
	}
	return out
}

// human writes a limit's duration the way the docs say it: "5 minutes",
// "24 hours", "90 days".
func human(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d > day && d%day == 0:
		return plural(int64(d/day), "day")
	case d >= time.Hour && d%time.Hour == 0:
		return plural(int64(d/time.Hour), "hour")
	case d >= time.Minute && d%time.Minute == 0:
		return plural(int64(d/time.Minute), "minute")
	}
	return d.String()
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return num(n) + " " + unit + "s"
}

// num writes an integer with thousands separators (100,000).
func num[T ~int | ~int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// bytesHuman writes a size in KiB when it is a whole number of them.
func bytesHuman(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return num(n) + " bytes"
}

// codeDocs says when each error code is answered (the reference's Errors table).
var codeDocs = map[apierr.Code]string{
	apierr.InvalidInput:      "the input failed decoding, validation or verification; `details.reason` and/or `details.field` say why",
	apierr.Unauthenticated:   "no or invalid credentials",
	apierr.PermissionDenied:  "Better IAM decided deny",
	apierr.NotFound:          "the object does not exist or belongs to another tenant (existence is never leaked)",
	apierr.Conflict:          "the request contradicts stored state (see each method)",
	apierr.CapacityExhausted: "no set of free devices fits the reservation window",
	apierr.QuotaExceeded:     "the admission does not fit the tenant's quota",
	apierr.Unavailable:       "a dependency (DynamoDB, KMS, Better IAM) failed, or the object is contended; retry. Whatever a step left half done is finished or undone by the reconciler",
	apierr.Internal:          "a bug; logged with the request id, never explained in the answer",
	apierr.NotImplemented:    "a catalog method this build does not serve",
}

// CodeDoc says when code is answered.
func CodeDoc(c apierr.Code) string { return codeDocs[c] }
