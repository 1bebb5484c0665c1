// Package logfmt builds the process logger in one of two formats. JSON is
// the default and the only format for Lambda: CloudWatch filters lines by
// their level and timestamp and extracts the EMF metrics of the request and
// reconciler lines from them. Text is for a developer's terminal (`make
// run`): one short line a record, millisecond times, no EMF metadata.
package logfmt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/bettercompute/control-plane/shared/metrics"
)

// Format is how log records are written.
type Format string

// The formats.
const (
	JSON Format = "json"
	Text Format = "text"
)

// New returns a logger writing records at level or above to w in format f
// (anything but Text is JSON).
func New(w io.Writer, f Format, level slog.Leveler) *slog.Logger {
	if f == Text {
		return slog.New(NewTextHandler(w, level))
	}
	// With the JSON log format Lambda filters lines by "level" and needs an
	// RFC 3339 "timestamp" member to do so (a line without one counts as INFO).
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				a.Key = "timestamp"
			}
			return a
		}}))
}

// emfOnly are the members a line carries only for CloudWatch's EMF: the
// "_aws" metadata (shared/metrics.Attr) and the Table dimension (the table
// is logged once at start).
var emfOnly = map[string]bool{"_aws": true, metrics.DimensionTable: true}

// TextHandler writes a record as
//
//	15:04:05.000 INFO  message key=value key="a value" key={"json":1}
//
// in local time. Strings are quoted only when they need it, groups are
// flattened into dotted keys, maps and structs are compact JSON, and the
// EMF members are left out.
type TextHandler struct {
	w      io.Writer
	mu     *sync.Mutex // shared by the handlers WithAttrs and WithGroup derive
	level  slog.Leveler
	attrs  []byte // preformatted attributes of WithAttrs, each with a leading space
	prefix string // open groups, "a.b."
}

// NewTextHandler returns a TextHandler writing records at level or above to w.
func NewTextHandler(w io.Writer, level slog.Leveler) *TextHandler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &TextHandler{w: w, mu: &sync.Mutex{}, level: level}
}

// Enabled implements slog.Handler.
func (h *TextHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

// Handle implements slog.Handler.
func (h *TextHandler) Handle(_ context.Context, r slog.Record) error {
	buf := make([]byte, 0, 256)
	if !r.Time.IsZero() {
		buf = r.Time.Local().AppendFormat(buf, "15:04:05.000 ")
	}
	buf = fmt.Appendf(buf, "%-5s %s", r.Level.String(), r.Message)
	buf = append(buf, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		buf = appendAttr(buf, h.prefix, a)
		return true
	})
	buf = append(buf, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(buf)
	return err
}

// WithAttrs implements slog.Handler.
func (h *TextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = slices.Clone(h.attrs)
	for _, a := range as {
		c.attrs = appendAttr(c.attrs, h.prefix, a)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *TextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

func appendAttr(buf []byte, prefix string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) || (prefix == "" && emfOnly[a.Key]) {
		return buf
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			buf = appendAttr(buf, prefix, g)
		}
		return buf
	}
	buf = append(buf, ' ')
	buf = append(buf, prefix...)
	buf = append(buf, a.Key...)
	buf = append(buf, '=')
	return appendValue(buf, a.Value)
}

func appendValue(buf []byte, v slog.Value) []byte {
	switch v.Kind() {
	case slog.KindString:
		return appendString(buf, v.String())
	case slog.KindInt64:
		return strconv.AppendInt(buf, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(buf, v.Uint64(), 10)
	case slog.KindFloat64:
		return strconv.AppendFloat(buf, v.Float64(), 'f', -1, 64)
	case slog.KindBool:
		return strconv.AppendBool(buf, v.Bool())
	case slog.KindDuration:
		return append(buf, v.Duration().String()...)
	case slog.KindTime:
		return v.Time().AppendFormat(buf, "2006-01-02T15:04:05.000Z07:00")
	}
	switch x := v.Any().(type) {
	case error:
		return appendString(buf, x.Error())
	case fmt.Stringer:
		return appendString(buf, x.String())
	}
	// Maps, slices and structs as compact JSON: its own quoting delimits it.
	if b, err := json.Marshal(v.Any()); err == nil && !bytes.ContainsAny(b, " \n") {
		return append(buf, b...)
	}
	return appendString(buf, fmt.Sprint(v.Any()))
}

// appendString writes s bare when it is one printable word without quotes
// or '=', else Go-quoted.
func appendString(buf []byte, s string) []byte {
	if needsQuote(s) {
		return strconv.AppendQuote(buf, s)
	}
	return append(buf, s...)
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' || r == '=' {
			return true
		}
	}
	return false
}

var _ slog.Handler = (*TextHandler)(nil)

// ParseLevel accepts debug, info, warn and error (any case); anything
// else is a configuration error, not a silent "info".
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("BC_LOG_LEVEL must be debug, info, warn or error, got %q", s)
}

// ParseFormat accepts json and text (any case); anything else is a
// configuration error.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case JSON, Text:
		return f, nil
	}
	return JSON, fmt.Errorf("BC_LOG_FORMAT must be json or text, got %q", s)
}
