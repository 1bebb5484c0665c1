package api

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Reference renders the API reference page of one resource: summary,
// method table, then per method its description, notes, kind,
// authorization, module, phase, and its input, output and error tables.
// served reports whether this build serves a method.
func Reference(r Resource, served func(*Method) bool) string {
	ms := r.Methods()
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# %s\n\n%s\n\nWire conventions, authentication, errors, paging and limits: [the index](README.md). Machine-readable: [openapi.json](../openapi.json).\n\n", r.Name, r.Summary)
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
		p("\n- Module: `%s`\n- Phase: %s (%s)\n\n", m.Module, m.Phase, status(m, served))
		inputTable(p, m)
		outputTable(p, m)
		errorTable(p, m)
	}
	return b.String()
}

// Methods returns the resource's methods in catalog order.
func (r Resource) Methods() []*Method {
	var ms []*Method
	for _, m := range Catalog {
		if m.Resource() == r.Name {
			ms = append(ms, m)
		}
	}
	return ms
}

type printer func(format string, args ...any)

func inputTable(p printer, m *Method) {
	p("### Input\n\n| Field | Type | Required | Constraints |\n|---|---|---|---|\n")
	inputRows(p, m.Input, "")
}

// inputRows writes the rows of struct t's members under prefix; an Object
// member with a shape is followed by the rows of its shape's members, a
// struct array by those of its elements ("manifest.signatures[].sig").
func inputRows(p printer, t reflect.Type, prefix string) {
	for _, f := range strictjson.Describe(t) {
		var c []string
		if f.Constraints != "" {
			c = append(c, f.Constraints)
		}
		if e := LookupEnum(f.Enum); e != nil {
			c = append(c, "one of "+enumValues(e))
		}
		if f.Doc != "" {
			c = append(c, ExpandDoc(f.Doc))
		}
		p("| `%s` | %s | %s | %s |\n", prefix+f.Name, f.Type, yesNo(f.Required), cell(codePatterns.ReplaceAllString(strings.Join(c, "; "), "$1 `$2`")))
		if strings.Contains(f.Name, ".") {
			continue // a nested struct's member: Describe flattens them
		}
		sf := fieldOf(t, f.Name)
		switch e := deref(sf.Type); {
		case objectShape(sf) != nil:
			inputRows(p, objectShape(sf), prefix+f.Name+".")
		case e.Kind() == reflect.Slice && isStruct(deref(e.Elem())):
			inputRows(p, deref(e.Elem()), prefix+f.Name+"[].")
		}
	}
}

func outputTable(p printer, m *Method) {
	p("\n### Output\n\n| Field | Type | Always | Description |\n|---|---|---|---|\n")
	for _, f := range DescribeOutput(m.Output) {
		d := f.Doc
		if f.Enum != nil {
			d += "; one of " + enumValues(f.Enum)
		}
		p("| `%s` | %s | %s | %s |\n", f.Name, f.Type, yesNo(f.Always), cell(d))
	}
}

func errorTable(p printer, m *Method) {
	p("\n### Errors\n\n| Code | HTTP | When | Details |\n|---|---|---|---|\n")
	for _, e := range m.ErrorCases() {
		p("| `%s` | %d | %s | %s |\n", e.Code, apierr.HTTPStatus(e.Code), cell(e.When), cell(describeDetails(e.Details)))
	}
}

// enumValues lists an enum's values, linked to their meanings in the index.
func enumValues(e *Enum) string {
	vs := make([]string, len(e.Values))
	for i, v := range e.Values {
		vs[i] = "`" + v.Value + "`"
	}
	return strings.Join(vs, ", ") + " ([meanings](README.md#" + enumAnchor(e) + "))"
}

func enumAnchor(e *Enum) string {
	if e == StateEnum {
		return "reservation-states"
	}
	return strings.ToLower(e.Name)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// cell makes text safe in a table cell: pipes escaped, and outside code
// spans angle brackets too (a doc's <resource> is text, not an HTML tag).
func cell(s string) string {
	var b strings.Builder
	code := false
	for _, r := range s {
		switch {
		case r == '|':
			b.WriteString("\\|")
		case r == '`':
			code = !code
			b.WriteRune(r)
		case !code && r == '<':
			b.WriteString("&lt;")
		case !code && r == '>':
			b.WriteString("&gt;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// codePatterns shows the patterns of Describe's constraints as code.
var codePatterns = regexp.MustCompile(`(matches|keys match) (\^\S*\$)`)

func status(m *Method, served func(*Method) bool) string {
	if served(m) {
		return m.Status
	}
	return "not served"
}
