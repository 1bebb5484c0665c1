package release_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/release"
)

var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// ---- statements ----

func binary(platform string) map[string]any {
	return map[string]any{"platform": platform, "url": "https://releases.example.com/bcd/" + platform,
		"sha256": strings.Repeat("0a", 32), "size": 12345678}
}

// statement is a valid release statement, changed by mods.
func statement(mods ...func(map[string]any)) []byte {
	m := map[string]any{"version": "1.4.0", "sequence": 7, "expires": "2027-01-01T00:00:00Z",
		"binaries": []any{binary("linux/amd64"), binary("darwin/arm64")}}
	for _, f := range mods {
		f(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func set(key string, v any) func(map[string]any) { return func(m map[string]any) { m[key] = v } }
func del(key string) func(map[string]any)        { return func(m map[string]any) { delete(m, key) } }
func platforms(ps ...string) func(map[string]any) {
	bs := make([]any, len(ps))
	for i, p := range ps {
		bs[i] = binary(p)
	}
	return set("binaries", bs)
}
func setBin(i int, key string, v any) func(map[string]any) {
	return func(m map[string]any) { m["binaries"].([]any)[i].(map[string]any)[key] = v }
}

// ---- envelopes ----

// pae is DSSE's pre-authentication encoding, written out independently of
// the library the code under test uses.
func pae(payloadType string, payload []byte) []byte {
	return fmt.Appendf(nil, "DSSEv1 %d %s %d %s", len(payloadType), payloadType, len(payload), payload)
}

type sig struct {
	KeyID string `json:"keyid,omitempty"`
	Sig   string `json:"sig"`
}

// signRaw signs PAE(payloadType, payload) with s: ECDSA over its SHA-256,
// Ed25519 over PAE itself.
func signRaw(t testing.TB, s crypto.Signer, payloadType string, payload []byte) []byte {
	t.Helper()
	msg, opts := pae(payloadType, payload), crypto.SignerOpts(crypto.Hash(0))
	if _, ok := s.Public().(*ecdsa.PublicKey); ok {
		sum := sha256.Sum256(msg)
		msg, opts = sum[:], crypto.SHA256
	}
	b, err := s.Sign(rand.Reader, msg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// by is a signature by s over payload, keyid naming s.
func by(t testing.TB, s crypto.Signer, payload []byte) sig {
	return sig{KeyID: keyID(t, s.Public()), Sig: base64.StdEncoding.EncodeToString(signRaw(t, s, release.PayloadType, payload))}
}

// named relabels a signature's keyid.
func (s sig) named(keyid string) sig { s.KeyID = keyid; return s }

func envelopeJSON(payloadType, payloadB64 string, sigs ...sig) []byte {
	if sigs == nil {
		sigs = []sig{}
	}
	b, err := json.Marshal(map[string]any{"payloadType": payloadType, "payload": payloadB64, "signatures": sigs})
	if err != nil {
		panic(err)
	}
	return b
}

func env(payload []byte, sigs ...sig) []byte {
	return envelopeJSON(release.PayloadType, base64.StdEncoding.EncodeToString(payload), sigs...)
}

// signed is an envelope over payload signed by each of signers.
func signed(t testing.TB, payload []byte, signers ...crypto.Signer) []byte {
	sigs := make([]sig, len(signers))
	for i, s := range signers {
		sigs[i] = by(t, s, payload)
	}
	return env(payload, sigs...)
}

// ---- assertions ----

type outcome struct {
	reason  string   // "" for success
	field   string   // details.field ("" when absent)
	signers []string // on success; nil to skip the check
}

func checkVerify(t *testing.T, p *release.Pins, envelope []byte, want outcome) *release.Verified {
	t.Helper()
	v, err := p.Verify(envelope, testNow)
	if want.reason == "" {
		if err != nil {
			t.Fatalf("Verify: %v (details %v)", err, details(err))
		}
		if want.signers != nil && !slices.Equal(v.Signers, want.signers) {
			t.Fatalf("Signers = %v, want %v", v.Signers, want.signers)
		}
		return v
	}
	if err == nil {
		t.Fatalf("Verify succeeded, want reason %q field %q", want.reason, want.field)
	}
	e := apierr.As(err)
	if e == nil || e.Code != apierr.InvalidInput {
		t.Fatalf("Verify error %v is not INVALID_INPUT", err)
	}
	field, _ := e.Details["field"].(string)
	if e.Details["reason"] != want.reason || field != want.field {
		t.Fatalf("Verify error %q: reason %v field %q, want reason %q field %q",
			e.Message, e.Details["reason"], field, want.reason, want.field)
	}
	return nil
}

func details(err error) map[string]any {
	if e := apierr.As(err); e != nil {
		return e.Details
	}
	return nil
}

func mustPins(t testing.TB, threshold int, signers ...crypto.Signer) *release.Pins {
	t.Helper()
	keys := make([]crypto.PublicKey, len(signers))
	for i, s := range signers {
		keys[i] = s.Public()
	}
	p, err := release.NewPins(keys, threshold)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sorted(ids ...string) []string { slices.Sort(ids); return ids }

// ---- tests ----

func TestVerifyReasons(t *testing.T) {
	ecA := newKey(t, release.AlgECDSAP256) // pinned
	edB := newKey(t, release.AlgEd25519)   // pinned
	stranger := newKey(t, release.AlgECDSAP256)
	strangerEd := newKey(t, release.AlgEd25519)
	idA, idB := keyID(t, ecA.Public()), keyID(t, edB.Public())
	pins1 := mustPins(t, 1, ecA, edB)
	pins2 := mustPins(t, 2, ecA, edB)

	good := statement()
	goodB64 := base64.StdEncoding.EncodeToString(good)
	sigA := by(t, ecA, good)
	other := statement(set("version", "9.9.9"))
	withStatement := func(payload []byte) []byte { return signed(t, payload, ecA) }
	raw := func(format string, args ...any) []byte { return fmt.Appendf(nil, format, args...) }
	ok := func(signers ...string) outcome { return outcome{signers: sorted(signers...)} }
	fail := func(reason, field string) outcome { return outcome{reason: reason, field: field} }
	const (
		malformed   = "malformed"
		invalid     = "invalid_field"
		sigs        = "manifest.signatures"
		sig0        = "manifest.signatures[0].sig"
		payloadPath = "manifest.payload"
		bin0        = "manifest.payload.binaries[0]"
	)
	tamperedPayload := envelopeJSON(release.PayloadType, base64.StdEncoding.EncodeToString(other), sigA)
	seventeen := make([]sig, 17)
	for i := range seventeen {
		seventeen[i] = sigA
	}

	for _, tc := range []struct {
		name string
		pins *release.Pins
		env  []byte
		want outcome
	}{
		// success
		{"ecdsa p256", pins1, withStatement(good), ok(idA)},
		{"ed25519", pins1, signed(t, good, edB), ok(idB)},
		{"no keyid, verifies under a pinned key", pins1, env(good, sigA.named("")), ok(idA)},
		{"unknown keyid hint, verifies under a pinned key", pins1, env(good, sigA.named(strings.Repeat("f", 64))), ok(idA)},
		{"keyid names another pinned key, counts for the key that verifies", pins1, env(good, sigA.named(idB)), ok(idA)},
		{"upper-case keyid", pins1, env(good, sigA.named(strings.ToUpper(idA))), ok(idA)},
		{"threshold met despite a bad signature", pins1, env(good, by(t, stranger, good).named(idB), sigA), ok(idA)},
		{"stranger signature alongside a pinned one", pins1, signed(t, good, stranger, ecA), ok(idA)},
		{"threshold 2 by two distinct keys", pins2, signed(t, good, edB, ecA), ok(idA, idB)},
		{"duplicate signature under threshold 1", pins1, env(good, sigA, sigA), ok(idA)},
		{"no expiry", pins1, withStatement(statement(del("expires"))), ok(idA)},
		{"expiry one second ahead with offset and fraction", pins1,
			withStatement(statement(set("expires", "2026-06-01T14:00:01.5+02:00"))), ok(idA)},
		{"build metadata", pins1, withStatement(statement(set("version", "1.4.0-rc.1+build.5"))), ok(idA)},
		{"platform with variant", pins1, withStatement(statement(platforms("linux/arm64/v8", "linux/arm64"))), ok(idA)},
		{"largest sequence", pins1, withStatement(statement(set("sequence", json.Number("9007199254740991")))), ok(idA)},
		{"16 signatures", pins1, env(good, slices.Repeat([]sig{sigA}, 16)...), ok(idA)},
		// DSSE v1.0.2: consumers MUST ignore unrecognized fields, of the
		// envelope and of each signature (a Sigstore bundle's cert, an
		// extension), whatever their value.
		{"unknown envelope members are ignored", pins1,
			raw(`{"payloadType":%q,"payload":%q,"signatures":[{"keyid":%q,"sig":%q}],"extension":{"kind":"x","v":[1,null]},"x":null}`, release.PayloadType, goodB64, idA, sigA.Sig),
			ok(idA)},
		{"unknown signature members are ignored", pins1,
			raw(`{"payloadType":%q,"payload":%q,"signatures":[{"cert":"-----BEGIN CERTIFICATE-----","sig":%q,"extra":{}}]}`, release.PayloadType, goodB64, sigA.Sig),
			ok(idA)},

		// malformed envelope
		{"not JSON", pins1, []byte(`{"payloadType":`), fail(malformed, "manifest.payloadType")},
		{"empty", pins1, nil, fail(malformed, "manifest")},
		{"not an object", pins1, []byte(`[]`), fail(malformed, "manifest")},
		{"trailing data", pins1, append(withStatement(good), " {}"...), fail(malformed, "manifest")},
		{"duplicate unknown envelope member", pins1,
			raw(`{"payloadType":%q,"payload":%q,"signatures":[],"extra":1,"extra":2}`, release.PayloadType, goodB64),
			fail(malformed, "manifest.extra")},
		{"duplicate envelope key", pins1,
			raw(`{"payloadType":%q,"payloadType":%[1]q,"payload":%q,"signatures":[]}`, release.PayloadType, goodB64),
			fail(malformed, "manifest.payloadType")},
		{"null payload", pins1, raw(`{"payloadType":%q,"payload":null,"signatures":[]}`, release.PayloadType),
			fail(malformed, payloadPath)},
		{"missing payloadType", pins1, raw(`{"payload":%q,"signatures":[]}`, goodB64), fail(malformed, "manifest.payloadType")},
		{"missing signatures", pins1, raw(`{"payloadType":%q,"payload":%q}`, release.PayloadType, goodB64), fail(malformed, sigs)},
		{"signatures not an array", pins1, raw(`{"payloadType":%q,"payload":%q,"signatures":{}}`, release.PayloadType, goodB64),
			fail(malformed, sigs)},
		{"signature without sig", pins1,
			raw(`{"payloadType":%q,"payload":%q,"signatures":[{"keyid":%q}]}`, release.PayloadType, goodB64, idA),
			fail(malformed, sig0)},
		{"numeric keyid", pins1,
			raw(`{"payloadType":%q,"payload":%q,"signatures":[{"keyid":1,"sig":%q}]}`, release.PayloadType, goodB64, sigA.Sig),
			fail(malformed, "manifest.signatures[0].keyid")},
		{"signature without sig", pins1,
			raw(`{"payloadType":%q,"payload":%q,"signatures":[{"keyid":%q,"cert":""}]}`, release.PayloadType, goodB64, idA),
			fail(malformed, "manifest.signatures[0].sig")},
		{"17 signatures", pins1, env(good, seventeen...), fail(malformed, sigs)},
		{"payload not base64", pins1, envelopeJSON(release.PayloadType, "not base64!", sigA), fail(malformed, payloadPath)},
		{"payload mixes base64 alphabets", pins1, envelopeJSON(release.PayloadType, "ab+_", sigA), fail(malformed, payloadPath)},
		{"payload with a line break", pins1, envelopeJSON(release.PayloadType, goodB64[:8]+"\n"+goodB64[8:], sigA),
			fail(malformed, payloadPath)},
		{"payload with non-zero trailing bits", pins1, envelopeJSON(release.PayloadType, "QR==", sigA), fail(malformed, payloadPath)},
		{"sig not base64", pins1, env(good, sigA, sig{KeyID: idB, Sig: "%%%"}), fail(malformed, "manifest.signatures[1].sig")},
		{"malformed before payload_type", pins1, envelopeJSON("text/plain", "not base64!", sigA), fail(malformed, payloadPath)},

		// payload_type
		{"wrong payload type", pins1, envelopeJSON("application/vnd.in-toto+json", goodB64,
			sig{KeyID: idA, Sig: base64.StdEncoding.EncodeToString(signRaw(t, ecA, "application/vnd.in-toto+json", good))}),
			fail("payload_type", "manifest.payloadType")},
		{"payload_type before unknown_key", pins1, envelopeJSON("", goodB64), fail("payload_type", "manifest.payloadType")},

		// unknown_key
		{"no signatures", pins1, env(good), fail("unknown_key", sigs)},
		{"signed by an unpinned key", pins1, signed(t, good, stranger), fail("unknown_key", sigs)},
		{"signed by an unpinned ed25519 key without keyid", pins1, env(good, by(t, strangerEd, good).named("")),
			fail("unknown_key", sigs)},
		{"unknown_key before statement errors", pins1, signed(t, []byte("not json"), stranger), fail("unknown_key", sigs)},

		// bad_signature
		{"pinned keyid, signed by an unpinned key", pins1, env(good, by(t, stranger, good).named(idA)), fail("bad_signature", sig0)},
		{"upper-case pinned keyid, signed by an unpinned key", pins1, env(good, by(t, stranger, good).named(strings.ToUpper(idA))),
			fail("bad_signature", sig0)},
		{"pinned keyid, garbage signature", pins1, env(good, sig{KeyID: idB, Sig: "AAAA"}), fail("bad_signature", sig0)},
		{"pinned keyid, empty signature", pins1, env(good, sig{KeyID: idA, Sig: ""}), fail("bad_signature", sig0)},
		{"payload tampered after signing", pins1, tamperedPayload, fail("bad_signature", sig0)},
		{"signature over another payload type", pins1, env(good, sig{KeyID: idA,
			Sig: base64.StdEncoding.EncodeToString(signRaw(t, ecA, "application/json", good))}), fail("bad_signature", sig0)},
		{"bad_signature before threshold", pins2, env(good, sigA, by(t, stranger, good).named(idB)),
			fail("bad_signature", "manifest.signatures[1].sig")},
		{"first bad signature is named", pins2, env(good, by(t, stranger, good), by(t, stranger, good).named(idB),
			by(t, strangerEd, good).named(idA)), fail("bad_signature", "manifest.signatures[1].sig")},
		{"bad_signature before statement errors", pins1, env([]byte("not json"), by(t, stranger, good).named(idA)),
			fail("bad_signature", sig0)},

		// threshold
		{"threshold 2, one key", pins2, signed(t, good, ecA), fail("threshold", sigs)},
		{"threshold 2, same key twice", pins2, env(good, sigA, sigA), fail("threshold", sigs)},
		{"threshold 2, same key twice with fresh signatures", pins2, signed(t, good, edB, edB), fail("threshold", sigs)},
		{"threshold 2, same key twice under two keyids", pins2, env(good, sigA, sigA.named(idB)), fail("threshold", sigs)},
		{"threshold 2, pinned and unpinned", pins2, signed(t, good, ecA, stranger), fail("threshold", sigs)},
		{"threshold before statement errors", pins2, signed(t, []byte("{}"), ecA), fail("threshold", sigs)},

		// malformed statement
		{"statement not JSON", pins1, withStatement([]byte("not json")), fail(malformed, payloadPath)},
		{"empty statement", pins1, withStatement(nil), fail(malformed, payloadPath)},
		{"statement not an object", pins1, withStatement([]byte(`["1.4.0"]`)), fail(malformed, payloadPath)},
		{"statement trailing data", pins1, withStatement(append(statement(), " {}"...)), fail(malformed, payloadPath)},
		{"statement not UTF-8", pins1, withStatement(bytes.Replace(statement(), []byte("1.4.0"), []byte("1.4.\xff"), 1)),
			fail(malformed, payloadPath)},
		{"statement unknown field", pins1, withStatement(statement(set("channel", "stable"))),
			fail(malformed, "manifest.payload.channel")},
		{"statement duplicate key", pins1, withStatement(raw(`{"version":"1.4.0","version":"1.4.1"}`)),
			fail(malformed, "manifest.payload.version")},
		{"binary unknown field", pins1, withStatement(statement(setBin(0, "arch", "amd64"))),
			fail(malformed, bin0+".arch")},
		{"unknown field outranks an earlier invalid field", pins1, withStatement(raw(`{"version":"x","sequence":0,"extra":1}`)),
			fail(malformed, "manifest.payload.extra")},
		{"unknown binary field outranks an earlier invalid field", pins1,
			withStatement(raw(`{"version":"1.0.0","sequence":"7","binaries":[{"size":0},{"os":"linux"}],"extra":1}`)),
			fail(malformed, "manifest.payload.binaries[1].os")},

		// invalid_field
		{"version missing", pins1, withStatement(statement(del("version"))), fail(invalid, "manifest.payload.version")},
		{"version null", pins1, withStatement(statement(set("version", nil))), fail(invalid, "manifest.payload.version")},
		{"version not semver", pins1, withStatement(statement(set("version", "1.4"))), fail(invalid, "manifest.payload.version")},
		{"version with leading zero", pins1, withStatement(statement(set("version", "01.4.0"))), fail(invalid, "manifest.payload.version")},
		{"version with v prefix", pins1, withStatement(statement(set("version", "v1.4.0"))), fail(invalid, "manifest.payload.version")},
		{"version over 64 characters", pins1, withStatement(statement(set("version", "1.4.0+"+strings.Repeat("a", 59)))),
			fail(invalid, "manifest.payload.version")},
		{"sequence missing", pins1, withStatement(statement(del("sequence"))), fail(invalid, "manifest.payload.sequence")},
		{"expires without zone", pins1, withStatement(statement(set("expires", "2027-01-01T00:00:00"))),
			fail(invalid, "manifest.payload.expires")},
		{"expires a date", pins1, withStatement(statement(set("expires", "2027-01-01"))), fail(invalid, "manifest.payload.expires")},
		{"expires null", pins1, withStatement(statement(set("expires", nil))), fail(invalid, "manifest.payload.expires")},
		{"binaries empty", pins1, withStatement(statement(platforms())), fail(invalid, "manifest.payload.binaries")},
		{"binaries missing", pins1, withStatement(statement(del("binaries"))), fail(invalid, "manifest.payload.binaries")},
		{"platform upper case", pins1, withStatement(statement(setBin(0, "platform", "Linux/amd64"))), fail(invalid, bin0+".platform")},
		{"platform without arch", pins1, withStatement(statement(setBin(0, "platform", "linux"))), fail(invalid, bin0+".platform")},
		{"platform with four parts", pins1, withStatement(statement(setBin(0, "platform", "linux/arm/v7/x"))),
			fail(invalid, bin0+".platform")},
		{"url http", pins1, withStatement(statement(setBin(0, "url", "http://releases.example.com/bcd"))), fail(invalid, bin0+".url")},
		{"url upper-case scheme", pins1, withStatement(statement(setBin(0, "url", "HTTPS://releases.example.com/bcd"))),
			fail(invalid, bin0+".url")},
		{"url without host", pins1, withStatement(statement(setBin(0, "url", "https:///bcd"))), fail(invalid, bin0+".url")},
		{"url with credentials", pins1, withStatement(statement(setBin(0, "url", "https://u:p@releases.example.com/bcd"))),
			fail(invalid, bin0+".url")},
		{"url file with a host", pins1, withStatement(statement(setBin(0, "url", "file://mirror/srv/bcd"))), fail(invalid, bin0+".url")},
		{"url file relative", pins1, withStatement(statement(setBin(0, "url", "file:bcd"))), fail(invalid, bin0+".url")},
		{"url file with a query", pins1, withStatement(statement(setBin(0, "url", "file:///srv/bcd?x=1"))), fail(invalid, bin0+".url")},
		{"url file of an absolute path", pins1, withStatement(statement(setBin(0, "url", "file:///srv/mirror/bcd"))), outcome{}},
		{"second url relative", pins1, withStatement(statement(setBin(1, "url", "/bcd"))),
			fail(invalid, "manifest.payload.binaries[1].url")},
		{"sha256 upper case", pins1, withStatement(statement(setBin(0, "sha256", strings.Repeat("0A", 32)))),
			fail(invalid, bin0+".sha256")},
		{"sha256 short", pins1, withStatement(statement(setBin(0, "sha256", strings.Repeat("0a", 31)))), fail(invalid, bin0+".sha256")},
		{"size zero", pins1, withStatement(statement(setBin(0, "size", 0))), fail(invalid, bin0+".size")},
		{"size a string", pins1, withStatement(statement(setBin(0, "size", "1"))), fail(invalid, bin0+".size")},
		{"size missing", pins1, withStatement(statement(func(m map[string]any) {
			delete(m["binaries"].([]any)[0].(map[string]any), "size")
		})), fail(invalid, bin0+".size")},
		{"invalid_field before expired", pins1,
			withStatement(statement(set("expires", "2020-01-01T00:00:00Z"), setBin(1, "url", "ftp://x"))),
			fail(invalid, "manifest.payload.binaries[1].url")},

		// expired
		{"expired", pins1, withStatement(statement(set("expires", "2026-01-01T00:00:00Z"))), fail("expired", "manifest.payload.expires")},
		{"expires exactly now", pins1, withStatement(statement(set("expires", "2026-06-01T14:00:00+02:00"))),
			fail("expired", "manifest.payload.expires")},
		{"expired before duplicate_platform", pins1,
			withStatement(statement(set("expires", "2026-01-01T00:00:00Z"), platforms("linux/amd64", "linux/amd64"))),
			fail("expired", "manifest.payload.expires")},

		// duplicate_platform
		{"duplicate platform", pins1, withStatement(statement(platforms("darwin/arm64", "linux/amd64", "linux/amd64"))),
			fail("duplicate_platform", "manifest.payload.binaries[2].platform")},
		{"duplicate_platform before no_linux_binary", pins1, withStatement(statement(platforms("darwin/arm64", "darwin/arm64"))),
			fail("duplicate_platform", "manifest.payload.binaries[1].platform")},

		// no_linux_binary
		{"no linux binary", pins1, withStatement(statement(platforms("darwin/arm64", "windows/amd64"))),
			fail("no_linux_binary", "manifest.payload.binaries")},
		{"linux only as an arch", pins1, withStatement(statement(platforms("freebsd/linux"))),
			fail("no_linux_binary", "manifest.payload.binaries")},
	} {
		t.Run(tc.name, func(t *testing.T) { checkVerify(t, tc.pins, tc.env, tc.want) })
	}
}

func TestVerifySequenceIntegerOnly(t *testing.T) {
	k := newKey(t, release.AlgEd25519)
	p := mustPins(t, 1, k)
	const field = "manifest.payload.sequence"
	for _, tc := range []struct {
		literal string
		ok      bool
	}{
		{"7", true},
		{"1", true},
		{"9007199254740991", true}, // 2^53 - 1
		{"7.0", false},
		{"7e0", false},
		{"7E0", false},
		{"7.5", false},
		{`"7"`, false},
		{"null", false},
		{"true", false},
		{"[7]", false},
		{"0", false},
		{"-1", false},
		{"9007199254740992", false},     // 2^53
		{"9223372036854775808", false},  // beyond int64
		{"-9223372036854775809", false}, // beyond int64
	} {
		t.Run(tc.literal, func(t *testing.T) {
			payload := fmt.Appendf(nil, `{"version":"1.4.0","sequence":%s,"binaries":[{"platform":"linux/amd64",`+
				`"url":"https://r.example.com/bcd","sha256":"%s","size":1}]}`, tc.literal, strings.Repeat("a", 64))
			want := outcome{reason: "invalid_field", field: field}
			if tc.ok {
				want = outcome{}
			}
			v := checkVerify(t, p, signed(t, payload, k), want)
			if v != nil && fmt.Sprint(v.Statement.Sequence) != tc.literal {
				t.Errorf("Sequence = %d, want %s", v.Statement.Sequence, tc.literal)
			}
		})
	}
}

func TestVerifyBase64Alphabets(t *testing.T) {
	k := newKey(t, release.AlgECDSAP256)
	p := mustPins(t, 1, k)
	// Each encoding must differ: the payload's and the signature's standard
	// base64 contain both '+' and '/' and end in padding.
	distinct := func(b []byte) bool {
		s := base64.StdEncoding.EncodeToString(b)
		return strings.Contains(s, "+") && strings.Contains(s, "/") && strings.HasSuffix(s, "=")
	}
	var payload []byte
	for i := 0; payload == nil || !distinct(payload); i++ {
		if i == 100 {
			t.Fatal("no payload with a distinctive base64 encoding")
		}
		payload = statement(setBin(0, "url", "https://releases.example.com/bcd?q=~~~???"+strings.Repeat("a", i)))
	}
	var sigBytes []byte
	for i := 0; sigBytes == nil || !distinct(sigBytes); i++ {
		if i == 1000 {
			t.Fatal("no signature with a distinctive base64 encoding")
		}
		sigBytes = signRaw(t, k, release.PayloadType, payload) // ECDSA signatures are randomized
	}
	encodings := []struct {
		name string
		enc  *base64.Encoding
	}{
		{"standard padded", base64.StdEncoding},
		{"standard unpadded", base64.RawStdEncoding},
		{"url-safe padded", base64.URLEncoding},
		{"url-safe unpadded", base64.RawURLEncoding},
	}
	id := keyID(t, k.Public())
	for _, pe := range encodings {
		for _, se := range encodings {
			t.Run("payload "+pe.name+", sig "+se.name, func(t *testing.T) {
				e := envelopeJSON(release.PayloadType, pe.enc.EncodeToString(payload), sig{KeyID: id, Sig: se.enc.EncodeToString(sigBytes)})
				v := checkVerify(t, p, e, outcome{signers: []string{id}})
				if !bytes.Equal(v.Payload, payload) {
					t.Fatal("payload differs")
				}
			})
		}
	}
}

func TestVerifyResult(t *testing.T) {
	ec := newKey(t, release.AlgECDSAP256)
	ed := newKey(t, release.AlgEd25519)
	p := mustPins(t, 2, ec, ed)
	// Whitespace and key order are kept: the payload is verified and hashed
	// as sent, never re-serialized.
	payload := []byte(`{ "sequence": 42, "version": "2.0.0+linux.1",
	  "binaries": [{"size": 5, "sha256": "` + strings.Repeat("b", 64) + `", "url": "https://r.example.com/a", "platform": "linux/arm64/v8"}],
	  "expires": "2026-06-01T12:00:00.000000001Z" }`)
	v := checkVerify(t, p, signed(t, payload, ed, ec), outcome{signers: sorted(keyID(t, ec.Public()), keyID(t, ed.Public()))})
	sum := sha256.Sum256(payload)
	if want := "sha256:" + hex.EncodeToString(sum[:]); v.Digest != want {
		t.Errorf("Digest = %s, want %s", v.Digest, want)
	}
	if !bytes.Equal(v.Payload, payload) {
		t.Errorf("Payload = %q, want the signed bytes", v.Payload)
	}
	wantExpires := time.Date(2026, 6, 1, 12, 0, 0, 1, time.UTC)
	st := v.Statement
	if st.Version != "2.0.0+linux.1" || st.Sequence != 42 || st.Expires == nil || !st.Expires.Equal(wantExpires) ||
		len(st.Binaries) != 1 || st.Binaries[0] != (release.Binary{Platform: "linux/arm64/v8", URL: "https://r.example.com/a",
		SHA256: strings.Repeat("b", 64), Size: 5}) {
		t.Errorf("Statement = %+v", st)
	}
}

func TestVerifyThresholdTwoDistinctKeys(t *testing.T) {
	a, b, c := newKey(t, release.AlgECDSAP256), newKey(t, release.AlgEd25519), newKey(t, release.AlgECDSAP256)
	p := mustPins(t, 2, a, b, c)
	payload := statement()
	for _, tc := range []struct {
		name    string
		signers []crypto.Signer
		want    outcome
	}{
		{"a and b", []crypto.Signer{a, b}, outcome{signers: sorted(keyID(t, a.Public()), keyID(t, b.Public()))}},
		{"c and a", []crypto.Signer{c, a}, outcome{signers: sorted(keyID(t, a.Public()), keyID(t, c.Public()))}},
		{"all three", []crypto.Signer{c, b, a},
			outcome{signers: sorted(keyID(t, a.Public()), keyID(t, b.Public()), keyID(t, c.Public()))}},
		{"b twice", []crypto.Signer{b, b}, outcome{reason: "threshold", field: "manifest.signatures"}},
		{"c alone", []crypto.Signer{c}, outcome{reason: "threshold", field: "manifest.signatures"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkVerify(t, p, signed(t, payload, tc.signers...), tc.want) })
	}
}

// hashSigner is a crypto.Signer that behaves like a KMS-backed one: it never
// sees the message, only what SignEnvelope hands it, and checks the options.
type hashSigner struct {
	t     *testing.T
	inner crypto.Signer
	want  crypto.Hash
	size  int // expected length of the signed input; 0 for any
}

func (s hashSigner) Public() crypto.PublicKey { return s.inner.Public() }

func (s hashSigner) Sign(r io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts.HashFunc() != s.want {
		s.t.Errorf("Sign called with hash %v, want %v", opts.HashFunc(), s.want)
	}
	if s.size != 0 && len(msg) != s.size {
		s.t.Errorf("Sign called with %d bytes, want %d", len(msg), s.size)
	}
	return s.inner.Sign(r, msg, opts)
}

func TestSignEnvelope(t *testing.T) {
	ec := newKey(t, release.AlgECDSAP256)
	ed := newKey(t, release.AlgEd25519)
	p := mustPins(t, 2, ec, ed)
	payload := statement()
	out, err := release.SignEnvelope(payload,
		hashSigner{t: t, inner: ec, want: crypto.SHA256, size: sha256.Size},
		hashSigner{t: t, inner: ed, want: crypto.Hash(0)})
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []sig  `json:"signatures"`
	}
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatal(err)
	}
	if e.PayloadType != release.PayloadType || e.Payload != base64.StdEncoding.EncodeToString(payload) ||
		len(e.Signatures) != 2 || e.Signatures[0].KeyID != keyID(t, ec.Public()) || e.Signatures[1].KeyID != keyID(t, ed.Public()) {
		t.Fatalf("envelope = %s", out)
	}
	checkVerify(t, p, out, outcome{signers: sorted(keyID(t, ec.Public()), keyID(t, ed.Public()))})

	if _, err := release.SignEnvelope(payload); err == nil {
		t.Error("SignEnvelope without signers succeeded")
	}
	// A signer whose signatures do not match its public key (a KMS key id
	// pointing at the wrong key) fails at signing time.
	liar := mismatchedSigner{pub: ec.Public(), inner: newKey(t, release.AlgECDSAP256)}
	if _, err := release.SignEnvelope(payload, liar); err == nil {
		t.Error("SignEnvelope with a mismatched signer succeeded")
	}
}

type mismatchedSigner struct {
	pub   crypto.PublicKey
	inner crypto.Signer
}

func (s mismatchedSigner) Public() crypto.PublicKey { return s.pub }
func (s mismatchedSigner) Sign(r io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	return s.inner.Sign(r, msg, opts)
}

// unknown_key says which keys signed and which are pinned.
func TestUnknownKeyNamesTheKeys(t *testing.T) {
	ecA, edB := newKey(t, release.AlgECDSAP256), newKey(t, release.AlgEd25519)
	stranger := newKey(t, release.AlgECDSAP256)
	_, err := mustPins(t, 1, ecA, edB).Verify(signed(t, statement(), stranger), testNow)
	e := apierr.As(err)
	if e == nil || e.Details["reason"] != "unknown_key" {
		t.Fatalf("got %v", err)
	}
	want := keyID(t, stranger.Public())
	if got, _ := e.Details["signerKeyIds"].([]string); len(got) != 1 || got[0] != want {
		t.Errorf("signerKeyIds %v, want [%s]", e.Details["signerKeyIds"], want)
	}
	pinned := sorted(keyID(t, ecA.Public()), keyID(t, edB.Public()))
	if got, _ := e.Details["pinnedKeyIds"].([]string); !slices.Equal(got, pinned) {
		t.Errorf("pinnedKeyIds %v, want %v", e.Details["pinnedKeyIds"], pinned)
	}
	if !strings.Contains(e.Message, want) || !strings.Contains(e.Message, pinned[0]) {
		t.Errorf("message %q names neither key", e.Message)
	}
}
