package rollout_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/metrics"
	"github.com/bettercompute/control-plane/shared/rollout"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Each rollout entering aborting, aborted, rolled_back or completed writes
// exactly one valid EMF record: RolloutTransitions 1 (Count) under
// [Table, State], whether a pass or rollouts.abort made the change.
func TestRolloutTransitionMetrics(t *testing.T) {
	e := newFleetEnv(t)
	var buf lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	e.rc.Logger, e.rc.Table = logger, "bc-test"
	e.rollouts.Logger, e.rollouts.Table = logger, "bc-test"
	e.release("1.0.0", 1)
	e.release("2.0.0", 2)
	e.pool("a", 1, "1.0.0", 1)
	e.pool("b", 1, "1.0.0", 1)
	e.pass()
	waves := []api.WaveSpec{{Percent: ptr(100)}}
	done := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"a"}, Waves: waves})
	e.until(done.RolloutID, api.Completed, 100, nil)
	stopped := e.create(rollout.CreateRequest{Version: "2.0.0", Pools: []string{"b"}, Waves: waves, BakeSeconds: ptr(0)})
	if _, err := e.rollouts.Abort(context.Background(), stopped.RolloutID, "regression"); err != nil {
		t.Fatal(err)
	}
	e.until(stopped.RolloutID, api.RolledBack, 100, nil)
	e.round(time.Second) // finished: no more lines

	var got []string
	for _, line := range bytes.Split(bytes.TrimSpace(buf.b.Bytes()), []byte("\n")) {
		points, ok, err := metrics.Parse(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !ok {
			t.Fatalf("not an EMF record: %s", line)
		}
		if len(points) != 1 {
			t.Fatalf("%s: %d points", line, len(points))
		}
		p := points[0]
		if p.Key() != metrics.Key(metrics.Namespace, rollout.MetricRolloutTransitions, metrics.DimensionTable, rollout.DimensionState) ||
			p.Unit != metrics.Count || len(p.Values) != 1 || p.Values[0] != 1 || p.Dimensions[metrics.DimensionTable] != "bc-test" {
			t.Errorf("point %+v", p)
		}
		got = append(got, p.Dimensions[rollout.DimensionState])
	}
	want := []string{"completed", "aborting", "rolled_back"}
	if len(got) != len(want) {
		t.Fatalf("states %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("states %v, want %v", got, want)
		}
	}
}
