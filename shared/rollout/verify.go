package rollout

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/strictjson"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// Patterns named by the tags of Binary (release.go): a platform is os/arch
// or os/arch/variant in lowercase (docs/reference/releases.md); a digest is lowercase hex.
var (
	_ = strictjson.RegisterPattern("platform", `^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9_.]+)?$`)
	_ = strictjson.RegisterPattern("sha256hex", `^[0-9a-f]{64}$`)
)

// semverPattern is the official SemVer 2.0.0 expression (semver.org). Build
// metadata is allowed and makes a distinct version.
var semverPattern = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Reasons carried in details.reason of a rejected manifest (docs/reference/releases.md).
const (
	ReasonMalformed         = "malformed"
	ReasonPayloadType       = "payload_type"
	ReasonUnknownKey        = "unknown_key"
	ReasonBadSignature      = "bad_signature"
	ReasonThreshold         = "threshold"
	ReasonInvalidField      = "invalid_field"
	ReasonExpired           = "expired"
	ReasonDuplicatePlatform = "duplicate_platform"
	ReasonNoLinuxBinary     = "no_linux_binary"
)

// Envelope is a DSSE envelope (DSSE v1.0.2) as sent in the request's
// `manifest`: what Verify decodes, and what the API reference and the
// OpenAPI document describe. As the DSSE specification says, members the
// envelope or a signature does not define are ignored (consumers MUST
// ignore unrecognized fields); duplicate keys, wrong types and a missing
// member are malformed. At most 16 signatures (more is malformed) bound the work of one request, since every signature may be
// tried against every pinned key; thresholds are small.
type Envelope struct {
	strictjson.IgnoreUnknown
	PayloadType string              `json:"payloadType" bc:"required" doc:"the payload's type: must be application/vnd.bettercompute.release.v1+json"`
	Payload     string              `json:"payload" bc:"required" doc:"the release statement's bytes, base64 (standard or URL-safe alphabet, padded or not); verified as sent, never re-serialized"`
	Signatures  []EnvelopeSignature `json:"signatures" bc:"required,max=16" doc:"signatures over DSSE PAE(payloadType, payload); the manifest verifies when signatures by at least the threshold of distinct pinned keys verify"`
}

// EnvelopeSignature is one signature of an Envelope.
type EnvelopeSignature struct {
	strictjson.IgnoreUnknown
	KeyID string `json:"keyid,omitempty" doc:"a hint naming the signing key: bcctl sign writes the hex SHA-256 of the key's SubjectPublicKeyInfo DER (the pins' keyid); optional, and a signature is tried under every pinned key whatever it names"`
	Sig   string `json:"sig" bc:"required" doc:"the signature, base64 (standard or URL-safe): ECDSA P-256 over SHA-256(PAE) as ASN.1 DER (what KMS ECDSA_SHA_256 returns; a raw r‖s signature does not verify), or Ed25519 over PAE"`
}

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
	var env Envelope
	if err := strictjson.Decode(envelopeJSON, &env, "manifest"); err != nil {
		return nil, decodeError(ReasonMalformed, err, "manifest")
	}
	payload, err := decodeBase64(env.Payload)
	if err != nil {
		return nil, apierr.Invalid(ReasonMalformed, "manifest.payload", "manifest.payload: %v", err)
	}
	sigs := make([][]byte, len(env.Signatures))
	for i, s := range env.Signatures {
		if sigs[i], err = decodeBase64(s.Sig); err != nil {
			field := fmt.Sprintf("manifest.signatures[%d].sig", i)
			return nil, apierr.Invalid(ReasonMalformed, field, "%s: %v", field, err)
		}
	}
	if env.PayloadType != PayloadType {
		return nil, apierr.Invalid(ReasonPayloadType, "manifest.payloadType",
			"manifest.payloadType: must be %q", PayloadType)
	}
	signers, err := p.signers(env.Signatures, sigs, dsse.PAE(env.PayloadType, payload))
	if err != nil {
		return nil, err
	}
	st, err := ParseStatement(payload, now)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(payload)
	return &Verified{Statement: st, Payload: payload, Digest: "sha256:" + hex.EncodeToString(sum[:]), Signers: signers}, nil
}

// signers returns the sorted ids of the distinct pinned keys under which a
// signature over pae verifies, or the unknown_key / bad_signature /
// threshold error.
//
// The counting is ours, not dsse.EnvelopeVerifier's: that verifier skips a
// key whose id differs from a signature's keyid (here the keyid is only a
// hint, and its default ids are SSH fingerprints, not our SPKI
// hashes), does not accept unpadded base64, prints to stdout, and cannot
// tell unknown_key from bad_signature from threshold. Only dsse.PAE is
// used from the library.
//
// A keyid naming a pinned key (hex, compared case-insensitively) is tried
// first, then every other pinned key in keyid order; the signature counts for
// the key it verifies under, and each pinned key counts once however many
// signatures it made. No signature verifies under two distinct keys, so
// crediting the first key that verifies loses nothing. A signature that named
// a pinned key but verifies under none is "bad"; one that verified under
// another pinned key than it named is not (it counts for that key).
//
// An empty signatures array is unknown_key: no signature by a pinned key.
func (p *Pins) signers(env []EnvelopeSignature, sigs [][]byte, pae []byte) ([]string, error) {
	credited := map[string]bool{}
	named := false
	badField := ""
	for i, s := range env {
		hint := strings.ToLower(s.KeyID)
		_, isPinned := p.keys[hint]
		named = named || isPinned
		id := p.verifiedUnder(hint, sigs[i], pae)
		switch {
		case id != "":
			credited[id] = true
		case isPinned && badField == "":
			badField = fmt.Sprintf("manifest.signatures[%d].sig", i)
		}
	}
	switch {
	case len(credited) >= p.threshold:
		ids := make([]string, 0, len(credited))
		for id := range credited {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids, nil
	case len(credited) == 0 && !named:
		// Say which keys signed and which are pinned: the usual cause is a
		// manifest signed with a key this deployment does not pin.
		signed := []string{}
		for _, s := range env {
			if s.KeyID != "" && !slices.Contains(signed, s.KeyID) {
				signed = append(signed, s.KeyID)
			}
		}
		return nil, apierr.Invalid(ReasonUnknownKey, "manifest.signatures",
			"manifest.signatures: no signature by a pinned release key (signed by %s; pinned: %s)",
			listOrNone(signed), listOrNone(p.ids)).
			With("signerKeyIds", signed).With("pinnedKeyIds", slices.Clone(p.ids))
	case badField != "":
		return nil, apierr.Invalid(ReasonBadSignature, badField,
			"%s: the signature does not verify under the pinned key it names", badField)
	default:
		return nil, apierr.Invalid(ReasonThreshold, "manifest.signatures",
			"manifest.signatures: %d distinct pinned keys signed, %d required", len(credited), p.threshold)
	}
}

// verifiedUnder returns the id of the pinned key sig verifies under (the
// hinted key first), or "".
func (p *Pins) verifiedUnder(hint string, sig, pae []byte) string {
	if k, ok := p.keys[hint]; ok && verifySignature(k, pae, sig) {
		return hint
	}
	for _, id := range p.ids {
		if id != hint && verifySignature(p.keys[id], pae, sig) {
			return id
		}
	}
	return ""
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
				return st, decodeError(ReasonInvalidField, err, root)
			}
		}
		return st, decodeError(ReasonMalformed, err, root)
	}
	invalid := func(field, problem string) error {
		return apierr.Invalid(ReasonInvalidField, field, "%s: %s", field, problem)
	}
	if !semverPattern.MatchString(st.Version) {
		return st, invalid(root+".version", "must be a SemVer 2.0 version")
	}
	for i, b := range st.Binaries {
		if !isHTTPSURL(b.URL) {
			return st, invalid(fmt.Sprintf("%s.binaries[%d].url", root, i), "must be an https URL with a host")
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
func isHTTPSURL(s string) bool {
	if !strings.HasPrefix(s, "https://") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https" && u.Opaque == "" && u.Hostname() != "" && u.User == nil
}

// decodeError maps a strictjson error to INVALID_INPUT with reason and the
// failing field (fallback when the error carries none).
func decodeError(reason string, err error, fallback string) *apierr.Error {
	var fe *strictjson.FieldError
	if errors.As(err, &fe) {
		field := fe.Field
		if field == "" {
			field = fallback
		}
		return apierr.Invalid(reason, field, "%s: %s", field, fe.Problem)
	}
	return apierr.Invalid(reason, fallback, "%s: %v", fallback, err)
}

var errBase64 = errors.New("must be standard or URL-safe base64")

// base64Encodings are tried in turn: standard and URL-safe alphabets, with or
// without padding. Strict rejects non-zero trailing bits, so every byte
// string has a single encoding per alphabet and padding choice.
var base64Encodings = []*base64.Encoding{
	base64.StdEncoding.Strict(), base64.RawStdEncoding.Strict(),
	base64.URLEncoding.Strict(), base64.RawURLEncoding.Strict(),
}

// decodeBase64 decodes DSSE's payload and sig fields (standard or URL-safe, padded or not). Line breaks,
// which Go's decoders would silently skip, are rejected.
func decodeBase64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errBase64
	}
	for _, enc := range base64Encodings {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errBase64
}

// listOrNone joins ids for a message ("none" when empty).
func listOrNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}
