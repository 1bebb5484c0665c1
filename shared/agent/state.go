package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/bettercompute/control-plane/shared/api"
)

// StateFile is the file under the state dir that says what the node runs,
// so a restarted agent reports it (a fresh state dir runs none).
const StateFile = "state.json"

// state is what StateFile holds.
type state struct {
	Running  *api.Version `json:"running"`
	Previous *api.Version `json:"previous"`
	// Checkpoint is the release log checkpoint verified last, as signed.
	Checkpoint string `json:"checkpoint,omitempty"`
}

func loadState(dir string) (state, error) {
	var st state
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("agent: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("agent: %s: %w", filepath.Join(dir, StateFile), err)
	}
	return st, nil
}

// saveState replaces StateFile atomically (a temporary file renamed over
// it), so a crash leaves the old state or the new, never half of one.
func saveState(dir string, st state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+StateFile+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, StateFile)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
