package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// poolView draws pools.usage pages as a terminal chart: one row per node,
// one column per slot of the span, each cell shaded by the share of the
// node's devices held during the slot; a header with the totals.
type poolView struct {
	ASCII bool // shades ".:+*#" instead of block characters
	Rows  int  // nodes to draw (0: all); the header covers every node of the pages
}

// columns is the number of slots across the span (half-hours of a day).
const columns = 48

var (
	unicodeShades = []rune{'·', '░', '▒', '▓', '█'}
	asciiShades   = []rune{'.', ':', '+', '*', '#'}
)

// Draw writes the chart of pages (in node order) of one resource: the
// header's figures over every node of the pages, a row for each of the
// first Rows nodes (the header says when there are more, or when the
// pages hold fewer nodes than the resource has).
func (v poolView) Draw(w io.Writer, pages []api.Usage) {
	if len(pages) == 0 {
		return
	}
	shades := unicodeShades
	if v.ASCII {
		shades = asciiShades
	}
	first := pages[0]
	first.Nodes = slices.Clone(first.Nodes)
	for _, p := range pages[1:] {
		first.AddPage(p)
	}
	t, nodes := first.Page, first.Nodes
	span := first.To.Sub(first.From)
	fmt.Fprintf(w, "pool %s · %s · %s on %s of %d · %s → %s UTC\n", first.PoolID, first.Resource,
		strictjson.Plural(first.Devices, "device"), strictjson.Plural(first.NodeCount, "node"), first.NodeSize,
		first.From.Format("2006-01-02 15:04"), first.To.Format("2006-01-02 15:04"))
	scope := ""
	if t.Nodes < first.NodeCount {
		scope = fmt.Sprintf(" (figures of the first %s)", strictjson.Plural(t.Nodes, "node"))
	}
	fmt.Fprintf(w, "now: %s busy (%d of %d devices) · whole nodes free: %d now, %d for the whole span · %s held over the span%s\n",
		percent(t.BusyNow, t.Devices), t.BusyNow, t.Devices, t.WholeFreeNow, t.WholeFreeAll,
		percent(t.BusyDeviceSecs, t.Devices*int(span/time.Second)), scope)
	if v.Rows > 0 && len(nodes) > v.Rows {
		fmt.Fprintf(w, "rows: the first %d of %d nodes (--nodes draws more)\n", v.Rows, len(nodes))
		nodes = nodes[:v.Rows]
	}
	label := 0
	for _, n := range nodes {
		label = max(label, len(n.NodeID))
	}
	// Time axis: an hour mark where a slot starts on the hour.
	slot := span / time.Duration(columns)
	axis := []rune(strings.Repeat(" ", columns+1))
	for c := 0; c < columns; c++ {
		at := first.From.Add(time.Duration(c) * slot)
		mark := at.Truncate(time.Hour)
		if mark.Before(at) {
			mark = mark.Add(time.Hour)
		}
		if mark.Before(at.Add(slot)) && mark.Hour()%3 == 0 && c+2 <= columns && (c == 0 || axis[c-1] == ' ') {
			copy(axis[c:], []rune(mark.Format("15")))
		}
	}
	fmt.Fprintf(w, "%-*s %5s  %s\n", label, "node", "now", strings.TrimRight(string(axis), " "))
	for _, n := range nodes {
		busy := make([]float64, columns) // device-time held in each slot
		for _, b := range n.Busy {
			for c := 0; c < columns; c++ {
				s := first.From.Add(time.Duration(c) * slot)
				e := s.Add(slot)
				if o := overlap(b.Start, b.End, s, e); o > 0 {
					busy[c] += float64(len(b.DeviceIDs)) * float64(o) / float64(slot)
				}
			}
		}
		var row strings.Builder
		for _, x := range busy {
			f := x / float64(n.Size)
			i := 0
			switch {
			case f <= 0:
			case f < 0.34:
				i = 1
			case f < 0.67:
				i = 2
			case f < 1:
				i = 3
			default:
				i = 4
			}
			row.WriteRune(shades[i])
		}
		fmt.Fprintf(w, "%-*s %5s  %s\n", label, n.NodeID, fmt.Sprintf("%d/%d", n.BusyNow, n.Size), row.String())
	}
	fmt.Fprintf(w, "%c free  %c under a third  %c under two thirds  %c most  %c all devices held · a column is %s\n",
		shades[0], shades[1], shades[2], shades[3], shades[4], slot)
}

func overlap(a0, a1, b0, b1 time.Time) time.Duration {
	s, e := a0, a1
	if b0.After(s) {
		s = b0
	}
	if b1.Before(e) {
		e = b1
	}
	if e.After(s) {
		return e.Sub(s)
	}
	return 0
}

func percent(part, whole int) string {
	if whole == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}
