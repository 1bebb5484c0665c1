package main

import (
	"fmt"
	"io"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// reservationTable and reservationsTable print reservations.create, get
// and release (one reservation), and reservations.list.
var (
	reservationTable  = oneTable(func(w io.Writer, a api.ReservationResult, _ time.Time) { printReservation(w, a.Reservation) })
	reservationsTable = listTable(func(a api.ListReservationsResult) []api.Reservation { return a.Reservations }, printReservations)
)

func printReservation(w io.Writer, r api.Reservation) {
	fmt.Fprintf(w, "reservation\t%s\nstate\t%s\n", r.ReservationID, stateWithReason(r))
	if r.ReleasedBy != "" {
		fmt.Fprintf(w, "released by\t%s\n", r.ReleasedBy)
	}
	fmt.Fprintf(w, "tenant\t%s\npool\t%s\nresource\t%s × %d (topology %s)\nwindow\t%s → %s\n",
		r.TenantID, r.PoolID, r.Resource, r.Count, r.Topology, stamp(r.Window.Start), stamp(r.Window.End))
	if len(r.NodeIDs) > 0 {
		fmt.Fprintf(w, "nodes\t%s (%d)\ndevices\t%s (%d)\n", idRanges(r.NodeIDs), len(r.NodeIDs), idRanges(r.DeviceIDs), len(r.DeviceIDs))
	}
	printTimeline(w, r.History)
}

// printReservations lists reservations, one row each.
func printReservations(w io.Writer, rs []api.Reservation, _ time.Time) {
	fmt.Fprintln(w, "RESERVATION\tSTATE\tPOOL\tRESOURCE\tCOUNT\tSTART\tEND\tNODES")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ReservationID, stateWithReason(r), r.PoolID, r.Resource, r.Count,
			stamp(r.Window.Start), stamp(r.Window.End), dash(idRanges(r.NodeIDs)))
	}
}

// printTimeline prints a reservation's history: when it entered each state.
func printTimeline(w io.Writer, h []api.Event) {
	fmt.Fprintln(w, "\nSTATE\tAT\tREASON")
	for _, e := range h {
		fmt.Fprintf(w, "%s\t%s\t%s\n", e.State, stamp(e.At), dash(eventReason(e)))
	}
}

// eventReason is a history entry's reason, with the rollout that caused a
// disrupted entry: "disrupted by rollout 01J…" (bcctl rollouts get shows it).
func eventReason(e api.Event) string {
	if e.RolloutID != "" {
		return e.Reason + " by rollout " + e.RolloutID
	}
	return e.Reason
}

func stateWithReason(r api.Reservation) string {
	if r.Reason != "" {
		return string(r.State) + " (" + r.Reason + ")"
	}
	return string(r.State)
}
