// Package strictjson decodes JSON into Go values strictly, at every depth:
// unknown fields, duplicate keys, trailing data, null and wrong types are
// errors that name the offending field by its JSON path ("window.end",
// "binaries[0].url"). The Go types are the schema: struct tags declare what is
// required and the constraints, and Describe turns the same tags into docs.
//
// Tag grammar (key "bc"): comma-separated options
//
//	required       the field must be present
//	max=N / min=N  string length in characters, or integer bounds
//	pattern=NAME   the string must match the pattern registered as NAME
//	nullable       (a pointer) null is taken, and leaves it nil
//	strictint      an integer must be written as one: 7, not 7.0 or 7e0
//	               (without it any integral number is taken, as JSON
//	               Schema's integer: 7, 7.0, 7e0, 0.7e1)
//	doc=TEXT       a short description for generated docs (no commas)
//
// A struct that embeds IgnoreUnknown skips the members it does not define
// (at its own level) instead of refusing them.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// FieldError is a decoding or validation failure at a JSON path.
type FieldError struct {
	Field   string // JSON path from the root; "" for the whole document
	Problem string // short reason: "unknown field", "expected string", ...
	Kind    string // machine-readable: malformed, unknown_field, duplicate_key, type, required, constraint
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Problem
	}
	return e.Field + ": " + e.Problem
}

// IgnoreUnknown, embedded in a struct, makes Decode skip the members the
// struct does not define instead of refusing them: for formats whose own
// specification tells consumers to ignore unrecognized fields (a DSSE
// envelope and its signatures). Only that struct's level is lenient; its
// members decode as strictly as anywhere, and duplicate keys, wrong types
// and missing required members are refused as always.
type IgnoreUnknown struct{}

func (IgnoreUnknown) ignoresUnknownMembers() {}

var ignoreUnknownType = reflect.TypeFor[interface{ ignoresUnknownMembers() }]()

// IgnoresUnknown reports whether struct type t embeds IgnoreUnknown.
func IgnoresUnknown(t reflect.Type) bool { return t.Implements(ignoreUnknownType) }

// Object is a JSON object kept as sent (well formed, within MaxDepth) for a
// later, context-specific strict decode.
type Object json.RawMessage

// MarshalJSON emits the object as is.
func (o Object) MarshalJSON() ([]byte, error) {
	if o == nil {
		return []byte("null"), nil
	}
	return o, nil
}

var (
	patternsMu sync.RWMutex
	patterns   = map[string]*regexp.Regexp{}
)

// RegisterPattern names a regular expression for use in `pattern=NAME` tags.
func RegisterPattern(name, expr string) *regexp.Regexp {
	re := regexp.MustCompile(expr)
	patternsMu.Lock()
	defer patternsMu.Unlock()
	patterns[name] = re
	return re
}

var (
	limitsMu sync.RWMutex
	limits   = map[string]int64{}
)

// RegisterLimits names constants for use as `min=NAME`/`max=NAME` tag
// values ("max=rollout.MaxPools"): the package that enforces a limit
// states it once and the tags quote it.
func RegisterLimits(named map[string]int64) struct{} {
	limitsMu.Lock()
	defer limitsMu.Unlock()
	for k, v := range named {
		limits[k] = v
	}
	return struct{}{}
}

func pattern(name string) *regexp.Regexp {
	patternsMu.RLock()
	defer patternsMu.RUnlock()
	re, ok := patterns[name]
	if !ok {
		panic("strictjson: unregistered pattern " + name)
	}
	return re
}

// MaxDepth is how deeply arrays and objects may nest in one document. The
// API's inputs need a handful of levels; the limit keeps a small hostile body
// (100,000 nested brackets fit in 256 KiB) from costing more than it is long.
const MaxDepth = 64

// Decode parses data into v (a non-nil pointer) in two streaming passes: a
// syntax pass over the whole document (nesting, duplicate names, trailing
// data), then a typed pass in which the Go type is the schema, so the first
// unknown field, wrong type or violated constraint stops the decode there.
// Time and memory are linear in len(data) whatever its shape; a JSON path
// is only built for the error reported. prefix is prepended to every field
// path (use "" at the root).
func Decode(data []byte, v any, prefix string) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("strictjson: Decode needs a non-nil pointer")
	}
	d := &decoder{prefix: prefix}
	if !utf8.Valid(data) {
		return d.fail("malformed", "body is not valid UTF-8")
	}
	if err := checkSyntax(data, prefix); err != nil {
		return err
	}
	// The document is well formed: the typed pass reports what the schema
	// refuses, in document order.
	d.dec = jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true))
	return d.value(rv.Elem(), options{})
}

// checkSyntax is the first pass: one JSON value, well formed, no duplicate
// member names, at most MaxDepth levels, nothing after it. Tokens are read
// in place, and duplicate names are found through 64-bit hashes of each
// object's names (keyed per process, so they cannot be aimed at): time and
// memory stay linear in len(data), a few MB and ms for 256 KiB of any shape.
func checkSyntax(data []byte, prefix string) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true))
	var open []nameSet // one per object open
	var unquoted []byte
	for {
		if k, n := dec.StackIndex(dec.StackDepth()); k == '{' && n%2 == 0 && dec.PeekKind() == '"' {
			raw, err := dec.ReadValue()
			if err != nil {
				return syntaxError(dec, err, prefix)
			}
			name := raw[1 : len(raw)-1]
			if bytes.IndexByte(name, '\\') >= 0 {
				if unquoted, err = jsontext.AppendUnquote(unquoted[:0], raw); err != nil {
					return syntaxError(dec, err, prefix)
				}
				name = unquoted
			}
			if !open[len(open)-1].add(maphash.Bytes(nameSeed, name)) {
				return duplicateName(data, prefix)
			}
			continue
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return syntaxError(dec, err, prefix)
		}
		switch tok.Kind() {
		case '{', '[':
			if dec.StackDepth() > MaxDepth {
				return &FieldError{Field: stackPath(dec, dec.StackPointer(), prefix),
					Problem: fmt.Sprintf("nesting deeper than %d levels", MaxDepth), Kind: "too_deep"}
			}
			if tok.Kind() == '{' {
				open = append(open, nameSet{})
			}
		case '}':
			open = open[:len(open)-1]
		}
		if dec.StackDepth() == 0 {
			break
		}
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return &FieldError{Field: prefix, Problem: "trailing data after the JSON value", Kind: "malformed"}
	}
	return nil
}

// nameSet holds the name hashes of one object: a short list, then a set.
type nameSet struct {
	few  []uint64
	many map[uint64]struct{}
}

// add records h and reports whether it was new.
func (s *nameSet) add(h uint64) bool {
	if s.many != nil {
		if _, ok := s.many[h]; ok {
			return false
		}
		s.many[h] = struct{}{}
		return true
	}
	if slices.Contains(s.few, h) {
		return false
	}
	if s.few = append(s.few, h); len(s.few) > 16 {
		s.many = make(map[uint64]struct{}, 64)
		for _, x := range s.few {
			s.many[x] = struct{}{}
		}
		s.few = nil
	}
	return true
}

var nameSeed = maphash.MakeSeed()

// duplicateName locates a duplicate member name the hashes found, by reading
// the document again with exact name tracking (only on this error path).
func duplicateName(data []byte, prefix string) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		if _, err := dec.ReadToken(); err != nil {
			var se *jsontext.SyntacticError
			if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
				return syntaxError(dec, err, prefix)
			}
			break
		}
	}
	// Two distinct names with equal 64-bit keyed hashes: as good as
	// impossible, and refused rather than risked.
	return &FieldError{Field: prefix, Problem: "duplicate key", Kind: "duplicate_key"}
}

// syntaxError maps a grammar error of the first pass. A duplicate member
// name is reported at the member ("a.b"), anything else as malformed where
// it happened.
func syntaxError(dec *jsontext.Decoder, err error, prefix string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// A member whose value is missing is named; otherwise the value
		// left open is.
		p := dec.StackPointer()
		if k, n := dec.StackIndex(dec.StackDepth()); k != '{' || n%2 == 0 {
			p = p.Parent()
		}
		return &FieldError{Field: stackPath(dec, p, prefix), Problem: "malformed JSON: unexpected end of input", Kind: "malformed"}
	}
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return &FieldError{Field: prefix, Problem: "malformed JSON: " + err.Error(), Kind: "malformed"}
	}
	field := stackPath(dec, se.JSONPointer, prefix)
	if errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return &FieldError{Field: field, Problem: "duplicate key", Kind: "duplicate_key"}
	}
	return &FieldError{Field: field, Problem: fmt.Sprintf("malformed JSON at byte %d: %v", se.ByteOffset, se.Err), Kind: "malformed"}
}

// stackPath renders a JSON pointer into the decoder's open values as this
// package's path ("a.b[2].c"): reference token i names a member or an index
// of the value open at depth i+1.
func stackPath(dec *jsontext.Decoder, p jsontext.Pointer, prefix string) string {
	var b strings.Builder
	b.WriteString(prefix)
	depth := 0
	for tok := range p.Tokens() {
		depth++
		if depth <= dec.StackDepth() {
			if k, _ := dec.StackIndex(depth); k == '[' {
				b.WriteString("[" + tok + "]")
				continue
			}
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// ---- decoding: one pass over the tokens, driven by the Go type ----

// segment is one step of a JSON path: an object member or an array index.
type segment struct {
	name  string
	index int // ≥ 0 for an array element
}

type decoder struct {
	dec    *jsontext.Decoder
	prefix string
	path   []segment
}

func (d *decoder) push(s segment) { d.path = append(d.path, s) }
func (d *decoder) pop()           { d.path = d.path[:len(d.path)-1] }

// pathString renders the current path ("window.end", "binaries[0].url").
func (d *decoder) pathString() string {
	var b strings.Builder
	b.WriteString(d.prefix)
	for _, s := range d.path {
		if s.index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.name)
	}
	return b.String()
}

func (d *decoder) fail(kind, problem string) error {
	return &FieldError{Field: d.pathString(), Problem: problem, Kind: kind}
}

func (d *decoder) failf(kind, format string, args ...any) error {
	return d.fail(kind, fmt.Sprintf(format, args...))
}

// syntax reports a grammar error in the typed pass, which the first pass
// makes unreachable (kept so a bug shows as malformed, not as a panic).
func (d *decoder) syntax(err error) error {
	return d.failf("malformed", "malformed JSON: %v", err)
}

// read returns the next token, mapping grammar errors.
func (d *decoder) read() (jsontext.Token, error) {
	tok, err := d.dec.ReadToken()
	if err != nil {
		return tok, d.syntax(err)
	}
	return tok, nil
}

// open reads the next token, which must begin an object or array (want),
// and enforces MaxDepth.
func (d *decoder) open(want jsontext.Kind, describe string) error {
	if k := d.dec.PeekKind(); k != want {
		if k == 0 {
			_, err := d.dec.ReadToken()
			return d.syntax(err)
		}
		return d.typeErr(describe, k)
	}
	if _, err := d.read(); err != nil {
		return err
	}
	if d.dec.StackDepth() > MaxDepth {
		return d.failf("too_deep", "nesting deeper than %d levels", MaxDepth)
	}
	return nil
}

// more reports whether the object or array being read has another member,
// consuming its end when it has not.
func (d *decoder) more() (bool, error) {
	switch d.dec.PeekKind() {
	case '}', ']':
		_, err := d.read()
		return false, err
	case 0:
		_, err := d.dec.ReadToken()
		return false, d.syntax(err)
	}
	return true, nil
}

var kindNames = map[jsontext.Kind]string{'{': "object", '[': "array", '"': "string", '0': "number", 't': "boolean", 'f': "boolean", 'n': "null"}

func (d *decoder) typeErr(want string, got jsontext.Kind) error {
	return d.failf("type", "expected %s, got %s", want, kindNames[got])
}

// scalar reads the next token, which must be of one of the kinds (want
// describes them for the error).
func (d *decoder) scalar(want string, kinds ...jsontext.Kind) (jsontext.Token, error) {
	k := d.dec.PeekKind()
	if k == 0 {
		_, err := d.dec.ReadToken()
		return jsontext.Token{}, d.syntax(err)
	}
	if !slices.Contains(kinds, k) {
		return jsontext.Token{}, d.typeErr(want, k)
	}
	return d.read()
}

// raw copies the next value as sent, for a later strict decode (Object,
// json.RawMessage); the first pass has checked its syntax and depth.
func (d *decoder) raw() ([]byte, error) {
	v, err := d.dec.ReadValue()
	if err != nil {
		return nil, d.syntax(err)
	}
	return bytes.Clone(v), nil
}

type options struct {
	required  bool
	nullable  bool
	strictInt bool
	hasMin    bool
	hasMax    bool
	min, max  int64
	pattern   string
	doc       string
}

func parseTag(tag string) options {
	var o options
	for _, part := range strings.Split(tag, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "required":
			o.required = true
		case "strictint":
			o.strictInt = true
		case "nullable":
			o.nullable = true
		case "min":
			o.hasMin, o.min = true, mustInt(v)
		case "max":
			o.hasMax, o.max = true, mustInt(v)
		case "pattern":
			o.pattern = v
		case "doc":
			o.doc = v
		case "":
		default:
			panic("strictjson: unknown tag option " + k)
		}
	}
	return o
}

// mustInt is a tag's number: a literal, or a name RegisterLimits gave.
func mustInt(s string) int64 {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	limitsMu.RLock()
	defer limitsMu.RUnlock()
	n, ok := limits[s]
	if !ok {
		panic("strictjson: bad number in tag (not a literal nor a registered limit): " + s)
	}
	return n
}

var (
	timeType   = reflect.TypeFor[time.Time]()
	objectType = reflect.TypeFor[Object]()
	rawType    = reflect.TypeFor[json.RawMessage]()
)

// isIntLiteral reports whether a JSON number is written as an integer: no
// fraction, no exponent (7.0 and 7e0 are not, for strictint fields).
func isIntLiteral(lit string) bool {
	lit = strings.TrimPrefix(lit, "-")
	if lit == "" || (lit[0] == '0' && len(lit) > 1) {
		return false
	}
	for i := 0; i < len(lit); i++ {
		if lit[i] < '0' || lit[i] > '9' {
			return false
		}
	}
	return true
}

// integralDigits rewrites a JSON number literal (valid by the grammar) that
// denotes an integer as plain decimal digits ("7.0" → "7", "1.5e1" → "15",
// "-0.0" → "0"); integral is false when it has a non-zero fraction. Digits
// past 20 (more than int64 holds) are not written out: the result then
// fails to parse as out of range, whatever the exponent, in time linear in
// the literal.
func integralDigits(lit string) (digits string, integral bool) {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(lit), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	ds := strings.TrimLeft(whole+frac, "0")
	if ds == "" {
		return "0", true // zero, with any fraction or exponent
	}
	// The value is 0.ds × 10^point.
	point := int64(len(whole) - (len(whole+frac) - len(ds)))
	if exp != "" {
		e, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || e > 1<<40 || e < -(1<<40) {
			// An exponent beyond ±2^40 with non-zero digits: far out of
			// range, or far from an integer.
			if strings.HasPrefix(exp, "-") {
				return "", false
			}
			return strings.Repeat("9", 20), true
		}
		point += e
	}
	switch {
	case point <= 0:
		return "", false // 0 < |value| < 1
	case point > 20:
		return strings.Repeat("9", 20), true // out of range
	case int64(len(ds)) > point:
		if strings.Trim(ds[point:], "0") != "" {
			return "", false
		}
		ds = ds[:point]
	default:
		ds += strings.Repeat("0", int(point)-len(ds))
	}
	if neg {
		ds = "-" + ds
	}
	return ds, true
}

func (d *decoder) constraint(format string, args ...any) error {
	return d.failf("constraint", format, args...)
}

// value decodes the next JSON value into v (o: the field's tag options).
func (d *decoder) value(v reflect.Value, o options) error {
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		if d.dec.PeekKind() == 'n' {
			if o.nullable {
				_, err := d.read()
				return err
			}
			return d.typeErr(describeType(t.Elem()), 'n')
		}
		p := reflect.New(t.Elem())
		if err := d.value(p.Elem(), o); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	switch t {
	case timeType:
		tok, err := d.scalar("RFC 3339 time string", '"')
		if err != nil {
			return err
		}
		ts, err := ParseTime(tok.String())
		if err != nil {
			return d.constraint("must be an RFC 3339 time with a Z or an offset")
		}
		v.Set(reflect.ValueOf(ts))
		return nil
	case objectType, rawType:
		switch k := d.dec.PeekKind(); {
		case t == objectType && k != '{':
			if k == 0 {
				_, err := d.dec.ReadToken()
				return d.syntax(err)
			}
			return d.typeErr("object", k)
		case k == 'n':
			return d.typeErr("value", k)
		}
		b, err := d.raw()
		if err != nil {
			return err
		}
		v.SetBytes(b)
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		return d.object(v)
	case reflect.String:
		tok, err := d.scalar("string", '"')
		if err != nil {
			return err
		}
		s := tok.String()
		if o.hasMax && int64(utf8.RuneCountInString(s)) > o.max {
			return d.constraint("must be at most %d characters", o.max)
		}
		if o.hasMin && int64(utf8.RuneCountInString(s)) < o.min {
			return d.constraint("must be at least %d characters", o.min)
		}
		if o.pattern != "" && !pattern(o.pattern).MatchString(s) {
			return d.constraint("must match %s", pattern(o.pattern))
		}
		v.SetString(s)
		return nil
	case reflect.Int, reflect.Int64, reflect.Int32:
		tok, err := d.scalar("integer", '0')
		if err != nil {
			return err
		}
		lit := tok.String()
		if !isIntLiteral(lit) {
			if o.strictInt {
				return d.fail("type", "expected an integer written without fraction or exponent, got "+lit)
			}
			digits, integral := integralDigits(lit)
			if !integral {
				return d.fail("type", "expected integer, got "+lit)
			}
			lit = digits
		}
		i, err := strconv.ParseInt(lit, 10, 64)
		if err != nil || v.OverflowInt(i) {
			return d.constraint("integer out of range")
		}
		if o.hasMin && i < o.min {
			return d.constraint("must be at least %d", o.min)
		}
		if o.hasMax && i > o.max {
			return d.constraint("must be at most %d", o.max)
		}
		v.SetInt(i)
		return nil
	case reflect.Bool:
		tok, err := d.scalar("boolean", 't', 'f')
		if err != nil {
			return err
		}
		v.SetBool(tok.Bool())
		return nil
	case reflect.Slice:
		return d.array(v, o)
	case reflect.Map:
		return d.mapping(v, o)
	}
	panic("strictjson: unsupported type " + t.String())
}

// array decodes a JSON array into slice v, refusing it as soon as it holds
// more elements than o allows.
func (d *decoder) array(v reflect.Value, o options) error {
	if err := d.open('[', "array"); err != nil {
		return err
	}
	s := reflect.MakeSlice(v.Type(), 0, 0)
	for i := 0; ; i++ {
		more, err := d.more()
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if o.hasMax && int64(i) >= o.max {
			return d.constraint("must have at most %d elements", o.max)
		}
		s = reflect.Append(s, reflect.New(v.Type().Elem()).Elem())
		d.push(segment{index: i})
		if err := d.value(s.Index(i), options{}); err != nil {
			return err
		}
		d.pop()
	}
	if o.hasMin && int64(s.Len()) < o.min {
		return d.constraint("must have at least %d elements", o.min)
	}
	v.Set(s)
	return nil
}

// mapping decodes a JSON object into map v. For maps, the tag's pattern
// constrains the keys and min/max the number of entries.
func (d *decoder) mapping(v reflect.Value, o options) error {
	t := v.Type()
	if t.Key().Kind() != reflect.String {
		panic("strictjson: map keys must be strings")
	}
	if err := d.open('{', "object"); err != nil {
		return err
	}
	elemOpts := options{}
	if et := t.Elem(); et.Kind() == reflect.Int || et.Kind() == reflect.Int64 {
		if lo, hi, ok := ValueBounds(t); ok {
			elemOpts = options{hasMin: true, min: lo, hasMax: true, max: hi}
		}
	}
	m := reflect.MakeMap(t)
	for {
		more, err := d.more()
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if o.hasMax && int64(m.Len()) >= o.max {
			return d.constraint("must have at most %d entries", o.max)
		}
		tok, err := d.read()
		if err != nil {
			return err
		}
		k := tok.String()
		d.push(segment{name: k, index: -1})
		if o.pattern != "" && !pattern(o.pattern).MatchString(k) {
			return d.constraint("key must match %s", pattern(o.pattern))
		}
		ev := reflect.New(t.Elem()).Elem()
		if err := d.value(ev, elemOpts); err != nil {
			return err
		}
		d.pop()
		m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
	}
	if o.hasMin && int64(m.Len()) < o.min {
		return d.constraint("must have at least %d entries", o.min)
	}
	v.Set(m)
	return nil
}

// object decodes a JSON object into struct v: every member must be a field,
// every required field present.
func (d *decoder) object(v reflect.Value) error {
	if err := d.open('{', "object"); err != nil {
		return err
	}
	st := structOf(v.Type())
	var present []bool
	for {
		more, err := d.more()
		if err != nil {
			return err
		}
		if !more {
			break
		}
		tok, err := d.read()
		if err != nil {
			return err
		}
		name := tok.String()
		d.push(segment{name: name, index: -1})
		fi, ok := st.byName[name]
		if !ok {
			if !st.ignoreUnknown {
				return d.fail("unknown_field", "unknown field")
			}
			if err := d.dec.SkipValue(); err != nil {
				return d.syntax(err)
			}
			d.pop()
			continue
		}
		if present == nil {
			present = make([]bool, len(st.fields))
		}
		present[fi] = true
		f := st.fields[fi]
		if err := d.value(v.FieldByIndex(f.index), f.opts); err != nil {
			return err
		}
		d.pop()
	}
	for i, f := range st.fields {
		if f.opts.required && (present == nil || !present[i]) {
			d.push(segment{name: f.name, index: -1})
			return d.fail("required", "is required")
		}
	}
	return nil
}

type fieldInfo struct {
	name  string
	index []int
	opts  options
	typ   reflect.Type
}

// structInfo is a struct type's JSON fields, in declaration order, and an
// index by name.
type structInfo struct {
	fields        []fieldInfo
	byName        map[string]int
	ignoreUnknown bool // the struct embeds IgnoreUnknown
}

var fieldCache sync.Map // reflect.Type -> *structInfo

func fields(t reflect.Type) []fieldInfo { return structOf(t).fields }

func structOf(t reflect.Type) *structInfo {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structInfo)
	}
	st := &structInfo{byName: map[string]int{}, ignoreUnknown: IgnoresUnknown(t)}
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			idx := append(append([]int{}, index...), i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, idx)
				continue
			}
			if !sf.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			st.byName[name] = len(st.fields)
			st.fields = append(st.fields, fieldInfo{name: name, index: idx, opts: parseTag(sf.Tag.Get("bc")), typ: sf.Type})
		}
	}
	walk(t, nil)
	fieldCache.Store(t, st)
	return st
}

// join appends a member name to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d{1,9})?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$`)

// ParseTime accepts RFC 3339 with optional fractional seconds; a zone (Z or
// an offset) is mandatory, and the T and Z may be lowercase (RFC 3339 §5.6
// allows t and z). Go's parser alone is looser than the RFC elsewhere (it
// takes a comma before the fraction and offsets like +24:00), hence the
// pattern, and stricter here (an uppercase T and Z only), hence ToUpper:
// the pattern leaves no other letter in the string.
func ParseTime(s string) (time.Time, error) {
	if !rfc3339.MatchString(s) {
		return time.Time{}, fmt.Errorf("not an RFC 3339 time: %q", s)
	}
	return time.Parse(time.RFC3339Nano, strings.ToUpper(s))
}
