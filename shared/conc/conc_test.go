package conc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/conc"
)

func TestEachRunsEveryCallBoundedAndJoinsErrors(t *testing.T) {
	for _, limit := range []int{1, 4} {
		var running, peak, calls atomic.Int64
		gate, started := make(chan struct{}), make(chan struct{}, 10)
		errA, errB := errors.New("a"), errors.New("b")
		done := make(chan error)
		go func() {
			done <- conc.Each(context.Background(), 10, limit, func(i int) error {
				calls.Add(1)
				if n := running.Add(1); n > peak.Load() {
					peak.Store(n)
				}
				defer running.Add(-1)
				if limit > 1 && i < limit {
					started <- struct{}{}
					<-gate // the first limit calls hold their slots until all of them run
				}
				switch i {
				case 3:
					return errA
				case 7:
					return errB
				}
				return nil
			})
		}()
		if limit > 1 {
			for range limit {
				<-started
			}
			if running.Load() != int64(limit) {
				t.Errorf("limit %d: %d running while the first held their slots", limit, running.Load())
			}
			close(gate)
		}
		err := <-done
		if calls.Load() != 10 || peak.Load() > int64(limit) {
			t.Errorf("limit %d: %d calls, peak %d at once", limit, calls.Load(), peak.Load())
		}
		if !errors.Is(err, errA) || !errors.Is(err, errB) {
			t.Errorf("limit %d: %v, want both errors joined", limit, err)
		}
	}
}

func TestEachStartsNothingOnceTheContextIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	err := conc.Each(ctx, 5, 1, func(i int) error {
		calls.Add(1)
		if i == 1 {
			cancel()
		}
		return nil
	})
	if calls.Load() != 2 || !errors.Is(err, context.Canceled) {
		t.Errorf("%d calls, %v; want 2 and context.Canceled", calls.Load(), err)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := conc.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a done context: %v", err)
	}
	if err := conc.Sleep(context.Background(), time.Microsecond); err != nil {
		t.Errorf("Sleep: %v", err)
	}
}
