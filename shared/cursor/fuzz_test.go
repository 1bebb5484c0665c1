package cursor_test

import (
	"maps"
	"testing"
	"unicode/utf8"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/cursor"
)

// FuzzDecode: a cursor is accepted only as Encode made it, for the query it
// was made for. Arbitrary tokens are refused (INVALID_INPUT, field cursor)
// and never panic; a real cursor round-trips, is refused for another query,
// and any one-byte change to it is refused.
func FuzzDecode(f *testing.F) {
	c := cursor.New([]byte("fuzz-key"))
	f.Add("", "sk", "RES#x", "lsk", "RES#2026", "reservations.list\x00acme", 0, byte(1))
	f.Add("eyJzayI6InNrIn0.AAAA", "pk", "RELEASE", "", "", "releases.list\x00platform", 3, byte('A'))
	f.Add("e30.e30", "sk", "\x00\xff", "lsk", "\"}", "", 40, byte(0))
	f.Fuzz(func(t *testing.T, token, k1, v1, k2, v2, binding string, at int, flip byte) {
		refused := func(tok, b string) {
			t.Helper()
			last, err := c.Decode(tok, b)
			e := apierr.As(err)
			if err == nil || e.Code != apierr.InvalidInput || e.Details["field"] != "cursor" {
				t.Fatalf("Decode(%q, %q) = %v, %v; want INVALID_INPUT on cursor", tok, b, last, err)
			}
		}
		if last, err := c.Decode(token, binding); err == nil {
			// Only a token Encode made verifies: it must be that token.
			if again := c.Encode(binding, last); again != token {
				t.Fatalf("accepted %q, which Encode writes as %q", token, again)
			}
		}
		for _, s := range []string{k1, v1, k2, v2} {
			if !utf8.ValidString(s) {
				return // a page's last key is made of DynamoDB strings: UTF-8
			}
		}
		last := map[string]string{k1: v1}
		if k2 != k1 {
			last[k2] = v2
		}
		tok := c.Encode(binding, last)
		got, err := c.Decode(tok, binding)
		if err != nil || !maps.Equal(got, last) {
			t.Fatalf("round trip of %v: %v, %v", last, got, err)
		}
		refused(tok, binding+"\x00other")
		if len(tok) > 0 {
			b := []byte(tok)
			i := at % len(b)
			if i < 0 {
				i = -i
			}
			if b[i] != flip {
				b[i] = flip
				refused(string(b), binding)
			}
		}
	})
}
