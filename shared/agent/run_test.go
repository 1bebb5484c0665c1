package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
)

// Run's pacing, with the sleep injected: the answer's interval ±10%;
// transport errors and UNAVAILABLE back off exponentially with full jitter
// (1 s doubling, at most 60 s); a replay is retried at once, once; a
// success resets the backoff; ctx's end stops it.
func TestRunPacing(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	latest := t0.Add(time.Hour).UnixMicro()
	// The server's answers, in order; a report's counter decides a replay.
	script := []func(rep api.Report) (int, any){
		func(api.Report) (int, any) { return 200, answer(5) },
		func(api.Report) (int, any) { return 503, apierr.Dependency("dynamodb", errors.New("down")) },
		func(api.Report) (int, any) { return 502, "bad gateway" }, // not the API's envelope: transport
		func(api.Report) (int, any) { return 503, apierr.Dependency("dynamodb", errors.New("down")) },
		func(api.Report) (int, any) {
			return 409, apierr.New(apierr.Conflict, "replay").With("reason", api.ReasonReplay).With("latestCounter", latest)
		},
		func(rep api.Report) (int, any) { // the retry at once
			if rep.Counter != latest+1 {
				t.Errorf("retry after a replay: counter %d, want %d", rep.Counter, latest+1)
			}
			return 200, answer(0) // no interval given: the default
		},
		func(api.Report) (int, any) { return 503, apierr.Dependency("dynamodb", errors.New("down")) },
	}
	for range 10 { // a long outage: the ceiling
		script = append(script, script[len(script)-1])
	}
	n := 0
	fake.script(func(rep api.Report) (int, any) {
		defer func() { n++ }()
		return script[min(n, len(script)-1)](rep)
	})
	var slept []time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	rnd := []float64{0, 0.5, 0.999, 0.5}
	f := newFixture(t, fake.srv.URL, node, func(c *Config) {
		c.Rand = func() float64 { return rnd[len(slept)%len(rnd)] }
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			slept = append(slept, d)
			if len(slept) == 16 {
				cancel()
			}
			return ctx.Err()
		}
	})
	if err := f.agent.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	ms := func(d ...float64) []time.Duration {
		out := make([]time.Duration, len(d))
		for i, v := range d {
			out[i] = time.Duration(v * float64(time.Millisecond))
		}
		return out
	}
	// Sleep i draws rnd[i%4].
	want := ms(
		4500,  // 5 s × (0.9 + 0.2×0): the interval's lower bound
		500,   // 1st failure: up to 1 s, × 0.5
		1998,  // 2nd: 2 s × 0.999
		2000,  // 3rd: 4 s × 0.5
		27000, // (the replay retried at once, no sleep) the default 30 s × 0.9
		500,   // 1st failure again: the success reset the backoff
		1998,  // 2 s × 0.999
		2000,  // 4 s × 0.5
		0,     // 8 s × 0
		8000,  // 16 s × 0.5
		31968, // 32 s × 0.999
		30000, // the ceiling: 60 s (not 64) × 0.5
		0, 30000, 59940, 30000,
	)
	if !slices.Equal(slept, want) {
		t.Errorf("slept\n%v, want\n%v", slept, want)
	}
}

// A replay that is refused again after the retry at once backs off (no
// loop of immediate retries).
func TestRunReplayRetriedOnce(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	calls := 0
	fake.script(func(rep api.Report) (int, any) {
		calls++
		return 409, apierr.New(apierr.Conflict, "replay").With("reason", api.ReasonReplay).With("latestCounter", rep.Counter)
	})
	ctx, cancel := context.WithCancel(context.Background())
	f := newFixture(t, fake.srv.URL, node, func(c *Config) {
		c.Sleep = func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }
	})
	_ = f.agent.Run(ctx)
	if calls != 2 {
		t.Errorf("%d heartbeats before the first sleep, want 2 (the replay and one retry)", calls)
	}
}

func TestRetryable(t *testing.T) {
	for err, want := range map[error]bool{
		errors.New("dial tcp: connection refused"):                        true,
		apierr.Dependency("dynamodb", errors.New("x")):                    true,
		apierr.New(apierr.Internal, "bug"):                                true,
		apierr.New(apierr.NotFound, "not registered"):                     false,
		apierr.Invalid(api.ReasonReportStale, "report.payload.at", "old"): false,
		apierr.New(apierr.PermissionDenied, "no"):                         false,
	} {
		if got := Retryable(err); got != want {
			t.Errorf("Retryable(%v) = %v", err, got)
		}
	}
}

// The interval's upper bound: +10%.
func TestJitterUpperBound(t *testing.T) {
	a := &Agent{cfg: Config{Rand: func() float64 { return 0.9999 }}}
	if got := a.jittered(10 * time.Second); got <= 10999*time.Millisecond || got > 11*time.Second {
		t.Errorf("jittered 10 s at the top: %v", got)
	}
}

// A heartbeat whose answer made the node bind something is followed by
// another at once, carrying the bound word; then the answer's interval
// again.
func TestRunReportsABindAtOnce(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	fake.answers([]api.DesiredBinding{bind("r1", "gpu-0")})
	var slept []time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	f := newFixture(t, fake.srv.URL, node, func(c *Config) {
		c.Rand = func() float64 { return 0.5 }
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			slept = append(slept, d)
			if len(slept) == 3 {
				cancel()
			}
			return ctx.Err()
		}
	})
	if err := f.agent.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if want := []time.Duration{0, 5 * time.Second, 5 * time.Second}; !slices.Equal(slept, want) {
		t.Errorf("slept %v, want %v", slept, want)
	}
	if got := fake.last().Bindings; len(got) != 1 || got[0].State != api.BindBound {
		t.Errorf("last report's bindings: %+v", got)
	}
}

// Run tells FirstHeartbeat the outcome of its first heartbeat once — after
// a replay's retry at once, the retry's — and never again.
func TestRunFirstHeartbeat(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	n := 0
	fake.script(func(rep api.Report) (int, any) {
		n++
		switch n {
		case 1:
			return 409, apierr.New(apierr.Conflict, "replay").With("reason", api.ReasonReplay).With("latestCounter", rep.Counter)
		case 2:
			return 404, apierr.New(apierr.NotFound, "node not found")
		}
		return 200, answer(30)
	})
	var told []string
	ctx, cancel := context.WithCancel(context.Background())
	f := newFixture(t, fake.srv.URL, node, func(c *Config) {
		c.FirstHeartbeat = func(res api.HeartbeatResult, err error) {
			told = append(told, fmt.Sprint(res.NextHeartbeatSeconds, " ", err))
		}
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			if n == 3 {
				cancel()
			}
			return ctx.Err()
		}
	})
	_ = f.agent.Run(ctx)
	if want := []string{"0 NOT_FOUND: node not found"}; !slices.Equal(told, want) {
		t.Errorf("FirstHeartbeat told %q, want %q", told, want)
	}
}

// A failed heartbeat's log line carries the API error's details and what
// to do, as bcctl prints them, with the program's words for its token.
func TestRunLogsHint(t *testing.T) {
	node := newKey(t)
	fake := newFakeAPI(t, node)
	fake.script(func(api.Report) (int, any) {
		return 401, apierr.New(apierr.Unauthenticated, "no valid token").With("reason", "token")
	})
	var logs strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	f := newFixture(t, fake.srv.URL, node, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		c.Words = client.Words{Token: "BC_AGENT_TOKEN (or --token)"}
		c.Sleep = func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }
	})
	_ = f.agent.Run(ctx)
	var line struct{ Msg, Error, Details, Hint string }
	if err := json.Unmarshal([]byte(strings.SplitN(logs.String(), "\n", 2)[0]), &line); err != nil {
		t.Fatalf("%v: %s", err, logs.String())
	}
	if line.Msg != "heartbeat failed" || line.Details != "reason=token" || !strings.HasPrefix(line.Hint, "Set BC_AGENT_TOKEN (or --token): ") {
		t.Errorf("log line: %+v", line)
	}
}
