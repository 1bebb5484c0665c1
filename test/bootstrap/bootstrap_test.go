// Package bootstrap_test checks what each Lambda's composition root links
// (docs/architecture.md, Composition roots): every main names the module
// its catalog method belongs to and nothing else, the bootstraps built as
// `make build` builds them stay within their size budgets, the node
// agent links no AWS SDK, and the API's contract links no domain.
package bootstrap_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
)

// Budgets in bytes of the linux/arm64 bootstraps (-s -w, as make build;
// their sizes move in 64-KiB steps, one per segment boundary crossed). The
// targets of issue 38 (service/kms at its current release);
// docs/performance.md has the sizes.
const (
	mib         = 1 << 20
	apiBudget   = 9.5 * mib
	reconcilerB = 10 * mib
	// The console links every module's read and action wiring, as the
	// reconciler does (10 MiB of it), and html/template: text/template
	// calls methods by name through reflect, so the linker keeps every
	// exported method of every type it can reach (4.7 MiB more).
	consoleB     = 16 * mib
	agentBudget  = 7.5 * mib
	modulePrefix = "github.com/bettercompute/control-plane/shared/app/"
)

func root(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// deps lists the packages pkg links for linux/arm64.
func deps(t *testing.T, dir, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-tags", "lambda.norpc", pkg)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// goName is a method's wiring's name: pools.get → PoolsGet.
func goName(method string) string {
	var b strings.Builder
	for w := range strings.SplitSeq(method, ".") {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// Each method's main names its own method's wiring (so the linker keeps
// that method's code only) and links its own module's wiring package; KMS
// only where the method reads KMS public keys (pins them, or answers the
// release log's verifier key), Secrets Manager only where it pages
// with cursors; the reconciler, which serves no method, no Secrets Manager,
// and KMS exactly when its actions sign the release log (it finishes
// crashed registrations and audits the log).
func TestEachMainLinksItsModuleOnly(t *testing.T) {
	dir := root(t)
	for _, m := range api.Catalog {
		pkg := "./functions/" + strings.ReplaceAll(m.Name, ".", "-")
		src, err := os.ReadFile(filepath.Join(dir, pkg, "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), "."+goName(m.Name)+"()") {
			t.Errorf("%s/main.go does not name its method's wiring %s", pkg, goName(m.Name))
		}
		ds := deps(t, dir, pkg)
		has := func(p string) bool { return slices.Contains(ds, p) }
		for _, mod := range []string{"capacity", "fleet", "rollout"} {
			// fleetapp and capacityapp are linked by the modules that use
			// their stores and services; the module's own is required.
			if mod == m.Module && !has(modulePrefix+mod+"app") {
				t.Errorf("%s does not link %sapp, its module's wiring", m.Name, mod)
			}
		}
		if has(modulePrefix + "modules") {
			t.Errorf("%s links every module (shared/app/modules)", m.Name)
		}
		if kms, pins := has("github.com/aws/aws-sdk-go-v2/service/kms"), slices.Contains(m.Actions, api.ReadsKMSKeys) || slices.Contains(m.Actions, api.ReadsReleaseLogKey); kms != pins {
			t.Errorf("%s links KMS: %v, reads KMS public keys: %v", m.Name, kms, pins)
		}
		pages := slices.Contains(m.Actions, api.ReadsCursorKey)
		if sm := has("github.com/aws/aws-sdk-go-v2/service/secretsmanager"); sm != pages {
			t.Errorf("%s links Secrets Manager: %v, pages with cursors: %v", m.Name, sm, pages)
		}
	}
	// The reconciler imports the wiring of every module (whose local-gateway
	// constructor names both readers) and names the KMS reader alone (the
	// release log's signer): none of Secrets Manager's code is in its
	// binary, and KMS's is exactly when it signs the release log.
	bin := filepath.Join(t.TempDir(), "reconciler")
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", bin, "./functions/reconciler")
	build.Dir, build.Env = dir, append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	syms, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(syms), "github.com/aws/aws-sdk-go-v2/service/secretsmanager."); n > 0 {
		t.Errorf("the reconciler's binary has %d symbols of Secrets Manager: it pages no cursors", n)
	}
	signs := slices.Contains(api.ReconcilerActions, api.SignsReleaseLog)
	if n := strings.Count(string(syms), "github.com/aws/aws-sdk-go-v2/service/kms."); (n > 0) != signs {
		t.Errorf("the reconciler's binary has %d symbols of KMS; it signs the release log: %v", n, signs)
	}
	if n := strings.Count(string(syms), "github.com/aws/aws-sdk-go-v2/service/dynamodb."); n == 0 {
		t.Error("no DynamoDB symbols in the reconciler's binary: the symbol check reads nothing")
	}
	for _, p := range deps(t, dir, "./cmd/bcd-agent") {
		if strings.HasPrefix(p, "github.com/aws/aws-sdk-go-v2") || strings.HasPrefix(p, "github.com/aws/smithy-go") {
			t.Errorf("bcd-agent links %s: the agent runs on GPU hosts and talks only HTTP", p)
		}
	}
}

// The bootstraps, built as make build builds them, within their budgets.
func TestBootstrapSizes(t *testing.T) {
	dir, out := root(t), t.TempDir()
	build := func(tags string, pkgs ...string) {
		args := append([]string{"build", "-trimpath", "-ldflags", "-s -w", "-o", out + "/"}, pkgs...)
		if tags != "" {
			args = append([]string{"build", "-tags", tags}, args[1:]...)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
	}
	build("lambda.norpc", "./functions/...")
	build("", "./cmd/bcd-agent")
	check := func(name string, budget float64) {
		fi, err := os.Stat(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-22s %.3f MiB", name, float64(fi.Size())/mib)
		if float64(fi.Size()) > budget {
			t.Errorf("%s is %.3f MiB, over its %.2f MiB budget", name, float64(fi.Size())/mib, budget/mib)
		}
	}
	for _, m := range api.Catalog {
		check(strings.ReplaceAll(m.Name, ".", "-"), apiBudget)
	}
	check("reconciler", reconcilerB)
	check("console", consoleB)
	check("bcd-agent", agentBudget)
}

// The node agent (bcd-agent) runs on GPU hosts and talks only HTTP: it
// links no store (shared/dynamo and its packages), no AWS SDK, no wiring
// and no domain — neither capacity, fleet and rollout nor the release
// domain's service (shared/release/registry): it speaks the API through
// its contract (shared/api, shared/client) and verifies releases with the
// leaf shared/release alone.
func TestAgentLinksNoStoreNorDomain(t *testing.T) {
	dir := root(t)
	const sh = "github.com/bettercompute/control-plane/shared/"
	linked := 0
	for _, pkg := range deps(t, dir, "./cmd/bcd-agent") {
		linked++
		switch {
		case pkg == sh+"dynamo" || strings.HasPrefix(pkg, sh+"dynamo/"):
			t.Errorf("bcd-agent links the store %s", pkg)
		case strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2") || strings.HasPrefix(pkg, "github.com/aws/smithy-go"):
			t.Errorf("bcd-agent links the AWS SDK's %s", pkg)
		case slices.Contains([]string{sh + "capacity", sh + "fleet", sh + "rollout", sh + "release/registry", sh + "reconcile"}, pkg),
			strings.HasPrefix(pkg, sh+"app"):
			t.Errorf("bcd-agent links %s", pkg)
		}
	}
	if linked < 10 {
		t.Fatalf("go list named %d packages: the check reads nothing", linked)
	}
}

// The arrows of docs/architecture.md (Rooms): a domain imports only lower
// domains and the shared leaves, never reconcile, an adapter or the wiring;
// reconcile no domain above capacity; the leaves no project package.
func TestArrows(t *testing.T) {
	dir := root(t)
	const sh = "github.com/bettercompute/control-plane/shared/"
	adapters := []string{"dynamo", "kmssign", "app", "reconcile", "localgw", "devstack"}
	forbid := map[string][]string{
		"capacity":  append([]string{"fleet", "rollout"}, adapters...),
		"fleet":     append([]string{"rollout"}, adapters...),
		"rollout":   append([]string{"release/registry"}, adapters...),
		"reconcile": {"fleet", "rollout", "release/registry", "dynamo", "kmssign", "app"},
		// The stores: the core links no domain; each module's store links
		// its own domain (and the domains that one builds on) only.
		"dynamo":            {"capacity", "fleet", "rollout", "release", "app", "reconcile"},
		"dynamo/capacitydb": {"fleet", "rollout", "release/registry", "app", "reconcile"},
		"dynamo/fleetdb":    {"rollout", "release/registry", "app", "reconcile"},
		"dynamo/rolloutdb":  {"release/registry", "app", "reconcile"},
		"dynamo/releasedb":  {"capacity", "fleet", "rollout", "app", "reconcile"},
		// The release domain's service: the leaf and the shared leaves only.
		"release/registry": append([]string{"capacity", "fleet", "rollout", "api"}, adapters...),
	}
	for pkg, bad := range forbid {
		for _, d := range deps(t, dir, "./shared/"+pkg) {
			for _, b := range bad {
				if d == sh+b || strings.HasPrefix(d, sh+b+"/") {
					t.Errorf("shared/%s links %s", pkg, d)
				}
			}
		}
	}
	// The release leaf: what the agent, bcctl and the API share of releases,
	// on the leaves it builds on alone.
	for _, d := range deps(t, dir, "./shared/release") {
		if strings.HasPrefix(d, "github.com/bettercompute/") && !slices.Contains([]string{sh + "release", sh + "dsse", sh + "strictjson", sh + "apierr"}, d) {
			t.Errorf("shared/release links %s", d)
		}
	}
	for _, leaf := range []string{"paging", "conc"} {
		for _, d := range deps(t, dir, "./shared/"+leaf) {
			if strings.HasPrefix(d, "github.com/bettercompute/") && d != sh+leaf {
				t.Errorf("shared/%s links %s", leaf, d)
			}
		}
	}
}

// The API's contract is a leaf (docs/architecture.md, Rooms): shared/api
// (the wire types, their vocabulary and limits, and the catalog) and the
// client generated from it link no domain, store or wiring, so whatever
// speaks the API — the node agent on GPU hosts, bcctl — need not link the
// control plane; nor does the agent.
func TestAPILinksNoDomain(t *testing.T) {
	dir := root(t)
	const sh = "github.com/bettercompute/control-plane/shared/"
	domains := []string{"capacity", "fleet", "rollout", "release/registry", "dynamo", "kmssign", "app", "reconcile", "localgw", "devstack"}
	bad := func(d string) bool {
		for _, b := range domains {
			if d == sh+b || strings.HasPrefix(d, sh+b+"/") {
				return true
			}
		}
		return false
	}
	for _, pkg := range []string{"./shared/api", "./shared/client"} {
		ds := deps(t, dir, pkg)
		if !slices.Contains(ds, sh+"api") {
			t.Fatalf("go list %s does not list shared/api: %v", pkg, ds)
		}
		for _, d := range ds {
			if bad(d) {
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
	for _, pkg := range []string{"./shared/agent", "./cmd/bcd-agent"} {
		for _, d := range deps(t, dir, pkg) {
			if bad(d) {
				t.Errorf("%s links %s", pkg, d)
			}
		}
	}
}
