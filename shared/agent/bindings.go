package agent

import (
	"context"
	"errors"
	"slices"

	"github.com/bettercompute/control-plane/shared/api"
)

// bindings acts on an answer's bindings: every unbind first, whatever the
// order listed, then the binds. A device's previous holder is not only
// scrubbed before the next is given it: the next is given it only once a
// report that said the previous holder unbound was accepted, so
// the control plane holds the scrub's word before the device changes
// hands. A bind whose devices overlap an unbind of the same answer not
// reported so stays pending (its word unchanged) until a later step; one
// that overlaps none proceeds at once. A reservation the answer also says
// to unbind is never bound. A bind the driver refuses because a device is
// still held stays pending too; a failed bind or unbind is reported
// failed, and tried again next step.
func (a *Agent) bindings(ctx context.Context, list []api.DesiredBinding) {
	told := make(map[string]bool, len(list))
	unbinds := map[string][]string{} // this answer's unbinds: reservation → its devices
	for _, b := range list {
		told[b.ReservationID] = true
		if b.Action == api.ActionUnbind {
			unbinds[b.ReservationID] = b.DeviceIDs
			a.unbind(ctx, b.ReservationID)
		}
	}
	for _, b := range list {
		if b.Action == api.ActionBind {
			a.bind(ctx, b, unbinds)
		}
	}
	a.order = a.order[:0]
	for _, b := range list {
		a.order = append(a.order, b.ReservationID)
	}
	// A reservation no longer listed and not held is forgotten once an
	// accepted report carried its last word.
	for id, w := range a.words {
		if !told[id] && !a.held[id] && a.reported[id] == w.State {
			delete(a.words, id)
		}
	}
	for id := range a.reported {
		if _, ok := a.words[id]; !ok {
			delete(a.reported, id)
		}
	}
}

// unbind scrubs a reservation's devices through the driver and says
// unbound, even of one it never bound (a tombstone: it was released before
// this node bound it), unless it said so already and holds nothing of it.
func (a *Agent) unbind(ctx context.Context, id string) {
	if a.words[id].State == api.BindUnbound && !a.held[id] {
		return
	}
	if err := a.cfg.Driver.Unbind(ctx, id); err != nil {
		a.log.Warn("unbind failed", "reservation", id, "error", err.Error())
		a.words[id] = failed(id, "unbind: "+err.Error())
		return
	}
	delete(a.held, id)
	a.words[id] = api.ReportedBinding{ReservationID: id, State: api.BindUnbound}
	a.log.Info("unbound", "reservation", id)
}

// bind gives a reservation its devices through the driver, unless the same
// answer says to unbind it, or a device of it belongs to an unbind of the
// answer whose unbound no accepted report carried yet.
func (a *Agent) bind(ctx context.Context, b api.DesiredBinding, unbinds map[string][]string) {
	id := b.ReservationID
	if _, ok := unbinds[id]; ok {
		a.log.Warn("bind not done: the same answer says to unbind it", "reservation", id)
		return
	}
	if a.held[id] && a.words[id].State == api.BindBound {
		return
	}
	for prev, devices := range unbinds {
		if a.reported[prev] == api.BindUnbound && a.words[prev].State == api.BindUnbound {
			continue // scrubbed, and the control plane has its word
		}
		if i := slices.IndexFunc(b.DeviceIDs, func(d string) bool { return slices.Contains(devices, d) }); i >= 0 {
			a.log.Info("bind pending: the previous holder's unbound is not reported yet", "reservation", id,
				"device", b.DeviceIDs[i], "previous_holder", prev)
			return
		}
	}
	err := a.cfg.Driver.Bind(ctx, id, b.TenantID, b.DeviceIDs)
	var busy *BusyError
	switch {
	case errors.As(err, &busy):
		a.log.Info("bind pending: a device is still held", "reservation", id, "device", busy.DeviceID, "held_by", busy.HeldBy)
	case err != nil:
		a.log.Warn("bind failed", "reservation", id, "error", err.Error())
		a.words[id] = failed(id, "bind: "+err.Error())
	default:
		a.held[id] = true
		a.words[id] = api.ReportedBinding{ReservationID: id, State: api.BindBound}
		a.log.Info("bound", "reservation", id, "tenant", b.TenantID, "devices", len(b.DeviceIDs))
	}
}

// unreported reports whether it has a word on a binding that no accepted
// report carried yet.
func (a *Agent) unreported() bool {
	for id, w := range a.words {
		if a.reported[id] != w.State {
			return true
		}
	}
	return false
}

// reportBindings is its word on every reservation of the last answer, in
// its order, then on the rest it still holds or has not reported yet (by
// id); at most fleet.MaxBindings.
func (a *Agent) reportBindings() []api.ReportedBinding {
	out := make([]api.ReportedBinding, 0, len(a.words))
	seen := make(map[string]bool, len(a.words))
	for _, id := range a.order {
		if w, ok := a.words[id]; ok && !seen[id] {
			out, seen[id] = append(out, w), true
		}
	}
	rest := make([]string, 0, len(a.words))
	for id := range a.words {
		if !seen[id] {
			rest = append(rest, id)
		}
	}
	slices.Sort(rest)
	for _, id := range rest {
		out = append(out, a.words[id])
	}
	if len(out) > api.MaxBindings {
		a.log.Warn("more bindings than a report carries", "bindings", len(out), "max", api.MaxBindings)
		out = out[:api.MaxBindings]
	}
	return out
}

// failed is a failed binding's word, its reason cut to what a report
// carries.
func failed(id, reason string) api.ReportedBinding {
	r := clip(reason)
	return api.ReportedBinding{ReservationID: id, State: api.BindFailed, Reason: &r}
}

// clip cuts a reason to the report's 256 characters.
func clip(s string) string {
	if r := []rune(s); len(r) > 256 {
		return string(r[:255]) + "…"
	}
	return s
}
