package rolloutdb

import (
	"reflect"
	"strings"
	"testing"
)

// TestAttributesDocumented holds every stored attribute of this store's
// items to the glossary (attributes): each name, short or long, is
// explained once there, and the glossary names nothing no item stores.
func TestAttributesDocumented(t *testing.T) {
	seen := map[string]bool{}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return
		}
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("dynamodbav"), ",")
			if name == "" || name == "-" {
				continue
			}
			key := prefix + "." + name
			seen[key] = true
			if _, ok := attributes[key]; !ok {
				t.Errorf("attribute %s (%s.%s) is not in the glossary", key, typ.Name(), f.Name)
			}
			walk(key, f.Type)
		}
	}
	for item, v := range storedItems {
		walk(item, reflect.TypeOf(v))
	}
	for key := range attributes {
		if !seen[key] {
			t.Errorf("the glossary explains %s, which no item stores", key)
		}
	}
}
