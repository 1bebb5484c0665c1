package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/fleet"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// renderTable prints a method's answer pages as a person reads them; now
// is what relative times count from.
func renderTable(w io.Writer, method string, pages [][]byte, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch method {
	case "pools.create", "pools.get":
		a, err := decodeAnswer[api.PoolResult](method, pages[0])
		if err != nil {
			return err
		}
		printPool(tw, a.Pool)
	case "pools.list":
		as, err := decodePages[api.ListPoolsResult](method, pages)
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "POOL\tOWNER\tRESOURCES\tCREATED")
		for _, a := range as {
			for _, p := range a.Pools {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.PoolID, p.OwnerTenantID, resourceList(p), stamp(p.CreatedAt))
			}
		}
	case "pools.offer", "quotas.get":
		a, err := decodeAnswer[api.QuotaResult](method, pages[0])
		if err != nil {
			return err
		}
		printQuotas(tw, []capacity.Quota{a.Quota})
	case "quotas.list":
		as, err := decodePages[api.ListQuotasResult](method, pages)
		if err != nil {
			return err
		}
		var qs []capacity.Quota
		for _, a := range as {
			qs = append(qs, a.Quotas...)
		}
		printQuotas(tw, qs)
	case "pools.usage":
		fmt.Fprintln(tw, "NODE\tHELD NOW\tDEVICES\tSTART\tEND\tRESERVATION")
		for _, p := range pages {
			a, err := decodeAnswer[api.PoolUsageResult](method, p)
			if err != nil {
				return err
			}
			u := a.Usage
			for _, n := range u.Nodes {
				if len(n.Busy) == 0 {
					fmt.Fprintf(tw, "%s\t%d/%d\t-\t\t\t\n", n.NodeID, n.BusyNow, n.Size)
				}
				for i, b := range n.Busy {
					node, now := n.NodeID, fmt.Sprintf("%d/%d", n.BusyNow, n.Size)
					if i > 0 {
						node, now = "", ""
					}
					// The hold's own window, not its part in the span.
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", node, now, idRanges(b.DeviceIDs), stamp(b.Window.Start), stamp(b.Window.End), dash(b.ReservationID))
				}
			}
		}
	case "reservations.create", "reservations.get", "reservations.release":
		a, err := decodeAnswer[api.ReservationResult](method, pages[0])
		if err != nil {
			return err
		}
		printReservation(tw, a.Reservation)
	case "reservations.list":
		as, err := decodePages[api.ListReservationsResult](method, pages)
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "RESERVATION\tSTATE\tPOOL\tRESOURCE\tCOUNT\tSTART\tEND\tNODES")
		for _, a := range as {
			for _, r := range a.Reservations {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ReservationID, stateWithReason(r), r.PoolID, r.Resource, r.Count,
					stamp(r.Window.Start), stamp(r.Window.End), dash(idRanges(r.NodeIDs)))
			}
		}
	case "releases.register":
		a, err := decodeAnswer[api.RegisterResult](method, pages[0])
		if err != nil {
			return err
		}
		printRelease(tw, a.Release, a.Replayed, now)
	case "releases.list":
		as, err := decodePages[api.ListReleasesResult](method, pages)
		if err != nil {
			return err
		}
		var rs []rollout.Release
		for _, a := range as {
			rs = append(rs, a.Releases...)
		}
		printReleases(tw, rs, now)
	case "nodes.register", "nodes.get", "nodes.cordon", "nodes.uncordon":
		a, err := decodeAnswer[api.NodeResult](method, pages[0])
		if err != nil {
			return err
		}
		printNode(tw, a.Node, now)
	case "nodes.list":
		as, err := decodePages[api.ListNodesResult](method, pages)
		if err != nil {
			return err
		}
		var ns []fleet.Node
		for _, a := range as {
			ns = append(ns, a.Nodes...)
		}
		printNodes(tw, ns, now)
	case "rollouts.create", "rollouts.get", "rollouts.pause", "rollouts.resume", "rollouts.abort":
		a, err := decodeAnswer[api.RolloutResult](method, pages[0])
		if err != nil {
			return err
		}
		printRollout(tw, a.Rollout, now)
	case "rollouts.list":
		as, err := decodePages[api.ListRolloutsResult](method, pages)
		if err != nil {
			return err
		}
		var rs []rollout.Rollout
		for _, a := range as {
			rs = append(rs, a.Rollouts...)
		}
		printRollouts(tw, rs, now)
	case "rollouts.nodes":
		as, err := decodePages[api.RolloutNodesResult](method, pages)
		if err != nil {
			return err
		}
		var ns []rollout.NodeProgress
		for _, a := range as {
			ns = append(ns, a.Nodes...)
		}
		printRolloutNodes(tw, ns, now)
	default:
		tw.Flush()
		return writeJSON(w, mergePages(method, pages))
	}
	return nil
}

// decodeAnswer decodes one answer of method: its result type in shared/api.
func decodeAnswer[T any](method string, page []byte) (T, error) {
	var a T
	if err := json.Unmarshal(page, &a); err != nil {
		return a, fmt.Errorf("%s: unexpected answer: %w", method, err)
	}
	return a, nil
}

// decodePages decodes every page of a list's answer.
func decodePages[T any](method string, pages [][]byte) ([]T, error) {
	out := make([]T, 0, len(pages))
	for _, p := range pages {
		a, err := decodeAnswer[T](method, p)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func printPool(w io.Writer, p capacity.Pool) {
	fmt.Fprintf(w, "pool\t%s\nowner\t%s\ncreated\t%s\n\n", p.PoolID, p.OwnerTenantID, stamp(p.CreatedAt))
	fmt.Fprintln(w, "RESOURCE\tDEVICES\tNODE SIZE\tNODES")
	for _, r := range p.ResourceNames() {
		t := p.Topology(r)
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", r, t.Devices, t.NodeSize, t.Nodes())
	}
}

// printQuotas lists quota rows. USED is what the tenant's live
// reservations hold charged, from admission until they are terminal
// (future bookings included), not the devices held now; FREE is what a new
// admission may still take, and a row whose max was lowered below used
// shows by how much it is over.
func printQuotas(w io.Writer, qs []capacity.Quota) {
	fmt.Fprintln(w, "TENANT\tPOOL\tRESOURCE\tMAX\tUSED\tFREE")
	for _, q := range qs {
		free := strconv.FormatInt(q.Max-q.Used, 10)
		if q.Used > q.Max {
			free = fmt.Sprintf("0 (over by %d)", q.Used-q.Max)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", q.TenantID, q.PoolID, q.Resource, q.Max, q.Used, free)
	}
}

func printReservation(w io.Writer, r capacity.Reservation) {
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

// printTimeline prints a reservation's history: when it entered each state.
func printTimeline(w io.Writer, h []capacity.Event) {
	fmt.Fprintln(w, "\nSTATE\tAT\tREASON")
	for _, e := range h {
		fmt.Fprintf(w, "%s\t%s\t%s\n", e.State, stamp(e.At), dash(eventReason(e)))
	}
}

// eventReason is a history entry's reason, with the rollout that caused a
// disrupted entry: "disrupted by rollout 01J…" (bcctl rollouts get shows it).
func eventReason(e capacity.Event) string {
	if e.RolloutID != "" {
		return e.Reason + " by rollout " + e.RolloutID
	}
	return e.Reason
}

// printReleases lists releases, one row each.
func printReleases(w io.Writer, rs []rollout.Release, now time.Time) {
	fmt.Fprintln(w, "VERSION\tSEQUENCE\tPLATFORMS\tEXPIRES\tREGISTERED\tBY")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Version, r.Sequence, platforms(r), expiresText(r, now), stamp(r.RegisteredAt), r.RegisteredBy.Principal)
	}
}

// expiresText is a release's expiry: its time ("(expired)" once passed:
// rollouts.create refuses it, nodes refuse to install it), or "never".
func expiresText(r rollout.Release, now time.Time) string {
	switch {
	case r.Expires == nil:
		return "never"
	case !now.Before(*r.Expires):
		return stamp(*r.Expires) + " (expired)"
	}
	return stamp(*r.Expires)
}

func printRelease(w io.Writer, r rollout.Release, replayed bool, now time.Time) {
	fmt.Fprintf(w, "version\t%s\nsequence\t%d\nexpires\t%s\nmanifest digest\t%s\nsigners\t%s\nregistered\t%s by %s/%s\n",
		r.Version, r.Sequence, expiresText(r, now), r.ManifestDigest, strings.Join(r.Signers, ", "), stamp(r.RegisteredAt), r.RegisteredBy.TenantID, r.RegisteredBy.Principal)
	if replayed {
		fmt.Fprintln(w, "replayed\tyes: this version was already recorded with this sequence")
	}
	fmt.Fprintln(w, "\nPLATFORM\tSIZE\tSHA256\tURL")
	for _, b := range r.Binaries {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", b.Platform, b.Size, b.SHA256, b.URL)
	}
}

func stateWithReason(r capacity.Reservation) string {
	if r.Reason != "" {
		return string(r.State) + " (" + r.Reason + ")"
	}
	return string(r.State)
}

func resourceList(p capacity.Pool) string {
	var parts []string
	for _, r := range p.ResourceNames() {
		parts = append(parts, r+"×"+strconv.Itoa(p.Resources[r]))
	}
	return strings.Join(parts, ", ")
}

func platforms(r rollout.Release) string {
	var ps []string
	for _, b := range r.Binaries {
		ps = append(ps, b.Platform)
	}
	return strings.Join(ps, ", ")
}

// idRanges lists ids of the form <prefix><n> compactly, as Slurm writes
// host lists: runs of consecutive numbers of one prefix in brackets
// (gpu.h100-[0-7,16-23], gpu.h100-node-[0-127]; a lone id as it is), the
// prefixes in order of first appearance; other ids are listed as they are.
// A 1,024-device reservation on whole nodes is one short range.
func idRanges(ids []string) string {
	var order []string
	nums := map[string][]int{}
	var other []string
	for _, id := range ids {
		i := len(id)
		for i > 0 && id[i-1] >= '0' && id[i-1] <= '9' {
			i--
		}
		n, err := strconv.Atoi(id[i:])
		if i == len(id) || err != nil || (id[i] == '0' && i < len(id)-1) {
			other = append(other, id)
			continue
		}
		prefix := id[:i]
		if _, ok := nums[prefix]; !ok {
			order = append(order, prefix)
		}
		nums[prefix] = append(nums[prefix], n)
	}
	var parts []string
	for _, prefix := range order {
		ns := nums[prefix]
		slices.Sort(ns)
		ns = slices.Compact(ns)
		if len(ns) == 1 {
			parts = append(parts, prefix+strconv.Itoa(ns[0]))
			continue
		}
		var runs []string
		for i := 0; i < len(ns); {
			j := i
			for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
				j++
			}
			if j == i {
				runs = append(runs, strconv.Itoa(ns[i]))
			} else {
				runs = append(runs, strconv.Itoa(ns[i])+"-"+strconv.Itoa(ns[j]))
			}
			i = j + 1
		}
		parts = append(parts, prefix+"["+strings.Join(runs, ",")+"]")
	}
	return strings.Join(append(parts, other...), ", ")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// span is a duration as a person reads it, to the second: "45s", "4m30s",
// "1h", "1h5m", "2d3h" (seconds left out from an hour on, minutes from a
// day on).
func span(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	const day = 24 * time.Hour
	days, hours, mins, secs := int(d/day), int(d%day/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	var b strings.Builder
	part := func(n int, unit string) {
		if n > 0 {
			fmt.Fprintf(&b, "%d%s", n, unit)
		}
	}
	switch {
	case days > 0:
		part(days, "d")
		part(hours, "h")
	case hours > 0:
		part(hours, "h")
		part(mins, "m")
	default:
		part(mins, "m")
		part(secs, "s")
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}
