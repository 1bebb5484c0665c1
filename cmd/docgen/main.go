// Command docgen writes what the method catalog generates (make docs):
// the API reference (docs/reference/<resource>.md and its index
// README.md), the OpenAPI 3.1 document (docs/openapi.json) and the typed Go
// client (shared/client/methods.go). A test fails when a committed file
// differs from what the catalog generates.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app/modules"
)

func main() {
	root := flag.String("root", ".", "the repository root to write under")
	flag.Parse()
	files, err := generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, path := range sortedKeys(files) {
		full := filepath.Join(*root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(full, files[path], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}

// Paths of the generated files, from the repository root.
const (
	referenceDir = "docs/reference"
	openAPIPath  = "docs/openapi.json"
	clientPath   = "shared/client/methods.go"
)

// generate returns every generated file by its path from the repository root.
func generate() (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, r := range api.ResourceDocs {
		files[filepath.Join(referenceDir, r.Name+".md")] = []byte(api.Reference(r, modules.Served))
	}
	files[filepath.Join(referenceDir, "README.md")] = []byte(api.Index(modules.Served))
	doc, err := api.OpenAPI()
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	files[openAPIPath] = doc
	src, err := clientSource()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	files[clientPath] = src
	return files, nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
