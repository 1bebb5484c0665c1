package metrics_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/metrics"
)

// A line written through slog with Attr is a record CloudWatch accepts, and
// Parse reads back each metric under each dimension set.
func TestAttrMakesAValidRecord(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	at := time.UnixMilli(1_767_225_600_000)
	logger.LogAttrs(context.Background(), slog.LevelInfo, "request",
		slog.String("Table", "t1"), slog.String("method", "pools.get"),
		slog.Float64("latency_ms", 12.5), slog.Int("ddb_calls", 2),
		metrics.Attr(at, metrics.Directive{
			Dimensions: [][]string{{"Table"}, {"Table", "method"}},
			Metrics:    []metrics.Metric{{Name: "latency_ms", Unit: metrics.Milliseconds}, {Name: "ddb_calls", Unit: metrics.Count}},
		}))
	points, ok, err := metrics.Parse(buf.Bytes())
	if err != nil || !ok {
		t.Fatalf("Parse(%s) = %v, %v", buf.Bytes(), ok, err)
	}
	got := map[string]float64{}
	for _, p := range points {
		if p.Namespace != metrics.Namespace {
			t.Errorf("namespace %q", p.Namespace)
		}
		got[p.Key()] = p.Values[0]
	}
	want := map[string]float64{
		metrics.Key(metrics.Namespace, "latency_ms", "Table"):           12.5,
		metrics.Key(metrics.Namespace, "latency_ms", "method", "Table"): 12.5,
		metrics.Key(metrics.Namespace, "ddb_calls", "Table"):            2,
		metrics.Key(metrics.Namespace, "ddb_calls", "Table", "method"):  2,
	}
	if len(got) != len(want) {
		t.Errorf("points %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

func TestParseRefusesWhatCloudWatchWouldDrop(t *testing.T) {
	const ok = `{"_aws":{"Timestamp":1767225600000,"CloudWatchMetrics":[{"Namespace":"N","Dimensions":[["D"]],"Metrics":[{"Name":"M","Unit":"Count"}]}]},"D":"x","M":1}`
	if _, isRecord, err := metrics.Parse([]byte(ok)); err != nil || !isRecord {
		t.Fatalf("the valid record: %v %v", isRecord, err)
	}
	for _, tc := range []struct{ name, line, want string }{
		{"timestamp missing", strings.Replace(ok, `"Timestamp":1767225600000,`, ``, 1), "Timestamp"},
		{"timestamp a string", strings.Replace(ok, `1767225600000`, `"now"`, 1), "Timestamp"},
		{"directives not an array", `{"_aws":{"Timestamp":1,"CloudWatchMetrics":{}}}`, "CloudWatchMetrics"},
		{"namespace empty", strings.Replace(ok, `"Namespace":"N"`, `"Namespace":""`, 1), "Namespace"},
		{"dimension member missing", strings.Replace(ok, `"D":"x",`, ``, 1), "dimension D"},
		{"dimension member not a string", strings.Replace(ok, `"D":"x"`, `"D":3`, 1), "dimension D"},
		{"metric member missing", strings.Replace(ok, `,"M":1`, ``, 1), "metric M"},
		{"metric member a string", strings.Replace(ok, `"M":1`, `"M":"1"`, 1), "metric M"},
		{"unknown unit", strings.Replace(ok, `"Unit":"Count"`, `"Unit":"Requests"`, 1), "unit"},
		{"storage resolution", strings.Replace(ok, `"Unit":"Count"`, `"Unit":"Count","StorageResolution":5`, 1), "StorageResolution"},
		{"_aws not an object", `{"_aws":[]}`, "_aws"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, isRecord, err := metrics.Parse([]byte(tc.line))
			if err == nil || !isRecord || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%s) = record %v, %v; want an error about %s", tc.line, isRecord, err, tc.want)
			}
		})
	}
	if _, isRecord, err := metrics.Parse([]byte(`{"msg":"plain line"}`)); isRecord || err != nil {
		t.Errorf("a line without _aws: record %v, %v", isRecord, err)
	}
	if _, _, err := metrics.Parse([]byte(`START RequestId: 1`)); err == nil {
		t.Errorf("a non-JSON line parsed")
	}
}
