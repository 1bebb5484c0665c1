package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The handbook's rule: every command the docs give is run by a test exactly
// as written. A real `cdk deploy` needs an AWS account, so these tests run
// the synthesis a documented deploy line does (where cdk-nag's rule packs
// fail a deploy), with the line's context values as written, and check the
// context keys and defaults the docs' tables name against cdk.json.

// The documents whose deploy lines and context tables are tested, from the
// repository root.
const (
	readmeDoc = "README.md"
	infraDoc  = "docs/infrastructure.md"
)

// A documented deploy command: `make deploy CDK_ARGS='…'`, in a fenced block
// or an inline code span that may wrap over lines.
var deployLine = regexp.MustCompile(`make deploy CDK_ARGS='([^']*)'`)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readDoc(t *testing.T, doc string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), doc))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deployArgs are the CDK_ARGS of every deploy line of text, each with its
// whitespace collapsed to single spaces: a code span wrapped over lines
// renders (and is copied) with spaces, and the shell splits the words the
// same either way.
func deployArgs(text string) []string {
	var out []string
	for _, m := range deployLine.FindAllStringSubmatch(text, -1) {
		out = append(out, strings.Join(strings.Fields(m[1]), " "))
	}
	return out
}

// cdkContext is cdk.json's context.
func cdkContext(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "cdk.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Context map[string]any }
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("cdk.json: %v", err)
	}
	return c.Context
}

// appKeys are the context keys the app reads: cdk.json lists each with its
// default (TestCDKJSONDefaults), beside the CLI's and the CDK's own keys.
func appKeys(ctx map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range ctx {
		if !strings.HasPrefix(k, "@") && k != "cli-telemetry" {
			out[k] = true
		}
	}
	return out
}

// contextArgs are the -c key=value pairs of a CDK command line, as the CLI
// hands them to the app (strings).
func contextArgs(t *testing.T, args string) map[string]any {
	t.Helper()
	out := map[string]any{}
	words := strings.Fields(args)
	for i := 0; i < len(words); i++ {
		var kv string
		switch w := words[i]; {
		case w == "-c" || w == "--context":
			if i++; i == len(words) {
				t.Fatalf("CDK_ARGS %q: %s without a value", args, w)
			}
			kv = words[i]
		case strings.HasPrefix(w, "--context="):
			kv = strings.TrimPrefix(w, "--context=")
		default:
			continue // another CLI option: make synth gets it as written
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("CDK_ARGS %q: context %q is not key=value", args, kv)
		}
		out[k] = v
	}
	return out
}

// Each `make deploy CDK_ARGS='…'` of docs/infrastructure.md, and of the
// README outside its deploy block (TestREADMEDeployBlockAsPasted runs that
// block's line as `make deploy` itself), synthesized as `make synth
// CDK_ARGS='…'` with the arguments exactly as written: the CLI, the app
// and the rule packs a deploy runs. The synthesis must succeed, every key
// the line sets must be one the app reads (the app ignores any other: a
// misspelt key deploys without the value), and the rule packs must leave no
// finding unsuppressed and no suppression stale on the stack those values
// build.
func TestDocumentedDeployLinesSynthesize(t *testing.T) {
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "node_modules", ".bin", "cdk")); err != nil {
		t.Fatalf("the CDK CLI is not installed (%v): run make tools", err)
	}
	block := map[string]bool{}
	for _, args := range deployArgs(readmeDeployBlock(t)) {
		block[args] = true
	}
	for _, doc := range []string{readmeDoc, infraDoc} {
		lines := deployArgs(readDoc(t, doc))
		if len(lines) == 0 {
			t.Errorf("%s has no `make deploy CDK_ARGS='…'` line: if the docs changed how they deploy, make this test run the new command", doc)
		}
		for i, args := range lines {
			if doc == readmeDoc && block[args] {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", filepath.Base(doc), i+1), func(t *testing.T) {
				out := t.TempDir()
				cmd := exec.Command("make", "synth", "CDK_ARGS="+args, "CDK_OUT="+out)
				cmd.Dir = root
				// As typed in a shell, not as a sub-make of make test.
				for _, e := range os.Environ() {
					if k, _, _ := strings.Cut(e, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
						cmd.Env = append(cmd.Env, e)
					}
				}
				t.Logf("make synth CDK_ARGS='%s'", args)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("make synth CDK_ARGS='%s' (the synthesis of %s's `make deploy` line): %v\n%s", args, doc, err, b)
				}
				checkDeployLineAssembly(t, args, out, map[string]any{CtxPlaceholders: "auto"}) // what make synth adds
			})
		}
	}
}

// checkDeployLineAssembly checks the cloud assembly a deploy line's
// arguments synthesized into dir, with the context its make target adds
// before them: every context key the line sets is one
// the app reads, and the rule packs leave no finding unsuppressed and no
// suppression stale on the stack those values build.
func checkDeployLineAssembly(t *testing.T, args, dir string, made map[string]any) {
	t.Helper()
	defaults := cdkContext(t)
	known := appKeys(defaults)
	fns, err := Functions()
	if err != nil {
		t.Fatal(err)
	}
	ctx := map[string]any{}
	for k, v := range defaults {
		ctx[k] = v
	}
	for k, v := range made {
		ctx[k] = v
	}
	for k, v := range contextArgs(t, args) {
		if !known[k] {
			t.Errorf("the deploy line sets context %s, which the app does not read (cdk.json lists the keys it reads)", k)
		}
		ctx[k] = v
	}
	cfg, err := ConfigFrom(func(k string) any { return ctx[k] })
	if err != nil {
		t.Fatalf("the deploy line's context: %v", err)
	}
	msgs := assemblyMessages(t, filepath.Join(dir, cfg.StackName+".metadata.json"))
	perPack := checkRulePacks(t, msgs, cfg.StackName, Suppressions(cfg, fns))
	for _, m := range msgs {
		if m.Level == "warning" && !rulePack.MatchString(m.Text) {
			t.Logf("synth warns at %s: %s", m.Path, strings.TrimSpace(m.Text))
		}
	}
	t.Logf("suppressed findings by pack: %v", perPack)
}

// assemblyMessages are the annotations of a stack in the cloud assembly
// the CLI wrote (its <stack>.metadata.json).
func assemblyMessages(t *testing.T, file string) []nagMessage {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string][]struct {
		Type string
		Data any
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var out []nagMessage
	for path, entries := range meta {
		for _, e := range entries {
			if level, ok := strings.CutPrefix(e.Type, "aws:cdk:"); ok && (level == "error" || level == "warning" || level == "info") {
				out = append(out, nagMessage{Path: path, Level: level, Text: fmt.Sprint(e.Data)})
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no annotations: did the rule packs run?", file)
	}
	return out
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// tableRows are the cells of the markdown table rows of text's section
// under heading (up to the next heading of the same level), header and
// separator rows left out.
func tableRows(t *testing.T, text, heading string) [][]string {
	t.Helper()
	_, section, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no section %q", heading)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if i := strings.Index(section, "\n"+level); i >= 0 {
		section = section[:i]
	}
	var rows [][]string
	header := true
	for _, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			header = true // the next table starts with its header
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if header || strings.Trim(cells[0], "-: ") == "" {
			header = false
			continue
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("section %q has no table", heading)
	}
	return rows
}

func spans(cell string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// render is a cdk.json value as the docs write it.
func render(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// The context the docs' tables name is the context the tests synthesize
// with: every key of the README's Deploying table and of
// docs/infrastructure.md's context table is one the app reads, the latter
// lists every key, and the default it gives each is cdk.json's.
func TestDocumentedContextTables(t *testing.T) {
	defaults := cdkContext(t)
	known := appKeys(defaults)

	for _, row := range tableRows(t, readDoc(t, readmeDoc), "## Deploying to AWS") {
		keys := spans(row[0])
		if len(keys) == 0 {
			t.Errorf("README Deploying table: row %q names no key", row[0])
		}
		for _, k := range keys {
			if !known[k] {
				t.Errorf("README Deploying table names context %s, which the app does not read", k)
			}
		}
	}

	listed := map[string]bool{}
	for _, row := range tableRows(t, readDoc(t, infraDoc), "## Configuration (CDK context)") {
		if len(row) < 3 {
			t.Errorf("%s context table: row %q has %d cells", infraDoc, row, len(row))
			continue
		}
		keys, values := spans(row[0]), spans(row[1])
		for i, k := range keys {
			if !known[k] {
				t.Errorf("%s context table names %s, which the app does not read", infraDoc, k)
				continue
			}
			listed[k] = true
			want := render(defaults[k])
			switch {
			case strings.HasPrefix(row[1], "—"): // no default
				if want != "" {
					t.Errorf("%s context table: %s has no default, cdk.json gives %q", infraDoc, k, want)
				}
			case len(values) == len(keys): // `a`, `b` | `1`, `2`
				if values[i] != want {
					t.Errorf("%s context table: %s defaults to %q, cdk.json to %q", infraDoc, k, values[i], want)
				}
			default:
				if want != "" && !strings.Contains(row[1], "`"+want+"`") {
					t.Errorf("%s context table: the default of %s (cdk.json: %q) is not in %q", infraDoc, k, want, row[1])
				}
			}
		}
	}
	for k := range known {
		if !listed[k] {
			t.Errorf("%s context table does not list context %s", infraDoc, k)
		}
	}
}

// The README's deploy block runs as pasted: without credentials it stops
// before building anything; with (fake) credentials and an AWS endpoint
// that refuses every connection, it gets as far as the AWS call, and every
// context value the block gives reached the synthesized template — every
// line of its multi-line CDK_ARGS, not the first alone.
func TestREADMEDeployBlockAsPasted(t *testing.T) {
	root := repoRoot(t)
	block := readmeDeployBlock(t)
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   ")) // the list item's indent
	}
	script := strings.Join(lines, "\n")
	args := deployArgs(script)[0]
	given := contextArgs(t, args)
	for _, k := range []string{"jwtIssuer", "jwtAudience", "iamUrl", "releaseSignerRoleArn", "alarmEmail"} {
		if given[k] == nil {
			t.Errorf("the README's deploy block sets no %s", k)
		}
	}
	home := t.TempDir()
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GOCACHE=" + goEnv(t, "GOCACHE"), "GOMODCACHE=" + goEnv(t, "GOMODCACHE"),
		"GOPATH=" + goEnv(t, "GOPATH"), "GOFLAGS=" + os.Getenv("GOFLAGS")}
	run := func(env ...string) (string, error) {
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir, cmd.Env = root, append(base, env...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	out, err := run()
	if err == nil || !strings.Contains(out, "no AWS credentials") || strings.Contains(out, "bootstrap ") && strings.Contains(out, "MiB") {
		t.Fatalf("without credentials: %v, want a refusal before the build:\n%s", err, out)
	}

	assets, cdkOut := t.TempDir(), t.TempDir()
	if err := WritePlaceholders(assets); err != nil {
		t.Fatal(err)
	}
	out, err = run("AWS_ACCESS_KEY_ID=AKIAFAKEFAKEFAKEFAKE", "AWS_SECRET_ACCESS_KEY=fake", "AWS_REGION=us-east-1",
		"AWS_ENDPOINT_URL=http://127.0.0.1:9", "AWS_EC2_METADATA_DISABLED=true", "AWS_MAX_ATTEMPTS=1",
		"DEPLOY_BUILD=", "LAMBDA_OUT="+assets, "CDK_OUT="+cdkOut)
	if err == nil {
		t.Fatalf("deploy against an endpoint that refuses succeeded:\n%s", out)
	}
	tmpl, rerr := os.ReadFile(filepath.Join(cdkOut, "BetterCompute.template.json"))
	if rerr != nil {
		t.Fatalf("no template synthesized (%v):\n%s", rerr, out)
	}
	for k, v := range given {
		if !strings.Contains(string(tmpl), fmt.Sprint(v)) {
			t.Errorf("context %s=%s is not in the synthesized template", k, v)
		}
	}
	checkDeployLineAssembly(t, args, cdkOut, map[string]any{CtxAssetRoot: assets}) // what make deploy adds (and deploying=true, which only the app reads)
}

// readmeDeployBlock is the README's sh block that deploys.
func readmeDeployBlock(t *testing.T) string {
	t.Helper()
	for _, b := range strings.Split(readDoc(t, readmeDoc), "```sh\n")[1:] {
		if body, _, _ := strings.Cut(b, "```"); strings.Contains(body, "make deploy CDK_ARGS=") {
			return body
		}
	}
	t.Fatal("README: no sh block with make deploy CDK_ARGS=")
	return ""
}

func goEnv(t *testing.T, k string) string {
	t.Helper()
	b, err := exec.Command("go", "env", k).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// The docs' function counts are the stack's: the catalog's methods and the
// reconciler.
func TestDocumentedFunctionCount(t *testing.T) {
	fns, err := Functions()
	if err != nil {
		t.Fatal(err)
	}
	for doc, re := range map[string]*regexp.Regexp{
		readmeDoc: regexp.MustCompile(`builds the (\d+) functions`),
		infraDoc:  regexp.MustCompile(`fewer than the stack's (\d+) functions`),
	} {
		m := re.FindStringSubmatch(readDoc(t, doc))
		if m == nil {
			t.Errorf("%s: no %q", doc, re)
			continue
		}
		if m[1] != strconv.Itoa(len(fns)) {
			t.Errorf("%s says %s functions; the stack has %d (the catalog's methods, the console and the reconciler)", doc, m[1], len(fns))
		}
	}
}
