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
	Doc         string
}

// Describe lists the fields of struct type t (nested structs flattened with
// dotted names), in declaration order.
func Describe(t reflect.Type) []FieldDoc {
	var out []FieldDoc
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for _, f := range fields(t) {
			ft := f.typ
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			name := join(prefix, f.name)
			out = append(out, FieldDoc{Name: name, Type: describeType(ft), Required: f.opts.required,
				Constraints: describeOptions(ft, f.opts), Doc: f.opts.doc})
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
			parts = append(parts, fmt.Sprintf("at least %d characters", o.min))
		}
		if o.hasMax {
			parts = append(parts, fmt.Sprintf("at most %d characters", o.max))
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
	case reflect.Slice, reflect.Map:
		if o.hasMin {
			parts = append(parts, fmt.Sprintf("at least %d entries", o.min))
		}
		if o.hasMax {
			parts = append(parts, fmt.Sprintf("at most %d entries", o.max))
		}
		if t.Kind() == reflect.Map && o.pattern != "" {
			parts = append(parts, "keys match "+pattern(o.pattern).String())
		}
		if t.Kind() == reflect.Map {
			if b, ok := reflect.New(t).Elem().Interface().(interface{ ValueBounds() (int64, int64) }); ok {
				lo, hi := b.ValueBounds()
				parts = append(parts, fmt.Sprintf("values %d..%d", lo, hi))
			}
		}
	}
	return strings.Join(parts, "; ")
}
