package logfmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/metrics"
)

// A request-like record with an EMF member, as the gateway writes it.
func logRequest(l *slog.Logger) {
	l.Info("request",
		slog.String("method", "releases.register"), slog.Int("status", 400), slog.String("outcome", "INVALID_INPUT"),
		slog.Float64("latency_ms", 3.25), slog.Int("ddb_calls", 0), slog.String("error", `manifest: no signature by a pinned key`),
		slog.Any("transitions", map[string]int{"active": 2, "binding": 1}), slog.String("request_id", "r-1"), slog.String("Table", "t"),
		metrics.Attr(time.Now(), metrics.Directive{Dimensions: [][]string{{"Table"}}, Metrics: []metrics.Metric{{Name: "latency_ms"}}}))
}

func TestTextLine(t *testing.T) {
	var buf bytes.Buffer
	logRequest(New(&buf, Text, slog.LevelInfo))
	line := buf.String()
	want := regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} INFO  request method=releases.register status=400 outcome=INVALID_INPUT ` +
		`latency_ms=3.25 ddb_calls=0 error="manifest: no signature by a pinned key" transitions={"active":2,"binding":1} request_id=r-1\n$`)
	if !want.MatchString(line) {
		t.Errorf("text line:\n%s", line)
	}
	if strings.Contains(line, "_aws") || strings.Contains(line, "CloudWatchMetrics") || strings.Contains(line, "Table=") {
		t.Errorf("EMF members in the text line: %s", line)
	}
}

func TestTextAttrsGroupsAndLevels(t *testing.T) {
	var buf bytes.Buffer
	l := New(&buf, Text, slog.LevelInfo).With("child", "dynalite").WithGroup("g").With("a", 1)
	l.Debug("hidden")
	l.Warn("two words", slog.Group("sub", slog.String("k", "")), "err", errors.New("boom bang"), "d", 1500*time.Millisecond, "ok", true)
	got := buf.String()
	if i := strings.IndexByte(got, ' '); i < 0 || !strings.HasSuffix(got[i:], ` WARN  two words child=dynalite g.a=1 g.sub.k="" g.err="boom bang" g.d=1.5s g.ok=true`+"\n") {
		t.Errorf("text line:\n%s", got)
	}
}

// JSON stays what CloudWatch reads: a "timestamp" member and the EMF record.
func TestJSONLineIsUnchanged(t *testing.T) {
	var buf bytes.Buffer
	logRequest(New(&buf, JSON, slog.LevelInfo))
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["timestamp"]; !ok || m["time"] != nil || m["level"] != "INFO" {
		t.Errorf("json line: %s", buf.String())
	}
	if points, ok, err := metrics.Parse(buf.Bytes()); !ok || err != nil || len(points) != 1 {
		t.Errorf("not the EMF record (ok %v, err %v): %s", ok, err, buf.String())
	}
}
