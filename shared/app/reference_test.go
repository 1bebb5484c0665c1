package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
)

// The committed API reference must be what the catalog generates: run
// `make docs` after changing the catalog.
func TestReferenceDocsAreGenerated(t *testing.T) {
	for _, r := range api.ResourceDocs {
		path := filepath.Join("..", "..", "docs", "reference", r.Name+".md")
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run `make docs`)", path, err)
		}
		if want := api.Reference(r, Served); string(got) != want {
			t.Errorf("%s is stale: run `make docs`", path)
		}
	}
}
