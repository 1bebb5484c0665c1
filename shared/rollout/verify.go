package rollout

import (
	"bytes"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/releasewire"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// semverPattern is the official SemVer 2.0.0 expression (semver.org). Build
// metadata is allowed and makes a distinct version.
var semverPattern = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Reasons carried in details.reason of a rejected manifest: the API's
// (package releasewire, with the patterns Binary's tags name).
const (
	ReasonMalformed         = releasewire.ReasonMalformed
	ReasonPayloadType       = releasewire.ReasonPayloadType
	ReasonUnknownKey        = releasewire.ReasonUnknownKey
	ReasonBadSignature      = releasewire.ReasonBadSignature
	ReasonThreshold         = releasewire.ReasonThreshold
	ReasonInvalidField      = releasewire.ReasonInvalidField
	ReasonExpired           = releasewire.ReasonExpired
	ReasonDuplicatePlatform = releasewire.ReasonDuplicatePlatform
	ReasonNoLinuxBinary     = releasewire.ReasonNoLinuxBinary
)

// The envelope, its keys and signing live in package dsse, shared with the
// fleet's node reports; these names keep the release side's vocabulary.
type (
	Envelope          = dsse.Envelope
	EnvelopeSignature = dsse.EnvelopeSignature
)

// Pins are the release signing keys a manifest must be signed by
// (docs/reference/releases.md): at least Threshold distinct pinned keys
// must sign.
type Pins struct{ *dsse.Pins }

// NewPins pins the release keys (deduplicated by keyid) with a threshold
// in 1..number of distinct keys; anything else is a configuration error at
// start, never a request error.
func NewPins(keys []crypto.PublicKey, threshold int) (*Pins, error) {
	p, err := dsse.NewPins(keys, threshold)
	if err != nil {
		return nil, fmt.Errorf("rollout: release pins: %w", err)
	}
	return &Pins{p}, nil
}

// Keys, their ids and signing (package dsse) under the names the release
// tooling has always used.
var (
	KeyID                = dsse.KeyID
	ParsePEMBundle       = dsse.ParsePEMBundle
	GenerateKey          = dsse.GenerateKey
	MarshalPrivateKeyPEM = dsse.MarshalPrivateKeyPEM
	ParsePrivateKeyPEM   = dsse.ParsePrivateKeyPEM
	MarshalPublicKeyPEM  = dsse.MarshalPublicKeyPEM
)

// Key algorithms GenerateKey accepts.
const (
	AlgECDSAP256 = dsse.AlgECDSAP256
	AlgEd25519   = dsse.AlgEd25519
)

// SignEnvelope signs a release statement: a DSSE envelope of PayloadType
// with one signature per signer, each naming its key by KeyID.
func SignEnvelope(payload []byte, signers ...crypto.Signer) ([]byte, error) {
	return dsse.Sign(PayloadType, payload, signers...)
}

// SignEnvelopeNaming is SignEnvelope with the keyid each signature names
// ("" for none): dsse.SignNaming.
func SignEnvelopeNaming(payload []byte, keyIDs []string, signers ...crypto.Signer) ([]byte, error) {
	return dsse.SignNaming(PayloadType, payload, keyIDs, signers...)
}

// manifest is what Verify expects of a release's envelope.
var manifest = dsse.Want{PayloadType: PayloadType, Field: "manifest", KeyNoun: "a pinned release key"}

// Verified is what a verified manifest yields.
type Verified struct {
	Statement Statement
	Payload   []byte   // decoded payload bytes, exactly as signed
	Digest    string   // "sha256:" + hex sha256(Payload)
	Signers   []string // keyids of the pinned keys whose signatures verified, sorted
}

// Verify checks a DSSE envelope (the JSON of the request's `manifest` object)
// at time now. Every failure is an INVALID_INPUT *apierr.Error whose
// details.reason follows this precedence (the reference's): malformed (envelope) →
// payload_type → unknown_key → bad_signature → threshold → malformed
// (statement) → invalid_field → expired → duplicate_platform →
// no_linux_binary. details.field is a JSON path from the request root
// ("manifest.signatures[0].sig", "manifest.payload.binaries[0].url").
func (p *Pins) Verify(envelopeJSON []byte, now time.Time) (*Verified, error) {
	opened, err := p.Open(envelopeJSON, manifest)
	if err != nil {
		return nil, err
	}
	st, err := ParseStatement(opened.Payload, now)
	if err != nil {
		return nil, err
	}
	return &Verified{Statement: st, Payload: opened.Payload, Digest: opened.Digest, Signers: opened.Signers}, nil
}

// ParseStatement decodes and checks a release statement (the payload of a
// manifest) at time now, as Verify does after the signatures: what `bcctl
// sign` checks before it signs. Errors are INVALID_INPUT with details.field
// under manifest.payload. The split between
// reasons: what makes the payload not a JSON object of the statement's shape
// (syntax errors, invalid UTF-8, trailing data, duplicate keys, unknown
// fields, a non-object document) is malformed; a present field of the wrong
// type (null included, "7", 7.0, 7e0 for sequence), a missing required field
// or a violated constraint is invalid_field with details.field. Then expired,
// duplicate_platform, no_linux_binary, in that order.
func ParseStatement(payload []byte, now time.Time) (Statement, error) {
	const root = "manifest.payload"
	var st Statement
	if !utf8.Valid(payload) {
		return st, apierr.Invalid(ReasonMalformed, root, "%s: is not UTF-8 JSON", root)
	}
	if err := strictjson.Decode(payload, &st, root); err != nil {
		var fe *strictjson.FieldError
		if errors.As(err, &fe) && fe.Field != root {
			switch fe.Kind {
			case "type", "required", "constraint":
				// strictjson stops at the first error in document order;
				// an unknown field further on still outranks it.
				if field := unknownStatementField(payload); field != "" {
					return st, apierr.Invalid(ReasonMalformed, root+"."+field, "%s.%s: unknown field", root, field)
				}
				return st, dsse.DecodeError(ReasonInvalidField, err, root)
			}
		}
		return st, dsse.DecodeError(ReasonMalformed, err, root)
	}
	invalid := func(field, problem string) error {
		return apierr.Invalid(ReasonInvalidField, field, "%s: %s", field, problem)
	}
	if !semverPattern.MatchString(st.Version) {
		return st, invalid(root+".version", "must be a SemVer 2.0 version")
	}
	for i, b := range st.Binaries {
		if !isHTTPSURL(b.URL) && !isFileURL(b.URL) {
			return st, invalid(fmt.Sprintf("%s.binaries[%d].url", root, i), "must be an https URL with a host, or a file URL of an absolute path on the node (file:///…)")
		}
	}
	if st.Expires != nil && !st.Expires.After(now) {
		return st, apierr.Invalid(ReasonExpired, root+".expires",
			"%s.expires: the manifest expired at %s", root, st.Expires.UTC().Format(time.RFC3339))
	}
	// Platforms are compared as strings: linux/arm64 and linux/arm64/v8 are
	// distinct platforms.
	seen := make(map[string]bool, len(st.Binaries))
	linux := false
	for i, b := range st.Binaries {
		if seen[b.Platform] {
			field := fmt.Sprintf("%s.binaries[%d].platform", root, i)
			return st, apierr.Invalid(ReasonDuplicatePlatform, field, "%s: several binaries for %s", field, b.Platform)
		}
		seen[b.Platform] = true
		os, _, _ := strings.Cut(b.Platform, "/")
		linux = linux || os == "linux"
	}
	if !linux {
		return st, apierr.Invalid(ReasonNoLinuxBinary, root+".binaries", "%s.binaries: no binary for os linux", root)
	}
	return st, nil
}

// Field names of the statement and of a binary, from their json tags.
var (
	statementFields = fieldNames(reflect.TypeFor[Statement]())
	binaryFields    = fieldNames(reflect.TypeFor[Binary]())
)

func fieldNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for _, f := range strictjson.Fields(t) {
		names[f.Name] = true
	}
	return names
}

// unknownStatementField returns the path (relative to the statement) of the
// first field, in document order, that neither Statement nor Binary defines;
// "" if there is none. payload is known to be syntactically valid JSON.
func unknownStatementField(payload []byte) string {
	keys, vals := objectFields(payload)
	for i, k := range keys {
		if !statementFields[k] {
			return k
		}
		if k != "binaries" {
			continue
		}
		var elems []json.RawMessage
		if json.Unmarshal(vals[i], &elems) != nil {
			continue
		}
		for j, e := range elems {
			bkeys, _ := objectFields(e)
			for _, bk := range bkeys {
				if !binaryFields[bk] {
					return fmt.Sprintf("binaries[%d].%s", j, bk)
				}
			}
		}
	}
	return ""
}

// objectFields lists a JSON object's keys and values in document order (none
// if data is not an object).
func objectFields(data []byte) ([]string, []json.RawMessage) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok {
			return keys, vals
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return keys, vals
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals
}

// isHTTPSURL accepts an absolute https URL with a host and no user info
// (credentials in a URL every agent downloads would leak them). The scheme
// must be written in lowercase, like every other field of the statement.
// isFileURL: file:///absolute/path (no host): a binary the node finds on
// its own disk (an air-gapped mirror, the local stack's simulated fleet).
// The signed size and sha256 bind the bytes either way.
func isFileURL(s string) bool {
	if !strings.HasPrefix(s, "file:///") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "file" && u.Host == "" && u.Opaque == "" && u.User == nil &&
		u.RawQuery == "" && u.Fragment == "" && strings.HasPrefix(u.Path, "/") && len(u.Path) > 1
}

func isHTTPSURL(s string) bool {
	if !strings.HasPrefix(s, "https://") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https" && u.Opaque == "" && u.Hostname() != "" && u.User == nil
}
