package agent

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/conc"
)

// Pacing of Run.
const (
	Jitter         = 0.1 // a heartbeat comes within ±10% of the interval it was given
	BackoffInitial = time.Second
	BackoffMax     = time.Minute
)

// Run heartbeats until ctx ends (and returns its error): Step, then sleep
// the answer's nextHeartbeatSeconds ±10%. A failed step is retried after
// an exponential backoff with full jitter (a random wait up to 1 s, 2 s,
// 4 s, … 60 s), except a replay (CONFLICT): Step moved the counter past the
// server's, so it is retried at once, once.
func (a *Agent) Run(ctx context.Context) error {
	failures, replayRetried, told := 0, false, false
	for {
		res, err := a.Step(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var wait time.Duration
		switch _, replay := replayed(err); {
		case err == nil && a.unreported():
			// It bound or unbound something: say so at once, so a tenant's
			// reservation goes active (and the next holder's bind comes) a
			// heartbeat sooner.
			failures, replayRetried = 0, false
		case err == nil:
			failures, replayRetried = 0, false
			wait = a.jittered(time.Duration(res.NextHeartbeatSeconds) * time.Second)
		case replay && !replayRetried:
			replayRetried = true
			a.log.Info("heartbeat: a replay; the counter moved past the server's, again at once", "error", err.Error())
			continue
		default:
			failures, replayRetried = failures+1, false
			wait = a.backoff(failures)
			lvl := a.log.Warn
			if !Retryable(err) {
				lvl = a.log.Error // it will not heal by itself: say so louder
			}
			attrs := []any{"error", err.Error(), "failures", failures, "retry_in", wait.Round(time.Millisecond).String()}
			lvl("heartbeat failed", append(attrs, a.explain(err)...)...)
		}
		if !told && a.cfg.FirstHeartbeat != nil {
			told = true
			a.cfg.FirstHeartbeat(res, err)
		}
		if err := a.cfg.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// explain is an API error's details and what to do about it, as log
// attributes (none for a transport failure: its error says it all).
func (a *Agent) explain(err error) []any {
	var e *apierr.Error
	if !errors.As(err, &e) {
		return nil
	}
	var out []any
	if d := client.DetailLine(e); d != "" {
		out = append(out, "details", d)
	}
	if h := client.Hint(e, HeartbeatCall(a.cfg.TenantID, a.cfg.PoolID, a.cfg.NodeID), a.cfg.Words); h != "" {
		out = append(out, "hint", h)
	}
	return out
}

// HeartbeatCall is the call a node's heartbeat error answers, for its hint
// (client.Hint names the node and pool from it).
func HeartbeatCall(tenant, pool, node string) client.Failed {
	return client.Failed{Method: "nodes.heartbeat", Request: map[string]any{"tenantId": tenant, "poolId": pool, "nodeId": node}}
}

// jittered is d (fleet.DefaultInterval when the answer gave none) ±Jitter.
func (a *Agent) jittered(d time.Duration) time.Duration {
	if d <= 0 {
		d = api.DefaultInterval
	}
	return time.Duration(float64(d) * (1 - Jitter + 2*Jitter*a.cfg.Rand()))
}

// backoff is the full-jitter wait after the n-th failure in a row: uniform
// in [0, min(BackoffMax, BackoffInitial·2^(n-1))).
func (a *Agent) backoff(n int) time.Duration {
	ceil := BackoffMax
	if n < 8 && BackoffInitial<<(n-1) < BackoffMax {
		ceil = BackoffInitial << (n - 1)
	}
	return time.Duration(float64(ceil) * a.cfg.Rand())
}

// Retryable: a failure that may heal by itself — the transport, an answer
// that is not the API's (a proxy's 502), UNAVAILABLE or INTERNAL. Anything
// else the API answered (an unregistered node, a refused report, a
// permission) needs an operator.
func Retryable(err error) bool {
	var e *apierr.Error
	if !errors.As(err, &e) {
		return true
	}
	return e.Code == apierr.Unavailable || e.Code == apierr.Internal || apierr.HTTPStatus(e.Code) >= http.StatusInternalServerError
}

// sleep waits d or until ctx ends.
var sleep = conc.Sleep
