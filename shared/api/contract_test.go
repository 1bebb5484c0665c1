package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Every method names its result type, and every member of it (at every
// depth) says what it means; an `enum` tag names a documented enum.
func TestOutputsDocumented(t *testing.T) {
	for _, m := range api.Catalog {
		t.Run(m.Name, func(t *testing.T) {
			if m.Output == nil || m.Output.Kind() != reflect.Struct {
				t.Fatalf("Output = %v, want a struct type", m.Output)
			}
			fields := api.DescribeOutput(m.Output)
			if len(fields) == 0 {
				t.Fatal("the output has no members")
			}
			for _, f := range fields {
				if strings.TrimSpace(f.Doc) == "" {
					t.Errorf("%s has no doc tag", f.Name)
				}
			}
			walkTags(t, m.Output, map[reflect.Type]bool{})
			walkTags(t, m.Input, map[reflect.Type]bool{})
			if m.Pages() {
				if _, ok := m.Output.FieldByName("NextCursor"); !ok {
					t.Errorf("%v takes a cursor but %v has no NextCursor", m.Input, m.Output)
				}
			}
		})
	}
}

// walkTags checks every `enum` tag under t names an enum.
func walkTags(t *testing.T, typ reflect.Type, seen map[reflect.Type]bool) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || seen[typ] {
		return
	}
	seen[typ] = true
	for _, f := range strictjson.Fields(typ) {
		if name := f.Tag.Get("enum"); name != "" && api.LookupEnum(name) == nil {
			t.Errorf("%v.%s: enum %q is not documented", typ, f.Name, name)
		}
		walkTags(t, f.Type, seen)
	}
}

// The state enum is api.ReservationStates, each state documented.
func TestStatesDocumented(t *testing.T) {
	if got, want := api.StateEnum.Strings(), statesOf(api.ReservationStates); !slices.Equal(got, want) {
		t.Fatalf("state enum %v, api.ReservationStates %v", got, want)
	}
	for _, v := range api.StateEnum.Values {
		doc := strings.TrimPrefix(v.Doc, "terminal: ")
		if strings.TrimSpace(doc) == "" {
			t.Errorf("state %s has no meaning", v.Value)
		}
		st, _ := api.ParseReservationState(v.Value)
		if st.Terminal() != strings.HasPrefix(v.Doc, "terminal: ") {
			t.Errorf("state %s: terminal %v, doc %q", v.Value, st.Terminal(), v.Doc)
		}
	}
}

func statesOf(ss []api.ReservationState) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// source is what the scan of shared/ found: the string constants of each
// package, and the calls that build API errors.
type source struct {
	consts     map[string]map[string]string // package dir → name → value
	fileConsts map[string]map[string]string // file → name → value (of its own declarations)
	calls      []errCall
}

// errCall is one apierr.Invalid / apierr.Dependency / .With / strictjson
// failure in the code, with its literal arguments resolved.
type errCall struct {
	pos  string
	fn   string // Invalid, Dependency, With, Kind
	args []string
}

// scanShared parses every non-test Go file under shared/ and collects the
// calls that put words into error answers.
func scanShared(t *testing.T) source {
	t.Helper()
	src := source{consts: map[string]map[string]string{}}
	fset := token.NewFileSet()
	files := map[string][]*ast.File{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files[filepath.Dir(path)] = append(files[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A constant's value is a string literal, or another constant's (an
	// alias: api.ReasonMalformed = dsse.ReasonMalformed,
	// rollout.ReasonExpired = release.ReasonExpired), in its package or
	// another one under shared/.
	exprs := map[string]map[string]ast.Expr{}       // dir → name → value
	declared := map[*ast.File]map[string]ast.Expr{} // what each file declares
	for dir, fs := range files {
		exprs[dir] = map[string]ast.Expr{}
		for _, f := range fs {
			declared[f] = map[string]ast.Expr{}
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							exprs[dir][n.Name], declared[f][n.Name] = vs.Values[i], vs.Values[i]
						}
					}
				}
			}
		}
	}
	var value func(dir string, e ast.Expr, depth int) (string, bool)
	value = func(dir string, e ast.Expr, depth int) (string, bool) {
		if s, ok := stringLit(e); ok || depth > 8 {
			return s, ok
		}
		switch e := e.(type) {
		case *ast.Ident:
			if v, ok := exprs[dir][e.Name]; ok {
				return value(dir, v, depth+1)
			}
		case *ast.SelectorExpr:
			if pkg, ok := e.X.(*ast.Ident); ok {
				other := filepath.Join("..", pkg.Name)
				if v, ok := exprs[other][e.Sel.Name]; ok {
					return value(other, v, depth+1)
				}
			}
		}
		return "", false
	}
	src.fileConsts = map[string]map[string]string{}
	for dir, fs := range files {
		consts := map[string]string{}
		for _, f := range fs {
			own := map[string]string{}
			for name, e := range declared[f] {
				if s, ok := value(dir, e, 0); ok {
					consts[name], own[name] = s, s
				}
			}
			src.fileConsts[fset.Position(f.Pos()).Filename] = own
		}
		src.consts[dir] = consts
		resolve := func(e ast.Expr) string {
			s, _ := value(dir, e, 0)
			return s // "" when computed: not a word the docs could list
		}
		for _, f := range fs {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					name := ""
					if ok {
						name = sel.Sel.Name
					}
					if name == "fail" || name == "failf" { // strictjson's decoder
						name = "Kind"
					}
					switch name {
					case "Invalid", "Dependency", "With", "Kind":
						c := errCall{pos: fset.Position(n.Pos()).String(), fn: name}
						for _, a := range n.Args {
							c.args = append(c.args, resolve(a))
						}
						if name == "Kind" && !strings.HasSuffix(dir, "strictjson") {
							return true
						}
						src.calls = append(src.calls, c)
					}
				case *ast.KeyValueExpr:
					if isIdent(n.Key, "Kind") && strings.HasSuffix(dir, "strictjson") {
						src.calls = append(src.calls, errCall{pos: fset.Position(n.Pos()).String(), fn: "Kind", args: []string{resolve(n.Value)}})
					}
				}
				return true
			})
		}
	}
	return src
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// Every word the code puts into an error answer is documented: each
// details key it sets (.With), each INVALID_INPUT reason (apierr.Invalid and
// strict decoding's kinds), each window rule and each failed dependency.
func TestErrorWordsMatchCode(t *testing.T) {
	src := scanShared(t)
	if len(src.calls) < 40 {
		t.Fatalf("the scan found %d error calls: it is not reading the code", len(src.calls))
	}
	var invalid []string // reasons the code answers
	for _, c := range src.calls {
		switch {
		case c.fn == "With" && len(c.args) == 2 && c.args[0] != "":
			if api.LookupDetailKey(c.args[0]) == nil {
				t.Errorf("%s: details key %q is not documented (api.DetailKeys)", c.pos, c.args[0])
			}
			if c.args[0] == "rule" && !slices.Contains(api.RuleEnum.Strings(), c.args[1]) {
				t.Errorf("%s: rule %q is not documented", c.pos, c.args[1])
			}
		case c.fn == "Invalid" && len(c.args) >= 3 && c.args[0] != "":
			invalid = append(invalid, c.args[0])
		case c.fn == "Kind" && len(c.args) >= 1 && c.args[0] != "":
			invalid = append(invalid, c.args[0])
		case c.fn == "Dependency" && len(c.args) == 2:
			if !slices.Contains(api.DependencyEnum.Strings(), c.args[0]) {
				t.Errorf("%s: dependency %q is not documented", c.pos, c.args[0])
			}
		}
	}
	for _, r := range invalid {
		if !slices.Contains(api.InvalidReasonEnum.Strings(), r) {
			t.Errorf("INVALID_INPUT reason %q is not documented (api.InvalidReasonEnum)", r)
		}
	}
	// And nothing is documented that the code never answers.
	for _, r := range api.InvalidReasonEnum.Strings() {
		if !slices.Contains(invalid, r) {
			t.Errorf("INVALID_INPUT reason %q is documented but no code answers it", r)
		}
	}
	// Reservation reasons and releasers are the Reason*/ReleasedBy*
	// constants of the reservations' vocabulary (shared/api, types_capacity.go).
	var reasons, releasers []string
	for name, v := range src.fileConsts[filepath.Join("..", "api", "types_capacity.go")] {
		switch {
		case strings.HasPrefix(name, "Reason"):
			reasons = append(reasons, v)
		case strings.HasPrefix(name, "ReleasedBy"):
			releasers = append(releasers, v)
		}
	}
	for _, c := range []struct {
		enum *api.Enum
		code []string
	}{{api.ReasonEnum, reasons}, {api.ReleasedByEnum, releasers}} {
		got, want := slices.Sorted(slices.Values(c.enum.Strings())), slices.Sorted(slices.Values(c.code))
		if !slices.Equal(got, want) {
			t.Errorf("enum %s documents %v; the reservations' vocabulary defines %v", c.enum.Name, got, want)
		}
	}
}

// The catalog's error cases use documented keys and values, come in HTTP
// status order, and every method has the cases every method can answer.
func TestErrorCases(t *testing.T) {
	for _, m := range api.Catalog {
		t.Run(m.Name, func(t *testing.T) {
			cases := m.ErrorCases()
			codes := map[apierr.Code]bool{}
			for i, e := range cases {
				codes[e.Code] = true
				if !slices.Contains(apierr.Codes, e.Code) {
					t.Errorf("case %d: unknown code %s", i, e.Code)
				}
				if i > 0 && apierr.HTTPStatus(cases[i-1].Code) > apierr.HTTPStatus(e.Code) {
					t.Errorf("case %d (%s) is out of HTTP status order", i, e.Code)
				}
				if strings.TrimSpace(e.When) == "" {
					t.Errorf("case %d (%s) does not say when", i, e.Code)
				}
				for _, d := range e.Details {
					k := api.LookupDetailKey(d.Key)
					if k == nil {
						t.Errorf("%s: details key %q is not documented", e.Code, d.Key)
						continue
					}
					var enum *api.Enum
					switch {
					case k.Enum != nil:
						enum = k.Enum
					case d.Key == "reason" && e.Code == apierr.InvalidInput:
						enum = api.InvalidReasonEnum
					case d.Key == "reason" && e.Code == apierr.CapacityExhausted:
						enum = api.ReasonEnum
					}
					for _, v := range d.Values {
						if enum != nil && !slices.Contains(enum.Strings(), v) {
							t.Errorf("%s: %s value %q is not a value of %s", e.Code, d.Key, v, enum.Name)
						}
					}
				}
			}
			for _, c := range []apierr.Code{apierr.InvalidInput, apierr.Unauthenticated, apierr.PermissionDenied, apierr.Unavailable, apierr.Internal} {
				if !codes[c] {
					t.Errorf("no %s case", c)
				}
			}
			if len(m.ErrorStatuses()) < 5 {
				t.Errorf("only %d error statuses", len(m.ErrorStatuses()))
			}
		})
	}
	for _, c := range apierr.Codes {
		if api.CodeDoc(c) == "" {
			t.Errorf("code %s is not documented", c)
		}
	}
}

// The limits the input tags enforce are the domain's constants: the docs
// quote the constants, strict decoding the tags.
func TestInputLimitsAreTheDomains(t *testing.T) {
	field := func(typ reflect.Type, name string) strictjson.Field {
		for _, f := range strictjson.Fields(typ) {
			if f.Name == name {
				return f
			}
		}
		t.Fatalf("%v has no %s", typ, name)
		return strictjson.Field{}
	}
	check := func(what string, got *int64, want int64) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s: tag %v, constant %d", what, got, want)
		}
	}
	check("count max", field(reflect.TypeFor[api.CreateReservationInput](), "count").Max, api.MaxCount)
	check("resources max", field(reflect.TypeFor[api.CreatePoolInput](), "resources").Max, api.MaxResources)
	check("offer max", field(reflect.TypeFor[api.OfferPoolInput](), "max").Max, api.MaxQuota)
	check("usage hours", field(reflect.TypeFor[api.PoolUsageInput](), "hours").Max, api.MaxUsageHours)
	check("usage nodes", field(reflect.TypeFor[api.PoolUsageInput](), "limit").Max, api.MaxUsageNodes)
	if lo, hi, _ := strictjson.ValueBounds(reflect.TypeFor[api.Resources]()); lo != 1 || hi != api.MaxDevicesPerResource {
		t.Errorf("device counts %d..%d, want 1..%d", lo, hi, api.MaxDevicesPerResource)
	}
	if lo, hi, _ := strictjson.ValueBounds(reflect.TypeFor[api.NodeSizes]()); lo != 1 || hi != api.MaxNodeSize {
		t.Errorf("node sizes %d..%d, want 1..%d", lo, hi, api.MaxNodeSize)
	}
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#+ (.+)$`)
)

// anchors are the ids GitHub gives a page's headings.
func anchors(text string) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// Nothing the reference says links outside the repository, and every
// relative link names a generated page.
func TestReferenceLinksStayInside(t *testing.T) {
	served := func(*api.Method) bool { return true }
	pages := map[string]string{"README.md": api.Index(served)}
	for _, r := range api.ResourceDocs {
		pages[r.Name+".md"] = api.Reference(r, served)
	}
	for name, text := range pages {
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			switch {
			case strings.Contains(target, "://"), strings.HasPrefix(target, "/"):
				t.Errorf("%s links outside the repository: %s", name, target)
			case target == "../openapi.json":
			default:
				page, anchor, _ := strings.Cut(target, "#")
				if page == "" {
					page = name
				}
				text, ok := pages[page]
				if !ok {
					t.Errorf("%s links to %s, which is not generated", name, target)
					continue
				}
				if anchor != "" && !slices.Contains(anchors(text), anchor) {
					t.Errorf("%s links to %s: no such heading", name, target)
				}
			}
		}
	}
}

// Every ${constant} a doc tag quotes is replaced by its value wherever the
// doc is shown.
func TestDocConstantsExpanded(t *testing.T) {
	served := func(*api.Method) bool { return true }
	out := []string{api.Index(served)}
	for _, r := range api.ResourceDocs {
		out = append(out, api.Reference(r, served))
	}
	doc, err := api.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, string(doc))
	for _, text := range out {
		if i := strings.Index(text, "${"); i >= 0 {
			t.Errorf("unexpanded constant: …%s…", text[max(0, i-60):min(len(text), i+40)])
		}
	}
}
