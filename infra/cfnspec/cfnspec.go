// Package cfnspec checks a CloudFormation template against the resource
// specification CloudFormation itself enforces, offline: the CloudFormation
// registry schemas as the AWS CDK team publishes them in the npm package
// @aws-cdk/aws-service-spec (its db.json.gz, pinned in package-lock.json).
//
// It reports what CloudFormation would refuse before it creates anything:
// an unknown resource type, an unknown property (at any depth), a value of
// the wrong shape (an object where a string goes, a string where a list
// goes, a number that is not one), a value outside a property's allowed
// values, a missing required property, and a Ref or Fn::GetAtt to a
// resource or attribute that does not exist. Values computed by intrinsic
// functions are accepted wherever a value goes: only the deployment knows
// them.
package cfnspec

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Spec is the resource specification: resource types with their properties
// and attributes, and the property types they use.
type Spec struct {
	resources map[string]*resourceType // by CloudFormation type
	types     map[string]*typeDef      // by $id
}

type resourceType struct {
	Properties map[string]property `json:"properties"`
	Attributes map[string]struct{} `json:"attributes"`
}

type typeDef struct {
	Name       string              `json:"name"`
	Properties map[string]property `json:"properties"`
}

type property struct {
	Type          propType   `json:"type"`
	Required      bool       `json:"required"`
	PreviousTypes []propType `json:"previousTypes"` // still accepted by CloudFormation
}

type propType struct {
	Type      string `json:"type"` // string, integer, number, boolean, json, date-time, tag, ref, array, map, union
	Reference *struct {
		Ref string `json:"$ref"`
	} `json:"reference"`
	Element       *propType  `json:"element"`
	Types         []propType `json:"types"`
	AllowedValues []any      `json:"allowedValues"` // strings, or numbers

}

// DBPath is the database of @aws-cdk/aws-service-spec as `make tools` (npm
// ci) installs it, relative to the repository root.
const DBPath = "node_modules/@aws-cdk/aws-service-spec/db.json.gz"

// Load reads the database of @aws-cdk/aws-service-spec (db.json.gz).
func Load(path string) (*Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cfnspec: %w (the npm package @aws-cdk/aws-service-spec: run make tools)", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("cfnspec: %s: %w", path, err)
	}
	var db struct {
		Schema struct {
			Resource struct {
				Entities []struct {
					CloudFormationType string `json:"cloudFormationType"`
					resourceType
				} `json:"entities"`
			} `json:"resource"`
			TypeDefinition struct {
				Entities []struct {
					ID string `json:"$id"`
					typeDef
				} `json:"entities"`
			} `json:"typeDefinition"`
		} `json:"schema"`
	}
	if err := json.NewDecoder(zr).Decode(&db); err != nil {
		return nil, fmt.Errorf("cfnspec: %s: %w", path, err)
	}
	s := &Spec{resources: map[string]*resourceType{}, types: map[string]*typeDef{}}
	for _, r := range db.Schema.Resource.Entities {
		s.resources[r.CloudFormationType] = &r.resourceType
	}
	for _, t := range db.Schema.TypeDefinition.Entities {
		s.types[t.ID] = &t.typeDef
	}
	if len(s.resources) < 100 || s.resources["AWS::Lambda::Function"] == nil {
		return nil, fmt.Errorf("cfnspec: %s holds %d resource types and no AWS::Lambda::Function: not the service spec", path, len(s.resources))
	}
	return s, nil
}

// Finding is one thing CloudFormation would refuse.
type Finding struct {
	Resource string // logical id
	Path     string // Properties.Environment.Variables…
	Problem  string
}

func (f Finding) String() string { return f.Resource + " " + f.Path + ": " + f.Problem }

// pseudo parameters a Ref may name.
var pseudo = map[string]bool{"AWS::AccountId": true, "AWS::NotificationARNs": true, "AWS::NoValue": true, "AWS::Partition": true,
	"AWS::Region": true, "AWS::StackId": true, "AWS::StackName": true, "AWS::URLSuffix": true}

// resourceKeys are what a template's resource may hold besides Properties.
var resourceKeys = map[string]bool{"Type": true, "Properties": true, "DependsOn": true, "Metadata": true, "Condition": true,
	"DeletionPolicy": true, "UpdateReplacePolicy": true, "UpdatePolicy": true, "CreationPolicy": true}

// Validate checks every resource of a template (JSON).
func (s *Spec) Validate(template []byte) ([]Finding, error) {
	var t struct {
		Parameters map[string]any
		Resources  map[string]map[string]any
	}
	if err := json.Unmarshal(template, &t); err != nil {
		return nil, fmt.Errorf("cfnspec: template: %w", err)
	}
	// Every resource's type first: a reference may name a later resource.
	v := &validator{spec: s, params: t.Parameters, resources: map[string]string{}}
	ids := make([]string, 0, len(t.Resources))
	for id, r := range t.Resources {
		typ, _ := r["Type"].(string)
		v.resources[id] = typ
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := t.Resources[id]
		v.id = id
		for k := range r {
			if !resourceKeys[k] {
				v.fail(k, "not a resource attribute CloudFormation knows")
			}
		}
		typ := v.resources[id]
		if isCustom(typ) {
			v.intrinsics("Properties", r["Properties"])
			continue
		}
		rt, ok := s.resources[typ]
		if !ok {
			v.fail("Type", fmt.Sprintf("unknown resource type %q", typ))
			continue
		}
		props, _ := r["Properties"].(map[string]any)
		if r["Properties"] != nil && props == nil {
			v.fail("Properties", "not an object")
			continue
		}
		v.object("Properties", props, rt.Properties)
		if deps, ok := r["DependsOn"]; ok {
			for _, d := range asList(deps) {
				if _, ok := v.resources[fmt.Sprint(d)]; !ok {
					v.fail("DependsOn", fmt.Sprintf("no resource %v", d))
				}
			}
		}
	}
	return v.findings, nil
}

// isCustom reports whether a resource type is a custom resource: its
// properties and attributes are the provider's, not the specification's.
func isCustom(typ string) bool {
	return strings.HasPrefix(typ, "Custom::") || typ == "AWS::CloudFormation::CustomResource"
}

type validator struct {
	spec      *Spec
	params    map[string]any
	resources map[string]string // logical id → type
	id        string
	findings  []Finding
}

func (v *validator) fail(path, problem string) {
	v.findings = append(v.findings, Finding{Resource: v.id, Path: path, Problem: problem})
}

func asList(x any) []any {
	if l, ok := x.([]any); ok {
		return l
	}
	return []any{x}
}

// object checks an object against its properties: names, required, values.
func (v *validator) object(path string, obj map[string]any, props map[string]property) {
	if fn, _ := intrinsic(obj); fn != "" {
		v.intrinsics(path, obj)
		return
	}
	for name, val := range obj {
		p, ok := props[name]
		if !ok {
			v.fail(path+"."+name, fmt.Sprintf("unknown property (known: %s)", strings.Join(slices.Sorted(maps.Keys(props)), ", ")))
			continue
		}
		v.value(path+"."+name, val, p)
	}
	for name, p := range props {
		if _, ok := obj[name]; p.Required && !ok {
			v.fail(path+"."+name, "required property missing")
		}
	}
}

// value checks one value against a property's current type, or any type
// CloudFormation still accepts for it.
func (v *validator) value(path string, val any, p property) {
	v.anyOf(path, val, append([]propType{p.Type}, p.PreviousTypes...))
}

// anyOf accepts val when one of types accepts it, and otherwise reports what
// the first type found wrong.
func (v *validator) anyOf(path string, val any, types []propType) {
	var first []Finding
	for i, t := range types {
		probe := &validator{spec: v.spec, params: v.params, resources: v.resources, id: v.id}
		probe.check(path, val, t)
		if len(probe.findings) == 0 {
			return
		}
		if i == 0 {
			first = probe.findings
		}
	}
	v.findings = append(v.findings, first...)
}

var numberLike = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)

func (v *validator) check(path string, val any, t propType) {
	if m, ok := val.(map[string]any); ok {
		if fn, _ := intrinsic(m); fn != "" {
			v.intrinsics(path, m)
			return
		}
	}
	switch t.Type {
	case "json":
		v.intrinsics(path, val)
	case "string", "date-time":
		switch x := val.(type) {
		case string:
			v.allowed(path, x, t)
		case float64, bool: // CloudFormation turns scalars into strings
		default:
			v.fail(path, fmt.Sprintf("want a string, got %s", kind(val)))
		}
	case "integer", "number":
		switch x := val.(type) {
		case float64:
			if t.Type == "integer" && x != float64(int64(x)) {
				v.fail(path, fmt.Sprintf("want an integer, got %v", x))
			}
			v.allowed(path, fmt.Sprint(x), t)
		case string:
			if !numberLike.MatchString(x) {
				v.fail(path, fmt.Sprintf("want a number, got %q", x))
			} else if _, err := strconv.ParseInt(x, 10, 64); t.Type == "integer" && err != nil {
				v.fail(path, fmt.Sprintf("want an integer, got %q", x))
			}
		default:
			v.fail(path, fmt.Sprintf("want a number, got %s", kind(val)))
		}
	case "boolean":
		switch x := val.(type) {
		case bool:
		case string:
			if x != "true" && x != "false" {
				v.fail(path, fmt.Sprintf("want a boolean, got %q", x))
			}
		default:
			v.fail(path, fmt.Sprintf("want a boolean, got %s", kind(val)))
		}
	case "ref", "tag": // a tag has no reference (none in the spec): tagProps
		obj, ok := val.(map[string]any)
		if !ok {
			v.fail(path, fmt.Sprintf("want an object, got %s", kind(val)))
			return
		}
		props := tagProps
		if t.Reference != nil {
			td, ok := v.spec.types[t.Reference.Ref]
			if !ok {
				v.fail(path, "the specification names an unknown type "+t.Reference.Ref)
				return
			}
			props = td.Properties
		}
		v.object(path, obj, props)
	case "array":
		list, ok := val.([]any)
		if !ok {
			v.fail(path, fmt.Sprintf("want a list, got %s", kind(val)))
			return
		}
		for i, e := range list {
			v.check(fmt.Sprintf("%s[%d]", path, i), e, *t.Element)
		}
	case "map":
		obj, ok := val.(map[string]any)
		if !ok {
			v.fail(path, fmt.Sprintf("want a map, got %s", kind(val)))
			return
		}
		for k, e := range obj {
			v.check(path+"."+k, e, *t.Element)
		}
	case "union":
		v.anyOf(path, val, t.Types)
	default:
		v.fail(path, "the specification has a type this checker does not know: "+t.Type)
	}
}

// allowed checks a scalar against the property's allowed values, if any.
func (v *validator) allowed(path, x string, t propType) {
	if len(t.AllowedValues) == 0 {
		return
	}
	for _, a := range t.AllowedValues {
		if fmt.Sprint(a) == x {
			return
		}
	}
	v.fail(path, fmt.Sprintf("%q is not one of %v", x, t.AllowedValues))
}

var tagProps = map[string]property{
	"Key": {Type: propType{Type: "string"}, Required: true}, "Value": {Type: propType{Type: "string"}, Required: true},
}

// intrinsic reports the function of a {"Fn::…": …} or {"Ref": …} object.
func intrinsic(m map[string]any) (string, any) {
	if len(m) != 1 {
		return "", nil
	}
	for k, arg := range m {
		if k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::") {
			return k, arg
		}
	}
	return "", nil
}

// intrinsics walks a value the checker cannot type and checks the
// references in it: a Ref names a parameter, a pseudo parameter or a
// resource; a Fn::GetAtt a resource and one of its type's attributes.
func (v *validator) intrinsics(path string, val any) {
	switch x := val.(type) {
	case map[string]any:
		if fn, arg := intrinsic(x); fn != "" {
			switch fn {
			case "Ref":
				name, _ := arg.(string)
				if _, ok := v.params[name]; !ok && !pseudo[name] {
					if _, ok := v.resources[name]; !ok {
						v.fail(path, fmt.Sprintf("Ref to %v: no such parameter or resource", arg))
					}
				}
				return
			case "Fn::GetAtt":
				var target, attr string
				switch a := arg.(type) {
				case []any:
					if len(a) == 2 {
						target, _ = a[0].(string)
						attr, _ = a[1].(string)
					}
				case string:
					target, attr, _ = strings.Cut(a, ".")
				}
				typ, ok := v.resources[target]
				switch {
				case !ok:
					v.fail(path, fmt.Sprintf("Fn::GetAtt %v: no such resource", arg))
				case isCustom(typ):
				default:
					if rt := v.spec.resources[typ]; rt != nil {
						if _, ok := rt.Attributes[attr]; !ok {
							v.fail(path, fmt.Sprintf("Fn::GetAtt %v: %s has no attribute %s", arg, typ, attr))
						}
					}
				}
				return
			}
		}
		for k, e := range x {
			v.intrinsics(path+"."+k, e)
		}
	case []any:
		for i, e := range x {
			v.intrinsics(fmt.Sprintf("%s[%d]", path, i), e)
		}
	}
}

func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
