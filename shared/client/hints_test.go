package client

import (
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// Explain prints the code and status, the details and the hint; Words
// say how the failing program sets a field and its token.
func TestExplain(t *testing.T) {
	var b strings.Builder
	e := apierr.Invalid("required", "poolId", "poolId: is required")
	Explain(&b, e, Failed{Method: "quotas.get"}, Words{Field: func(f string) string { return f + "=…" }, Fields: "bcctl call quotas.get -h"})
	want := "INVALID_INPUT (HTTP 400): poolId: is required\n    details: field=poolId reason=required\n" +
		"    Fix poolId=… (the request's poolId); bcctl call quotas.get -h lists every field and its limits.\n"
	if b.String() != want {
		t.Errorf("Explain:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, c := range []struct {
		e     *apierr.Error
		fc    Failed
		words Words
		want  string
	}{
		{e, Failed{}, Words{}, "Fix the request's poolId."},
		{apierr.New(apierr.InvalidInput, "bad"), Failed{}, Words{Fields: "the verb's --help"}, "Fix the request; the verb's --help lists every field and its limits."},
		{apierr.New(apierr.Unauthenticated, "no token"), Failed{}, Words{Token: "BC_AGENT_TOKEN (or --token)"},
			"Set BC_AGENT_TOKEN (or --token): a JWT from your identity provider, or dev:<principal> on the local gateway."},
		{apierr.New(apierr.Unauthenticated, "no token"), Failed{}, Words{}, "Set the token: a JWT from your identity provider, or dev:<principal> on the local gateway."},
		{apierr.New(apierr.PermissionDenied, "denied"), Failed{Method: "nodes.heartbeat", Request: map[string]any{"poolId": "p1", "nodeId": "n-0"}}, Words{},
			"A heartbeat needs compute:nodes:report on node:p1/n-0 for the principal of --token (the node's own); ask an admin (locally: localstack/policy.json)."},
		{apierr.New(apierr.NotFound, "x").With("field", "nodeId"), Failed{Method: "nodes.heartbeat", Request: map[string]any{"poolId": "p1", "nodeId": "n-node-0"}}, Words{},
			"If n-node-0 is not registered, register it first: bcctl nodes register --pool p1 n-node-0 --key NODE-KEY.pem (or --public-key-file NODE.pub). Pool p1 is there and the tenant's: only the node is missing."},
		{apierr.New(apierr.NotFound, "x").With("field", "poolId"), Failed{Method: "nodes.heartbeat", Request: map[string]any{"poolId": "p1", "nodeId": "n-node-0"}}, Words{},
			"Pool p1 was not found for the report's tenant: a node reports as its pool's owner (--tenant), whoever else the pool is offered to; bcctl pools get p1 as the owner shows whether it exists."},
		{apierr.New(apierr.NotFound, "x").With("field", "poolId"), Failed{Method: "nodes.get", Request: map[string]any{"poolId": "p1", "nodeId": "n-node-0"}}, Words{},
			"Check --pool and --tenant: only the pool's owner sees and registers its nodes (a tenant offered the pool sees none)."},
		{apierr.New(apierr.QuotaExceeded, "x").With("requested", 40).With("poolDevices", 16), Failed{Method: "reservations.create"}, Words{},
			"The pool has only 16 devices of this resource: ask for at most 16 (or use another pool)."},
		{apierr.New(apierr.CapacityExhausted, "x").With("reason", "capacity").With("poolDevices", 8), Failed{Method: "reservations.create"}, Words{},
			"The pool has only 8 devices of this resource: ask for at most 8 (or use another pool)."},
		{apierr.New(apierr.CapacityExhausted, "x").With("reason", "capacity"), Failed{Method: "reservations.create"}, Words{},
			"No devices are free for that window: try another window or a smaller count (bcctl pools show POOL)."},
		{apierr.Invalid(api.ReasonReportStale, "report.payload.at", "stale"), Failed{Method: "nodes.heartbeat"}, Words{},
			"The report's at must be within " + api.MaxSkew.String() + " of the server's clock: sign a fresh report, and check the node's clock."},
	} {
		if got := Hint(c.e, c.fc, c.words); got != c.want {
			t.Errorf("Hint(%v) = %q, want %q", c.e, got, c.want)
		}
	}
	if got := DetailLine(apierr.New(apierr.QuotaExceeded, "x").With("used", 4).With("max", 16).With("reason", "quota")); got != "max=16 reason=quota used=4" {
		t.Errorf("DetailLine = %q", got)
	}
}
