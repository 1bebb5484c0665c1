package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"mime"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/meter"
	"github.com/bettercompute/control-plane/shared/metrics"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// MaxBody is the largest accepted raw HTTP body.
const MaxBody = 256 << 10

// Call is what a method handler knows of the request beyond its input.
type Call struct {
	RequestID string
	Method    *Method
	Principal string
	TenantID  string
	// scope holds the input fields a scope template names besides the
	// tenant (poolId and nodeId of a node's own scope).
	scope   map[string]string
	decider iam.Decider
}

// Decide asks Better IAM once for this call's permission and scope with the
// given attributes. Deny is PERMISSION_DENIED; no decision is UNAVAILABLE.
func (c *Call) Decide(ctx context.Context, attributes map[string]any) error {
	d, err := c.decider.Decide(ctx, iam.Request{Principal: c.Principal, Permission: c.Method.Permission,
		Scope: c.Method.ScopeFor(c.TenantID, c.scope), TenantID: c.TenantID, Attributes: attributes})
	if err != nil {
		return apierr.Dependency("better-iam", err)
	}
	if !d.Allow {
		e := apierr.New(apierr.PermissionDenied, "%s is not allowed %s on %s", c.Principal, c.Method.Permission, c.Method.ScopeFor(c.TenantID, c.scope))
		if d.Reason != "" {
			e = e.With("reason", d.Reason)
		}
		return e
	}
	return nil
}

// Endpoint binds a catalog method to the function that serves it.
type Endpoint struct {
	Method *Method
	serve  func(ctx context.Context, call *Call, body []byte) (any, error)
}

type tenanted interface{ ActingTenant() string }

// scoped is an input whose method's scope names its fields (a node's).
type scoped interface{ ScopeFields() map[string]string }

// Bind makes an Endpoint from a typed handler; In must be the method's
// catalog input type and Out its output type (checked at start, so a
// mismatch cannot ship). Out may be `any` (tests), which is not checked.
func Bind[In, Out any](m *Method, fn func(ctx context.Context, call *Call, in *In) (Out, error)) Endpoint {
	if reflect.TypeFor[In]() != m.Input {
		panic(fmt.Sprintf("api: %s takes %v, handler takes %v", m.Name, m.Input, reflect.TypeFor[In]()))
	}
	if out := reflect.TypeFor[Out](); out.Kind() != reflect.Interface && out != m.Output {
		panic(fmt.Sprintf("api: %s answers %v, handler answers %v", m.Name, m.Output, out))
	}
	if _, ok := any(new(In)).(tenanted); !ok {
		panic(fmt.Sprintf("api: %s input %v does not embed api.Tenant", m.Name, m.Input))
	}
	return Endpoint{Method: m, serve: func(ctx context.Context, call *Call, body []byte) (any, error) {
		in := new(In)
		if err := DecodeInput(body, in); err != nil {
			return nil, err
		}
		call.TenantID = any(in).(tenanted).ActingTenant()
		if sc, ok := any(in).(scoped); ok {
			call.scope = sc.ScopeFields()
		}
		if !m.DecideOnDraft {
			if err := call.Decide(ctx, nil); err != nil {
				return nil, err
			}
		}
		out, err := fn(ctx, call, in)
		if err != nil {
			return nil, err
		}
		return out, nil
	}}
}

// NotServed is the endpoint of a catalog method this build does not serve.
func NotServed(m *Method) Endpoint {
	return Endpoint{Method: m, serve: func(context.Context, *Call, []byte) (any, error) {
		return nil, apierr.New(apierr.NotImplemented, "%s (phase %s) is not served by this release", m.Name, m.Phase)
	}}
}

// DecodeInput strictly decodes a request body; problems are INVALID_INPUT
// with details.field as the JSON path.
func DecodeInput(body []byte, in any) error {
	if err := strictjson.Decode(body, in, ""); err != nil {
		if fe, ok := err.(*strictjson.FieldError); ok {
			return apierr.Invalid(fe.Kind, fe.Field, "%s", fe.Error())
		}
		return apierr.Invalid("malformed", "", "%v", err)
	}
	return nil
}

// Gateway adapts API Gateway v2 (HTTP API) events to endpoints: identity,
// body limits, decoding, authorization, error envelope, one log line.
type Gateway struct {
	Decider iam.Decider
	Logger  *slog.Logger
	// AllowDevTokens accepts "Authorization: Bearer dev:<principal>". Only the
	// local gateway sets it; Lambdas behind API Gateway never do.
	AllowDevTokens bool
	// Table names the deployment (BC_TABLE). When set, each request line is
	// also a CloudWatch EMF record of RequestMetrics with this as its Table
	// dimension.
	Table string
}

// The request line's members that RequestMetrics publishes: its latency,
// DynamoDB round trips and capacity units, by method and by outcome ("ok"
// or the error code).
const (
	MetricLatency     = "latency_ms"
	MetricDynamoCalls = "ddb_calls"
	MetricRCU         = "ddb_rcu"
	MetricWCU         = "ddb_wcu"
	DimensionMethod   = "method"
	DimensionOutcome  = "outcome"
	OutcomeOK         = "ok"
)

// RequestMetrics are the EMF directives of every request line: latency and
// DynamoDB cost per method (and in total), and latency by outcome, whose
// sample count is the number of answers with each code.
var RequestMetrics = []metrics.Directive{
	{
		Dimensions: [][]string{{metrics.DimensionTable}, {metrics.DimensionTable, DimensionMethod}},
		Metrics: []metrics.Metric{
			{Name: MetricLatency, Unit: metrics.Milliseconds},
			{Name: MetricDynamoCalls, Unit: metrics.Count},
			{Name: MetricRCU, Unit: metrics.Count},
			{Name: MetricWCU, Unit: metrics.Count},
		},
	},
	{
		Dimensions: [][]string{{metrics.DimensionTable, DimensionOutcome}},
		Metrics:    []metrics.Metric{{Name: MetricLatency, Unit: metrics.Milliseconds}},
	},
}

// Lambda returns the function lambda.Start wants for one endpoint. A payload
// that is not an API Gateway HTTP API event (payload format 2.0), such as a
// test event or another service's, is answered INVALID_INPUT (details.reason
// "not_api_gateway_event"), never served as an empty request.
func (g *Gateway) Lambda(ep Endpoint) func(context.Context, json.RawMessage) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, payload json.RawMessage) (events.APIGatewayV2HTTPResponse, error) {
		var req events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(payload, &req); err != nil || req.Version != "2.0" || req.RequestContext.HTTP.Method == "" {
			start := time.Now()
			call := &Call{RequestID: NewRequestID(), Method: ep.Method}
			err := apierr.Invalid("not_api_gateway_event", "",
				"the function takes API Gateway HTTP API events (payload format 2.0); got %s", describePayload(payload))
			resp := g.respond(call, nil, err)
			g.log(ctx, call, err, resp.StatusCode, time.Since(start), meter.Usage{})
			return resp, nil
		}
		return g.Serve(ctx, ep, req), nil
	}
}

// describePayload says what an unexpected payload looks like, briefly.
func describePayload(p json.RawMessage) string {
	var probe struct {
		Version    string `json:"version"`
		Source     string `json:"source"`
		DetailType string `json:"detail-type"`
	}
	switch {
	case json.Unmarshal(p, &probe) != nil:
		t := strings.TrimSpace(string(p))
		if t == "" {
			return "an empty payload"
		}
		switch t[0] {
		case '[':
			return "a JSON array"
		case '"':
			return "a JSON string"
		case '{':
			return "a JSON object"
		}
		return "a JSON value that is not an object"
	case probe.DetailType != "":
		return fmt.Sprintf("an EventBridge event (%s from %s)", probe.DetailType, probe.Source)
	case probe.Version != "":
		return fmt.Sprintf("an event of version %q", probe.Version)
	}
	return "a JSON value without the HTTP API request context"
}

// Serve handles one request. It never panics and never returns a Go error:
// every outcome is an HTTP response.
func (g *Gateway) Serve(ctx context.Context, ep Endpoint, req events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse) {
	start := time.Now()
	call := &Call{RequestID: req.RequestContext.RequestID, Method: ep.Method, decider: g.Decider}
	if call.RequestID == "" {
		call.RequestID = NewRequestID()
	}
	m := &meter.Meter{}
	ctx = meter.With(ctx, m)
	var result any
	var err error
	defer func() {
		if p := recover(); p != nil {
			err = &apierr.Error{Code: apierr.Internal, Message: "internal error",
				Cause: fmt.Errorf("panic: %v\n%s", p, debug.Stack())}
		}
		var body []byte
		if err == nil {
			var merr error
			if body, merr = json.Marshal(result); merr != nil {
				err = &apierr.Error{Code: apierr.Internal, Message: "internal error", Cause: fmt.Errorf("encode result: %w", merr)}
			}
		}
		resp = g.respond(call, body, err)
		g.log(ctx, call, err, resp.StatusCode, time.Since(start), m.Usage())
	}()
	call.Principal, err = g.principal(req)
	if err != nil {
		return
	}
	if err = checkContentType(req.Headers); err != nil {
		return
	}
	body, err := rawBody(req)
	if err != nil {
		return
	}
	result, err = ep.serve(ctx, call, body)
	return
}

func (g *Gateway) principal(req events.APIGatewayV2HTTPRequest) (string, error) {
	if a := req.RequestContext.Authorizer; a != nil && a.JWT != nil {
		if sub := a.JWT.Claims["sub"]; sub != "" {
			return sub, nil
		}
	}
	if g.AllowDevTokens {
		h := header(req.Headers, "authorization")
		if p, ok := strings.CutPrefix(h, "Bearer dev:"); ok && strings.TrimSpace(p) != "" {
			return strings.TrimSpace(p), nil
		}
	}
	return "", apierr.New(apierr.Unauthenticated, "missing or invalid credentials")
}

func header(h map[string]string, name string) string {
	if v, ok := h[name]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// ReasonContentType is details.reason of a body declared as something
// other than JSON.
const ReasonContentType = "content_type"

// checkContentType refuses a body whose Content-Type is not JSON: a client
// that sends a form (curl -d without -H) or text learns so, instead of
// reading a decoding error about its content. A request without the header
// is read as JSON (WireRules).
func checkContentType(h map[string]string) error {
	ct := header(h, "content-type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		hint := ""
		if strings.HasPrefix(strings.ToLower(ct), "application/x-www-form-urlencoded") {
			hint = " (curl -d sends that unless given -H 'Content-Type: application/json')"
		}
		return apierr.Invalid(ReasonContentType, "", "Content-Type must be application/json, not %q%s", ct, hint)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return apierr.Invalid(ReasonContentType, "", "Content-Type charset must be utf-8 (JSON is UTF-8), not %q", cs)
	}
	return nil
}

func rawBody(req events.APIGatewayV2HTTPRequest) ([]byte, error) {
	tooLarge := apierr.Invalid("too_large", "", "request body exceeds %d bytes", MaxBody)
	if !req.IsBase64Encoded {
		if len(req.Body) > MaxBody {
			return nil, tooLarge
		}
		return []byte(req.Body), nil
	}
	if base64.StdEncoding.DecodedLen(len(req.Body)) > MaxBody+2 {
		return nil, tooLarge
	}
	b, err := base64.StdEncoding.DecodeString(req.Body)
	if err != nil {
		return nil, apierr.Invalid("malformed", "", "request body is not valid base64")
	}
	if len(b) > MaxBody {
		return nil, tooLarge
	}
	return b, nil
}

type errorBody struct {
	Error     *apierr.Error `json:"error"`
	RequestID string        `json:"requestId"`
}

// respond builds the HTTP answer: body is the encoded result when err is nil.
func (g *Gateway) respond(call *Call, body []byte, err error) events.APIGatewayV2HTTPResponse {
	status := 200
	if err != nil {
		status, body = ErrorEnvelope(call.RequestID, err)
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Body: string(body),
		Headers: map[string]string{"content-type": "application/json", "x-request-id": call.RequestID}}
}

// ErrorEnvelope is the one encoding of an error answer: its HTTP
// status and `{"error":{code,message,details},"requestId"}`. Anything that
// is not an *apierr.Error, and every INTERNAL, shows a generic message.
func ErrorEnvelope(requestID string, err error) (int, []byte) {
	e := apierr.As(err)
	if e == nil || e.Code == apierr.Internal {
		e = &apierr.Error{Code: apierr.Internal, Message: "internal error; quote the request id"}
	}
	body, _ := json.Marshal(errorBody{Error: e, RequestID: requestID}) // details {} when empty: Error.MarshalJSON
	return apierr.HTTPStatus(e.Code), body
}

// log writes the request's one line: what was asked and answered first,
// who asked and the request id after. A 4xx line carries the message the
// caller was shown; INTERNAL and UNAVAILABLE lines carry the cause, which
// the caller never sees.
func (g *Gateway) log(ctx context.Context, call *Call, err error, status int, latency time.Duration, cost meter.Usage) {
	logger := g.Logger
	if logger == nil {
		logger = slog.Default()
	}
	outcome, level := OutcomeOK, slog.LevelInfo
	if err != nil {
		outcome = string(apierr.CodeOf(err))
	}
	attrs := []slog.Attr{
		slog.String(DimensionMethod, call.Method.Name),
		slog.Int("status", status),
		slog.String(DimensionOutcome, outcome),
		slog.Float64(MetricLatency, float64(latency.Microseconds())/1000),
		slog.Int(MetricDynamoCalls, cost.Calls),
		slog.Float64(MetricRCU, cost.RCU),
		slog.Float64(MetricWCU, cost.WCU),
		slog.String("tenant", call.TenantID),
		slog.String("principal", call.Principal),
		slog.String("request_id", call.RequestID),
	}
	switch code := apierr.CodeOf(err); {
	case err == nil:
	case code == apierr.Internal || code == apierr.Unavailable:
		level = slog.LevelError
		attrs = append(attrs, slog.String("error", err.Error()))
	default:
		attrs = append(attrs, slog.String("error", apierr.As(err).Message))
	}
	if g.Table != "" {
		attrs = append(attrs, slog.String(metrics.DimensionTable, g.Table), metrics.Attr(time.Now(), RequestMetrics...))
	}
	logger.LogAttrs(ctx, level, "request", attrs...)
}

// NewRequestID returns a random request id for requests that carry none.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
