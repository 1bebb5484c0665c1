// Package metrics writes CloudWatch embedded metric format (EMF) records: a
// JSON log line whose "_aws" member tells CloudWatch Logs which of the line's
// own members to extract as metrics, so a Lambda publishes metrics without
// PutMetricData (no extra IAM action, no extra round trip). The gateway's
// per-request line and the reconciler's pass summary are such records; Parse
// checks a line against the EMF specification and is what the tests use.
//
// Specification: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Namespace holds every Better Compute metric.
const Namespace = "BetterCompute"

// DimensionTable names the deployment in every record (the table's name,
// BC_TABLE): two stacks in one account and region never mix their metrics.
const DimensionTable = "Table"

// Units used here (the specification lists the others).
const (
	Milliseconds = "Milliseconds"
	Count        = "Count"
)

// Directive is one MetricDirective: every metric it names is published under
// every one of its dimension sets.
type Directive struct {
	Dimensions [][]string `json:"Dimensions"`
	Metrics    []Metric   `json:"Metrics"`
}

// Metric is a MetricDefinition: Name is also the record member holding the value.
type Metric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit,omitempty"`
}

type metadata struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

type directive struct {
	Namespace string `json:"Namespace"`
	Directive
}

// Attr is the "_aws" member that makes a log line an EMF record of
// Namespace at t. The line must carry every dimension (a string) and every
// metric (a number) as top-level members of its own.
func Attr(t time.Time, directives ...Directive) slog.Attr {
	md := metadata{Timestamp: t.UnixMilli()}
	for _, d := range directives {
		md.CloudWatchMetrics = append(md.CloudWatchMetrics, directive{Namespace: Namespace, Directive: d})
	}
	return slog.Any("_aws", md)
}

// Point is one metric value a record publishes under one dimension set.
type Point struct {
	Namespace  string
	Name       string
	Unit       string
	Dimensions map[string]string
	Values     []float64
}

// Key identifies a metric series shape: namespace, name and sorted dimension
// names, e.g. "BetterCompute/latency_ms[Table,method]".
func (p Point) Key() string { return Key(p.Namespace, p.Name, dimNames(p.Dimensions)...) }

// Key builds the identifier Point.Key returns from its parts.
func Key(namespace, name string, dimensions ...string) string {
	d := slices.Clone(dimensions)
	slices.Sort(d)
	return fmt.Sprintf("%s/%s%v", namespace, name, d)
}

func dimNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Limits of the specification.
const (
	maxDimensions     = 30  // keys in one dimension set
	maxMetrics        = 100 // metrics in one directive
	maxValues         = 100 // values in one metric member
	maxNameLength     = 1024
	maxDimensionValue = 1024
)

var units = map[string]bool{
	"Seconds": true, "Microseconds": true, "Milliseconds": true, "Bytes": true, "Kilobytes": true, "Megabytes": true,
	"Gigabytes": true, "Terabytes": true, "Bits": true, "Kilobits": true, "Megabits": true, "Gigabits": true, "Terabits": true,
	"Percent": true, "Count": true, "Bytes/Second": true, "Kilobytes/Second": true, "Megabytes/Second": true,
	"Gigabytes/Second": true, "Terabytes/Second": true, "Bits/Second": true, "Kilobits/Second": true, "Megabits/Second": true,
	"Gigabits/Second": true, "Terabits/Second": true, "Count/Second": true, "None": true,
}

// Parse checks one log line against the EMF specification and returns what
// CloudWatch would extract from it. A line without "_aws" is not a record
// (ok false, no error); a line with one that breaks the specification is an
// error naming the rule.
func Parse(line []byte) (points []Point, ok bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		return nil, false, fmt.Errorf("emf: not a JSON object: %w", err)
	}
	raw, ok := root["_aws"]
	if !ok {
		return nil, false, nil
	}
	aws, isObj := raw.(map[string]any)
	if !isObj {
		return nil, true, fmt.Errorf("emf: _aws is %T, want an object", raw)
	}
	ts, isNum := aws["Timestamp"].(json.Number)
	if _, err := ts.Int64(); !isNum || err != nil || ts.String()[0] == '-' {
		return nil, true, fmt.Errorf("emf: _aws.Timestamp is %v, want milliseconds since the epoch", aws["Timestamp"])
	}
	dirs, isArr := aws["CloudWatchMetrics"].([]any)
	if !isArr {
		return nil, true, fmt.Errorf("emf: _aws.CloudWatchMetrics is %T, want an array", aws["CloudWatchMetrics"])
	}
	for i, rd := range dirs {
		where := fmt.Sprintf("_aws.CloudWatchMetrics[%d]", i)
		d, isObj := rd.(map[string]any)
		if !isObj {
			return nil, true, fmt.Errorf("emf: %s is %T, want an object", where, rd)
		}
		ns, _ := d["Namespace"].(string)
		if ns == "" || len(ns) > maxNameLength {
			return nil, true, fmt.Errorf("emf: %s.Namespace is %v, want a string of 1..%d characters", where, d["Namespace"], maxNameLength)
		}
		sets, isArr := d["Dimensions"].([]any)
		if !isArr {
			return nil, true, fmt.Errorf("emf: %s.Dimensions is %T, want an array of dimension sets", where, d["Dimensions"])
		}
		var dimSets []map[string]string
		for j, rs := range sets {
			set, isArr := rs.([]any)
			if !isArr || len(set) > maxDimensions {
				return nil, true, fmt.Errorf("emf: %s.Dimensions[%d] is %v, want an array of at most %d keys", where, j, rs, maxDimensions)
			}
			dims := map[string]string{}
			for _, rk := range set {
				k, _ := rk.(string)
				v, isStr := root[k].(string)
				if k == "" || !isStr || v == "" || len(v) > maxDimensionValue {
					return nil, true, fmt.Errorf("emf: %s.Dimensions[%d]: dimension %v needs a top-level string member of 1..%d characters, got %v",
						where, j, rk, maxDimensionValue, root[k])
				}
				dims[k] = v
			}
			dimSets = append(dimSets, dims)
		}
		ms, isArr := d["Metrics"].([]any)
		if !isArr || len(ms) > maxMetrics {
			return nil, true, fmt.Errorf("emf: %s.Metrics is %v, want an array of at most %d metric definitions", where, d["Metrics"], maxMetrics)
		}
		for j, rm := range ms {
			m, isObj := rm.(map[string]any)
			name, _ := m["Name"].(string)
			if !isObj || name == "" || len(name) > maxNameLength {
				return nil, true, fmt.Errorf("emf: %s.Metrics[%d] is %v, want an object with a Name", where, j, rm)
			}
			unit, _ := m["Unit"].(string)
			if u, has := m["Unit"]; has && !units[unit] {
				return nil, true, fmt.Errorf("emf: metric %s: unit %v is not one of CloudWatch's", name, u)
			}
			if r, has := m["StorageResolution"]; has && r != json.Number("1") && r != json.Number("60") {
				return nil, true, fmt.Errorf("emf: metric %s: StorageResolution %v, want 1 or 60", name, r)
			}
			values, err := numbers(root[name])
			if err != nil {
				return nil, true, fmt.Errorf("emf: metric %s: %w", name, err)
			}
			for _, dims := range dimSets {
				points = append(points, Point{Namespace: ns, Name: name, Unit: unit, Dimensions: dims, Values: values})
			}
		}
	}
	return points, true, nil
}

// numbers reads a metric's member: a number or an array of numbers.
func numbers(v any) ([]float64, error) {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		return []float64{f}, err
	case []any:
		if len(v) == 0 || len(v) > maxValues {
			return nil, fmt.Errorf("%d values, want 1..%d", len(v), maxValues)
		}
		out := make([]float64, 0, len(v))
		for _, e := range v {
			n, ok := e.(json.Number)
			if !ok {
				return nil, fmt.Errorf("value %v is not a number", e)
			}
			f, err := n.Float64()
			if err != nil {
				return nil, err
			}
			out = append(out, f)
		}
		return out, nil
	}
	return nil, fmt.Errorf("the record's member is %v (%T), want a number or an array of numbers", v, v)
}
