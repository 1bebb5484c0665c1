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
//	doc=TEXT       a short description for generated docs (no commas)
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
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

// Object is a JSON object kept as (canonically re-encoded) JSON for a later,
// context-specific strict decode.
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

func pattern(name string) *regexp.Regexp {
	patternsMu.RLock()
	defer patternsMu.RUnlock()
	re, ok := patterns[name]
	if !ok {
		panic("strictjson: unregistered pattern " + name)
	}
	return re
}

// Decode parses data into v (a non-nil pointer). prefix is prepended to every
// field path (use "" at the request root).
func Decode(data []byte, v any, prefix string) error {
	root, err := parse(data)
	if err != nil {
		if fe, ok := err.(*FieldError); ok && prefix != "" {
			fe.Field = joinPath(prefix, fe.Field)
		}
		return err
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("strictjson: Decode needs a non-nil pointer")
	}
	return assign(root, rv.Elem(), prefix, options{})
}

// ---- parsing: a tree that remembers key order and rejects duplicates ----

type node struct {
	kind  byte // '{' object, '[' array, 's' string, 'n' number, 'b' bool, '0' null
	str   string
	b     bool
	keys  []string
	vals  []*node
	elems []*node
}

func parse(data []byte) (*node, error) {
	if !utf8.Valid(data) {
		return nil, &FieldError{Problem: "body is not valid UTF-8", Kind: "malformed"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseValue(dec, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &FieldError{Problem: "trailing data after the JSON value", Kind: "malformed"}
	}
	return n, nil
}

func parseValue(dec *json.Decoder, path string) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, &FieldError{Field: path, Problem: "malformed JSON: " + err.Error(), Kind: "malformed"}
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: '{'}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, &FieldError{Field: path, Problem: "malformed JSON: " + err.Error(), Kind: "malformed"}
				}
				key, ok := kt.(string)
				if !ok {
					return nil, &FieldError{Field: path, Problem: "malformed JSON object", Kind: "malformed"}
				}
				kp := join(path, key)
				if seen[key] {
					return nil, &FieldError{Field: kp, Problem: "duplicate key", Kind: "duplicate_key"}
				}
				seen[key] = true
				v, err := parseValue(dec, kp)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, key)
				n.vals = append(n.vals, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, &FieldError{Field: path, Problem: "malformed JSON: " + err.Error(), Kind: "malformed"}
			}
			return n, nil
		case '[':
			n := &node{kind: '['}
			for i := 0; dec.More(); i++ {
				v, err := parseValue(dec, fmt.Sprintf("%s[%d]", path, i))
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, &FieldError{Field: path, Problem: "malformed JSON: " + err.Error(), Kind: "malformed"}
			}
			return n, nil
		}
	case string:
		return &node{kind: 's', str: t}, nil
	case json.Number:
		return &node{kind: 'n', str: string(t)}, nil
	case bool:
		return &node{kind: 'b', b: t}, nil
	case nil:
		return &node{kind: '0'}, nil
	}
	return nil, &FieldError{Field: path, Problem: "malformed JSON", Kind: "malformed"}
}

func (n *node) encode(buf *bytes.Buffer) {
	switch n.kind {
	case '{':
		buf.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			buf.WriteByte(':')
			n.vals[i].encode(buf)
		}
		buf.WriteByte('}')
	case '[':
		buf.WriteByte('[')
		for i, e := range n.elems {
			if i > 0 {
				buf.WriteByte(',')
			}
			e.encode(buf)
		}
		buf.WriteByte(']')
	case 's':
		sb, _ := json.Marshal(n.str)
		buf.Write(sb)
	case 'n':
		buf.WriteString(n.str)
	case 'b':
		buf.WriteString(strconv.FormatBool(n.b))
	default:
		buf.WriteString("null")
	}
}

// joinPath prefixes a relative JSON path ("a.b", "[0].c" or "").
func joinPath(prefix, rel string) string {
	if rel == "" || strings.HasPrefix(rel, "[") {
		return prefix + rel
	}
	return prefix + "." + rel
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// ---- assignment: walk the tree against the Go type ----

type options struct {
	required  bool
	hasMin    bool
	hasMax    bool
	min, max  int64
	pattern   string
	doc       string
	omitEmpty bool
}

func parseTag(tag string) options {
	var o options
	for _, part := range strings.Split(tag, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "required":
			o.required = true
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

func mustInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic("strictjson: bad number in tag: " + s)
	}
	return n
}

var (
	timeType   = reflect.TypeFor[time.Time]()
	objectType = reflect.TypeFor[Object]()
	rawType    = reflect.TypeFor[json.RawMessage]()
	intLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)
)

func typeErr(path, want string, n *node) error {
	got := map[byte]string{'{': "object", '[': "array", 's': "string", 'n': "number", 'b': "boolean", '0': "null"}[n.kind]
	return &FieldError{Field: path, Problem: fmt.Sprintf("expected %s, got %s", want, got), Kind: "type"}
}

func constraint(path, format string, args ...any) error {
	return &FieldError{Field: path, Problem: fmt.Sprintf(format, args...), Kind: "constraint"}
}

func assign(n *node, v reflect.Value, path string, o options) error {
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		if n.kind == '0' {
			return typeErr(path, describeType(t.Elem()), n)
		}
		p := reflect.New(t.Elem())
		if err := assign(n, p.Elem(), path, o); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	switch {
	case t == timeType:
		if n.kind != 's' {
			return typeErr(path, "RFC 3339 time string", n)
		}
		ts, err := ParseTime(n.str)
		if err != nil {
			return constraint(path, "must be an RFC 3339 time with a Z or an offset")
		}
		v.Set(reflect.ValueOf(ts))
		return nil
	case t == objectType:
		if n.kind != '{' {
			return typeErr(path, "object", n)
		}
		var buf bytes.Buffer
		n.encode(&buf)
		v.SetBytes(buf.Bytes())
		return nil
	case t == rawType:
		if n.kind == '0' {
			return typeErr(path, "value", n)
		}
		var buf bytes.Buffer
		n.encode(&buf)
		v.SetBytes(buf.Bytes())
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		return assignStruct(n, v, path)
	case reflect.String:
		if n.kind != 's' {
			return typeErr(path, "string", n)
		}
		if o.hasMax && int64(utf8.RuneCountInString(n.str)) > o.max {
			return constraint(path, "must be at most %d characters", o.max)
		}
		if o.hasMin && int64(utf8.RuneCountInString(n.str)) < o.min {
			return constraint(path, "must be at least %d characters", o.min)
		}
		if o.pattern != "" && !pattern(o.pattern).MatchString(n.str) {
			return constraint(path, "must match %s", pattern(o.pattern))
		}
		v.SetString(n.str)
		return nil
	case reflect.Int, reflect.Int64, reflect.Int32:
		if n.kind != 'n' || !intLiteral.MatchString(n.str) {
			return typeErr(path, "integer", n)
		}
		i, err := strconv.ParseInt(n.str, 10, 64)
		if err != nil || v.OverflowInt(i) {
			return constraint(path, "integer out of range")
		}
		if o.hasMin && i < o.min {
			return constraint(path, "must be at least %d", o.min)
		}
		if o.hasMax && i > o.max {
			return constraint(path, "must be at most %d", o.max)
		}
		v.SetInt(i)
		return nil
	case reflect.Bool:
		if n.kind != 'b' {
			return typeErr(path, "boolean", n)
		}
		v.SetBool(n.b)
		return nil
	case reflect.Slice:
		if n.kind != '[' {
			return typeErr(path, "array", n)
		}
		if o.hasMax && int64(len(n.elems)) > o.max {
			return constraint(path, "must have at most %d elements", o.max)
		}
		if o.hasMin && int64(len(n.elems)) < o.min {
			return constraint(path, "must have at least %d elements", o.min)
		}
		s := reflect.MakeSlice(t, len(n.elems), len(n.elems))
		for i, e := range n.elems {
			if err := assign(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i), options{}); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if n.kind != '{' {
			return typeErr(path, "object", n)
		}
		if t.Key().Kind() != reflect.String {
			panic("strictjson: map keys must be strings")
		}
		if o.hasMax && int64(len(n.keys)) > o.max {
			return constraint(path, "must have at most %d entries", o.max)
		}
		if o.hasMin && int64(len(n.keys)) < o.min {
			return constraint(path, "must have at least %d entries", o.min)
		}
		m := reflect.MakeMapWithSize(t, len(n.keys))
		elemOpts := options{}
		if o.pattern != "" {
			// For maps, pattern constrains the keys and min/max the count.
			for _, k := range n.keys {
				if !pattern(o.pattern).MatchString(k) {
					return constraint(join(path, k), "key must match %s", pattern(o.pattern))
				}
			}
		}
		if et := t.Elem(); et.Kind() == reflect.Int || et.Kind() == reflect.Int64 {
			elemOpts = mapValueOptions(v)
		}
		for i, k := range n.keys {
			ev := reflect.New(t.Elem()).Elem()
			if err := assign(n.vals[i], ev, join(path, k), elemOpts); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
		}
		v.Set(m)
		return nil
	}
	panic("strictjson: unsupported type " + t.String())
}

// mapValueOptions lets a named map type declare bounds for its values with a
// method `ValueBounds() (min, max int64)`.
func mapValueOptions(v reflect.Value) options {
	if b, ok := v.Interface().(interface{ ValueBounds() (int64, int64) }); ok {
		lo, hi := b.ValueBounds()
		return options{hasMin: true, min: lo, hasMax: true, max: hi}
	}
	return options{}
}

type fieldInfo struct {
	name  string
	index []int
	opts  options
	typ   reflect.Type
}

var fieldCache sync.Map // reflect.Type -> []fieldInfo

func fields(t reflect.Type) []fieldInfo {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]fieldInfo)
	}
	var out []fieldInfo
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
			out = append(out, fieldInfo{name: name, index: idx, opts: parseTag(sf.Tag.Get("bc")), typ: sf.Type})
		}
	}
	walk(t, nil)
	fieldCache.Store(t, out)
	return out
}

func assignStruct(n *node, v reflect.Value, path string) error {
	if n.kind != '{' {
		return typeErr(path, "object", n)
	}
	fs := fields(v.Type())
	byName := make(map[string]int, len(fs))
	for i, f := range fs {
		byName[f.name] = i
	}
	present := make([]bool, len(fs))
	for i, k := range n.keys {
		fi, ok := byName[k]
		if !ok {
			return &FieldError{Field: join(path, k), Problem: "unknown field", Kind: "unknown_field"}
		}
		present[fi] = true
		if err := assign(n.vals[i], v.FieldByIndex(fs[fi].index), join(path, k), fs[fi].opts); err != nil {
			return err
		}
	}
	for i, f := range fs {
		if f.opts.required && !present[i] {
			return &FieldError{Field: join(path, f.name), Problem: "is required", Kind: "required"}
		}
	}
	return nil
}

var rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d{1,9})?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$`)

// ParseTime accepts RFC 3339 with optional fractional seconds; a zone (Z or
// an offset) is mandatory. Go's parser alone is looser than the RFC (it takes
// a comma before the fraction and offsets like +24:00), hence the pattern.
func ParseTime(s string) (time.Time, error) {
	if !rfc3339.MatchString(s) {
		return time.Time{}, fmt.Errorf("not an RFC 3339 time: %q", s)
	}
	return time.Parse(time.RFC3339Nano, s)
}
