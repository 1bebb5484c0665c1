// Package cursor makes opaque pagination cursors. A cursor carries the last
// key of a page and is bound, by an HMAC, to the method, the tenant and the
// filters of its query (not to limit): a cursor that was tampered with or
// that belongs to another query is rejected as INVALID_INPUT (field cursor).
package cursor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/bettercompute/control-plane/shared/apierr"
)

// Codec signs and checks cursors with one key.
type Codec struct{ key []byte }

// New returns a codec keyed by key (BC_CURSOR_KEY).
func New(key []byte) *Codec { return &Codec{key: append([]byte(nil), key...)} }

// Binding names a query: method, tenant and filters, in a fixed order.
func Binding(method, tenant string, filters ...string) string {
	return strings.Join(append([]string{method, tenant}, filters...), "\x00")
}

// Encode returns the cursor for the page after last (nil last → "").
func (c *Codec) Encode(binding string, last map[string]string) string {
	if len(last) == 0 {
		return ""
	}
	body, _ := json.Marshal(last)
	mac := c.mac(binding, body)
	return base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// Decode checks a cursor against the query it must belong to.
func (c *Codec) Decode(token, binding string) (map[string]string, error) {
	bad := apierr.Invalid("", "cursor", "cursor is invalid or belongs to another query")
	b64body, b64mac, ok := strings.Cut(token, ".")
	if !ok {
		return nil, bad
	}
	// Strict: a cursor with non-canonical trailing bits is a tampered one.
	body, err1 := base64.RawURLEncoding.Strict().DecodeString(b64body)
	mac, err2 := base64.RawURLEncoding.Strict().DecodeString(b64mac)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, c.mac(binding, body)) {
		return nil, bad
	}
	var last map[string]string
	if err := json.Unmarshal(body, &last); err != nil || len(last) == 0 {
		return nil, bad
	}
	return last, nil
}

func (c *Codec) mac(binding string, body []byte) []byte {
	h := hmac.New(sha256.New, c.key)
	h.Write([]byte(binding))
	h.Write([]byte{0xff})
	h.Write(body)
	return h.Sum(nil)
}
