package cursor_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/cursor"
)

var (
	key     = []byte("0123456789abcdef0123456789abcdef")
	binding = cursor.Binding("reservations.list", "acme", "pool-1", "active")
	last    = map[string]string{"pk": "TENANT#acme", "sk": "RES#01J0000000000000000000000"}
)

// checkInvalid asserts err is INVALID_INPUT with details.field == "cursor"
// and a message that reveals nothing about the cursor's content.
func checkInvalid(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("Decode = nil error, want INVALID_INPUT")
	}
	e, ok := err.(*apierr.Error)
	if !ok {
		t.Fatalf("error is %T (%v), want *apierr.Error", err, err)
	}
	if e.Code != apierr.InvalidInput {
		t.Errorf("code = %s, want INVALID_INPUT", e.Code)
	}
	if e.Details["field"] != "cursor" {
		t.Errorf("details = %v, want field cursor", e.Details)
	}
	if strings.Contains(e.Message, "TENANT#") || strings.Contains(e.Message, "acme") {
		t.Errorf("message %q reveals cursor content", e.Message)
	}
}

func TestRoundTrip(t *testing.T) {
	c := cursor.New(key)
	for _, tc := range []struct {
		name    string
		binding string
		last    map[string]string
	}{
		{"typical", binding, last},
		{"one key", cursor.Binding("pools.list", "acme"), map[string]string{"poolId": "p"}},
		{"unicode and separators", cursor.Binding("quotas.list", "t:1", ""), map[string]string{"k": "a.b\x00c/é=+"}},
		{"empty value", binding, map[string]string{"k": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := c.Encode(tc.binding, tc.last)
			if tok == "" {
				t.Fatal("Encode = \"\"")
			}
			// URL-safe, unpadded: usable in a query string without escaping.
			if strings.ContainsAny(tok, "+/= ") {
				t.Errorf("cursor %q is not raw URL-safe base64", tok)
			}
			if strings.Contains(tok, "TENANT#") {
				t.Errorf("cursor %q shows its key in plain text", tok)
			}
			got, err := c.Decode(tok, tc.binding)
			if err != nil {
				t.Fatalf("Decode = %v", err)
			}
			if !reflect.DeepEqual(got, tc.last) {
				t.Errorf("Decode = %v, want %v", got, tc.last)
			}
			// A second codec with the same key decodes it (keys, not codecs, matter).
			if _, err := cursor.New(append([]byte(nil), key...)).Decode(tok, tc.binding); err != nil {
				t.Errorf("same key, new codec: %v", err)
			}
		})
	}
}

func TestEmptyLastEncodesEmpty(t *testing.T) {
	c := cursor.New(key)
	if got := c.Encode(binding, nil); got != "" {
		t.Errorf("Encode(nil) = %q, want \"\"", got)
	}
	if got := c.Encode(binding, map[string]string{}); got != "" {
		t.Errorf("Encode({}) = %q, want \"\"", got)
	}
}

func TestNewCopiesKey(t *testing.T) {
	k := append([]byte(nil), key...)
	c := cursor.New(k)
	tok := c.Encode(binding, last)
	k[0] ^= 0xff // the caller reuses its buffer
	if _, err := c.Decode(tok, binding); err != nil {
		t.Errorf("codec changed when the caller's key buffer changed: %v", err)
	}
}

func TestBinding(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b string
	}{
		{"method", cursor.Binding("reservations.list", "acme"), cursor.Binding("pools.list", "acme")},
		{"tenant", cursor.Binding("pools.list", "acme"), cursor.Binding("pools.list", "globex")},
		{"filter value", cursor.Binding("m", "t", "pool-1"), cursor.Binding("m", "t", "pool-2")},
		{"filter present vs absent", cursor.Binding("m", "t", ""), cursor.Binding("m", "t")},
		{"filter order", cursor.Binding("m", "t", "a", "b"), cursor.Binding("m", "t", "b", "a")},
		{"no concatenation ambiguity", cursor.Binding("m", "ab"), cursor.Binding("ma", "b")},
		{"tenant vs filter", cursor.Binding("m", "t", "x"), cursor.Binding("m", "tx")},
	} {
		if tc.a == tc.b {
			t.Errorf("%s: bindings %q and %q are equal", tc.name, tc.a, tc.b)
		}
	}
	if cursor.Binding("m", "t", "f") != cursor.Binding("m", "t", "f") {
		t.Error("Binding is not deterministic")
	}
}

func TestOtherQueryRejected(t *testing.T) {
	c := cursor.New(key)
	tok := c.Encode(binding, last)
	for _, tc := range []struct{ name, binding string }{
		{"another method", cursor.Binding("pools.list", "acme", "pool-1", "active")},
		{"another tenant", cursor.Binding("reservations.list", "globex", "pool-1", "active")},
		{"another pool filter", cursor.Binding("reservations.list", "acme", "pool-2", "active")},
		{"another state filter", cursor.Binding("reservations.list", "acme", "pool-1", "released")},
		{"filter dropped", cursor.Binding("reservations.list", "acme", "pool-1")},
		{"filter added", cursor.Binding("reservations.list", "acme", "pool-1", "active", "x")},
		{"empty binding", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Decode(tok, tc.binding)
			checkInvalid(t, err)
			if got != nil {
				t.Errorf("Decode returned %v with the error", got)
			}
		})
	}
}

func TestAnotherKeyRejected(t *testing.T) {
	tok := cursor.New(key).Encode(binding, last)
	// (Not key+"\x00": HMAC zero-pads keys, so that is the same key.)
	for _, k := range [][]byte{[]byte("another key"), nil, []byte("1123456789abcdef0123456789abcdef")} {
		_, err := cursor.New(k).Decode(tok, binding)
		checkInvalid(t, err)
	}
}

func TestTamperedRejected(t *testing.T) {
	c := cursor.New(key)
	tok := c.Encode(binding, last)
	b64body, b64mac, ok := strings.Cut(tok, ".")
	if !ok {
		t.Fatalf("cursor %q has no '.'", tok)
	}
	body, err := base64.RawURLEncoding.DecodeString(b64body)
	if err != nil {
		t.Fatalf("body of %q: %v", tok, err)
	}
	mac, err := base64.RawURLEncoding.DecodeString(b64mac)
	if err != nil {
		t.Fatalf("mac of %q: %v", tok, err)
	}
	enc := base64.RawURLEncoding.EncodeToString

	// The body with another last key, re-encoded, with the old MAC.
	forged := strings.Replace(string(body), "TENANT#acme", "TENANT#globex", 1)
	if forged == string(body) {
		t.Fatalf("body %s does not hold the key", body)
	}
	flippedBody := append([]byte(nil), body...)
	flippedBody[len(flippedBody)/2] ^= 0x01
	flippedMac := append([]byte(nil), mac...)
	flippedMac[0] ^= 0x80
	// A MAC computed for another key of the same query, glued to this body.
	otherTok := c.Encode(binding, map[string]string{"pk": "TENANT#acme", "sk": "RES#2"})
	_, otherMac, _ := strings.Cut(otherTok, ".")

	for _, tc := range []struct{ name, token string }{
		{"forged body, old mac", enc([]byte(forged)) + "." + b64mac},
		{"bit flipped in body", enc(flippedBody) + "." + b64mac},
		{"bit flipped in mac", b64body + "." + enc(flippedMac)},
		{"truncated mac", b64body + "." + enc(mac[:16])},
		{"mac of another body", b64body + "." + otherMac},
		{"empty mac", b64body + "."},
		{"mac missing", b64body},
		{"body missing", "." + b64mac},
		{"extra segment", tok + ".x"},
		{"mac with padding", b64body + "." + base64.URLEncoding.EncodeToString(mac)},
		{"std alphabet", base64.RawStdEncoding.EncodeToString(body) + "." + base64.RawStdEncoding.EncodeToString(mac) + "+/"},
		{"last char removed", tok[:len(tok)-1]},
		{"char appended", tok + "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.token == tok {
				t.Fatal("test token equals the genuine cursor")
			}
			got, err := c.Decode(tc.token, binding)
			checkInvalid(t, err)
			if got != nil {
				t.Errorf("Decode returned %v with the error", got)
			}
		})
	}
}

// A base64 character carries 6 bits; the last character of an unpadded
// 32-byte MAC (43 characters) carries 4 bits of MAC and 2 unused bits. A
// cursor whose string differs from the one the server issued was tampered
// with (docs/architecture.md, Pagination cursors) even if it decodes to the same bytes.
func TestNonCanonicalEncodingRejected(t *testing.T) {
	c := cursor.New(key)
	tok := c.Encode(binding, last)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	lastChar := strings.IndexByte(alphabet, tok[len(tok)-1])
	if lastChar < 0 || lastChar&0b11 != 0 {
		t.Fatalf("cursor %q does not end in a canonical character", tok)
	}
	tampered := tok[:len(tok)-1] + string(alphabet[lastChar|0b01]) // set an unused bit
	if tampered == tok {
		t.Fatal("tampered equals the genuine cursor")
	}
	_, err := c.Decode(tampered, binding)
	checkInvalid(t, err)
}

func TestGarbageRejected(t *testing.T) {
	c := cursor.New(key)
	for _, tok := range []string{
		"",
		".",
		"..",
		"garbage",
		"not.base64!",
		"e30.e30",                         // "{}" . "{}"
		"%%%.%%%",                         // not base64 at all
		strings.Repeat("A", 4096),         // long, no dot
		"eyJrIjoidiJ9." + "AAAA",          // a real body, a made-up MAC
		"bnVsbA." + "AAAA",                // "null"
		"W10." + "AAAA",                   // "[]"
		"\x00.\x00",                       // control bytes
		"eyJrIjoidiJ9.eyJrIjoidiJ9.extra", // three segments
	} {
		t.Run(tok, func(t *testing.T) {
			got, err := c.Decode(tok, binding)
			checkInvalid(t, err)
			if got != nil {
				t.Errorf("Decode returned %v", got)
			}
		})
	}
}

// sign builds a cursor for arbitrary body bytes the way Encode does
// (HMAC-SHA256 over binding, 0xff, body). TestSignedButInvalidBodyRejected
// first checks that it reproduces Encode, so the construction cannot drift.
func sign(k []byte, binding string, body []byte) string {
	h := hmac.New(sha256.New, k)
	h.Write([]byte(binding))
	h.Write([]byte{0xff})
	h.Write(body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// A correctly signed cursor must still carry a non-empty JSON object of
// strings.
func TestSignedButInvalidBodyRejected(t *testing.T) {
	c := cursor.New(key)
	if got, want := sign(key, binding, []byte(`{"k":"v"}`)), c.Encode(binding, map[string]string{"k": "v"}); got != want {
		t.Fatalf("test helper sign = %q, Encode = %q; update sign", got, want)
	}
	for _, body := range []string{`{}`, `null`, `[]`, `"s"`, `{"k":1}`, `{"k":"v"`, ``} {
		t.Run(body, func(t *testing.T) {
			got, err := c.Decode(sign(key, binding, []byte(body)), binding)
			checkInvalid(t, err)
			if got != nil {
				t.Errorf("Decode returned %v", got)
			}
		})
	}
}
