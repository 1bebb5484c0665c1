package agent

import (
	"context"
	"errors"
	"slices"

	"github.com/bettercompute/control-plane/shared/fleet"
)

// bindings acts on an answer's bindings in the order listed (every unbind
// before any bind, so a device's previous holder is scrubbed before the
// next is given it). A bind the driver refuses because a device is still
// held stays pending (its word unchanged) and is tried again next step; a
// failed bind or unbind is reported failed, and tried again next step too.
func (a *Agent) bindings(ctx context.Context, list []fleet.DesiredBinding) {
	told := make(map[string]bool, len(list))
	for _, b := range list {
		told[b.ReservationID] = true
		id := b.ReservationID
		switch b.Action {
		case fleet.ActionUnbind:
			if a.words[id].State == fleet.BindUnbound && !a.held[id] {
				continue
			}
			if err := a.cfg.Driver.Unbind(ctx, id); err != nil {
				a.log.Warn("unbind failed", "reservation", id, "error", err.Error())
				a.words[id] = failed(id, "unbind: "+err.Error())
				continue
			}
			delete(a.held, id)
			a.words[id] = fleet.ReportedBinding{ReservationID: id, State: fleet.BindUnbound}
			a.log.Info("unbound", "reservation", id)
		case fleet.ActionBind:
			if a.held[id] && a.words[id].State == fleet.BindBound {
				continue
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
				a.words[id] = fleet.ReportedBinding{ReservationID: id, State: fleet.BindBound}
				a.log.Info("bound", "reservation", id, "tenant", b.TenantID, "devices", len(b.DeviceIDs))
			}
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
func (a *Agent) reportBindings() []fleet.ReportedBinding {
	out := make([]fleet.ReportedBinding, 0, len(a.words))
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
	if len(out) > fleet.MaxBindings {
		a.log.Warn("more bindings than a report carries", "bindings", len(out), "max", fleet.MaxBindings)
		out = out[:fleet.MaxBindings]
	}
	return out
}

// failed is a failed binding's word, its reason cut to what a report
// carries.
func failed(id, reason string) fleet.ReportedBinding {
	r := clip(reason)
	return fleet.ReportedBinding{ReservationID: id, State: fleet.BindFailed, Reason: &r}
}

// clip cuts a reason to the report's 256 characters.
func clip(s string) string {
	if r := []rune(s); len(r) > 256 {
		return string(r[:255]) + "…"
	}
	return s
}
