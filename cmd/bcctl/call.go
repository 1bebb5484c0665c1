package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/client"
)

// callCommand is the generic `bcctl call METHOD [FIELD=value]…`: any method
// with a body built from httpie-style arguments; `bcctl call METHOD -h` shows
// the method's fields.
func (c *cli) callCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "call METHOD [FIELD=string | FIELD:=json | FIELD:=@file.json | @body.json]...",
		Short: "Call any API method with a body built from arguments",
		Long: `Calls an API method (see bcctl methods) with a JSON body built from the arguments: FIELD=value sets a
string, FIELD:=json sets raw JSON, FIELD:=@file.json the JSON of a file, @body.json starts from a whole
body; later arguments win. tenantId defaults to --tenant (BC_TENANT); for the fleet's methods
(releases) to "platform", unless --tenant is given. The global flags --api-url, --token, --tenant
and -o may stand anywhere on the line. bcctl call METHOD -h lists the method's fields. The answer
is printed as JSON.`,
		DisableFlagParsing: true,
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, m := range api.Catalog {
				names = append(names, m.Name)
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// Flag parsing is off (FIELD:=-1 and @file are arguments), so
			// the global flags are taken out here.
			args, tenantGiven, err := c.globalFlags(args)
			if err != nil {
				return usageErr(err)
			}
			if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
				return cmd.Help()
			}
			m := api.Lookup(args[0])
			if m == nil {
				return usageErr(noMethod(cmd.Root(), args[0]))
			}
			if slices.Contains(args[1:], "-h") || slices.Contains(args[1:], "--help") {
				fmt.Fprintln(c.out, methodHelp(m, fieldsOf(m)))
				return nil
			}
			c.called = m
			tenant := c.tenant
			if m.Scope == api.FleetScope && !tenantGiven {
				tenant = platformTenant
			}
			var defaults []string
			if tenant != "" {
				defaults = append(defaults, "tenantId="+tenant)
			}
			body, err := buildBody(append(defaults, args[1:]...), os.ReadFile)
			if err != nil {
				return usageErr(err)
			}
			raw, err := c.call(cmd.Context(), m.Name, body)
			if err != nil {
				return err
			}
			return writeJSON(c.out, raw)
		},
	}
}

// globalFlags takes the global flags out of call's arguments, applies
// them, and reports whether --tenant was among them.
func (c *cli) globalFlags(args []string) (rest []string, tenantGiven bool, err error) {
	targets := map[string]*string{"--api-url": &c.apiURL, "--token": &c.token, "--tenant": &c.tenant, "--output": &c.output, "-o": &c.output}
	for i := 0; i < len(args); i++ {
		name, value, inline := strings.Cut(args[i], "=")
		target, ok := targets[name]
		if !ok || !strings.HasPrefix(args[i], "-") {
			rest = append(rest, args[i])
			continue
		}
		if !inline {
			if i+1 == len(args) {
				return nil, false, fmt.Errorf("flag needs an argument: %s", name)
			}
			i++
			value = args[i]
		}
		*target = value
		tenantGiven = tenantGiven || name == "--tenant"
	}
	if c.output != "table" && c.output != "json" {
		return nil, false, fmt.Errorf("-o must be table or json, not %q", c.output)
	}
	c.client = client.New(c.apiURL, c.bearer())
	return rest, tenantGiven, nil
}

// buildBody builds the request JSON from httpie-style arguments:
// FIELD=value (a string), FIELD:=json (raw JSON), FIELD:=@file (JSON from a
// file), and @file (the whole body from a file). Later fields win.
func buildBody(args []string, readFile func(string) ([]byte, error)) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	var order []string
	set := func(k string, v json.RawMessage) {
		if _, ok := fields[k]; !ok {
			order = append(order, k)
		}
		fields[k] = v
	}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "@"):
			data, err := readFile(a[1:])
			if err != nil {
				return nil, err
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(data, &obj); err != nil {
				return nil, fmt.Errorf("%s: %w", a[1:], err)
			}
			for k, v := range obj {
				set(k, v)
			}
		case strings.Contains(a, ":="):
			k, v, _ := strings.Cut(a, ":=")
			raw := []byte(v)
			if strings.HasPrefix(v, "@") {
				var err error
				if raw, err = readFile(v[1:]); err != nil {
					return nil, err
				}
			}
			if !json.Valid(raw) {
				return nil, fmt.Errorf("%s: not valid JSON", k)
			}
			set(k, bytes.TrimSpace(raw))
		case strings.Contains(a, "="):
			k, v, _ := strings.Cut(a, "=")
			s, _ := json.Marshal(v)
			set(k, s)
		default:
			return nil, fmt.Errorf("argument %q is not FIELD=value, FIELD:=json or @file", a)
		}
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range order {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(fields[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// methodsCommand lists the catalog: every method, its kind and
// authorization, and with --fields its input fields.
func (c *cli) methodsCommand() *cobra.Command {
	var withFields bool
	cmd := &cobra.Command{
		Use:   "methods",
		Short: "List the API's methods (with --fields, their input fields)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "METHOD\tKIND\tAUTHORIZATION\tCLI")
			for _, m := range api.Catalog {
				fmt.Fprintf(tw, "%s\t%s\t%s @ %s\tbcctl %s %s\n", m.Name, m.Kind, m.Permission, m.Scope, m.Resource(), m.Verb())
				if withFields {
					for _, f := range fieldsOf(m) {
						fmt.Fprintf(tw, "\t  %s\t%s\t%s\n", f.Name, flagName(f), f.usage())
					}
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&withFields, "fields", false, "also list each method's input fields")
	return cmd
}

// noMethod says that name is no catalog method, and what was likely meant:
// the closest methods by edit distance, or the bcctl verb of that name
// (pools.show, releases.get: verbs of bcctl, not methods of the API).
func noMethod(root *cobra.Command, name string) error {
	msg := fmt.Sprintf("call: no method %q (see bcctl methods)", name)
	norm := strings.NewReplacer("/", ".", " ", ".", "_", ".").Replace(strings.ToLower(name))
	if res, verb, ok := strings.Cut(norm, "."); ok && api.Lookup(norm) == nil {
		if found, rest, err := root.Find([]string{res, verb}); err == nil && len(rest) == 0 && found.Name() == verb && found.Parent().Name() == res {
			return fmt.Errorf("%s; %s is a bcctl verb, not an API method: bcctl %s %s", msg, norm, res, verb)
		}
	}
	best, names := -1, []string(nil)
	for _, m := range api.Catalog {
		d := editDistance(norm, m.Name)
		switch {
		case best < 0 || d < best:
			best, names = d, []string{m.Name}
		case d == best:
			names = append(names, m.Name)
		}
	}
	if best >= 0 && best <= 3 && best < len(norm)/2 {
		msg += "; did you mean " + strings.Join(names, ", ") + "?"
	}
	return errors.New(msg)
}

// editDistance is the Levenshtein distance of a and b (bytes: method
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
