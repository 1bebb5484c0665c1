package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/metrics"
	"github.com/bettercompute/control-plane/shared/reconcile"
)

// noDue is a due index with nothing due.
type noDue struct{}

func (noDue) Shards() int { return 1 }
func (noDue) Due(context.Context, int, time.Time, func(reconcile.DueItem) bool) error {
	return nil
}

// fakeLog is a release log step whose answers the test sets.
type fakeLog struct {
	finished  bool
	finishErr error
	size      int64
	auditErr  error
	audited   bool
}

func (f *fakeLog) Finish(context.Context) (bool, error) { return f.finished, f.finishErr }
func (f *fakeLog) Audit(context.Context) (int64, error) {
	f.audited = true
	return f.size, f.auditErr
}

// finding is an audit finding as registry.LogAuditError reports one.
type finding struct{}

func (finding) Error() string { return "release log audit failed: roots differ" }
func (finding) AuditFinding() (int64, string, string) {
	return 7, "c2lnbmVk", "dHJlZQ=="
}

// lines decodes the JSON log lines in buf.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %s: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// The release log's step of a pass: finished registrations and audit
// findings are counted apart from dependency errors, a failing step never
// fails the pass, and a finding is an ERROR line with the size and both
// roots. Serial and concurrent passes run it alike.
func TestPassRunsTheReleaseLogStep(t *testing.T) {
	wrapped := errors.Join(errors.New("while auditing"), finding{})
	for _, tc := range []struct {
		name                                 string
		log                                  *fakeLog
		finished, auditFailed, errs, logSize int
		errorLine                            bool
	}{
		{name: "clean", log: &fakeLog{size: 3}, logSize: 3},
		{name: "finished", log: &fakeLog{finished: true, size: 4}, finished: 1, logSize: 4},
		{name: "finish fails, the audit still runs", log: &fakeLog{finishErr: errors.New("dynamodb down"), size: 4}, errs: 1, logSize: 4},
		{name: "the audit's dependency fails", log: &fakeLog{auditErr: errors.New("kms down")}, errs: 1},
		{name: "the audit finds the log wrong", log: &fakeLog{size: 7, auditErr: wrapped}, auditFailed: 1, logSize: 7, errorLine: true},
	} {
		for _, serial := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/serial=%v", tc.name, serial), func(t *testing.T) {
				var buf bytes.Buffer
				rc := &reconcile.Reconciler{Due: noDue{}, Capacity: &capacity.Steps{Service: &capacity.Service{}},
					Log: tc.log, Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Serial: serial}
				tc.log.audited = false
				res, err := rc.Pass(context.Background())
				if err != nil {
					t.Fatalf("the pass failed: %v", err)
				}
				if !tc.log.audited {
					t.Error("the pass did not audit the log")
				}
				if res.LogFinished != tc.finished || res.LogAuditFailed != tc.auditFailed || res.Errors != tc.errs || res.LogSize != int64(tc.logSize) {
					t.Errorf("logFinished %d, logAuditFailed %d, errors %d, logSize %d; want %d, %d, %d, %d",
						res.LogFinished, res.LogAuditFailed, res.Errors, res.LogSize, tc.finished, tc.auditFailed, tc.errs, tc.logSize)
				}
				var errorLines []map[string]any
				for _, l := range lines(t, &buf) {
					if l["level"] == "ERROR" {
						errorLines = append(errorLines, l)
					}
				}
				switch {
				case !tc.errorLine && len(errorLines) > 0:
					t.Errorf("ERROR lines %v", errorLines)
				case tc.errorLine && len(errorLines) != 1:
					t.Fatalf("%d ERROR lines, want 1: %s", len(errorLines), buf.String())
				case tc.errorLine:
					l := errorLines[0]
					if l["msg"] != "release log audit failed" || l["size"] != 7.0 || l["checkpointRoot"] != "c2lnbmVk" || l["treeRoot"] != "dHJlZQ==" {
						t.Errorf("error line %v", l)
					}
				}
			})
		}
	}
	// Without a log (no log key configured) there is no step.
	rc := &reconcile.Reconciler{Due: noDue{}, Capacity: &capacity.Steps{Service: &capacity.Service{}}, Logger: slog.New(slog.DiscardHandler)}
	if res, err := rc.Pass(context.Background()); err != nil || res.Errors != 0 || res.LogSize != 0 {
		t.Errorf("a pass without a log: %+v %v", res, err)
	}
}

// The summary line publishes LogFinished and LogAuditFailed (EMF, by
// [Table]); a failed audit makes an otherwise idle pass a warning, so its
// point is published where an idle pass's is not.
func TestPassSummaryPublishesTheLogMetrics(t *testing.T) {
	for _, tc := range []struct {
		res   reconcile.PassResult
		level string
	}{
		{reconcile.PassResult{LogAuditFailed: 1, LogSize: 7}, "WARN"},
		{reconcile.PassResult{LogFinished: 1, LogSize: 8}, "INFO"},
		{reconcile.PassResult{LogSize: 8}, "DEBUG"},
	} {
		var buf bytes.Buffer
		tc.res.Log(context.Background(), slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "bc-table")
		l := lines(t, &buf)
		if len(l) != 1 || l[0]["level"] != tc.level || l[0]["logSize"] != float64(tc.res.LogSize) {
			t.Errorf("%+v: summary %v, want level %s", tc.res, l, tc.level)
		}
		points, ok, err := metrics.Parse(bytes.TrimSpace(buf.Bytes()))
		if err != nil || !ok {
			t.Fatalf("not an EMF record (%v): %s", err, buf.Bytes())
		}
		want := map[string]float64{reconcile.MetricLogFinished: float64(tc.res.LogFinished), reconcile.MetricLogAuditFailed: float64(tc.res.LogAuditFailed)}
		for _, p := range points {
			if v, ok := want[p.Name]; ok {
				if p.Key() != metrics.Key(reconcile.MetricNamespace, p.Name, reconcile.DimensionTable) || p.Unit != string(metrics.Count) || len(p.Values) != 1 || p.Values[0] != v {
					t.Errorf("%s: %+v, want %v Count by [Table]", p.Name, p, v)
				}
				delete(want, p.Name)
			}
		}
		if len(want) > 0 {
			t.Errorf("the record publishes none of %v", want)
		}
	}
}
