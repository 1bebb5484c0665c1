package modules_test

import (
	"slices"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/modules"
)

// Each module wires exactly its catalog methods, in catalog order: a method
// left out of Methods would be answered NOT_IMPLEMENTED by the local
// gateway while its Lambda serves it.
func TestEachModuleWiresItsCatalogMethods(t *testing.T) {
	a := modules.Wire(&app.App{})
	seen := 0
	for _, mod := range a.List() {
		var want, got []string
		for _, m := range api.Catalog {
			if m.Module == mod.Name() {
				want = append(want, m.Name)
			}
		}
		for _, m := range mod.Methods() {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("module %s wires %v, its catalog methods are %v", mod.Name(), got, want)
		}
		seen += len(got)
	}
	if seen != len(api.Catalog) {
		t.Errorf("the modules wire %d methods, the catalog has %d", seen, len(api.Catalog))
	}
}
