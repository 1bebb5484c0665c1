package dsse

import (
	"bytes"
	"strings"
	"testing"

	ssl "github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// Our PAE is the library's, byte for byte, on the shapes that matter:
// empty type or body, multi-byte UTF-8 (lengths count bytes), spaces and
// binary in the body, and a body long enough for a many-digit length.
func TestPAEMatchesTheLibrary(t *testing.T) {
	cases := []struct {
		typ  string
		body []byte
	}{
		{"", nil},
		{"application/vnd.in-toto+json", []byte(`{"a":1}`)},
		{"tÿpe with spaces", []byte("bödy \x00\xff with spaces")},
		{"application/vnd.bettercompute.release+json", []byte(strings.Repeat("x", 123457))},
	}
	for _, c := range cases {
		if got, want := PAE(c.typ, c.body), ssl.PAE(c.typ, c.body); !bytes.Equal(got, want) {
			t.Errorf("PAE(%q, %d bytes) = %q…, the library's %q…", c.typ, len(c.body), got[:min(len(got), 60)], want[:min(len(want), 60)])
		}
	}
}
