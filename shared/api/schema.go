package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// docConstants are the limits a `doc` tag may quote as ${name}: a tag is
// text, so this is how it states a constant without repeating its value.
// The names keep the resource each limit is of (capacity., fleet.); the
// constants are this package's.
var docConstants = map[string]string{
	"capacity.InlineDevices":           num(InlineDevices),
	"capacity.MaxQuota":                num(MaxQuota),
	"capacity.MaxCount":                num(MaxCount),
	"capacity.DefaultNodeSize":         num(DefaultNodeSize),
	"capacity.MaxUsageHours":           num(MaxUsageHours),
	"capacity.DefaultUsageNodes":       num(DefaultUsageNodes),
	"capacity.MaxStartSkew":            human(MaxStartSkew),
	"capacity.MaxLeadTime":             human(MaxLeadTime),
	"capacity.MaxWindow":               human(MaxWindow),
	"capacity.DefaultAvailabilitySpan": human(DefaultAvailabilitySpan),
	"capacity.MaxAvailabilitySpan":     human(MaxAvailabilitySpan),
	"capacity.DefaultOfferings":        num(DefaultOfferings),
	"fleet.MaxSkew":                    human(MaxSkew),
	"fleet.BusyInterval":               human(BusyInterval),
}

// The limits the tags quote by name (max=capacity.MaxCount): the domains
// enforce these constants, the tags do not repeat their values.
var _ = strictjson.RegisterLimits(map[string]int64{
	"capacity.MaxResources":         MaxResources,
	"capacity.MaxQuota":             MaxQuota,
	"capacity.MaxUsageHours":        MaxUsageHours,
	"capacity.MaxUsageNodes":        MaxUsageNodes,
	"capacity.MaxCount":             MaxCount,
	"capacity.MaxAvailabilityHours": int64(MaxAvailabilityHours),
	"capacity.MaxOfferings":         MaxOfferings,
	"fleet.MaxChecks":               MaxChecks,
	"fleet.MaxBindings":             MaxBindings,
	"rollout.MaxPools":              MaxPools,
	"rollout.MaxWaves":              MaxWaves,
})

var docConstant = regexp.MustCompile(`\$\{([A-Za-z.]+)\}`)

// ExpandDoc replaces ${name} in a doc tag by the constant's value; an
// unknown name panics (the tests render every tag).
func ExpandDoc(s string) string {
	return docConstant.ReplaceAllStringFunc(s, func(m string) string {
		v, ok := docConstants[m[2:len(m)-1]]
		if !ok {
			panic("api: doc tag quotes unknown constant " + m)
		}
		return v
	})
}

// OutputField documents one member of a result object: its JSON path
// ("reservation.history[].state"), type, whether it is always present, its
// meaning and, for enumerated strings, its values.
type OutputField struct {
	Name   string
	Type   string
	Always bool
	Doc    string
	Enum   *Enum
}

// DescribeOutput lists the members of result type t, depth first, in
// declaration order.
func DescribeOutput(t reflect.Type) []OutputField {
	var out []OutputField
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for _, f := range strictjson.Fields(t) {
			name := f.Name
			if prefix != "" {
				name = prefix + "." + name
			}
			out = append(out, OutputField{Name: name, Type: strictjson.TypeName(f.Type), Always: !optional(f),
				Doc: ExpandDoc(f.Doc), Enum: LookupEnum(f.Tag.Get("enum"))})
			switch e := deref(f.Type); {
			case isStruct(e):
				walk(e, name)
			case e.Kind() == reflect.Slice && isStruct(deref(e.Elem())):
				walk(deref(e.Elem()), name+"[]")
			}
		}
	}
	walk(t, "")
	return out
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// isStruct: a struct encoded as a JSON object (a time is a string).
func isStruct(t reflect.Type) bool { return t.Kind() == reflect.Struct && !strictjson.IsTime(t) }

// object is a JSON object that keeps its members in the order they were
// set, so the generated OpenAPI document reads top-down and is the same
// byte for byte on every run.
type object struct {
	keys []string
	vals map[string]any
}

func obj(kv ...any) *object {
	o := &object{vals: map[string]any{}}
	for i := 0; i < len(kv); i += 2 {
		o.set(kv[i].(string), kv[i+1])
	}
	return o
}

func (o *object) set(k string, v any) *object {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
	return o
}

func (o *object) get(k string) any { return o.vals[k] }

// MarshalJSON writes the members in insertion order.
func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// schemas builds JSON Schema (2020-12, the dialect of OpenAPI 3.1) from Go
// types. Inputs state what strictjson enforces (required members, lengths,
// ranges, patterns, entry counts, no unknown members); outputs what
// encoding/json writes (omitempty members are optional). Named output
// structs become components, referenced by name.
type schemas struct {
	components *object
	types      map[string]reflect.Type
}

func newSchemas() *schemas { return &schemas{components: obj(), types: map[string]reflect.Type{}} }

// ref registers t's schema as a component named after the Go type and
// returns a reference to it.
func (s *schemas) ref(t reflect.Type, build func() *object) *object {
	name := t.Name()
	if prev, ok := s.types[name]; ok {
		if prev != t {
			panic(fmt.Sprintf("api: schema name %s is taken by %v and %v", name, prev, t))
		}
	} else {
		s.types[name] = t
		s.components.set(name, nil) // reserve the slot: recursion and order
		s.components.set(name, build())
	}
	return obj("$ref", "#/components/schemas/"+name)
}

// input is the schema of a method's input type (a component).
func (s *schemas) input(t reflect.Type) *object {
	return s.ref(t, func() *object { return s.inputObject(t) })
}

func (s *schemas) inputObject(t reflect.Type) *object {
	props, req := obj(), []string{}
	for _, f := range strictjson.Fields(t) {
		p := s.inputValue(deref(f.Type), f)
		if f.Doc != "" {
			p.set("description", ExpandDoc(f.Doc))
		}
		props.set(f.Name, p)
		if f.Required {
			req = append(req, f.Name)
		}
	}
	o := obj("type", "object", "properties", props)
	if len(req) > 0 {
		o.set("required", req)
	}
	// Strict decoding refuses every member the type does not define, but
	// where the type follows a format that tells consumers to ignore them
	// (strictjson.IgnoreUnknown: the DSSE envelope).
	return o.set("additionalProperties", strictjson.IgnoresUnknown(t))
}

// objectShapes are the Go types a strictjson.Object member's `shape` tag
// names: the object is kept as sent for its module's own strict decode,
// which the type drives (release.Envelope for a release manifest); the
// docs describe it from the same type.
var objectShapes = map[string]reflect.Type{
	"dsse": reflect.TypeFor[dsse.Envelope](),
}

var apiPackage = reflect.TypeFor[Tenant]().PkgPath()

// objectShape is the type of an Object member's shape tag, or nil.
func objectShape(f strictjson.Field) reflect.Type {
	name := f.Tag.Get("shape")
	if name == "" {
		return nil
	}
	t, ok := objectShapes[name]
	if !ok {
		panic("api: unknown object shape " + name)
	}
	return t
}

func (s *schemas) inputValue(t reflect.Type, f strictjson.Field) *object {
	switch {
	case strictjson.IsTime(t):
		return obj("type", "string", "format", "date-time")
	case strictjson.IsObject(t):
		if shape := objectShape(f); shape != nil {
			return obj("allOf", []any{s.input(shape)})
		}
		return obj("type", "object")
	case isStruct(t) && t.PkgPath() != apiPackage:
		// Another package's type (a shape's parts): a component, which
		// generated clients name after it.
		return s.input(t)
	case isStruct(t):
		return s.inputObject(t)
	}
	var o *object
	switch t.Kind() {
	case reflect.String:
		o = obj("type", "string")
		bound(o, "minLength", "maxLength", f.Min, f.Max)
		if f.Pattern != "" {
			o.set("pattern", f.Pattern)
		}
		if e := LookupEnum(f.Tag.Get("enum")); e != nil {
			o.set("enum", e.Strings())
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		o = obj("type", "integer")
		bound(o, "minimum", "maximum", f.Min, f.Max)
	case reflect.Bool:
		o = obj("type", "boolean")
	case reflect.Slice:
		items := s.inputValue(deref(t.Elem()), strictjson.Field{})
		if e := deref(t.Elem()); isStruct(e) {
			// An array's objects (rollouts.create's waves): a component,
			// which generated clients name after it.
			items = s.input(e)
		}
		o = obj("type", "array", "items", items)
		bound(o, "minItems", "maxItems", f.Min, f.Max)
	case reflect.Map:
		v := s.inputValue(deref(t.Elem()), strictjson.Field{})
		if lo, hi, ok := strictjson.ValueBounds(t); ok {
			bound(v, "minimum", "maximum", &lo, &hi)
		}
		o = obj("type", "object")
		if f.Pattern != "" {
			o.set("propertyNames", obj("pattern", f.Pattern))
		}
		o.set("additionalProperties", v)
		bound(o, "minProperties", "maxProperties", f.Min, f.Max)
	default:
		panic("api: no JSON Schema for input type " + t.String())
	}
	return o
}

func bound(o *object, minKey, maxKey string, lo, hi *int64) {
	if lo != nil {
		o.set(minKey, *lo)
	}
	if hi != nil {
		o.set(maxKey, *hi)
	}
}

// output is the schema of a result type (a component; so is every named
// struct it holds).
func (s *schemas) output(t reflect.Type) *object {
	return s.ref(t, func() *object { return s.outputObject(t) })
}

// optional: encoding/json may leave the member out (omitempty, or
// omitzero: a proof not asked for, while an empty one is []).
func optional(f strictjson.Field) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	return f.OmitEmpty || strings.Contains(","+opts+",", ",omitzero,")
}

func (s *schemas) outputObject(t reflect.Type) *object {
	props, req := obj(), []string{}
	for _, f := range strictjson.Fields(t) {
		var p *object
		switch ft := deref(f.Type); {
		case objectShape(f) != nil:
			// Kept as sent (a manifest exactly as registered): its shape.
			p = obj("allOf", []any{s.input(objectShape(f))})
		case f.Type.Kind() == reflect.Pointer && !optional(f) && isStruct(ft):
			// Always present, null when there is none (a node's cordon).
			p = obj("anyOf", []any{s.output(ft), obj("type", "null")})
		default:
			p = s.outputValue(ft)
		}
		if e := LookupEnum(f.Tag.Get("enum")); e != nil {
			p.set("enum", e.Strings())
		}
		if f.Doc != "" {
			p.set("description", ExpandDoc(f.Doc)+enumDoc(LookupEnum(f.Tag.Get("enum"))))
		}
		props.set(f.Name, p)
		if !optional(f) {
			req = append(req, f.Name)
		}
	}
	o := obj("type", "object", "properties", props)
	if len(req) > 0 {
		o.set("required", req)
	}
	return o
}

func (s *schemas) outputValue(t reflect.Type) *object {
	switch {
	case strictjson.IsTime(t):
		return obj("type", "string", "format", "date-time")
	case isStruct(t):
		// A reference with siblings (description) is valid JSON Schema
		// 2020-12; wrapping it in allOf keeps 3.0-minded tools reading it.
		return obj("allOf", []any{s.output(t)})
	}
	switch t.Kind() {
	case reflect.String:
		return obj("type", "string")
	case reflect.Int, reflect.Int32, reflect.Int64:
		return obj("type", "integer")
	case reflect.Bool:
		return obj("type", "boolean")
	case reflect.Slice:
		e := deref(t.Elem())
		if isStruct(e) {
			return obj("type", "array", "items", s.output(e))
		}
		return obj("type", "array", "items", s.outputValue(e))
	case reflect.Map:
		return obj("type", "object", "additionalProperties", s.outputValue(deref(t.Elem())))
	}
	panic("api: no JSON Schema for output type " + t.String())
}

// enumDoc lists an enum's values and meanings for a description.
func enumDoc(e *Enum) string {
	if e == nil {
		return ""
	}
	parts := make([]string, len(e.Values))
	for i, v := range e.Values {
		parts[i] = "`" + v.Value + "`: " + v.Doc
	}
	return ". One of: " + strings.Join(parts, "; ") + "."
}
