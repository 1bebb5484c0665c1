package release_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/release"
)

// fuzzKeys are fixed keys (testdata), so the committed corpus's signed
// envelopes stay valid from run to run.
func fuzzKeys(t testing.TB) []crypto.Signer {
	var out []crypto.Signer
	for _, f := range []string{"testdata/fuzz-ecdsa.pem", "testdata/fuzz-ed25519.pem"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		k, err := release.ParsePrivateKeyPEM(data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	return out
}

// FuzzVerify feeds arbitrary envelopes to DSSE verification under two
// pinned keys, at thresholds 1 and 2. It must never panic, refuse only with
// INVALID_INPUT and a reason, and never accept what an independent check
// (the standard library's verifiers over a PAE written out here) does not:
// every signer it reports signed the payload, each key counts once, and
// there are at least threshold of them.
func FuzzVerify(f *testing.F) {
	keys := fuzzKeys(f)
	ecKey, edKey := keys[0], keys[1]
	payload := statement()
	f.Add(signed(f, payload, ecKey))
	f.Add(signed(f, payload, edKey))
	f.Add(signed(f, payload, ecKey, edKey))
	f.Add(env(payload, by(f, ecKey, payload), by(f, ecKey, payload)))          // one key twice
	f.Add(env(payload, by(f, ecKey, payload).named(keyID(f, edKey.Public())))) // keyid of the other key
	f.Add(env(payload, sig{KeyID: keyID(f, ecKey.Public()), Sig: "MEUCIQ"}))   // names a pin, does not verify
	f.Add(env(payload))                                                        // no signatures
	f.Add(envelopeJSON(release.PayloadType, base64.RawURLEncoding.EncodeToString(payload), by(f, edKey, payload)))
	f.Add(signed(f, statement(set("sequence", 7.0)), edKey))
	f.Add(signed(f, statement(platforms("linux/amd64", "linux/amd64")), edKey))
	f.Add([]byte(`{"payloadType":"x","payload":"","signatures":[],"payloadType":"y"}`))
	// The hardening issue's shapes, as a manifest.
	f.Add([]byte(`{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`))
	f.Add([]byte(strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)))
	f.Add([]byte(`{"payloadType":"` + release.PayloadType + `","payload":"e30","signatures":[` + strings.Repeat(`{"sig":"AA"},`, 2000) + `{"sig":"AA"}]}`))
	reasons := []string{"malformed", "payload_type", "unknown_key", "bad_signature", "threshold",
		"invalid_field", "expired", "duplicate_platform", "no_linux_binary"}
	pins := []*release.Pins{mustPins(f, 1, ecKey, edKey), mustPins(f, 2, ecKey, edKey)}
	pub := map[string]crypto.PublicKey{keyID(f, ecKey.Public()): ecKey.Public(), keyID(f, edKey.Public()): edKey.Public()}
	f.Fuzz(func(t *testing.T, envelope []byte) {
		for threshold, p := range pins {
			v, err := p.Verify(envelope, testNow)
			if err != nil {
				if e := apierr.As(err); e == nil || e.Code != apierr.InvalidInput || !slices.Contains(reasons, fmt.Sprint(e.Details["reason"])) {
					t.Fatalf("refusal %v is not INVALID_INPUT with a documented reason", err)
				}
				continue
			}
			if len(v.Signers) < threshold+1 {
				t.Fatalf("accepted with %d signers at threshold %d", len(v.Signers), threshold+1)
			}
			checkIndependently(t, envelope, v, pub)
		}
	})
}

// checkIndependently re-verifies an accepted envelope with the standard
// library only.
func checkIndependently(t *testing.T, envelope []byte, v *release.Verified, pub map[string]crypto.PublicKey) {
	t.Helper()
	var raw struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []struct {
			Sig string `json:"sig"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(envelope, &raw); err != nil {
		t.Fatalf("accepted an envelope encoding/json cannot read: %v", err)
	}
	payload := anyBase64(raw.Payload)
	if payload == nil || !bytes.Equal(payload, v.Payload) || raw.PayloadType != release.PayloadType {
		t.Fatalf("accepted payload %q does not match the envelope", v.Payload)
	}
	if sum := sha256.Sum256(payload); v.Digest != "sha256:"+hexString(sum[:]) {
		t.Fatalf("digest %s", v.Digest)
	}
	msg := pae(raw.PayloadType, payload)
	seen := map[string]bool{}
	for _, id := range v.Signers {
		if seen[id] {
			t.Fatalf("signer %s counted twice", id)
		}
		seen[id] = true
		key, ok := pub[id]
		if !ok {
			t.Fatalf("signer %s is not pinned", id)
		}
		verified := false
		for _, s := range raw.Signatures {
			sig := anyBase64(s.Sig)
			switch k := key.(type) {
			case *ecdsa.PublicKey:
				sum := sha256.Sum256(msg)
				verified = verified || ecdsa.VerifyASN1(k, sum[:], sig)
			case ed25519.PublicKey:
				verified = verified || ed25519.Verify(k, msg, sig)
			}
		}
		if !verified {
			t.Fatalf("signer %s has no signature that verifies", id)
		}
	}
}

func anyBase64(s string) []byte {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.Strict().DecodeString(s); err == nil {
			return b
		}
	}
	return nil
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}
