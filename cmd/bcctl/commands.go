package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// resourceCommands builds `bcctl <resource> <verb>` for every catalog method:
// flags from the method's input fields (names that read naturally, types
// and limits from the catalog), tables by default, -o json, --all over
// pages; plus the verbs that are not one call (pools show, reservations
// watch).
func (c *cli) resourceCommands() []*cobra.Command {
	byName := map[string]*cobra.Command{}
	var order []string
	group := func(name, summary string) *cobra.Command {
		summary = plainText(summary)
		return &cobra.Command{Use: name, Short: firstSentence(summary), Long: summary, Args: cobra.ArbitraryArgs,
			SuggestionsMinimumDistance: 2,
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
					if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
						msg += "; did you mean " + strings.Join(s, ", ") + "?"
					}
					return usageErr(errors.New(msg))
				}
				return cmd.Help()
			}}
	}
	for _, r := range api.ResourceDocs {
		byName[r.Name] = group(r.Name, r.Summary)
		order = append(order, r.Name)
	}
	// Verbs that read their input otherwise than one flag per field.
	custom := map[string]func(*api.Method) *cobra.Command{
		"nodes.register":  c.nodesRegisterCommand,  // the key from a file
		"rollouts.create": c.rolloutsCreateCommand, // repeatable --pool and --wave, durations, --no-rollback
	}
	for _, m := range api.Catalog {
		parent, ok := byName[m.Resource()]
		if !ok {
			parent = group(m.Resource(), "The "+m.Resource()+" methods.")
			byName[m.Resource()] = parent
			order = append(order, m.Resource())
		}
		if build, ok := custom[m.Name]; ok {
			parent.AddCommand(build(m))
			continue
		}
		parent.AddCommand(c.methodCommand(m))
	}
	byName["releases"].AddCommand(c.releasesGetCommand(), c.releasesVerifyCommand())
	byName["pools"].AddCommand(c.poolsShowCommand())
	byName["reservations"].AddCommand(c.watchCommand())
	byName["rollouts"].AddCommand(c.rolloutsWatchCommand())
	out := make([]*cobra.Command, 0, len(order))
	for _, name := range order {
		out = append(out, byName[name])
	}
	return out
}

// platformTenant is the tenantId of the fleet's methods (releases, scope
// api.FleetScope) unless --tenant is given.
const platformTenant = "platform"

// field is one input field as a flag or argument of a verb.
type field struct {
	strictjson.FieldDoc
	flag       string // flag name without dashes; "" for an argument or a global
	positional bool
	global     bool // tenantId: the --tenant flag
	keyFile    bool // publicKey: read from a key file (nodes register)
	negated    bool // a switch that sends false (rollouts create --no-rollback)
}

// flagRenames maps request fields to the flags that set them where a flag
// is not named after its field in kebab case (kebab: nodeSize → --node-size).
var flagRenames = map[string]string{
	"tenantId":     "tenant", // the global --tenant
	"poolId":       "pool",   // POOL, the argument, of the pools verbs but list
	"toTenantId":   "to",
	"window.start": "start",
	"window.end":   "end",
	"resources":    "devices",
	// rollouts create: --pool and --wave repeat, durations drop "Seconds".
	"pools":                   "pool",
	"waves":                   "wave",
	"bakeSeconds":             "bake",
	"maxFailedNodes":          "max-failed",
	"progressDeadlineSeconds": "progress-deadline",
	"drain.waitSeconds":       "drain-wait",
	"drain.onTimeout":         "drain-on-timeout",
	"rollbackOnAbort":         "no-rollback",
}

// flagOf is the flag that sets a request field (without dashes).
func flagOf(field string) string {
	if f, ok := flagRenames[field]; ok {
		return f
	}
	return kebab(field)
}

// fieldsOf maps a method's input fields to flags and arguments.
func fieldsOf(m *api.Method) []field {
	var out []field
	for _, f := range strictjson.Describe(m.Input) {
		fl := field{FieldDoc: f}
		switch {
		case f.Name == "tenantId":
			fl.global = true
		case f.Name == "window":
			continue // its start and end are flags of their own
		case f.Name == "reservationId", f.Name == "poolId" && m.Resource() == "pools" && m.Verb() != "list",
			f.Name == "nodeId" && m.Resource() == "nodes", f.Name == "rolloutId" && m.Resource() == "rollouts",
			f.Name == "version" && (m.Name == "rollouts.create" || m.Name == "releases.prove"):
			fl.positional = true
		case f.Name == "publicKey" && m.Name == "nodes.register": // nodesRegisterCommand reads it
			fl.keyFile = true
		case f.Name == "rollbackOnAbort":
			fl.flag, fl.negated = flagOf(f.Name), true
		default:
			fl.flag = flagOf(f.Name)
		}
		out = append(out, fl)
	}
	return out
}

func (f field) kind() string {
	switch {
	case strings.HasPrefix(f.Type, "string (RFC 3339"):
		return "time"
	case f.Type == "integer" && strings.HasSuffix(f.Name, "Seconds"):
		return "duration"
	case f.Type == "integer":
		return "int"
	case f.Type == "array of string":
		return "strings"
	case strings.HasPrefix(f.Type, "map of string to integer"):
		return "counts"
	case f.Type == "object" || f.Type == "any":
		return "json"
	}
	return "string"
}

// defaultSeconds is a default in a duration field's doc: "default 300".
var defaultSeconds = regexp.MustCompile(`default ([0-9]+)\b`)

func (f field) usage() string {
	var parts []string
	switch {
	case f.keyFile:
		parts = append(parts, "a PEM file: --key a private key (only its public key is sent) or --public-key-file a PUBLIC KEY")
	case f.kind() == "time":
		parts = append(parts, "a time: RFC 3339 (2026-12-01T10:00:00Z), now, or relative (+2h, +30m, +1d) from the current minute")
	case f.negated:
		// The doc says what the field does when true: the switch does the
		// opposite, so the doc is what happens without it.
		parts = append(parts, "a switch: sends "+f.Name+" false; without it "+f.Name+" is true: "+
			strings.TrimSuffix(api.ExpandDoc(f.Doc), " (default true)"))
		return strings.Join(parts, "; ")
	case f.kind() == "duration":
		parts = append(parts, "a duration (90s, 5m, 1h30m), sent in whole seconds")
	case f.kind() == "strings":
		parts = append(parts, "repeatable")
	case f.kind() == "counts":
		parts = append(parts, "RESOURCE=N, repeatable")
	case f.kind() == "json":
		parts = append(parts, "a JSON file (- for stdin)")
	default:
		parts = append(parts, f.Type)
	}
	if doc := api.ExpandDoc(f.Doc); doc != "" && f.kind() == "duration" {
		// The catalog's defaults are in seconds; the flag takes durations.
		parts = append(parts, defaultSeconds.ReplaceAllStringFunc(doc, func(m string) string {
			n, _ := strconv.Atoi(defaultSeconds.FindStringSubmatch(m)[1])
			return "default " + span(time.Duration(n)*time.Second)
		}))
	} else if doc != "" {
		parts = append(parts, doc)
	}
	if f.kind() == "duration" && f.Min != nil && f.Max != nil {
		// The catalog's limits are in seconds; the flag takes durations.
		parts = append(parts, span(time.Duration(*f.Min)*time.Second)+" to "+span(time.Duration(*f.Max)*time.Second))
	} else if f.Constraints != "" {
		parts = append(parts, f.Constraints)
	}
	if f.Required {
		parts = append(parts, "required")
	}
	return strings.Join(parts, "; ")
}

// methodCommand is `bcctl <resource> <verb>` for one method.
func (c *cli) methodCommand(m *api.Method) *cobra.Command {
	fields := fieldsOf(m)
	var positional *field
	for i := range fields {
		if fields[i].positional {
			positional = &fields[i]
		}
	}
	use := m.Verb()
	args := cobra.ExactArgs(boolInt(positional != nil))
	if positional != nil {
		arg := strings.ToUpper(strings.TrimSuffix(positional.Name, "Id"))
		if !positional.Required {
			// An optional argument (releases prove [VERSION]: consistency alone without it).
			arg, args = "["+arg+"]", cobra.RangeArgs(0, 1)
		}
		use += " " + arg
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: m.Brief(),
		Long:  methodHelp(m, fields),
		Args:  args,
	}
	values := map[string]*string{}
	multi := map[string]*[]string{}
	for _, f := range fields {
		switch {
		case f.flag == "":
		case f.kind() == "counts":
			multi[f.flag] = new([]string)
			cmd.Flags().Var(&countsFlag{multi[f.flag]}, f.flag, f.usage())
		case f.kind() == "strings":
			multi[f.flag] = new([]string)
			cmd.Flags().StringArrayVar(multi[f.flag], f.flag, nil, f.usage())
		default:
			values[f.flag] = new(string)
			cmd.Flags().Var(&typedFlag{values[f.flag], f.kind()}, f.flag, f.usage())
		}
	}
	for _, f := range fields {
		if f.flag != "" && f.Enum != "" {
			_ = cmd.RegisterFlagCompletionFunc(f.flag, fixed(enumValues(f.Enum)...))
		}
	}
	var all bool
	if m.Pages() {
		cmd.Flags().BoolVar(&all, "all", false, "follow nextCursor and print every page")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		body := map[string]any{}
		fleetWide := false
		for _, f := range fields {
			var raw string
			var set bool
			switch {
			case f.global:
				raw = c.tenantOf(cmd, m)
				set = raw != ""
			case f.positional:
				if len(args) > 0 {
					raw, set = args[0], true
				}
			case f.kind() == "counts", f.kind() == "strings":
				set = len(*multi[f.flag]) > 0
			default:
				raw, set = *values[f.flag], cmd.Flags().Changed(f.flag)
			}
			if !set && m.Name == "nodes.list" && f.Name == "poolId" {
				fleetWide = true // every pool the tenant owns
				continue
			}
			if !set {
				if f.Required {
					return usageErr(fmt.Errorf("%s: %s is required", m.Name, flagName(f)))
				}
				continue
			}
			v, err := c.parseValue(f, raw, multi[f.flag])
			if err != nil {
				return err
			}
			if f.Name == "manifest" {
				if err := checkManifest(raw, v.(json.RawMessage)); err != nil {
					return err
				}
			}
			setPath(body, f.Name, v)
		}
		if fleetWide {
			return c.nodesListFleet(cmd.Context(), body, all)
		}
		err := c.invoke(cmd, m, body, all)
		if m.Name == "reservations.create" {
			err = c.suggestWindow(cmd.Context(), err, body, tenantFlag(cmd, c.tenant))
		}
		return err
	}
	if m.Name == "nodes.list" {
		cmd.Long += "\n\nWithout --pool: the nodes of every pool the tenant owns, pool by pool, each read a page (--limit) at a time, " +
			"in one table with a POOL column; the first --limit (default 100) unless --all."
		if f := cmd.Flags().Lookup("pool"); f != nil {
			f.Usage = strings.TrimSuffix(f.Usage, "; required") + "; without it, every pool the tenant owns"
		}
	}
	return cmd
}

// tenantFlag is tenant when the command line gave --tenant ("" when it
// came from BC_TENANT): what a command bcctl prints for the same shell to
// run says it too.
func tenantFlag(cmd *cobra.Command, tenant string) string {
	if f := cmd.Flags().Lookup("tenant"); f != nil && f.Changed {
		return tenant
	}
	return ""
}

// tenantOf is the tenantId a verb of m sends: --tenant (BC_TENANT), or
// for the fleet's methods (releases, rollouts) the platform unless
// --tenant is given, whatever tenant BC_TENANT names for capacity work.
func (c *cli) tenantOf(cmd *cobra.Command, m *api.Method) string {
	if m.Scope == api.FleetScope && !cmd.Flags().Changed("tenant") {
		return platformTenant
	}
	return c.tenant
}

func flagName(f field) string {
	switch {
	case f.global:
		return "--tenant (or BC_TENANT)"
	case f.positional:
		return strings.ToUpper(strings.TrimSuffix(f.Name, "Id"))
	case f.keyFile:
		return hintFlags[f.Name]
	}
	return "--" + f.flag
}

func (c *cli) parseValue(f field, raw string, multi *[]string) (any, error) {
	switch f.kind() {
	case "int":
		n, err := strconv.Atoi(raw)
		if err != nil {
			return nil, usageErr(fmt.Errorf("%s: %q is not an integer", flagName(f), raw))
		}
		return n, nil
	case "duration":
		d, err := time.ParseDuration(raw)
		if err != nil || d%time.Second != 0 {
			return nil, usageErr(fmt.Errorf("%s: %q is not a duration in whole seconds (90s, 5m, 1h30m)", flagName(f), raw))
		}
		return int(d / time.Second), nil
	case "strings":
		return *multi, nil
	case "time":
		t, err := parseWhen(raw, c.now())
		if err != nil {
			return nil, usageErr(fmt.Errorf("%s: %w", flagName(f), err))
		}
		return t.UTC().Format(time.RFC3339Nano), nil
	case "counts":
		out := map[string]int{}
		for _, kv := range *multi {
			k, v, ok := strings.Cut(kv, "=")
			n, err := strconv.Atoi(v)
			if !ok || err != nil {
				return nil, usageErr(fmt.Errorf("%s: %q is not RESOURCE=N", flagName(f), kv))
			}
			out[k] = n
		}
		return out, nil
	case "json":
		var data []byte
		var err error
		if raw == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(raw)
		}
		if err != nil {
			return nil, localErr(err)
		}
		if !json.Valid(data) {
			return nil, localErr(fmt.Errorf("%s: %s is not JSON", flagName(f), raw))
		}
		return json.RawMessage(bytes.TrimSpace(data)), nil
	}
	return raw, nil
}

// parseWhen reads a time: RFC 3339, "now", or now plus a duration
// ("+2h", "+90m", "-5m", "+1d", "+1d12h"). "now" and relative times count
// from the current minute (now rounded down to it), so the same command
// line sends the same time all minute long: a retry with the same
// --client-token within the minute is the same request.
func parseWhen(s string, now time.Time) (time.Time, error) {
	now = now.Truncate(time.Minute)
	switch {
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "+"), strings.HasPrefix(s, "-"):
		sign := time.Duration(1)
		if s[0] == '-' {
			sign = -1
		}
		rest := s[1:]
		var days time.Duration
		if d, tail, ok := strings.Cut(rest, "d"); ok {
			n, err := strconv.Atoi(d)
			if err != nil {
				return time.Time{}, fmt.Errorf("%q is not a relative time like +2h or +1d", s)
			}
			days, rest = time.Duration(n)*24*time.Hour, tail
		}
		var dur time.Duration
		if rest != "" {
			var err error
			if dur, err = time.ParseDuration(rest); err != nil {
				return time.Time{}, fmt.Errorf("%q is not a relative time like +2h or +1d", s)
			}
		}
		return now.Add(sign * (days + dur)), nil
	}
	t, err := strictjson.ParseTime(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a time (RFC 3339 like 2026-12-01T10:00:00Z, now, or +2h)", s)
	}
	return t, nil
}

// typedFlag is a flag whose value is parsed with the request (parseValue),
// and whose help names its kind: --count int, --end time, --manifest file.
type typedFlag struct {
	v    *string
	kind string
}

func (f *typedFlag) String() string     { return *f.v }
func (f *typedFlag) Set(s string) error { *f.v = s; return nil }
func (f *typedFlag) Type() string {
	if f.kind == "json" {
		return "file"
	}
	return f.kind
}

// countsFlag is a repeatable RESOURCE=N flag (--devices gpu.h100=16).
type countsFlag struct{ v *[]string }

func (f *countsFlag) String() string     { return strings.Join(*f.v, ",") }
func (f *countsFlag) Set(s string) error { *f.v = append(*f.v, s); return nil }
func (f *countsFlag) Type() string       { return "RESOURCE=N" }

// checkManifest refuses a manifest file that is a release statement not
// yet signed, saying how to sign it (the API would only say that the
// envelope's members are missing).
func checkManifest(name string, data json.RawMessage) error {
	if looksSigned(data) {
		return nil
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(data, &probe) != nil || (probe["version"] == nil && probe["binaries"] == nil) {
		return nil // let the API say what is wrong
	}
	return localErr(fmt.Errorf("--manifest %s is a release statement, not a signed manifest: sign it first "+
		"(bcctl sign --statement %s --key KEY.pem --out manifest.json), then register manifest.json", name, name))
}

// setPath sets a dotted path ("window.end") in a nested object.
func setPath(obj map[string]any, path string, v any) {
	head, rest, nested := strings.Cut(path, ".")
	if !nested {
		obj[head] = v
		return
	}
	child, ok := obj[head].(map[string]any)
	if !ok {
		child = map[string]any{}
		obj[head] = child
	}
	setPath(child, rest, v)
}

// invoke calls the method (every page with all) and prints the answer.
func (c *cli) invoke(cmd *cobra.Command, m *api.Method, body map[string]any, all bool) error {
	ctx := cmd.Context()
	before := c.rolloutBefore(cmd, m, body)
	var pages [][]byte
	for {
		raw, _ := json.Marshal(body)
		ans, err := c.call(ctx, m.Name, raw)
		if err != nil {
			return err
		}
		pages = append(pages, ans)
		var next struct {
			NextCursor string `json:"nextCursor"`
		}
		_ = json.Unmarshal(ans, &next)
		if !all || next.NextCursor == "" {
			break
		}
		body["cursor"] = next.NextCursor
	}
	var err error
	if c.output == "json" {
		err = writeJSON(c.out, mergePages(m.Name, pages))
	} else {
		err = renderTable(c.out, m.Name, pages, c.now())
	}
	if err == nil && !all {
		c.moreNote(pages)
	}
	if err == nil {
		c.cutNote(m.Name, pages)
	}
	if err == nil && m.Name == "pools.availability" && c.output != "json" {
		c.bookingNote(c.out, pages[0], tenantFlag(cmd, c.tenant))
	}
	if err == nil {
		reason, _ := body["reason"].(string)
		c.unchangedNote(m.Name, before, pages[0], reason)
	}
	if err == nil {
		c.noPoolsNote(ctx, m.Name, body, pages)
	}
	return err
}

// noPoolsNote says on stderr why a tenant's reservations list is empty
// when the tenant owns no pool and was offered none: an empty table
// alone reads as "none yet" when the tenant cannot reserve at all (a
// mistyped --tenant, a tenant nobody offered capacity).
func (c *cli) noPoolsNote(ctx context.Context, method string, body map[string]any, pages [][]byte) {
	if method != "reservations.list" || len(pages) != 1 {
		return
	}
	var page struct{ Reservations []json.RawMessage }
	if json.Unmarshal(pages[0], &page) != nil || len(page.Reservations) > 0 || body["cursor"] != nil {
		return
	}
	tenant, _ := body["tenantId"].(string)
	var pools struct{ Pools []json.RawMessage }
	if c.callJSON(ctx, "pools.list", map[string]any{"tenantId": tenant, "limit": 1}, &pools) != nil || len(pools.Pools) > 0 {
		return // not granted pools.list, or it has pools: the table says it all
	}
	fmt.Fprintf(c.errOut, "bcctl: tenant %s owns no pool and was offered none, so it has nothing to reserve on "+
		"(bcctl pools create makes one; a pool's owner offers capacity with bcctl pools offer POOL --to %s)\n", tenant, tenant)
}

// moreNote says on stderr, after a list's first page, that more follow and
// how to get them: a list is never cut off silently.
func (c *cli) moreNote(pages [][]byte) {
	var top map[string]json.RawMessage
	if json.Unmarshal(pages[len(pages)-1], &top) != nil {
		return
	}
	var cursor string
	if json.Unmarshal(top["nextCursor"], &cursor) != nil || cursor == "" {
		return
	}
	shown, what := 0, "items"
	for k, v := range top {
		var items []json.RawMessage
		if json.Unmarshal(v, &items) == nil {
			shown, what = len(items), k
		}
	}
	var usage struct{ Nodes []json.RawMessage }
	if json.Unmarshal(top["usage"], &usage) == nil && usage.Nodes != nil {
		shown, what = len(usage.Nodes), "nodes"
	}
	fmt.Fprintf(c.errOut, "bcctl: %s shown; more follow: --all prints every page, --cursor %s the next one\n",
		strictjson.Plural(shown, strings.TrimSuffix(what, "s")), cursor)
}

// mergePages joins the pages of a list into one answer, as if it were one
// page: the first page's object with every page's items in its list field
// and no nextCursor. pools.usage pages one level down: their nodes are
// joined and their totals added up (api.Usage.AddPage).
func mergePages(method string, pages [][]byte) json.RawMessage {
	if len(pages) == 1 {
		return pages[0]
	}
	if method == "pools.usage" {
		us, err := decodePages[api.PoolUsageResult](method, pages)
		if err != nil {
			return pages[0]
		}
		merged := api.PoolUsageResult{Usage: us[0].Usage}
		for _, u := range us[1:] {
			merged.Usage.AddPage(u.Usage)
		}
		out, _ := json.Marshal(merged)
		return out
	}
	var first map[string]json.RawMessage
	if json.Unmarshal(pages[0], &first) != nil {
		return pages[0]
	}
	for key := range first {
		var items []json.RawMessage
		if json.Unmarshal(first[key], &items) != nil {
			continue
		}
		for _, p := range pages[1:] {
			var obj map[string]json.RawMessage
			var more []json.RawMessage
			if json.Unmarshal(p, &obj) == nil && json.Unmarshal(obj[key], &more) == nil {
				items = append(items, more...)
			}
		}
		first[key], _ = json.Marshal(items)
	}
	delete(first, "nextCursor")
	out, _ := json.Marshal(first)
	return out
}

func writeJSON(w io.Writer, raw []byte) error {
	var pretty bytes.Buffer
	if json.Indent(&pretty, raw, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(raw)
	}
	pretty.WriteByte('\n')
	_, err := w.Write(pretty.Bytes())
	return err
}

// methodHelp is a verb's --help text: the catalog's summary, its
// authorization and its fields with their types and limits.
func methodHelp(m *api.Method, fields []field) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nMethod %s (POST %s), %s; authorization %s @ %s.\n", plainText(m.Summary), m.Name, m.Path(), m.Kind, m.Permission, m.Scope)
	for _, n := range m.Notes {
		if n.Label == "" {
			fmt.Fprintf(&b, "\n%s\n", plainText(n.Text)) // as the reference prints it: no prefix
		} else {
			fmt.Fprintf(&b, "\n%s: %s\n", n.Label, plainText(n.Text))
		}
	}
	b.WriteString("\nFields (request field → how to set it):\n")
	width := 14 // wider only for a method with longer names (rollouts create)
	for _, f := range fields {
		width = max(width, len(f.Name))
	}
	for _, f := range fields {
		fmt.Fprintf(&b, "  %-*s %-24s %s\n", width, f.Name, flagName(f), f.usage())
	}
	if len(m.Errors) > 0 {
		b.WriteString("\nErrors (besides those of every method; docs/reference has them all):\n")
		for _, e := range m.Errors {
			var keys []string
			for _, d := range e.Details {
				keys = append(keys, d.Key)
			}
			line := fmt.Sprintf("  %s (HTTP %d): %s", e.Code, apierr.HTTPStatus(e.Code), e.When)
			if len(keys) > 0 {
				line += " [details: " + strings.Join(keys, ", ") + "]"
			}
			b.WriteString(line + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// markdownLink is a link of the catalog's texts: [text](target).
var markdownLink = regexp.MustCompile(`\[([^\]]+)\]\(([^)]+)\)`)

// plainText is a catalog text for a terminal: a link becomes its text and,
// after it, the page it points to (the catalog's links are relative to
// docs/reference, where the reference they are written for lives).
func plainText(s string) string {
	return markdownLink.ReplaceAllStringFunc(s, func(link string) string {
		m := markdownLink.FindStringSubmatch(link)
		return m[1] + " (docs/reference/" + m[2] + ")"
	})
}

// firstSentence is a resource group's short help: its summary's first
// sentence (methods have api.Method.Brief).
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i > 0 {
		return s[:i+1]
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// enumValues lists the values of the catalog's enum name (api.Enums),
// sorted: the completions of a flag whose field names the enum.
func enumValues(name string) []string {
	e := api.LookupEnum(name)
	if e == nil {
		return nil
	}
	out := e.Strings()
	sort.Strings(out)
	return out
}
