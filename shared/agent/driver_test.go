package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The driver gives a device to one reservation at a time: a bind of a held
// device is a *BusyError naming the holder until that holder is unbound;
// binds and unbinds are recorded in order; a repeated bind is a no-op.
func TestRecordingDriverHoldsDevices(t *testing.T) {
	ctx := context.Background()
	d := NewRecordingDriver(8)
	if err := d.Bind(ctx, "r1", "acme", []string{"gpu-1", "gpu-0"}); err != nil {
		t.Fatal(err)
	}
	var busy *BusyError
	if err := d.Bind(ctx, "r2", "acme", []string{"gpu-2", "gpu-1"}); !errors.As(err, &busy) || busy.DeviceID != "gpu-1" || busy.HeldBy != "r1" {
		t.Fatalf("bind of a held device: %v", err)
	}
	if err := d.Bind(ctx, "r1", "acme", []string{"gpu-0", "gpu-1"}); err != nil {
		t.Fatalf("the same bind again: %v", err)
	}
	if err := d.Bind(ctx, "r1", "acme", []string{"gpu-7"}); err == nil || errors.As(err, &busy) {
		t.Fatalf("r1 onto other devices: %v, want a failure", err)
	}
	if err := d.Unbind(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Bind(ctx, "r2", "acme", []string{"gpu-2", "gpu-1"}); err != nil {
		t.Fatalf("bind after the holder's unbind: %v", err)
	}
	if err := d.Unbind(ctx, "never-bound"); err != nil {
		t.Fatalf("unbind of what it does not hold: %v", err)
	}
	if got, want := ops(d), []string{"bind r1", "unbind r1", "bind r2", "unbind never-bound"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if ev := d.Events()[1]; !slices.Equal(ev.DeviceIDs, []string{"gpu-1", "gpu-0"}) { // as bound
		t.Errorf("the unbind names %v", ev.DeviceIDs)
	}
	if h := d.Held(); len(h) != 1 || !slices.Equal(h["r2"], []string{"gpu-2", "gpu-1"}) {
		t.Errorf("held: %v", h)
	}
}

// Tests make it unhealthy or fail binds.
func TestRecordingDriverFaults(t *testing.T) {
	ctx := context.Background()
	d := NewRecordingDriver(8)
	if h := d.Health(ctx); h.Visible != 8 || len(h.Checks) != 1 || !h.Checks[0].OK {
		t.Fatalf("healthy: %+v", h)
	}
	d.SetVisible(7)
	d.SetCheck("recording-driver", false, "sim")
	if h := d.Health(ctx); h.Visible != 7 || len(h.Checks) != 1 || h.Checks[0].OK || *h.Checks[0].Detail != "sim" {
		t.Errorf("unhealthy: %+v", h)
	}
	d.FailBinds(ErrBindFailed)
	if err := d.Bind(ctx, "r1", "acme", []string{"gpu-0"}); !errors.Is(err, ErrBindFailed) {
		t.Errorf("bind: %v", err)
	}
	if len(d.Events()) != 0 || len(d.Held()) != 0 {
		t.Errorf("a failed bind was recorded: %v %v", d.Events(), d.Held())
	}
}

// The journal: one JSON line per event, and a driver reopened on it still
// holds what was bound and not unbound.
func TestRecordingDriverJournal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	d := NewRecordingDriver(8)
	c, err := d.OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r1", "r2"} {
		if err := d.Bind(ctx, id, "acme", []string{"gpu-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Unbind(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	c.Close()

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		lines = append(lines, ev.Op+" "+ev.ReservationID)
	}
	if want := []string{"bind r1", "bind r2", "unbind r1"}; !slices.Equal(lines, want) {
		t.Errorf("journal %v, want %v", lines, want)
	}

	again := NewRecordingDriver(8)
	c, err = again.OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var busy *BusyError
	if err := again.Bind(ctx, "r3", "acme", []string{"gpu-r2"}); !errors.As(err, &busy) || busy.HeldBy != "r2" {
		t.Errorf("after a restart, r2's device: %v", err)
	}
	if err := again.Bind(ctx, "r3", "acme", []string{"gpu-r1"}); err != nil {
		t.Errorf("after a restart, r1's unbound device: %v", err)
	}
	if err := os.WriteFile(path, []byte("not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRecordingDriver(8).OpenJournal(path); err == nil {
		t.Error("a damaged journal was opened")
	}
}
