package dsse

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Reasons carried in details.reason of a refused envelope.
const (
	ReasonMalformed    = "malformed"
	ReasonPayloadType  = "payload_type"
	ReasonUnknownKey   = "unknown_key"
	ReasonBadSignature = "bad_signature"
	ReasonThreshold    = "threshold"
)

// Envelope is a DSSE envelope (DSSE v1.0.2) as sent in a request (a
// release's `manifest`, a node's `report`): what Open decodes, and what the
// API reference and the OpenAPI document describe. As the DSSE
// specification says, members the envelope or a signature does not define
// are ignored (consumers MUST ignore unrecognized fields); duplicate keys,
// wrong types and a missing member are malformed. At most 16 signatures
// (more is malformed) bound the work of one request, since every signature
// may be tried against every pinned key; thresholds are small.
type Envelope struct {
	strictjson.IgnoreUnknown
	PayloadType string              `json:"payloadType" bc:"required" doc:"the payload's type: application/vnd.bettercompute.release.v1+json in a release manifest, application/vnd.bettercompute.node-report+json in a node report"`
	Payload     string              `json:"payload" bc:"required" doc:"the signed statement's bytes, base64 (standard or URL-safe alphabet, padded or not); verified as sent, never re-serialized"`
	Signatures  []EnvelopeSignature `json:"signatures" bc:"required,max=16" doc:"signatures over DSSE PAE(payloadType, payload); the envelope verifies when signatures by at least the threshold of distinct pinned keys verify (a node report: the node's registered key)"`
}

// EnvelopeSignature is one signature of an Envelope.
type EnvelopeSignature struct {
	strictjson.IgnoreUnknown
	KeyID string `json:"keyid,omitempty" doc:"a hint naming the signing key: bcctl sign writes the hex SHA-256 of the key's SubjectPublicKeyInfo DER (the pins' keyid); optional, and a signature is tried under every pinned key whatever it names"`
	Sig   string `json:"sig" bc:"required" doc:"the signature, base64 (standard or URL-safe): ECDSA P-256 over SHA-256(PAE) as ASN.1 DER (what KMS ECDSA_SHA_256 returns; a raw r‖s signature does not verify), or Ed25519 over PAE"`
}

// Opened is what a verified envelope yields.
type Opened struct {
	Payload []byte   // decoded payload bytes, exactly as signed
	Digest  string   // "sha256:" + hex sha256(Payload)
	Signers []string // keyids of the pinned keys whose signatures verified, sorted
}

// Want says what Open expects of an envelope.
type Want struct {
	PayloadType string // the one payload type accepted
	Field       string // the envelope's JSON path from the request root ("manifest", "report")
	KeyNoun     string // how messages name the pinned keys ("a pinned release key", "the node's registered key")
}

// Open decodes envelopeJSON and checks its signatures under p. Every
// failure is an INVALID_INPUT *apierr.Error whose details.reason follows
// this precedence: malformed → payload_type → unknown_key → bad_signature →
// threshold. details.field is a JSON path under want.Field
// ("manifest.signatures[0].sig"). The payload itself is not interpreted.
func (p *Pins) Open(envelopeJSON []byte, want Want) (*Opened, error) {
	root := want.Field
	var env Envelope
	if err := strictjson.Decode(envelopeJSON, &env, root); err != nil {
		return nil, DecodeError(ReasonMalformed, err, root)
	}
	payload, err := decodeBase64(env.Payload)
	if err != nil {
		return nil, apierr.Invalid(ReasonMalformed, root+".payload", "%s.payload: %v", root, err)
	}
	sigs := make([][]byte, len(env.Signatures))
	for i, s := range env.Signatures {
		if sigs[i], err = decodeBase64(s.Sig); err != nil {
			field := fmt.Sprintf("%s.signatures[%d].sig", root, i)
			return nil, apierr.Invalid(ReasonMalformed, field, "%s: %v", field, err)
		}
	}
	if env.PayloadType != want.PayloadType {
		return nil, apierr.Invalid(ReasonPayloadType, root+".payloadType",
			"%s.payloadType: must be %q", root, want.PayloadType)
	}
	signers, err := p.signers(env.Signatures, sigs, PAE(env.PayloadType, payload), want)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(payload)
	return &Opened{Payload: payload, Digest: "sha256:" + hex.EncodeToString(sum[:]), Signers: signers}, nil
}

// signers returns the sorted ids of the distinct pinned keys under which a
// signature over pae verifies, or the unknown_key / bad_signature /
// threshold error.
//
// The counting is ours, not dsse.EnvelopeVerifier's: that verifier skips a
// key whose id differs from a signature's keyid (here the keyid is only a
// hint, and its default ids are SSH fingerprints, not our SPKI
// hashes), does not accept unpadded base64, prints to stdout, and cannot
// tell unknown_key from bad_signature from threshold. Nor is the library's
// PAE linked (see PAE).
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
func (p *Pins) signers(env []EnvelopeSignature, sigs [][]byte, pae []byte, want Want) ([]string, error) {
	root := want.Field
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
			badField = fmt.Sprintf("%s.signatures[%d].sig", root, i)
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
		// Say which keys signed and which are pinned: the usual cause is an
		// envelope signed with a key this verifier does not pin.
		signed := []string{}
		for _, s := range env {
			if s.KeyID != "" && !slices.Contains(signed, s.KeyID) {
				signed = append(signed, s.KeyID)
			}
		}
		return nil, apierr.Invalid(ReasonUnknownKey, root+".signatures",
			"%s.signatures: no signature by %s (signed by %s; pinned: %s)",
			root, want.KeyNoun, listOrNone(signed), listOrNone(p.ids)).
			With("signerKeyIds", signed).With("pinnedKeyIds", slices.Clone(p.ids))
	case badField != "":
		return nil, apierr.Invalid(ReasonBadSignature, badField,
			"%s: the signature does not verify under the pinned key it names", badField)
	default:
		return nil, apierr.Invalid(ReasonThreshold, root+".signatures",
			"%s.signatures: %d distinct pinned keys signed, %d required", root, len(credited), p.threshold)
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

// DecodeError maps a strictjson error to INVALID_INPUT with reason and the
// failing field (fallback when the error carries none).
func DecodeError(reason string, err error, fallback string) *apierr.Error {
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

// Payload is an envelope's payload bytes, decoded as Open decodes them
// (standard or URL-safe base64, padded or not), without verifying any
// signature: for a caller that only needs the statement an envelope it
// verified before carries (a release log entry is the payload).
func Payload(envelopeJSON []byte) ([]byte, error) {
	var env struct {
		Payload string `json:"payload"`
	}
	if err := json.Unmarshal(envelopeJSON, &env); err != nil || env.Payload == "" {
		return nil, fmt.Errorf("dsse: not an envelope with a payload")
	}
	return decodeBase64(env.Payload)
}
