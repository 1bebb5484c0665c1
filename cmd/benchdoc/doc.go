package main

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A document holds generated blocks between a begin and an end marker:
//
//	<!-- bench: PATTERN | UNIT UNIT … -->
//	| table generated from the results |
//	<!-- end bench -->
//
// PATTERN is a Go regexp matched against each result's name (without
// "Benchmark" and the -GOMAXPROCS suffix): the table has a row per
// matching name, in the order of the results file, and a column per unit
// (a unit of the results, or one of derived). `<!-- bench: header -->`
// generates the paragraph saying when, where and how long the results were
// measured. `<!-- bench @FILE: … -->` takes its results from FILE, beside
// the results file, instead: a subset's (make bench BENCH=regexp
// BENCH_OUT=docs/bench/FILE), so a subset's tables are generated too
// without running every benchmark. Everything outside the blocks is the
// document's own.
var beginMarker = regexp.MustCompile(`^<!-- bench(?: @([A-Za-z0-9._-]+))?: (.*?) -->$`)

// Opener gives the results of a block: file "" is the results file, any
// other a file beside it; link is the file relative to the document.
type Opener func(file string) (res *Results, link string, err error)

const endMarker = "<!-- end bench -->"

// subsetBench is the -bench pattern of a results file's command.
var subsetBench = regexp.MustCompile(`-bench (\S+)`)

// headerKeys are the header members the header paragraph needs.
var headerKeys = []string{"date", "commit", "go", "cpu", "took"}

// Render returns doc with every generated block made anew from res;
// resultsLink is the results file relative to the document.
func Render(doc string, res *Results, resultsLink string) (string, error) {
	return RenderWith(doc, func(file string) (*Results, string, error) {
		if file != "" {
			return nil, "", fmt.Errorf("no results file %s", file)
		}
		return res, resultsLink, nil
	})
}

// RenderWith is Render with each block's results from open.
func RenderWith(doc string, open Opener) (string, error) {
	lines := strings.Split(doc, "\n")
	var out []string
	blocks := 0
	for i := 0; i < len(lines); i++ {
		out = append(out, lines[i])
		m := beginMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		blocks++
		end := slices.Index(lines[i+1:], endMarker)
		if end < 0 {
			return "", fmt.Errorf("line %d: %q has no %q after it", i+1, lines[i], endMarker)
		}
		res, link, err := open(m[1])
		if err != nil {
			return "", fmt.Errorf("line %d: %w", i+1, err)
		}
		body, err := block(m[2], res, link)
		if err != nil {
			return "", fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, body...)
		out = append(out, endMarker)
		i += end + 1
	}
	if blocks == 0 {
		return "", fmt.Errorf("no %q blocks", "<!-- bench: … -->")
	}
	return strings.Join(out, "\n"), nil
}

func block(spec string, res *Results, resultsLink string) ([]string, error) {
	if spec == "header" {
		return header(res, resultsLink)
	}
	pattern, units, ok := strings.Cut(spec, "|")
	cols := strings.Fields(units)
	if !ok || len(cols) == 0 {
		return nil, fmt.Errorf("bench block %q: want PATTERN | UNIT…", spec)
	}
	re, err := regexp.Compile(strings.TrimSpace(pattern))
	if err != nil {
		return nil, fmt.Errorf("bench block %q: %w", spec, err)
	}
	var names []string
	values := map[string]map[string][]float64{} // name → unit → values
	for _, r := range res.Runs {
		if !re.MatchString(r.Name) {
			continue
		}
		if values[r.Name] == nil {
			names = append(names, r.Name)
			values[r.Name] = map[string][]float64{}
		}
		for _, c := range cols {
			if v, ok := r.Metric(c); ok {
				values[r.Name][c] = append(values[r.Name][c], v)
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("bench block %q: no result in the results file matches", spec)
	}
	for _, c := range cols {
		if !slices.ContainsFunc(names, func(n string) bool { return len(values[n][c]) > 0 }) {
			return nil, fmt.Errorf("bench block %q: no matching result has %s", spec, c)
		}
	}
	prefix := commonDir(names)
	head := "| `Benchmark" + prefix + "` |"
	if prefix == "" {
		head = "| Benchmark |"
	}
	rule := "|---|"
	for _, c := range cols {
		head += " " + c + " |"
		rule += "---:|"
	}
	rows := []string{head, rule}
	for _, n := range names {
		row := "| `" + strings.TrimPrefix(n, prefix) + "` |"
		for _, c := range cols {
			row += " " + span(values[n][c]) + " |"
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func header(res *Results, resultsLink string) ([]string, error) {
	h := res.Header
	for _, k := range headerKeys {
		if h[k] == "" {
			return nil, fmt.Errorf("the results file has no %q header line (write it with `benchdoc run`)", "# "+k+": …")
		}
	}
	var servers []string
	for _, k := range []string{"dynalite", "local-kms"} {
		if h[k] != "" {
			servers = append(servers, k+" "+h[k])
		}
	}
	run := "`make bench`"
	if m := subsetBench.FindStringSubmatch(h["command"]); m != nil && m[1] != "." {
		run = fmt.Sprintf("`make bench BENCH='%s' BENCH_OUT=docs/%s`", m[1], resultsLink)
	}
	s := fmt.Sprintf("Measured by %s on %s at commit %s with %s on %s", run, h["date"], h["commit"], h["go"], h["cpu"])
	if len(servers) > 0 {
		s += ", against " + strings.Join(servers, " and ")
	}
	s += fmt.Sprintf("; the whole run took %s. Raw output: [%s](%s).", h["took"], resultsLink, resultsLink)
	return []string{s}, nil
}

// commonDir is the longest prefix ending in "/" that every name shares,
// when there is more than one name.
func commonDir(names []string) string {
	if len(names) < 2 {
		return ""
	}
	p := names[0]
	for _, n := range names[1:] {
		for !strings.HasPrefix(n, p) {
			p = p[:len(p)-1]
		}
	}
	return p[:strings.LastIndexByte(p, '/')+1]
}

// span shows one value, or the range of several (go test -count).
func span(vs []float64) string {
	if len(vs) == 0 {
		return "—"
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	if number(lo) == number(hi) {
		return number(lo)
	}
	return number(lo) + "–" + number(hi)
}

// number shows v with three significant digits, whole from 100 on, with
// thousands separators.
func number(v float64) string {
	a := math.Abs(v)
	if a >= 100 || v == math.Trunc(v) {
		s := strconv.FormatFloat(math.Round(a), 'f', 0, 64)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		if v < 0 {
			s = "-" + s
		}
		return s
	}
	decimals := max(0, 2-int(math.Floor(math.Log10(a))))
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
}
