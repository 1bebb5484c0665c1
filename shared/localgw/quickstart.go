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
	end := exampleEnd(now)
	return []Example{
		// Releases are the platform's, not a tenant's.
		{"List releases (platform admin)", "releases.list", "admin", `{"tenantId":"platform"}`},
		// The README's pool, to the device: whichever creates it second
		// gets it back (the same request), not CONFLICT.
		{"Create a pool of 16 H100s (two nodes of 8) owned by tenant acme", "pools.create", "admin",
			`{"tenantId":"acme","poolId":"gpu-pool-1","resources":{"gpu.h100":16}}`},
		{"Reserve 2 of them for the next hour", "reservations.create", "admin",
			`{"tenantId":"acme","poolId":"gpu-pool-1","resource":"gpu.h100","count":2,"window":{"end":"` + end + `"}}`},
	}
}

// exampleEnd is the reservation example's end: an hour from now's minute.
func exampleEnd(now time.Time) string {
	return now.UTC().Add(time.Hour).Truncate(time.Minute).Format(time.RFC3339)
}

// EndLine sets $END, as the printed quickstart's reservation sends it, to
// an hour from the minute it is pasted in (GNU date, else BSD/macOS date),
// not the minute make run started: a quickstart pasted an hour later
// still reserves the next hour.
const EndLine = `END=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:00Z 2>/dev/null || date -u -v+1H +%Y-%m-%dT%H:%M:00Z)`

// Printed is ex's body as the quickstart prints it: a time relative to
// now is $END, set by EndLine (false: the body is printed as it is).
func (ex Example) Printed(now time.Time) (string, bool) {
	end := exampleEnd(now)
	if !strings.Contains(ex.Body, `"`+end+`"`) {
		return ex.Body, false
	}
	return strings.ReplaceAll(ex.Body, `"`+end+`"`, `"'"$END"'"`), true
}

// Stack is what the quickstart tells of a running local stack.
type Stack struct {
	URL            string // the local gateway, http://host:port
	DynamoEndpoint string
	KMSEndpoint    string
	Table          string
	Region         string
	// LogVerifierKey is the release log's signed-note verifier key
	// (bcctl releases verify reads it as BC_RELEASE_LOG_VKEY).
	LogVerifierKey string
}

// ConsoleURL is the web console of the stack.
func (s Stack) ConsoleURL() string { return s.URL + ConsolePath + "/" }

// CLIEnv is the environment of the bcctl CLI against the stack, in print order:
// every variable cmd/bcctl reads (a test checks), so `bcctl call`, `bcctl pools
// show`, `bcctl sign --kms-key` and `bcctl check` work as pasted. No AWS
// credentials: against a local endpoint the CLI uses dummy ones.
func (s Stack) CLIEnv() [][2]string {
	return [][2]string{
		{"BC_API_URL", s.URL},
		{"BC_TOKEN", "dev:admin"},
		{"BC_TENANT", "acme"},
		{"BC_DYNAMODB_ENDPOINT", s.DynamoEndpoint},
		{"BC_KMS_ENDPOINT", s.KMSEndpoint},
		{"BC_TABLE", s.Table},
		{"AWS_REGION", s.Region},
		{"BC_RELEASE_LOG_VKEY", s.LogVerifierKey},
	}
}

// Exports is CLIEnv as one shell export command, a variable a line.
func (s Stack) Exports() string {
	lines := make([]string, 0, len(s.CLIEnv()))
	for _, kv := range s.CLIEnv() {
		lines = append(lines, kv[0]+"="+shellQuote(kv[1]))
	}
	return "export " + strings.Join(lines, " \\\n  ")
}

// shellQuote leaves a word of safe characters bare and single-quotes
// anything else.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:@%+,=-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Quickstart is the copy-paste text `make run` prints: curl calls against
// the stack with dev tokens (Bearer dev:<principal>, local gateway only),
// then the environment for the bcctl CLI.
func Quickstart(s Stack, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Better Compute local stack: %s (health: %s%s)\n", s.URL, s.URL, HealthPath)
	fmt.Fprintf(&b, "Console: %s — open it in a browser and sign in as a dev principal.\n", s.ConsoleURL())
	b.WriteString("Principals (localstack/policy.json): admin (everything), alice and ops (tenant acme; alice also reads the release log), auditor (the release log only), fleet-agent (node reports only: compute:nodes:report on node:*).\n")
	for _, ex := range Examples(now) {
		m := api.Lookup(ex.Method)
		body, relative := ex.Printed(now)
		fmt.Fprintf(&b, "\n# %s\n", ex.Title)
		if relative {
			b.WriteString(EndLine + "\n")
		}
		fmt.Fprintf(&b, "curl -sS -X POST %s%s \\\n  -H 'Authorization: Bearer dev:%s' -H 'Content-Type: application/json' \\\n  -d '%s'\n",
			s.URL, m.Path(), ex.Principal, body)
	}
	fmt.Fprintf(&b, "\n# The bcctl CLI in another shell, as the README runs it: %s, then bin/bcctl …\n%s\n", CLIBuild, s.Exports())
	b.WriteString("# These ports stay the same across restarts and make clean (they follow BC_STATE_DIR's path); a port another\n" +
		"# process holds is replaced by a free one, and then this block shows the new one.\n")
	b.WriteString("\nStop with Ctrl-C; state persists under BC_STATE_DIR (default .local/, which make clean removes to start over).\n")
	return b.String()
}

// CLIBuild is how the README builds the CLI it calls bin/bcctl.
const CLIBuild = "go build -o bin/bcctl ./cmd/bcctl"
