// Package localgw is the local stand-in for API Gateway (HTTP API): it turns
// each HTTP request into the API Gateway v2 event (payload format 2.0) that
// the deployed Lambda receives, and calls the very same api.Gateway.Serve the
// Lambda runs. cmd/bc-local serves it behind `make run`; the end-to-end tests
// serve it on an httptest server.
package localgw

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// IntegrationTimeout is how long a request may run, as API Gateway's
// Lambda integration allows (30 s). A client that hangs up does not cancel
// a request in flight, as with a Lambda.
const IntegrationTimeout = 30 * time.Second

// Handler routes POST {method path} of every endpoint to g.Serve, and
// answers GET /healthz. Unknown paths are NOT_FOUND and other HTTP methods
// on a route INVALID_INPUT (details.reason "method_not_allowed"), both in
// the API's error envelope. Routes match the path as sent: like API Gateway,
// /api/compute/pools%2Flist is not /api/compute/pools/list.
func Handler(g *api.Gateway, eps []api.Endpoint, opts ...Option) http.Handler {
	h := &handler{g: g, routes: make(map[string]api.Endpoint, len(eps)), now: time.Now, invoke: g.Serve}
	for _, ep := range eps {
		h.routes[ep.Method.Path()] = ep
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Option adjusts the handler.
type Option func(*handler)

// WithHealth makes /healthz ask check (the dependencies, cheaply) and answer
// 503 with its error in the API's envelope when it fails. A result is reused
// for HealthTTL, so polling the endpoint does not load the dependencies.
func WithHealth(check func(context.Context) error) Option {
	return func(h *handler) { h.health = &health{check: check} }
}

// HealthTTL is how long a health result is reused; HealthTimeout bounds
// one check.
const (
	HealthTTL     = time.Second
	HealthTimeout = 2 * time.Second
)

type health struct {
	check func(context.Context) error
	mu    sync.Mutex
	at    time.Time
	err   error
}

func (c *health) result(ctx context.Context, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || now.Sub(c.at) >= HealthTTL {
		cctx, cancel := context.WithTimeout(ctx, HealthTimeout)
		c.err = c.check(cctx)
		cancel()
		c.at = now
	}
	return c.err
}

type handler struct {
	g       *api.Gateway
	routes  map[string]api.Endpoint
	now     func() time.Time
	health  *health
	invoke  Invoke // g.Serve unless WithInvoke
	console http.Handler
}

// Invoke runs one route's function on the event API Gateway would send.
type Invoke func(ctx context.Context, ep api.Endpoint, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse

// WithInvoke replaces the in-process g.Serve with another way to run the
// function, e.g. the built Lambda under the runtime interface emulator
// (test/lambdastack): routing, the event and the answer stay this gateway's.
func WithInvoke(f Invoke) Option {
	return func(h *handler) {
		if f != nil { // nil keeps g.Serve
			h.invoke = f
		}
	}
}

// WithConsole serves the web console (shared/console) under ConsolePath, as
// API Gateway routes /console/ to the console function. Its pages call the
// methods through this gateway's Serve with the viewer's own token, so the
// dev tokens it accepts are this gateway's rule, not the console's.
func WithConsole(h http.Handler) Option {
	return func(gw *handler) { gw.console = h }
}

// ConsolePath is where the console is served.
const ConsolePath = "/console"

// HealthPath answers 200 {"status":"ok"} while the gateway serves and its
// dependencies answer.
const HealthPath = "/healthz"

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	if path == HealthPath {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.methodNotAllowed(w, r, "GET, HEAD")
			return
		}
		if h.health != nil {
			if err := h.health.result(r.Context(), h.now()); err != nil {
				e := apierr.As(err)
				if e == nil {
					e = apierr.New(apierr.Unavailable, "%v", err)
				}
				h.fail(w, r, http.StatusServiceUnavailable, e)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
		return
	}
	if h.console != nil && (path == ConsolePath || strings.HasPrefix(path, ConsolePath+"/")) {
		h.console.ServeHTTP(w, r)
		return
	}
	ep, ok := h.routes[path]
	if !ok {
		h.fail(w, r, http.StatusNotFound, apierr.New(apierr.NotFound, "no route for %s %s", r.Method, path).With("path", path))
		return
	}
	if r.Method != http.MethodPost {
		h.methodNotAllowed(w, r, http.MethodPost)
		return
	}
	ev, err := h.event(r, ep.Method)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, apierr.Invalid("malformed", "", "the request body could not be read"))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), IntegrationTimeout)
	defer cancel()
	writeResponse(w, h.invoke(ctx, ep, ev))
}

// event builds the API Gateway v2 event API Gateway would send for r.
func (h *handler) event(r *http.Request, m *api.Method) (events.APIGatewayV2HTTPRequest, error) {
	// One byte more than the limit lets the gateway itself answer too_large.
	body, err := io.ReadAll(io.LimitReader(r.Body, api.MaxBody+1))
	if err != nil {
		return events.APIGatewayV2HTTPRequest{}, err
	}
	now := h.now()
	routeKey := http.MethodPost + " " + m.Path()
	ev := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       routeKey,
		RawPath:        r.URL.EscapedPath(),
		RawQueryString: r.URL.RawQuery,
		Headers:        map[string]string{},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     routeKey,
			AccountID:    "local",
			Stage:        "$default",
			RequestID:    api.NewRequestID(),
			APIID:        "local",
			DomainName:   r.Host,
			DomainPrefix: strings.Split(r.Host, ".")[0],
			Time:         now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  sourceIP(r.RemoteAddr),
				UserAgent: r.UserAgent(),
			},
		},
	}
	// Payload format 2.0: lowercased names, repeated headers joined with
	// commas, cookies in their own list.
	for name, values := range r.Header {
		name = strings.ToLower(name)
		if name == "cookie" {
			for _, v := range values {
				for c := range strings.SplitSeq(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						ev.Cookies = append(ev.Cookies, c)
					}
				}
			}
			continue
		}
		ev.Headers[name] = strings.Join(values, ",")
	}
	if r.Host != "" {
		ev.Headers["host"] = r.Host
	}
	if q, err := url.ParseQuery(r.URL.RawQuery); err == nil && len(q) > 0 {
		ev.QueryStringParameters = make(map[string]string, len(q))
		for k, v := range q {
			ev.QueryStringParameters[k] = strings.Join(v, ",")
		}
	}
	if utf8.Valid(body) {
		ev.Body = string(body)
	} else {
		ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	return ev, nil
}

func sourceIP(remoteAddr string) string {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}

// writeResponse copies a Lambda's API Gateway v2 response to w.
func writeResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) {
	hdr := w.Header()
	for k, v := range resp.Headers {
		hdr.Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			hdr.Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		hdr.Add("Set-Cookie", c)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			// API Gateway answers a malformed Lambda response with 500.
			hdr.Del("Content-Length")
			http.Error(w, `{"message":"Internal Server Error"}`, http.StatusInternalServerError)
			return
		}
		body = b
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (h *handler) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	h.fail(w, r, http.StatusMethodNotAllowed, apierr.Invalid("method_not_allowed", "", "%s %s: use %s", r.Method, r.URL.Path, allow))
}

// fail answers a request no endpoint serves in the API's error envelope
// (docs/reference, Errors), with a request id, and logs one line as the gateway does. The
// status is explicit: 405 carries INVALID_INPUT, which is otherwise 400.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, e *apierr.Error) {
	id := api.NewRequestID()
	_, body := api.ErrorEnvelope(id, e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", id)
	w.WriteHeader(status)
	_, _ = w.Write(body)
	logger := h.g.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("request_id", id),
		slog.String("http_method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.String("outcome", string(e.Code)))
}
