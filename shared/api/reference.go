package api

import (
	"fmt"
	"strings"

	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Reference renders the API reference page of one resource in the seed's
// format: summary, method table, then each method's description, notes,
// kind, authorization, module, phase and input table. served reports
// whether this build serves a method.
func Reference(r Resource, served func(*Method) bool) string {
	var ms []*Method
	for _, m := range Catalog {
		if m.Resource() == r.Name {
			ms = append(ms, m)
		}
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# %s\n\n%s See [%s](%s).\n\n", r.Name, r.Summary, guideTitle(r.Guide), r.Guide)
	n := 0
	for _, m := range ms {
		if served(m) {
			n++
		}
	}
	if n == len(ms) {
		p("All %d methods are served by this release.\n\n", len(ms))
	} else {
		p("%d of %d methods are served by this release.\n\n", n, len(ms))
	}
	p("| Method | Kind | Authorization | Phase | Status |\n|---|---|---|---|---|\n")
	for _, m := range ms {
		p("| [`%s`](#%s) | %s | `%s` @ `%s` | %s | %s |\n", m.Verb(), m.Verb(), m.Kind, m.Permission, m.Scope, m.Phase, status(m, served))
	}
	for _, m := range ms {
		p("\n## %s\n\n`POST %s`\n\n%s\n\n", m.Verb(), m.Path(), m.Summary)
		for _, note := range m.Notes {
			if note.Label == "" {
				p("%s\n\n", note.Text)
			} else {
				p("- **%s.** %s\n", note.Label, note.Text)
			}
		}
		if len(m.Notes) > 0 && m.Notes[len(m.Notes)-1].Label != "" {
			p("\n")
		}
		p("- Kind: %s\n- Authorization: `%s` @ `%s`", m.Kind, m.Permission, m.Scope)
		if m.DecideOnDraft {
			p(" (decided once, on the draft)")
		}
		p("\n- Module: `%s`\n- Phase: %s (%s)\n\n### Input\n\n", m.Module, m.Phase, status(m, served))
		p("| Field | Type | Required | Constraints |\n|---|---|---|---|\n")
		for _, f := range strictjson.Describe(m.Input) {
			c := f.Constraints
			if f.Doc != "" {
				if c != "" {
					c += "; "
				}
				c += f.Doc
			}
			req := "no"
			if f.Required {
				req = "yes"
			}
			p("| `%s` | %s | %s | %s |\n", f.Name, f.Type, req, strings.ReplaceAll(c, "|", "\\|"))
		}
	}
	return b.String()
}

func status(m *Method, served func(*Method) bool) string {
	if served(m) {
		return m.Status
	}
	return "not served"
}

func guideTitle(path string) string {
	parts := strings.Split(strings.TrimRight(path, "/"), "/")
	last := strings.ReplaceAll(parts[len(parts)-1], "-", " ")
	return strings.ToUpper(last[:1]) + last[1:]
}
