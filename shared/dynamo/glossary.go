package dynamo

import (
	"reflect"
	"sort"
	"strings"
)

// Undocumented compares a store's glossary of attribute names (by item and
// path, "node.b.mv") with the item types it stores (items: an item name →
// a value of its type), walking their dynamodbav names into nested records,
// slices and maps: missing are stored names the glossary does not explain,
// unused are names it explains that no item stores. Each store's
// TestAttributesDocumented holds it to none of either.
func Undocumented(glossary map[string]string, items map[string]any) (missing, unused []string) {
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
			if _, ok := glossary[key]; !ok {
				missing = append(missing, key+" ("+typ.Name()+"."+f.Name+")")
			}
			walk(key, f.Type)
		}
	}
	for item, v := range items {
		walk(item, reflect.TypeOf(v))
	}
	for key := range glossary {
		if !seen[key] {
			unused = append(unused, key)
		}
	}
	sort.Strings(missing)
	sort.Strings(unused)
	return missing, unused
}
