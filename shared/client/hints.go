package client

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/release"
)

// The API's errors as a person reads them, with one line of what to do:
// bcctl and bcd-agent print them alike. The hints name bcctl's verbs (what
// an operator runs about a node or a release, whichever program failed);
// Words says how the failing program sets a field or its token.

// DetailLine renders an error's details as key=value pairs, in key order.
func DetailLine(e *apierr.Error) string {
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := e.Details[k]
		s, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		parts = append(parts, k+"="+s)
	}
	return strings.Join(parts, " ")
}

// detail is a string member of an error's details ("" when absent).
func detail(e *apierr.Error, key string) string { s, _ := e.Details[key].(string); return s }

// count is an integer detail as text ("" when absent): a number decoded
// from JSON (float64) or set by the server (int).
func count(e *apierr.Error, key string) string {
	switch v := e.Details[key].(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// Failed is the call an API error answered: its method and the request
// as sent (nil when the body was not a JSON object).
type Failed struct {
	Method  string
	Request map[string]any
}

// arg is a string member of the request, or placeholder when it has none.
func (fc Failed) arg(key, placeholder string) string {
	if s, ok := fc.Request[key].(string); ok && s != "" {
		return s
	}
	return placeholder
}

// Words are how the program that made the call lets a person set what a
// hint names: bcctl's verbs set a field by a flag, bcctl call by
// FIELD=value, the agent by its own flags and variables.
type Words struct {
	// Field says how to set a request field an INVALID_INPUT names
	// ("--pool (or POOL)", "poolId=…"); nil, or "": the hint names the
	// field alone.
	Field func(field string) string
	// Fields is where the fields and their limits are listed ("the verb's
	// --help"); "": nowhere to point to.
	Fields string
	// Token is where the bearer token comes from ("BC_TOKEN (or --token)").
	Token string
}

// Explain writes an API error as a person should read it: "CODE (HTTP n):
// message", the details (the numbers to act on) and one line of what to do.
func Explain(w io.Writer, e *apierr.Error, fc Failed, words Words) {
	fmt.Fprintf(w, "%s (HTTP %d): %s\n", e.Code, apierr.HTTPStatus(e.Code), e.Message)
	if d := DetailLine(e); d != "" {
		fmt.Fprintf(w, "    details: %s\n", d)
	}
	if h := Hint(e, fc, words); h != "" {
		fmt.Fprintf(w, "    %s\n", h)
	}
}

// Hint is one line of what to do about an API error to the call fc.
func Hint(e *apierr.Error, fc Failed, words Words) string {
	str := func(k string) string { return detail(e, k) }
	if h := releaseHint(e); h != "" {
		return h
	}
	if h := nodeHint(e, fc); h != "" {
		return h
	}
	if h := rolloutHint(e, fc); h != "" {
		return h
	}
	if n := count(e, "poolDevices"); n != "" && (e.Code == apierr.QuotaExceeded || e.Code == apierr.CapacityExhausted) {
		// No window or higher max fits a count above the pool's size.
		return "The pool has only " + n + " devices of this resource: ask for at most " + n + " (or use another pool)."
	}
	switch e.Code {
	case apierr.InvalidInput:
		listed := ""
		if words.Fields != "" {
			listed = "; " + words.Fields + " lists every field and its limits"
		}
		f := str("field")
		set := ""
		if f != "" && words.Field != nil {
			set = words.Field(f)
		}
		switch {
		case set != "":
			return fmt.Sprintf("Fix %s (the request's %s)%s.", set, f, listed)
		case f != "":
			return fmt.Sprintf("Fix the request's %s%s.", f, listed)
		}
		return "Fix the request" + listed + "."
	case apierr.Unauthenticated:
		return fmt.Sprintf("Set %s: a JWT from your identity provider, or dev:<principal> on the local gateway.", orText(words.Token, "the token"))
	case apierr.PermissionDenied:
		// Name the grant: a fleet-scope method is not granted on a tenant.
		if m := api.Lookup(fc.Method); m != nil && !m.DecideOnDraft {
			scope := m.ScopeFor(fc.arg("tenantId", "<tenant>"), map[string]string{"poolId": fc.arg("poolId", "<pool>"), "nodeId": fc.arg("nodeId", "<node>")})
			return fmt.Sprintf("The principal lacks %s on %s, this method's grant; ask an admin (locally: localstack/policy.json).", m.Permission, scope)
		}
		return "The principal lacks a grant for this method on this tenant; ask an admin (locally: localstack/policy.json)."
	case apierr.NotFound:
		if p := str("path"); p != "" {
			return fmt.Sprintf("No API method at %s: --api-url (BC_API_URL) is the base URL before /api/compute (locally %s).", p, api.LocalServer)
		}
		return "Check the id and --tenant: another tenant's pools and reservations are not visible."
	case apierr.Conflict:
		if str("field") == "clientToken" {
			return "This --client-token was used for another request (pool, resource, count, topology or window differ). Relative times count from " +
				"the minute they are sent in, so a retry in a later minute sends another window: repeat the first call's absolute --start/--end " +
				"(bcctl reservations get shows them), or use a new token."
		}
		return "The id or clientToken is taken with another definition; use another, or repeat the first request exactly."
	case apierr.QuotaExceeded:
		return "Release reservations, ask for less, or ask the pool's owner for a higher max (bcctl pools offer)."
	case apierr.CapacityExhausted:
		if str("reason") == "topology" {
			return "Devices are free but not on few enough nodes: try --topology any, a smaller count or another window."
		}
		return "No devices are free for that window: try another window or a smaller count (bcctl pools show POOL)."
	case apierr.Unavailable:
		return "A dependency is down or contended; retry (reservations create: with the same --client-token)."
	case apierr.Internal:
		return "A bug on the server: report it with the request id from its logs."
	case apierr.NotImplemented:
		return "This release does not serve the method."
	}
	return ""
}

// releaseHint is what to do about a refused release registration, by its
// reason ("" for other errors).
func releaseHint(e *apierr.Error) string {
	field := detail(e, "field")
	statementField := strings.TrimPrefix(field, "manifest.payload.")
	resign := "then sign it again (bcctl sign) and register the new manifest"
	switch {
	case e.Code == apierr.Conflict && e.Details["version"] != nil:
		return fmt.Sprintf("Version %v is registered with sequence %v: a new build needs a new version (and a sequence above the latest), %s.", e.Details["version"], e.Details["sequence"], resign)
	case e.Code != apierr.InvalidInput || !strings.HasPrefix(field, "manifest"):
		return ""
	}
	switch detail(e, "reason") {
	case release.ReasonUnknownKey:
		return "No signature is by a key this deployment pins (details.pinnedKeyIds): sign with a pinned key, or pin yours " +
			"(bcctl pubkey --key KEY.pem prints its PEM for BC_RELEASE_PINS_FILE)."
	case release.ReasonBadSignature:
		return "A signature names a pinned key but does not verify: the manifest changed after it was signed, or an ECDSA signature is raw r‖s " +
			"instead of ASN.1 DER. Sign the statement again with bcctl sign."
	case release.ReasonThreshold:
		return "Fewer distinct pinned keys signed than the deployment requires (BC_RELEASE_THRESHOLD): sign with more pinned keys (bcctl sign --key A.pem --key B.pem)."
	case release.ReasonExpired:
		return "The statement's expires has passed: set a later expires (or none) in the statement, " + resign + "."
	case "rollback":
		return fmt.Sprintf("The release channel is at sequence %v: give the statement a higher sequence, %s.", e.Details["latestSequence"], resign)
	case release.ReasonPayloadType:
		return "The envelope's payloadType must be " + release.PayloadType + ": bcctl sign writes it."
	case release.ReasonInvalidField:
		return fmt.Sprintf("Fix the statement's %s, %s.", statementField, resign)
	case release.ReasonDuplicatePlatform:
		return "Two binaries of the statement share a platform: keep one per platform, " + resign + "."
	case release.ReasonNoLinuxBinary:
		return "The statement needs a binary for linux (platform linux/…): add one, " + resign + "."
	case release.ReasonMalformed, "required", "type", "unknown_field":
		if strings.HasPrefix(field, "manifest.payload.") {
			return fmt.Sprintf("The signed statement is not a valid release statement (%s): fix the statement file, %s.", statementField, resign)
		}
		return "The manifest must be a DSSE envelope: sign the release statement first (bcctl sign --statement FILE --key KEY.pem --out manifest.json) and register the file it writes."
	}
	return ""
}

// nodeHint is what to do about an error of a nodes method ("" for what
// the general hints say well enough). The fleet's NOT_FOUND says in
// details.field whether the pool (poolId) or the node (nodeId) is missing;
// without it (an older API) the hint for a node's NOT_FOUND covers both.
func nodeHint(e *apierr.Error, fc Failed) string {
	if !strings.HasPrefix(fc.Method, "nodes.") || detail(e, "path") != "" {
		return ""
	}
	pool, node := fc.arg("poolId", "POOL"), fc.arg("nodeId", "NODE")
	register := fmt.Sprintf("bcctl nodes register --pool %s %s --key NODE-KEY.pem (or --public-key-file NODE.pub)", pool, node)
	missing := "" // which the API says is missing (an older one does not)
	if e.Code == apierr.NotFound {
		missing = detail(e, "field")
	}
	switch {
	case missing == "poolId" && fc.Method == "nodes.heartbeat":
		return fmt.Sprintf("Pool %s was not found for the report's tenant: a node reports as its pool's owner (--tenant), "+
			"whoever else the pool is offered to; bcctl pools get %s as the owner shows whether it exists.", pool, pool)
	case missing == "poolId" || (e.Code == apierr.NotFound && (fc.Method == "nodes.list" || fc.Method == "nodes.register")):
		return "Check --pool and --tenant: only the pool's owner sees and registers its nodes (a tenant offered the pool sees none)."
	case missing == "nodeId":
		return fmt.Sprintf("If %s is not registered, register it first: %s. Pool %s is there and the tenant's: only the node is missing.", node, register, pool)
	case e.Code == apierr.NotFound:
		return fmt.Sprintf("If %s is not registered, register it first: %s; if the pool is not found, check --pool and --tenant "+
			"(only the pool's owner sees its nodes).", node, register)
	case e.Code == apierr.InvalidInput && detail(e, "field") == "nodeId":
		return fmt.Sprintf("NODE is one of the pool's nodes, <resource>-node-<k> with k from 0 (gpu.h100-node-0, gpu.h100-node-1, …): "+
			"bcctl pools get %s lists each resource's NODES.", pool)
	case e.Code == apierr.InvalidInput && detail(e, "field") == "publicKey":
		return "The node's key is one ECDSA P-256 or Ed25519 key: --key KEY.pem (a private key; only its public key is sent) or " +
			"--public-key-file (a PEM PUBLIC KEY). bcctl keygen --out NODE-KEY.pem makes one."
	case e.Code == apierr.Conflict && detail(e, "field") == "publicKey":
		return fmt.Sprintf("%s is registered with the key whose keyid is details.keyId (bcctl pubkey --key FILE prints a key's keyid): "+
			"register with that key, or, if the host was re-imaged or its key lost, hand the node to the new key: "+
			"bcctl nodes register --pool %s %s --key NEW-KEY.pem --replace (it keeps its reservations and cordon, and is not placed on "+
			"until its first healthy heartbeat under the new key).", node, pool, node)
	case e.Code == apierr.Conflict && detail(e, "field") == "platform":
		return fmt.Sprintf("%s is registered as %s: repeat the registration with --platform %s, or change it with --replace "+
			"(then it is not placed on until its first healthy heartbeat).", node, detail(e, "platform"), detail(e, "platform"))
	case e.Code == apierr.PermissionDenied && fc.Method == "nodes.heartbeat":
		return fmt.Sprintf("A heartbeat needs compute:nodes:report on node:%s/%s for the principal of --token (the node's own); "+
			"ask an admin (locally: localstack/policy.json).", pool, node)
	}
	switch detail(e, "reason") {
	case api.ReasonReplay:
		return fmt.Sprintf("The report's counter must rise: sign a new report with a counter above %v (details.latestCounter).", e.Details["latestCounter"])
	case api.ReasonBadSignature:
		return fmt.Sprintf("Sign the report with the key %s was registered with (keyid details.keyId; bcctl nodes get shows it).", node)
	case api.ReasonReportStale:
		return fmt.Sprintf("The report's at must be within %s of the server's clock: sign a fresh report, and check the node's clock.", api.MaxSkew)
	case api.ReasonMismatch:
		return "The signed report names another pool or node than the request (--pool, NODE): send it for the node that signed it."
	}
	return ""
}

// rolloutHint is what to do about an error of a rollouts method, by the
// catalog's error cases ("" for what the general hints say well enough).
// A pause or resume of a rollout in another state is no error (the API
// answers it unchanged; unchangedNote says so).
func rolloutHint(e *apierr.Error, fc Failed) string {
	if !strings.HasPrefix(fc.Method, "rollouts.") || detail(e, "path") != "" {
		return ""
	}
	id := fc.arg("rolloutId", "ID")
	field := detail(e, "field")
	switch {
	case e.Code == apierr.Conflict && detail(e, "rolloutId") != "":
		holder := detail(e, "rolloutId")
		return fmt.Sprintf("A pool can be in one unfinished rollout at a time: follow %s to its end (bcctl rollouts watch %s) or abort it "+
			"(bcctl rollouts abort %s --reason …), then create this one again.", holder, holder, holder)
	case e.Code == apierr.Conflict && field == "clientToken":
		return "This --client-token was used for another rollout request (version, pools, waves or settings differ): " +
			"repeat the first command exactly to get its rollout, or use a new token."
	case e.Code == apierr.NotFound && fc.Method == "rollouts.create" && detail(e, "poolId") != "":
		return fmt.Sprintf("Pool %s does not exist: check --pool (bcctl pools get %s --tenant OWNER shows a pool to its owner).",
			detail(e, "poolId"), detail(e, "poolId"))
	case e.Code == apierr.NotFound && fc.Method == "rollouts.create":
		version := fc.arg("version", "VERSION")
		return fmt.Sprintf("Release %s is not registered: bcctl releases list shows the versions; sign its statement (bcctl sign) and "+
			"register it (bcctl releases register --manifest FILE) first.", version)
	case e.Code == apierr.NotFound:
		return fmt.Sprintf("No rollout %s: bcctl rollouts list shows the rollouts (a create refused with CONFLICT made none).", id)
	case e.Code == apierr.InvalidInput && strings.HasPrefix(field, "waves"):
		return "Waves are cumulative: each --wave covers at least as many nodes as the one before, and the last covers every node " +
			"of the rollout's pools (end with --wave 100%); the message says how many nodes they have."
	case e.Code == apierr.InvalidInput && field == "version" && detail(e, "reason") == release.ReasonExpired:
		return "The release has expired: register a new release (a new version, a higher sequence, a later expires) and roll that out."
	case e.Code == apierr.InvalidInput && field == "pools":
		return "Name each pool once (--pool POOL per pool)."
	case e.Code == apierr.Unavailable && fc.Method == "rollouts.pause" && detail(e, "dependency") == "":
		return fmt.Sprintf("A reconciler pass kept starting the rollout's nodes: retry (bcctl rollouts pause %s); once it answers, no node starts.", id)
	case e.Code == apierr.PermissionDenied:
		return "Rollouts belong to the platform: the principal of --token needs compute:fleet:admin on the fleet scope " +
			"(bcctl sends --tenant platform unless --tenant is given); ask an admin (locally: localstack/policy.json)."
	}
	return ""
}

// orText is s, or instead when s is "".
func orText(s, instead string) string {
	if s == "" {
		return instead
	}
	return s
}
