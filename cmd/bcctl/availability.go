package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// pools availability prints the answer as a sentence a person reads
// ("16 × gpu.h100 on 2 nodes for 6 h: from now until 14:00, then from
// Tue 02:00 until Wed 09:00 (UTC)"), the quota beside it, then a table of
// the offerings and the command that books the first; reservations create
// refused CAPACITY_EXHAUSTED asks it for the first window that fits and
// says how to book that.

// availabilityTable prints pools.availability.
var availabilityTable = oneTable(func(w io.Writer, a api.PoolAvailabilityResult, now time.Time) {
	av := a.Availability
	fmt.Fprintln(w, availabilitySentence(av, now))
	fmt.Fprintln(w, quotaSentence(av))
	if av.Partial {
		fmt.Fprintln(w, "Partial: some starts were left out undecided (the search reads a bounded share of each hour's nodes); "+
			"a create there may still be placed, and a narrower --from/--to decides more of them.")
	}
	if len(av.Offerings) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFIRST START\tLAST START\tNODES\tLAST WINDOW ENDS")
	for _, o := range av.Offerings {
		first := stamp(o.EarliestStart)
		if !o.EarliestStart.After(now) {
			first = "now"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", first, stamp(o.LatestStart), o.Nodes, stamp(o.LatestStart.Add(hoursOf(av))))
	}
})

func hoursOf(av api.Availability) time.Duration { return time.Duration(av.Hours) * time.Hour }

// availabilitySentence says the request and its offerings in words, the
// times in UTC relative to now: "14:00" today, "Tue 02:00" within the
// week, "Dec 12 02:00" beyond.
func availabilitySentence(av api.Availability, now time.Time) string {
	head := fmt.Sprintf("%d × %s %s for %d h:", av.Count, av.Resource, spreadWords(av), av.Hours)
	if len(av.Offerings) == 0 {
		return fmt.Sprintf("%s no start from %s to %s (UTC) fits.", head, when(av.From, now), when(av.To, now))
	}
	parts := make([]string, len(av.Offerings))
	for i, o := range av.Offerings {
		switch {
		case o.EarliestStart.Equal(o.LatestStart) && !o.EarliestStart.After(now):
			parts[i] = "now only"
		case o.EarliestStart.Equal(o.LatestStart):
			parts[i] = "at " + when(o.EarliestStart, now)
		default:
			parts[i] = "from " + when(o.EarliestStart, now) + " until " + when(o.LatestStart, now)
		}
	}
	return head + " " + strings.Join(parts, ", then ") + " (UTC)."
}

// spreadWords says how the devices are spread: on one node, on n nodes,
// or anywhere.
func spreadWords(av api.Availability) string {
	switch {
	case av.Topology == api.AnyDevices:
		return "on any nodes"
	case len(av.Offerings) == 0:
		return "on as few nodes as hold them"
	case av.Offerings[0].Nodes == 1:
		return "on 1 node"
	}
	return fmt.Sprintf("on %d nodes", av.Offerings[0].Nodes)
}

// when is a time in UTC as the sentence says it; "now" for one not after now.
func when(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	switch {
	case !t.After(now):
		return "now"
	case t.Format("2006-01-02") == now.Format("2006-01-02"):
		return t.Format("15:04")
	case t.Sub(now) < 6*24*time.Hour:
		return t.Format("Mon 15:04")
	}
	return t.Format("Jan 2 15:04")
}

// quotaSentence says whether the count fits the tenant's quota now.
func quotaSentence(av api.Availability) string {
	q := av.Quota
	left := max(q.Max-q.Used, 0)
	if q.Fits {
		return fmt.Sprintf("Quota: %d of %d used, %d left: enough.", q.Used, q.Max, left)
	}
	return fmt.Sprintf("Quota: %d of %d used, %d left: not enough for %d — a create is refused QUOTA_EXCEEDED until reservations end "+
		"or the pool's owner raises max (bcctl pools offer).", q.Used, q.Max, left, av.Count)
}

// bookCommand is the command that books an offering's first start: from
// now (no --start) when that is the current hour, else from it, for the
// hours asked; length, when not zero, is the window to book instead.
func bookCommand(prog string, av api.Availability, o api.Offering, tenant string, length time.Duration, now time.Time) string {
	if length == 0 {
		length = hoursOf(av)
	}
	parts := []string{cmp.Or(prog, "bcctl")}
	if tenant != "" {
		parts = append(parts, "--tenant", tenant)
	}
	parts = append(parts, "reservations", "create", "--pool", av.PoolID, "--resource", av.Resource, "--count", fmt.Sprint(av.Count))
	if av.Topology == api.AnyDevices {
		parts = append(parts, "--topology", api.AnyDevices)
	}
	end := o.EarliestStart.Add(length)
	if o.EarliestStart.After(now) {
		parts = append(parts, "--start", o.EarliestStart.UTC().Format(time.RFC3339))
	} else {
		end = o.EarliestStart.Add(hoursOf(av)) // from now to the current hour's window end
	}
	return strings.Join(append(parts, "--end", end.UTC().Format(time.RFC3339)), " ")
}

// bookingNote prints, after a pools.availability table, the command that
// books its first offering (with --tenant when the command line gave one).
func (c *cli) bookingNote(w io.Writer, page []byte, tenantFlag string) {
	a, err := decodeAnswer[api.PoolAvailabilityResult]("pools.availability", page)
	if err != nil || len(a.Availability.Offerings) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTo book the first: %s\n", bookCommand(c.prog, a.Availability, a.Availability.Offerings[0], tenantFlag, 0, c.now()))
}

// afterRefusal is a refused reservations create's error with what to do
// about it beyond the hint: the first window that fits and its command.
type afterRefusal struct {
	error
	text string
}

func (e afterRefusal) Unwrap() error { return e.error }

// suggestWindow turns a CAPACITY_EXHAUSTED answer to reservations create
// into one that also says the first window of the same count, topology and
// length that fits, from the requested start on (pools.availability), and
// the command that books it. Any other error, or one the search cannot
// help with, is returned as it is.
func (c *cli) suggestWindow(ctx context.Context, err error, body map[string]any, tenantFlag string) error {
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Code != apierr.CapacityExhausted || c.output == "json" {
		return err
	}
	window, _ := body["window"].(map[string]any)
	endText, _ := window["end"].(string)
	end, perr := time.Parse(time.RFC3339Nano, endText)
	if perr != nil {
		return err
	}
	now := c.now()
	start := now
	if s, ok := window["start"].(string); ok {
		if t, perr := time.Parse(time.RFC3339Nano, s); perr == nil && t.After(now) {
			start = t
		}
	}
	length := end.Sub(start)
	hours := int((length + time.Hour - 1) / time.Hour)
	if hours < 1 || hours > api.MaxAvailabilityHours {
		return err
	}
	q := map[string]any{"tenantId": body["tenantId"], "poolId": body["poolId"], "resource": body["resource"], "count": body["count"],
		"hours": hours, "from": start.UTC().Format(time.RFC3339Nano), "limit": 1}
	if topo, ok := body["topology"]; ok {
		q["topology"] = topo
	}
	var got api.PoolAvailabilityResult
	if c.callJSON(ctx, "pools.availability", q, &got) != nil {
		return err // not granted, or down: the refusal says enough
	}
	av := got.Availability
	var b strings.Builder
	if len(av.Offerings) == 0 {
		fmt.Fprintf(&b, "    No window of %d h fits from then to %s (UTC) either; bcctl pools availability %s --resource %s --count %d --hours %d --to +31d looks further.\n",
			hours, when(av.To, now), av.PoolID, av.Resource, av.Count, hours)
	} else {
		o := av.Offerings[0]
		fmt.Fprintf(&b, "    The first window that fits (bcctl pools availability): %s\n", availabilitySentence(av, now))
		fmt.Fprintf(&b, "    Book it: %s\n", bookCommand(c.prog, av, o, tenantFlag, length.Round(time.Second), now))
	}
	return afterRefusal{err, b.String()}
}
