package teststack

import (
	"context"
	"log/slog"
	"sync"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
)

// RequestLog keeps the gateway's request lines (one per call: its method
// and what it cost in DynamoDB), for tests that count what a client's
// calls read. Give it to Start with WithRequestLog.
type RequestLog struct {
	mu    sync.Mutex
	lines []RequestLine
}

// RequestLine is one call as the gateway logged it.
type RequestLine struct {
	Method string
	Calls  int64   // DynamoDB round trips
	RCU    float64 // read capacity units
}

// WithRequestLog makes the app log its request lines into l (and nothing
// else: the stack's own log is discarded as usual).
func WithRequestLog(l *RequestLog) Option {
	return WithAppOptions(app.WithLogger(slog.New(l)))
}

func (l *RequestLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *RequestLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *RequestLog) WithGroup(string) slog.Handler            { return l }

// Handle keeps a request line.
func (l *RequestLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "request" {
		return nil
	}
	var line RequestLine
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case api.DimensionMethod:
			line.Method = a.Value.String()
		case api.MetricDynamoCalls:
			line.Calls = a.Value.Int64()
		case api.MetricRCU:
			line.RCU = a.Value.Float64()
		}
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	return nil
}

// Len is how many lines are kept.
func (l *RequestLog) Len() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.lines) }

// Since is the lines after the first n.
func (l *RequestLog) Since(n int) []RequestLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]RequestLine(nil), l.lines[n:]...)
}
