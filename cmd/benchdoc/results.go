package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Results is a results file: the header benchdoc wrote ("# key: value"
// lines) and every benchmark result line of the raw `go test -bench` output.
type Results struct {
	Header map[string]string
	Runs   []Run
}

// Run is one benchmark result line.
type Run struct {
	Pkg     string
	Name    string // without "Benchmark" and without the -GOMAXPROCS suffix
	Iters   int64
	Metrics map[string]float64 // by unit: ns/op, B/op, p50-ms, …
}

var (
	headerLine = regexp.MustCompile(`^# ([a-z-]+): (.*)$`)
	resultLine = regexp.MustCompile(`^Benchmark(\S+)\s+(\d+)\s+(.*)$`)
)

// ParseResults reads a results file. A result line whose values do not
// come in value-unit pairs is an error: the file would be misread silently.
func ParseResults(r io.Reader) (*Results, error) {
	res := &Results{Header: map[string]string{}}
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, l := range lines {
		if m := headerLine.FindStringSubmatch(l); m != nil {
			res.Header[m[1]] = m[2]
		}
	}
	suffix := ""
	if p, _ := strconv.Atoi(res.Header["gomaxprocs"]); p > 1 {
		suffix = "-" + strconv.Itoa(p) // go test names results Name-GOMAXPROCS when above 1
	}
	pkg := ""
	for n, l := range lines {
		if p, ok := strings.CutPrefix(l, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		m := resultLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		run := Run{Pkg: pkg, Name: strings.TrimSuffix(m[1], suffix), Metrics: map[string]float64{}}
		run.Iters, _ = strconv.ParseInt(m[2], 10, 64)
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("line %d: values and units do not pair up: %s", n+1, l)
		}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q is not a number: %s", n+1, f[i], l)
			}
			run.Metrics[f[i+1]] = v
		}
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

// derived are units a document may ask for that the results hold in
// another unit: name → (source unit, factor).
var derived = map[string]struct {
	from   string
	factor float64
}{
	"ms/op":  {"ns/op", 1e-6},
	"µs/op":  {"ns/op", 1e-3},
	"s/op":   {"ns/op", 1e-9},
	"KiB/op": {"B/op", 1.0 / 1024},
	"MiB/op": {"B/op", 1.0 / (1 << 20)},
}

// Metric is the run's value in unit, converting a derived unit.
func (r Run) Metric(unit string) (float64, bool) {
	if v, ok := r.Metrics[unit]; ok {
		return v, true
	}
	if d, ok := derived[unit]; ok {
		v, ok := r.Metrics[d.from]
		return v * d.factor, ok
	}
	return 0, false
}
