package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// placeholderBootstrap stands in for a function binary when the template is
// synthesized without `make build` (tests, `make synth` in CI). Deployed by
// mistake, it fails every invocation with a message saying why.
const placeholderBootstrap = "#!/bin/sh\necho 'placeholder bootstrap: deploy after `make build`' >&2\nexit 1\n"

// WritePlaceholders writes a placeholder bootstrap for every function of the
// stack under dir (dir/<function>/bootstrap).
func WritePlaceholders(dir string) error {
	for _, name := range functionNames() {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "bootstrap"), []byte(placeholderBootstrap), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// MissingAssets lists the bootstraps missing under root, one per function.
func MissingAssets(root string) []string {
	var missing []string
	for _, name := range functionNames() {
		p := filepath.Join(root, name, "bootstrap")
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			missing = append(missing, p)
		}
	}
	return missing
}

func checkAssets(root string) error {
	if missing := MissingAssets(root); len(missing) > 0 {
		return fmt.Errorf("missing Lambda bootstraps (run `make build`; `make synth` uses placeholders):\n  %s",
			strings.Join(missing, "\n  "))
	}
	return nil
}

// functionNames is every function of the stack, from the catalog (never from
// the file system).
func functionNames() []string {
	fns, err := Functions()
	if err != nil {
		return nil // New reports the error
	}
	names := make([]string, len(fns))
	for i, f := range fns {
		names[i] = f.Name
	}
	return names
}
