package api_test

import (
	"crypto"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/release"
)

// hostileBodies are request bodies of the shapes an attacker can send within
// the 256 KiB limit (MaxBody), each built to just under the limit. They are
// decoded into a real catalog input, as the gateway does before authorizing.
func hostileBodies(size int) []struct {
	name  string
	input func() any
	body  string
} {
	// deep nests open…close around inner inside prefix…suffix.
	deep := func(prefix, open, inner, close, suffix string) string {
		n := (size - len(prefix) - len(inner) - len(suffix)) / (len(open) + len(close))
		return prefix + strings.Repeat(open, n) + inner + strings.Repeat(close, n) + suffix
	}
	wide := func(prefix, suffix string, elem func(i int) string) string {
		var b strings.Builder
		b.WriteString(prefix)
		for i := 0; b.Len() < size-len(suffix)-32; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(elem(i))
		}
		b.WriteString(suffix)
		return b.String()
	}
	list := func() any { return new(api.ListPoolsInput) }
	register := func() any { return new(api.RegisterReleaseInput) }
	return []struct {
		name  string
		input func() any
		body  string
	}{
		{"deep-arrays", list, deep("", "[", "", "]", "")},
		{"deep-objects", list, deep("", `{"a":`, "1", "}", "")},
		{"deep-arrays-in-manifest", register, deep(`{"tenantId":"t","manifest":{"x":`, "[", "", "]", "}}")},
		{"deep-objects-in-manifest", register, deep(`{"tenantId":"t","manifest":`, `{"a":`, "1", "}", "}")},
		{"wide-object", list, wide("{", "}", func(i int) string { return `"k` + strconv.Itoa(i) + `":0` })},
		{"wide-object-in-manifest", register, wide(`{"tenantId":"t","manifest":{`, "}}", func(i int) string { return `"k` + strconv.Itoa(i) + `":0` })},
		{"wide-array", list, wide("[", "]", func(int) string { return "0" })},
		{"wide-array-in-manifest", register, wide(`{"tenantId":"t","manifest":{"signatures":[`, "]}}", func(int) string { return `{}` })},
		{"long-string", list, `{"tenantId":"` + strings.Repeat("a", size-20) + `"}`},
		{"escaped-string", list, `{"tenantId":"` + strings.Repeat(`\u0041`, (size-20)/6) + `"}`},
		{"long-number", list, `{"tenantId":"t","limit":` + strings.Repeat("9", size-40) + `}`},
	}
}

// benchBodySize is 256 KiB unless BC_BENCH_BODY sets another size (the
// decoder before the hardening issue needed smaller bodies to finish).
func benchBodySize() int {
	if s, err := strconv.Atoi(os.Getenv("BC_BENCH_BODY")); err == nil && s > 0 {
		return s
	}
	return api.MaxBody - 64
}

// refuse decodes body as the gateway does and, for a release, verifies the
// manifest as releases.register does; it reports whether either refused it.
func refuse(body []byte, in any, pins *release.Pins) bool {
	if err := api.DecodeInput(body, in); err != nil {
		return true
	}
	if r, ok := in.(*api.RegisterReleaseInput); ok {
		_, err := pins.Verify(r.Manifest, time.Now())
		return err != nil
	}
	return false
}

func benchPins(tb testing.TB) *release.Pins {
	k, err := release.GenerateKey("ed25519")
	if err != nil {
		tb.Fatal(err)
	}
	pins, err := release.NewPins([]crypto.PublicKey{k.Public()}, 1)
	if err != nil {
		tb.Fatal(err)
	}
	return pins
}

// BenchmarkDecodeHostile reports time and allocated bytes per request of
// every hostile shape; each must be refused (INVALID_INPUT) in a few ms and
// a few MB.
func BenchmarkDecodeHostile(b *testing.B) {
	pins := benchPins(b)
	for _, c := range hostileBodies(benchBodySize()) {
		b.Run(fmt.Sprintf("%s/%dKiB", c.name, len(c.body)>>10), func(b *testing.B) {
			body := []byte(c.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if !refuse(body, c.input(), pins) {
					b.Fatal("accepted a hostile body")
				}
			}
		})
	}
}
