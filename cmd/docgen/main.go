// Command docgen writes the API reference (docs/reference/<resource>.md)
// from the method catalog: `go run ./cmd/docgen` (make docs). A test fails
// when the committed pages differ from what the catalog generates.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
)

func main() {
	dir := flag.String("dir", "docs/reference", "output folder")
	flag.Parse()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, r := range api.ResourceDocs {
		path := filepath.Join(*dir, r.Name+".md")
		if err := os.WriteFile(path, []byte(api.Reference(r, app.Served)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}
