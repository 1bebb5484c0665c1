package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// Timeline is a pool's nodes × time, drawn server-side as SVG: deterministic
// for the same input (golden-tested), no script, no chart library.
type Timeline struct {
	From, To time.Time // the view
	Now      time.Time
	Nodes    []TimelineNode
	// Offers are ranges of start times a request could be placed at
	// (pools.availability), highlighted across every row.
	Offers []Span
}

// TimelineNode is one row.
type TimelineNode struct {
	ID    string
	Size  int    // devices: the row has one lane per device
	Href  string // the node's page ("" when the viewer cannot open it)
	Bars  []Bar
	Bands []Band
}

// Bar is one reservation's devices on a node. Kind is the reservation's
// state when the viewer holds it (placed, binding, active, released) or
// "other" (someone else's: anonymous unless the viewer owns the pool).
type Bar struct {
	Start, End time.Time
	Lanes      [][2]int // runs of consecutive device lanes [first, last]
	Kind       string
	Label      string // drawn inside the bar when it is wide enough
	Title      string // the tooltip ("" for none)
	Href       string
}

// Band is a state of the node over a span: cordoned, draining, unhealthy,
// unreachable or registered (not yet reporting).
type Band struct {
	Kind       string
	Start, End time.Time
	Title      string
}

// Span is a half-open range of time.
type Span struct{ Start, End time.Time }

// Geometry of the drawing, in SVG user units (the SVG scales to its box).
const (
	tlLabelW = 170.0
	tlAreaW  = 1000.0
	tlAxisH  = 36.0
	tlLaneH  = 5.0
	tlMinRow = 14.0
	tlRowPad = 4.0
)

func rowHeight(size int) float64 {
	return max(float64(size)*tlLaneH, tlMinRow) + tlRowPad
}

// SVG draws the timeline. Every text is escaped here: the result is
// trusted HTML for the page's template.
func (t Timeline) SVG() template.HTML {
	var b strings.Builder
	b.Grow(64 + len(t.Nodes)*256)
	span := t.To.Sub(t.From).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(at time.Time) float64 {
		s := at.Sub(t.From).Seconds()
		return tlLabelW + min(max(s, 0), span)/span*tlAreaW
	}
	height := tlAxisH
	for _, n := range t.Nodes {
		height += rowHeight(n.Size)
	}
	width := tlLabelW + tlAreaW + 8
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" aria-labelledby="tl-title">`, width, height, width, height)
	fmt.Fprintf(&b, `<title id="tl-title">%d nodes from %s to %s (UTC)</title>`, len(t.Nodes), t.From.UTC().Format("2006-01-02 15:04"), t.To.UTC().Format("2006-01-02 15:04"))
	b.WriteString(`<defs>` +
		`<pattern id="p-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="2" height="6" class="ph"/></pattern>` +
		`<pattern id="p-dots" width="5" height="5" patternUnits="userSpaceOnUse"><circle cx="2.5" cy="2.5" r="1.2" class="ph"/></pattern>` +
		`<pattern id="p-cross" width="6" height="6" patternUnits="userSpaceOnUse"><path d="M0 0L6 6M6 0L0 6" class="pl"/></pattern>` +
		`<pattern id="p-bind" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="2" height="4" class="pb"/></pattern>` +
		`</defs>`)
	t.axis(&b, x, height)
	for i, y := 1, tlAxisH; i <= len(t.Nodes); i++ {
		h := rowHeight(t.Nodes[i-1].Size)
		if i%2 == 0 {
			fmt.Fprintf(&b, `<rect class="row" x="0" y="%.0f" width="%.0f" height="%.0f"/>`, y, width, h)
		}
		y += h
	}
	for _, o := range t.Offers {
		if !o.End.After(t.From) || !o.Start.Before(t.To) {
			continue
		}
		x0, x1 := x(o.Start), x(o.End)
		fmt.Fprintf(&b, `<rect class="offer" x="%.1f" y="%.0f" width="%.1f" height="%.0f"><title>can start %s – %s UTC</title></rect>`,
			x0, tlAxisH-10, max(x1-x0, 1.5), height-tlAxisH+10, o.Start.UTC().Format("Jan 02 15:04"), o.End.UTC().Format("Jan 02 15:04"))
		fmt.Fprintf(&b, `<text class="offer-l" x="%.1f" y="%.0f">can start</text>`, x0+2, tlAxisH-2)
	}
	y := tlAxisH
	for _, n := range t.Nodes {
		h := rowHeight(n.Size)
		label := template.HTMLEscapeString(n.ID)
		if n.Href != "" {
			fmt.Fprintf(&b, `<a href="%s"><text class="node" x="4" y="%.1f">%s</text></a>`, template.HTMLEscapeString(n.Href), y+h/2+4, label)
		} else {
			fmt.Fprintf(&b, `<text class="node" x="4" y="%.1f">%s</text>`, y+h/2+4, label)
		}
		for _, bd := range n.Bands {
			if !bd.End.After(t.From) || !bd.Start.Before(t.To) {
				continue
			}
			x0, x1 := x(bd.Start), x(bd.End)
			fmt.Fprintf(&b, `<rect class="band %s" x="%.1f" y="%.0f" width="%.1f" height="%.0f"><title>%s</title></rect>`,
				bd.Kind, x0, y, max(x1-x0, 1), h, template.HTMLEscapeString(bd.Title))
			fmt.Fprintf(&b, `<text class="band-l" x="%.1f" y="%.1f">%s</text>`, x0+2, y+h-3, bd.Kind)
		}
		for _, bar := range n.Bars {
			if !bar.End.After(t.From) || !bar.Start.Before(t.To) || len(bar.Lanes) == 0 {
				continue
			}
			x0, x1 := x(bar.Start), x(bar.End)
			w := max(x1-x0, 1)
			if bar.Href != "" {
				fmt.Fprintf(&b, `<a href="%s">`, template.HTMLEscapeString(bar.Href))
			}
			// A bar is a path per run of lanes, in whole units (a unit is a
			// pixel at the default width): every byte counts on a busy
			// page. One run carries the title itself; more are a group.
			title := ""
			if bar.Title != "" {
				title = `<title>` + template.HTMLEscapeString(bar.Title) + `</title>`
			}
			if len(bar.Lanes) > 1 {
				fmt.Fprintf(&b, `<g class="b %s">%s`, bar.Kind, title)
			}
			for _, run := range bar.Lanes {
				d := fmt.Sprintf(`M%.0f %.0fh%.0fv%.0fh-%.0fz`, x0, y+tlRowPad/2+float64(run[0])*tlLaneH, w, float64(run[1]-run[0]+1)*tlLaneH-1, w)
				switch {
				case len(bar.Lanes) > 1:
					fmt.Fprintf(&b, `<path d="%s"/>`, d)
				case title != "":
					fmt.Fprintf(&b, `<path class="b %s" d="%s">%s</path>`, bar.Kind, d, title)
				default:
					fmt.Fprintf(&b, `<path class="b %s" d="%s"/>`, bar.Kind, d)
				}
			}
			if len(bar.Lanes) > 1 {
				b.WriteString(`</g>`)
			}
			if bar.Label != "" && w > float64(len(bar.Label))*5.2+4 {
				fmt.Fprintf(&b, `<text class="bar-l %s" x="%.0f" y="%.0f">%s</text>`, bar.Kind, x0+3, y+tlRowPad/2+float64(bar.Lanes[0][0])*tlLaneH+9, template.HTMLEscapeString(bar.Label))
			}
			if bar.Href != "" {
				b.WriteString(`</a>`)
			}
		}
		y += h
	}
	if !t.Now.Before(t.From) && !t.Now.After(t.To) {
		nx := x(t.Now)
		fmt.Fprintf(&b, `<line class="now" x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"/><text class="now-l" x="%.1f" y="%.0f">now</text>`,
			nx, tlAxisH-14, nx, height, nx+2, tlAxisH-16)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// axis draws the time axis: a tick a day (every 3 hours when the view is a
// day or two), with labels spaced so they never collide.
func (t Timeline) axis(b *strings.Builder, x func(time.Time) float64, height float64) {
	span := t.To.Sub(t.From)
	step, format := 24*time.Hour, "Jan 02"
	if span <= 2*24*time.Hour {
		step, format = 3*time.Hour, "15:04"
	}
	perLabel := int(max(1, (60.0/tlAreaW)*float64(span)/float64(step)+0.999))
	first := t.From.UTC().Truncate(step)
	if first.Before(t.From) {
		first = first.Add(step)
	}
	i := 0
	for at := first; !at.After(t.To); at = at.Add(step) {
		ax := x(at)
		fmt.Fprintf(b, `<line class="tick" x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f"/>`, ax, tlAxisH-6, ax, height)
		if i%perLabel == 0 {
			fmt.Fprintf(b, `<text class="tick-l" x="%.1f" y="12">%s</text>`, ax+2, at.Format(format))
		}
		i++
	}
}
