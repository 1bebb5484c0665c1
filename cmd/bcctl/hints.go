package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/bettercompute/control-plane/shared/apierr"
)

// detailLine renders an error's details as key=value pairs, in key order.
func detailLine(e *apierr.Error) string {
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := e.Details[k]
		s, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		parts = append(parts, k+"="+s)
	}
	return strings.Join(parts, " ")
}

// hint is one line of what to do about an API error.
func hint(e *apierr.Error) string {
	str := func(k string) string { s, _ := e.Details[k].(string); return s }
	switch e.Code {
	case apierr.InvalidInput:
		if f := str("field"); f != "" {
			if flag := flagFor(f); flag != "" {
				return fmt.Sprintf("Fix %s (the request's %s); the verb's --help lists every field and its limits.", flag, f)
			}
			return fmt.Sprintf("Fix the request's %s; the verb's --help lists every field and its limits.", f)
		}
		return "Fix the request; the verb's --help lists every field and its limits."
	case apierr.Unauthenticated:
		return "Set BC_TOKEN (or --token): a JWT from your identity provider, or dev:<principal> on the local gateway."
	case apierr.PermissionDenied:
		return "The principal lacks a grant for this method on this tenant; ask an admin (locally: localstack/policy.json)."
	case apierr.NotFound:
		return "Check the id and --tenant: another tenant's pools and reservations are not visible."
	case apierr.Conflict:
		return "The id or clientToken is taken with another definition; use another, or repeat the first request exactly."
	case apierr.QuotaExceeded:
		return "Release reservations, ask for less, or ask the pool's owner for a higher max (bcctl pools offer)."
	case apierr.CapacityExhausted:
		if str("reason") == "topology" {
			return "Devices are free but not on few enough nodes: try --topology any, a smaller count or another window."
		}
		return "No devices are free for that window: try another window or a smaller count (bcctl pools show POOL)."
	case apierr.Unavailable:
		return "A dependency is down or contended; retry (reservations create: with the same --client-token)."
	case apierr.Internal:
		return "A bug on the server: report it with the request id from its logs."
	case apierr.NotImplemented:
		return "This release does not serve the method."
	}
	return ""
}

// hintFlags says how to set the request fields whose hint says more than
// one flag (the others: flagOf).
var hintFlags = map[string]string{
	"poolId":        "--pool (or POOL)",
	"reservationId": "the reservation id argument",
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
