package localgw

import (
	"fmt"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Example is one quickstart call.
type Example struct {
	Title     string
	Method    string // catalog name
	Principal string // dev token principal
	Body      string
}

// Examples are the quickstart's calls at time now. A unit test decodes each
// body strictly into its method's input and the end-to-end test runs them,
// so the printed quickstart cannot drift from the API.
func Examples(now time.Time) []Example {
	end := now.UTC().Add(time.Hour).Truncate(time.Minute).Format(time.RFC3339)
	return []Example{
		{"List releases (platform admin)", "releases.list", "admin", `{"tenantId":"acme"}`},
		{"Create a pool of 8 H100s owned by tenant acme", "pools.create", "admin",
			`{"tenantId":"acme","poolId":"gpu-pool-1","resources":{"gpu.h100":8}}`},
		{"Reserve 2 of them for the next hour", "reservations.create", "admin",
			`{"tenantId":"acme","poolId":"gpu-pool-1","resource":"gpu.h100","count":2,"window":{"end":"` + end + `"}}`},
	}
}

// Quickstart is the copy-paste text `make run` prints: curl calls against
// baseURL with dev tokens (Bearer dev:<principal>, local gateway only).
func Quickstart(baseURL string, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Better Compute local stack: %s (health: %s%s)\n", baseURL, baseURL, HealthPath)
	b.WriteString("Principals (localstack/policy.json): admin (everything), alice and ops (tenant acme).\n")
	for _, ex := range Examples(now) {
		m := api.Lookup(ex.Method)
		fmt.Fprintf(&b, "\n# %s\ncurl -sS -X POST %s%s \\\n  -H 'Authorization: Bearer dev:%s' -H 'Content-Type: application/json' \\\n  -d '%s'\n",
			ex.Title, baseURL, m.Path(), ex.Principal, ex.Body)
	}
	b.WriteString("\nStop with Ctrl-C; state persists under BC_STATE_DIR (default .local/).\n")
	return b.String()
}
