package main

import (
	"fmt"
	"strings"
	"testing"
)

const fixture = `# Written by ` + "`make bench`" + ` (cmd/benchdoc): the raw ` + "`go test -bench`" + ` output below.
# date: 2026-12-01 02:20 UTC
# commit: 0123456789ab
# go: go1.26.8 linux/amd64
# cpu: Test CPU, 2 cores, 24 GiB
# gomaxprocs: 2
# dynalite: 4.0.0 on Node 20.20.2
goos: linux
pkg: example.com/a
BenchmarkCreateAtScale/pool-4096/live-0
    capacity_bench_test.go:1: a log line
BenchmarkCreateAtScale/pool-4096/live-0-2   	1	23000000000 ns/op	6.000 ddb-calls/op	23.94 p50-ms
BenchmarkCreateAtScale/pool-4096/live-100-2 	1	24000000000 ns/op	6.000 ddb-calls/op	24.51 p50-ms	1.17 units-vs-0-live
pkg: example.com/b
BenchmarkDecode-2   	47154	24694 ns/op	10613.27 MB/s	4360 B/op	34 allocs/op
BenchmarkDecode-2   	47000	25694 ns/op	10000.00 MB/s	4360 B/op	34 allocs/op
PASS
# took: 14m52s
`

func parse(t *testing.T, s string) *Results {
	t.Helper()
	res, err := ParseResults(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestParseResults(t *testing.T) {
	res := parse(t, fixture)
	if res.Header["took"] != "14m52s" || res.Header["commit"] != "0123456789ab" {
		t.Errorf("header %v", res.Header)
	}
	if len(res.Runs) != 4 {
		t.Fatalf("%d runs, want 4 (the bare name line is not a result): %+v", len(res.Runs), res.Runs)
	}
	r := res.Runs[0]
	if r.Pkg != "example.com/a" || r.Name != "CreateAtScale/pool-4096/live-0" || r.Iters != 1 || r.Metrics["p50-ms"] != 23.94 {
		t.Errorf("first run %+v", r)
	}
	if v, ok := res.Runs[2].Metric("µs/op"); !ok || v != 24.694 {
		t.Errorf("µs/op derived from ns/op: %v %v", v, ok)
	}
	if _, err := ParseResults(strings.NewReader("BenchmarkX-2  10  5 ns/op 7\n")); err == nil {
		t.Error("a value without a unit was accepted")
	}
}

func TestRender(t *testing.T) {
	res := parse(t, fixture)
	doc := "# Title\n\nProse stays.\n\n<!-- bench: header -->\nold\n<!-- end bench -->\n\n" +
		"<!-- bench: ^CreateAtScale/ | p50-ms ddb-calls/op units-vs-0-live -->\n| stale |\n<!-- end bench -->\n" +
		"<!-- bench: ^Decode$ | µs/op MB/s allocs/op -->\n<!-- end bench -->\nEnd.\n"
	got, err := Render(doc, res, "bench/results.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\n\nProse stays.\n\n<!-- bench: header -->\n" +
		"Measured by `make bench` on 2026-12-01 02:20 UTC at commit 0123456789ab with go1.26.8 linux/amd64 on Test CPU, 2 cores, 24 GiB, " +
		"against dynalite 4.0.0 on Node 20.20.2; the whole run took 14m52s. Raw output: [bench/results.txt](bench/results.txt).\n" +
		"<!-- end bench -->\n\n" +
		"<!-- bench: ^CreateAtScale/ | p50-ms ddb-calls/op units-vs-0-live -->\n" +
		"| `BenchmarkCreateAtScale/pool-4096/` | p50-ms | ddb-calls/op | units-vs-0-live |\n|---|---:|---:|---:|\n" +
		"| `live-0` | 23.9 | 6 | — |\n| `live-100` | 24.5 | 6 | 1.17 |\n<!-- end bench -->\n" +
		"<!-- bench: ^Decode$ | µs/op MB/s allocs/op -->\n" +
		"| Benchmark | µs/op | MB/s | allocs/op |\n|---|---:|---:|---:|\n| `Decode` | 24.7–25.7 | 10,000–10,613 | 34 |\n" +
		"<!-- end bench -->\nEnd.\n"
	if got != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
	if again, err := Render(got, res, "bench/results.txt"); err != nil || again != got {
		t.Errorf("rendering twice changes the document (%v)", err)
	}
}

// A block that no longer matches — a benchmark renamed or a unit gone —
// fails, rather than leaving an empty or stale table.
func TestRenderRefusesStaleBlocks(t *testing.T) {
	res := parse(t, fixture)
	for name, doc := range map[string]string{
		"no match":      "<!-- bench: ^Renamed$ | ns/op -->\n<!-- end bench -->\n",
		"unknown unit":  "<!-- bench: ^Decode$ | p99-ms -->\n<!-- end bench -->\n",
		"no units":      "<!-- bench: ^Decode$ -->\n<!-- end bench -->\n",
		"no end marker": "<!-- bench: ^Decode$ | ns/op -->\n| row |\n",
		"no blocks":     "# Nothing generated\n",
		"no header":     "<!-- bench: header -->\n<!-- end bench -->\n",
	} {
		t.Run(name, func(t *testing.T) {
			r := res
			if name == "no header" {
				r = parse(t, "BenchmarkDecode-2 1 5 ns/op\n")
			}
			if out, err := Render(doc, r, "bench/results.txt"); err == nil {
				t.Errorf("rendered:\n%s", out)
			}
		})
	}
}

func TestNumber(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 6: "6", 8.053: "8.05", 26.56: "26.6", 0.375: "0.375", 0.0012: "0.0012", 99.96: "100",
		417.7: "418", 1583.2: "1,583", 59994: "59,994", 1334419136: "1,334,419,136", -2.5: "-2.5",
	} {
		if got := number(v); got != want {
			t.Errorf("number(%v) = %q, want %q", v, got, want)
		}
	}
}

// A block naming a subset's results file is made from that file, its
// header saying the subset's make command.
func TestRenderSubsetFile(t *testing.T) {
	main, sub := parse(t, fixture), parse(t, strings.Replace(fixture, "# dynalite:", "# command: go test -p 1 -run ^$ -bench Decode -benchmem ./...\n# dynalite:", 1))
	sub.Runs = sub.Runs[3:] // its last run only
	doc := "<!-- bench @sub.txt: header -->\n<!-- end bench -->\n<!-- bench @sub.txt: ^Decode$ | MB/s -->\n<!-- end bench -->\n" +
		"<!-- bench: ^CreateAtScale/ | p50-ms -->\n<!-- end bench -->"
	got, err := RenderWith(doc, func(file string) (*Results, string, error) {
		switch file {
		case "":
			return main, "bench/results.txt", nil
		case "sub.txt":
			return sub, "bench/sub.txt", nil
		}
		return nil, "", fmt.Errorf("no %s", file)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Measured by `make bench BENCH='Decode' BENCH_OUT=docs/bench/sub.txt`", "[bench/sub.txt](bench/sub.txt)",
		"| `Decode` | 10,000 |", "| `live-0` | 23.9 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered without %q:\n%s", want, got)
		}
	}
	if _, err := RenderWith("<!-- bench @nope.txt: header -->\n<!-- end bench -->", func(file string) (*Results, string, error) {
		return nil, "", fmt.Errorf("no %s", file)
	}); err == nil {
		t.Error("a block naming a missing file rendered")
	}
}
