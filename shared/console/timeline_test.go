package console

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var t0 = time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)

// sampleTimeline has every kind of bar and band, an offer and the now line.
func sampleTimeline() Timeline {
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	return Timeline{From: h(-48), To: h(5 * 24), Now: h(10), Offers: []Span{{h(30), h(36)}},
		Nodes: []TimelineNode{
			{ID: "gpu.h100-node-0", Size: 8, Href: "p/nodes/gpu.h100-node-0", Bars: []Bar{
				{Start: h(-30), End: h(-2), Lanes: [][2]int{{0, 3}}, Kind: "released", Title: "released"},
				{Start: h(2), End: h(20), Lanes: [][2]int{{0, 3}}, Kind: "active", Label: "active", Title: "yours: active", Href: "../reservations/A"},
				{Start: h(40), End: h(90), Lanes: [][2]int{{4, 5}, {7, 7}}, Kind: "placed", Label: "placed", Title: "yours: placed", Href: "../reservations/B"},
			}},
			{ID: "gpu.h100-node-1", Size: 8, Bars: []Bar{
				{Start: h(-100), End: h(200), Lanes: [][2]int{{0, 7}}, Kind: "other", Title: "booked (another tenant's)"},
			}, Bands: []Band{{Kind: "cordoned", Start: h(5), End: h(120), Title: `cordoned by operator: <script>alert("x")</script>`}}},
			{ID: "gpu.h100-node-2", Size: 4, Bars: []Bar{
				{Start: h(9), End: h(12), Lanes: [][2]int{{1, 2}}, Kind: "binding", Label: "binding", Title: "yours: binding"},
			}, Bands: []Band{{Kind: "unreachable", Start: h(8), End: h(120), Title: "unreachable since Dec 05 08:00 UTC"}}},
		}}
}

// The timeline is deterministic: the same input draws the same SVG,
// byte for byte (go test -run TestTimelineGolden -update rewrites it).
func TestTimelineGolden(t *testing.T) {
	got := string(sampleTimeline().SVG())
	path := "testdata/timeline.golden.svg"
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the timeline drew differently from %s (run with -update if the change is meant):\n%s", path, got)
	}
	if got != string(sampleTimeline().SVG()) {
		t.Error("two drawings of one timeline differ")
	}
}

// Text that reaches the SVG is escaped: the timeline is trusted HTML.
func TestTimelineEscapes(t *testing.T) {
	svg := string(sampleTimeline().SVG())
	if strings.Contains(svg, "<script>") || !strings.Contains(svg, "&lt;script&gt;") {
		t.Errorf("the band's title is not escaped:\n%s", svg)
	}
	for _, want := range []string{`class="b active"`, `class="b placed"`, `class="b binding"`, `class="b other"`, `class="band cordoned"`,
		`class="band unreachable"`, `class="offer"`, `class="now"`, `>now</text>`, `>cordoned</text>`, `>active</text>`} {
		if !strings.Contains(svg, want) {
			t.Errorf("the timeline lacks %s", want)
		}
	}
}

// busyTimeline is 64 nodes × 38 days with two reservations a node a day,
// half of them the viewer's: what a busy pool's default view draws (at the
// month view a bar's tooltip names no times and others' bars carry none;
// zoomed in to a week or less, every bar's does).
func busyTimeline() Timeline {
	from := t0.Add(-7 * 24 * time.Hour)
	tl := Timeline{From: from, To: from.Add(MaxDays * 24 * time.Hour), Now: t0, Offers: []Span{{t0.Add(30 * time.Hour), t0.Add(40 * time.Hour)}}}
	for n := range NodesPerPage {
		node := TimelineNode{ID: fmt.Sprintf("gpu.h100-node-%d", n), Size: 8, Href: fmt.Sprintf("p/nodes/gpu.h100-node-%d", n)}
		for d := range MaxDays {
			day := from.Add(time.Duration(d) * 24 * time.Hour)
			node.Bars = append(node.Bars,
				Bar{Start: day.Add(time.Hour), End: day.Add(11 * time.Hour), Lanes: [][2]int{{0, 3}}, Kind: "other"},
				Bar{Start: day.Add(12 * time.Hour), End: day.Add(23 * time.Hour), Lanes: [][2]int{{4, 7}}, Kind: "active", Label: "active",
					Title: "yours: active", Href: "../reservations/01M91V67PNX9PQWJB57AXPZYF4"})
		}
		if n%8 == 0 {
			node.Bands = []Band{{Kind: "cordoned", Start: t0.Add(-3 * time.Hour), End: tl.To, Title: "cordoned by operator since Dec 04 21:00: psu-swap"}}
		}
		tl.Nodes = append(tl.Nodes, node)
	}
	return tl
}

// The default view of a busy 64-node page stays under 500 KB.
func TestBusyTimelineSize(t *testing.T) {
	if n := len(busyTimeline().SVG()); n > 500_000 {
		t.Errorf("64 nodes × 38 days draw %d bytes, over 500 KB", n)
	}
}

// BenchmarkTimeline64x38 draws the busy page: 64 nodes × 38 days, 4,864
// bars (the target: 200 ms p50, 500 KB).
func BenchmarkTimeline64x38(b *testing.B) {
	tl := busyTimeline()
	var n int
	for b.Loop() {
		n = len(tl.SVG())
	}
	b.ReportMetric(float64(n), "svg-bytes")
}

// BenchmarkTimelinePage64x38 renders the whole pool page fragment of the
// busy page from the methods' answers as the page holds them: the SVG, the
// template around it, the legend (the calls themselves are measured by
// their own benchmarks: a usage call a day of the view).
func BenchmarkTimelinePage64x38(b *testing.B) {
	c, err := New(Config{Caller: &Caller{}})
	if err != nil {
		b.Fatal(err)
	}
	tl := busyTimeline()
	var n int
	for b.Loop() {
		d := poolData{page: page{Tenant: "acme", Now: tl.Now}, Resource: "gpu.h100", Resources: []string{"gpu.h100"},
			From: tl.From, To: tl.To, Days: MaxDays, SVG: tl.SVG(), Legend: legend, First: 1, Last: NodesPerPage, NodeCount: 12500, NextURL: "/console/pools/p?after=x"}
		var w strings.Builder
		if err := c.tmpl.ExecuteTemplate(&w, "pool", d); err != nil {
			b.Fatal(err)
		}
		n = w.Len()
	}
	b.ReportMetric(float64(n), "page-bytes")
}
