package main

import (
	"strings"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// The hints themselves are client.Hint's (bcd-agent prints them too);
// here is how bcctl's verbs and bcctl call set what a hint names.

// flagWords: a verb sets a field by its flag.
var flagWords = client.Words{Field: flagFor, Fields: "the verb's --help", Token: "BC_TOKEN (or --token)"}

// callWords: bcctl call sets a field as FIELD=value (a string) or
// FIELD:=json (anything else, and a nested field's parent), the way call
// takes it, not by a flag it does not have.
func callWords(m *api.Method) client.Words {
	types := map[string]string{}
	for _, f := range strictjson.Describe(m.Input) {
		types[f.Name] = f.Type
	}
	return client.Words{
		Field: func(field string) string {
			root := field
			if i := strings.IndexAny(field, ".["); i >= 0 {
				root = field[:i]
			}
			switch {
			case root != field:
				return root + ":={…}"
			case strings.HasPrefix(types[root], "string"):
				return root + "=…"
			}
			return root + ":=…"
		},
		Fields: "bcctl call " + m.Name + " -h",
		Token:  flagWords.Token,
	}
}

// hintFlags says how to set the request fields whose hint says more than
// one flag (the others: flagOf).
var hintFlags = map[string]string{
	"poolId":        "--pool (or POOL)",
	"reservationId": "the reservation id argument",
	"nodeId":        "the NODE argument",
	"publicKey":     "--key/--public-key-file",
	"window":        "--start/--end",
}

// flagFor says how to set the request field an error names (details.field:
// "window.end", "resources[gpu]", "manifest.payload", …).
func flagFor(field string) string {
	root, _, _ := strings.Cut(field, "[")
	if _, ok := flagRenames[root]; !ok {
		if head, _, ok := strings.Cut(root, "."); ok {
			root = head
		}
	}
	if f, ok := hintFlags[root]; ok {
		return f
	}
	return "--" + flagOf(root)
}

// kebab turns a JSON name into a flag name: toTenantId → to-tenant-id.
func kebab(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
