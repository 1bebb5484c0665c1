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
)

// renderer prints a method's answer pages (every page of a list) as a
// person reads them; now is what relative times count from.
type renderer func(w io.Writer, method string, pages [][]byte, now time.Time) error

// tables are the methods bcctl prints as tables, with their renderers
// (each kept with its resource); any other method prints as JSON.
var tables = map[string]renderer{
	"pools.create": poolTable, "pools.get": poolTable, "pools.list": poolsTable, "pools.usage": usageTable,
	"pools.availability": availabilityTable, "pools.offer": quotaTable, "quotas.get": quotaTable, "quotas.list": quotasTable,
	"reservations.create": reservationTable, "reservations.get": reservationTable,
	"reservations.release": reservationTable, "reservations.list": reservationsTable,
	"releases.register": releaseTable, "releases.list": releasesTable, "releases.log": logTable,
	"nodes.register": nodeTable, "nodes.get": nodeTable, "nodes.cordon": nodeTable, "nodes.uncordon": nodeTable, "nodes.list": nodesTable,
	"rollouts.create": rolloutTable, "rollouts.get": rolloutTable, "rollouts.pause": rolloutTable, "rollouts.resume": rolloutTable,
	"rollouts.abort": rolloutTable, "rollouts.list": rolloutsTable, "rollouts.nodes": rolloutNodesTable,
}

// renderTable prints a method's answer pages as a person reads them; now
// is what relative times count from.
func renderTable(w io.Writer, method string, pages [][]byte, now time.Time) error {
	render, ok := tables[method]
	if !ok {
		return writeJSON(w, mergePages(method, pages))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	return render(tw, method, pages, now)
}

// oneTable is the renderer of a method that answers one object.
func oneTable[T any](print func(w io.Writer, a T, now time.Time)) renderer {
	return func(w io.Writer, method string, pages [][]byte, now time.Time) error {
		a, err := decodeAnswer[T](method, pages[0])
		if err != nil {
			return err
		}
		print(w, a, now)
		return nil
	}
}

// listTable is the renderer of a list: the items of every page, decoded
// before any is printed, in one table.
func listTable[P, T any](items func(P) []T, print func(w io.Writer, items []T, now time.Time)) renderer {
	return func(w io.Writer, method string, pages [][]byte, now time.Time) error {
		as, err := decodePages[P](method, pages)
		if err != nil {
			return err
		}
		var all []T
		for _, a := range as {
			all = append(all, items(a)...)
		}
		print(w, all, now)
		return nil
	}
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
