package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// Driver is what the agent needs of the node's devices. Unbind must be
// idempotent (an agent that restarted is told to unbind what it may never
// have bound in this life); Bind of a reservation already bound to the
// same devices must be too.
type Driver interface {
	// Bind gives the reservation's tenant the devices. A *BusyError means
	// another reservation still holds one of them: the agent retries on a
	// later step, after that holder's unbind.
	Bind(ctx context.Context, reservationID, tenantID string, deviceIDs []string) error
	// Unbind takes the reservation's devices back and scrubs them.
	Unbind(ctx context.Context, reservationID string) error
	// Health is what the driver sees now: the devices visible and the
	// checks it ran (at most fleet.MaxChecks).
	Health(ctx context.Context) DeviceHealth
}

// DeviceHealth is a driver's view of the node's devices.
type DeviceHealth struct {
	Visible int
	Checks  []api.Check
}

// BusyError: a bind asked for a device another reservation still holds.
type BusyError struct {
	DeviceID string
	HeldBy   string // the reservation holding it
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("device %s is still held by reservation %s (not unbound yet)", e.DeviceID, e.HeldBy)
}

// Event is one bind or unbind a RecordingDriver did: an entry of its
// journal (one JSON object a line).
type Event struct {
	At            time.Time `json:"at"`
	Op            string    `json:"op"` // "bind" or "unbind"
	ReservationID string    `json:"reservationId"`
	TenantID      string    `json:"tenantId,omitempty"`
	DeviceIDs     []string  `json:"deviceIds"`
}

// RecordingDriver is the reference driver: it touches no hardware and
// records what a real one would do, in order. It holds each bound device
// for its reservation until that reservation is unbound, and refuses to
// give a held device to another reservation, as a real driver must.
// Tests (and the simulated fleet) can make it unhealthy or fail binds.
// It is safe for concurrent use.
type RecordingDriver struct {
	mu      sync.Mutex
	now     func() time.Time
	visible int
	checks  []api.Check
	bindErr error
	holder  map[string]string   // device → reservation
	devices map[string][]string // reservation → devices
	events  []Event
	journal io.Writer
}

// NewRecordingDriver is a driver of a node that sees devices devices and
// passes its one check ("recording-driver").
func NewRecordingDriver(devices int) *RecordingDriver {
	return &RecordingDriver{now: time.Now, visible: devices,
		checks: []api.Check{{Name: "recording-driver", OK: true}},
		holder: map[string]string{}, devices: map[string][]string{}}
}

// OpenJournal appends every later bind and unbind to the file at path as a
// JSON line, after replaying the lines already there: a driver restarted on
// the same journal still holds what it held (the refusal of a held device
// survives a restart of the agent).
func (d *RecordingDriver) OpenJournal(path string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			f.Close()
			return nil, fmt.Errorf("journal %s: line %d: %w", path, n, err)
		}
		d.apply(ev)
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	d.journal = f
	return f, nil
}

// SetNow replaces the clock that stamps events.
func (d *RecordingDriver) SetNow(now func() time.Time) { d.mu.Lock(); d.now = now; d.mu.Unlock() }

// SetVisible sets how many devices the node sees (fewer than expected makes
// it unhealthy).
func (d *RecordingDriver) SetVisible(n int) { d.mu.Lock(); d.visible = n; d.mu.Unlock() }

// SetCheck sets the outcome of a named check, adding it if new.
func (d *RecordingDriver) SetCheck(name string, ok bool, detail string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := api.Check{Name: name, OK: ok}
	if detail != "" {
		c.Detail = &detail
	}
	if i := slices.IndexFunc(d.checks, func(c api.Check) bool { return c.Name == name }); i >= 0 {
		d.checks[i] = c
		return
	}
	d.checks = append(d.checks, c)
}

// FailBinds makes every later Bind fail with err (nil: binds work again).
func (d *RecordingDriver) FailBinds(err error) { d.mu.Lock(); d.bindErr = err; d.mu.Unlock() }

// Events is every bind and unbind done, in order.
func (d *RecordingDriver) Events() []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.events)
}

// Held maps each reservation bound now to its devices.
func (d *RecordingDriver) Held() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string][]string, len(d.devices))
	for r, ds := range d.devices {
		out[r] = slices.Clone(ds)
	}
	return out
}

// Bind implements Driver.
func (d *RecordingDriver) Bind(_ context.Context, reservationID, tenantID string, deviceIDs []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bindErr != nil {
		return d.bindErr
	}
	if have, ok := d.devices[reservationID]; ok {
		if sameSet(have, deviceIDs) {
			return nil // already bound: a retried bind
		}
		return fmt.Errorf("reservation %s is bound to other devices (%v); unbind it first", reservationID, have)
	}
	for _, dev := range deviceIDs {
		if h, ok := d.holder[dev]; ok {
			return &BusyError{DeviceID: dev, HeldBy: h}
		}
	}
	return d.record(Event{Op: api.ActionBind, ReservationID: reservationID, TenantID: tenantID, DeviceIDs: slices.Clone(deviceIDs)})
}

// Unbind implements Driver: it records every unbind, even of a reservation
// it does not hold (the devices are scrubbed regardless).
func (d *RecordingDriver) Unbind(_ context.Context, reservationID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.record(Event{Op: api.ActionUnbind, ReservationID: reservationID, DeviceIDs: slices.Clone(d.devices[reservationID])})
}

// Health implements Driver.
func (d *RecordingDriver) Health(context.Context) DeviceHealth {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DeviceHealth{Visible: d.visible, Checks: slices.Clone(d.checks)}
}

// record journals ev, then applies it: an event that could not be written
// did not happen, so the agent reports the failure and retries.
func (d *RecordingDriver) record(ev Event) error {
	ev.At = d.now().UTC()
	if ev.DeviceIDs == nil {
		ev.DeviceIDs = []string{}
	}
	if d.journal != nil {
		line, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if _, err := d.journal.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	d.apply(ev)
	d.events = append(d.events, ev)
	return nil
}

// apply updates what is held after ev.
func (d *RecordingDriver) apply(ev Event) {
	switch ev.Op {
	case api.ActionBind:
		d.devices[ev.ReservationID] = ev.DeviceIDs
		for _, dev := range ev.DeviceIDs {
			d.holder[dev] = ev.ReservationID
		}
	case api.ActionUnbind:
		for _, dev := range d.devices[ev.ReservationID] {
			if d.holder[dev] == ev.ReservationID {
				delete(d.holder, dev)
			}
		}
		delete(d.devices, ev.ReservationID)
	}
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// ErrBindFailed is a ready-made failure for FailBinds.
var ErrBindFailed = errors.New("recording driver: bind failed (as the test asked)")
