package strictjson

import (
	"fmt"
	"reflect"
	"strings"
)

// FieldDoc documents one input field, derived from the same tags Decode uses.
type FieldDoc struct {
	Name        string // JSON path, e.g. "window.end"
	Type        string
	Required    bool
	Constraints string
	Doc         string // from `bc:"doc=…"`, else the field's `doc:"…"` tag
	Enum        string // the field's `enum` tag: the name of its documented values
	// Min and Max are the bounds Constraints states in words, for a caller
	// that checks a value before it is sent: a string's length in
	// characters, an integer's value, or an array's or map's entries; nil
	// when unbounded.
	Min, Max *int64
}

// Describe lists the fields of struct type t (nested structs flattened with
// dotted names), in declaration order.
func Describe(t reflect.Type) []FieldDoc {
	var out []FieldDoc
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for _, f := range fields(t) {
			tag := t.FieldByIndex(f.index).Tag
			enum := tag.Get("enum")
			ft := f.typ
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			name := join(prefix, f.name)
			typ := describeType(ft)
			if f.opts.nullable {
				typ += " or null"
			}
			lo, hi := f.opts.bounds()
			out = append(out, FieldDoc{Name: name, Type: typ, Required: f.opts.required,
				Constraints: describeOptions(ft, f.opts), Min: lo, Max: hi, Doc: docOf(tag, f.opts), Enum: enum})
			if ft.Kind() == reflect.Struct && ft != timeType {
				walk(ft, name)
			}
		}
	}
	walk(t, "")
	return out
}

func describeType(t reflect.Type) string {
	switch {
	case t == timeType:
		return "string (RFC 3339 time)"
	case t == objectType:
		return "object"
	case t == rawType:
		return "any"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return describeType(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice:
		return "array of " + describeType(t.Elem())
	case reflect.Map:
		return "map of string to " + describeType(t.Elem())
	case reflect.Struct:
		return "object"
	}
	return t.String()
}

func describeOptions(t reflect.Type, o options) string {
	var parts []string
	switch t.Kind() {
	case reflect.String:
		if o.hasMin {
			parts = append(parts, "at least "+Plural(o.min, "character"))
		}
		if o.hasMax {
			parts = append(parts, "at most "+Plural(o.max, "character"))
		}
		if o.pattern != "" {
			parts = append(parts, "matches "+pattern(o.pattern).String())
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		switch {
		case o.hasMin && o.hasMax:
			parts = append(parts, fmt.Sprintf("%d..%d", o.min, o.max))
		case o.hasMin:
			parts = append(parts, fmt.Sprintf("at least %d", o.min))
		case o.hasMax:
			parts = append(parts, fmt.Sprintf("at most %d", o.max))
		}
		if o.strictInt {
			parts = append(parts, "written as an integer (not 7.0 or 7e0)")
		}
	case reflect.Slice, reflect.Map:
		if o.hasMin {
			parts = append(parts, "at least "+Plural(o.min, "entry"))
		}
		if o.hasMax {
			parts = append(parts, "at most "+Plural(o.max, "entry"))
		}
		if t.Kind() == reflect.Map && o.pattern != "" {
			parts = append(parts, "keys match "+pattern(o.pattern).String())
		}
		if lo, hi, ok := ValueBounds(t); ok {
			parts = append(parts, fmt.Sprintf("values %d..%d", lo, hi))
		}
	}
	return strings.Join(parts, "; ")
}

// Field is one JSON member of a struct as Decode reads it: what a schema
// generator needs to state the same rules (one struct level; nested structs
// are walked by the caller).
type Field struct {
	Name      string
	Type      reflect.Type // as declared (a pointer marks an optional member)
	Required  bool
	OmitEmpty bool // the json tag says omitempty (encoders leave it out when empty)
	// Min and Max bound a string's length in characters, an integer's
	// value, or an array's or map's entries; nil when unbounded.
	Min, Max *int64
	// Pattern is the regular expression a string (or a map's keys) must match.
	Pattern string
	Doc     string // from `bc:"doc=…"`, else the field's `doc:"…"` tag
	Tag     reflect.StructTag
}

// Fields lists the JSON members of struct type t in declaration order,
// embedded structs flattened, as Decode reads them.
func Fields(t reflect.Type) []Field {
	var out []Field
	for _, f := range fields(t) {
		sf := t.FieldByIndex(f.index)
		_, jopts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		d := Field{Name: f.name, Type: f.typ, Required: f.opts.required, OmitEmpty: strings.Contains(","+jopts+",", ",omitempty,"),
			Doc: docOf(sf.Tag, f.opts), Tag: sf.Tag}
		d.Min, d.Max = f.opts.bounds()
		if f.opts.pattern != "" {
			d.Pattern = pattern(f.opts.pattern).String()
		}
		out = append(out, d)
	}
	return out
}

// bounds are the min and max options, nil where not given (each a copy of
// its own: a caller may keep it).
func (o options) bounds() (lo, hi *int64) {
	if o.hasMin {
		lo = new(o.min)
	}
	if o.hasMax {
		hi = new(o.max)
	}
	return lo, hi
}

// docOf is a field's description: `bc:"doc=…"`, else its `doc:"…"` tag.
func docOf(tag reflect.StructTag, o options) string {
	if o.doc != "" {
		return o.doc
	}
	return tag.Get("doc")
}

// ValueBounds returns the bounds a named map type declares for its values
// with a method `ValueBounds() (min, max int64)` (see Resources in
// shared/api), if any: Decode enforces them, Describe states them.
func ValueBounds(t reflect.Type) (lo, hi int64, ok bool) {
	if t.Kind() != reflect.Map {
		return 0, 0, false
	}
	b, ok := reflect.New(t).Elem().Interface().(interface{ ValueBounds() (int64, int64) })
	if !ok {
		return 0, 0, false
	}
	lo, hi = b.ValueBounds()
	return lo, hi, true
}

// TypeName is a JSON type in the words of the reference's tables
// ("string (RFC 3339 time)", "array of object", "map of string to integer").
func TypeName(t reflect.Type) string { return describeType(t) }

// IsTime reports whether t is decoded as an RFC 3339 time; IsObject whether
// it is kept as a raw JSON object (Object).
func IsTime(t reflect.Type) bool   { return t == timeType }
func IsObject(t reflect.Type) bool { return t == objectType }

// Plural writes n and a noun, in the plural unless n is 1 ("1 character",
// "3 entries", "2 nodes").
func Plural[N int | int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	switch {
	case strings.HasSuffix(noun, "y") && !strings.HasSuffix(noun, "ey"):
		noun = noun[:len(noun)-1] + "ies"
	case strings.HasSuffix(noun, "s"), strings.HasSuffix(noun, "x"):
		noun += "es"
	default:
		noun += "s"
	}
	return fmt.Sprintf("%d %s", n, noun)
}
