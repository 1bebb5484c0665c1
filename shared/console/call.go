package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
)

// Viewer is who is looking: the credentials the browser sent and, behind
// API Gateway, the claims its JWT authorizer verified. The console never
// reads them itself: it hands them to the gateway with every call, which
// authenticates them exactly as it does a client's request.
type Viewer struct {
	Authorization string            // the request's Authorization header, as sent
	Claims        map[string]string // the JWT authorizer's claims (deployed), nil locally
	Tenant        string            // the tenant the viewer acts as (the page's ?tenant=)
}

type claimsKey struct{}

// WithClaims carries the JWT authorizer's verified claims of a request into
// its context (the Lambda adapter sets them; the local gateway has none).
func WithClaims(ctx context.Context, claims map[string]string) context.Context {
	return context.WithValue(ctx, claimsKey{}, claims)
}

func viewerOf(r *http.Request) Viewer {
	c, _ := r.Context().Value(claimsKey{}).(map[string]string)
	return Viewer{Authorization: r.Header.Get("Authorization"), Claims: c, Tenant: r.URL.Query().Get("tenant")}
}

// CallError is a method's error answer as the API gave it: its HTTP
// status and the envelope's error (code, message, details).
type CallError struct {
	Status int
	Err    *apierr.Error
	// RequestID quotes the failed request (logged by the gateway).
	RequestID string
}

func (e *CallError) Error() string { return fmt.Sprintf("%s: %s", e.Err.Code, e.Err.Message) }

// Detail returns details[k] as text ("" when absent).
func (e *CallError) Detail(k string) string {
	if v, ok := e.Err.Details[k]; ok && v != nil {
		if s, ok := v.(string); ok {
			return s
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	return ""
}

// Caller calls the API's methods in process, through the gateway's own
// Serve: authentication, strict decoding, the Better IAM decision, tenant
// scoping and the error envelope are exactly a client's.
type Caller struct {
	Gateway   *api.Gateway
	Endpoints map[string]api.Endpoint
}

// CallerFor is the Caller of the console's methods among eps.
func CallerFor(g *api.Gateway, eps []api.Endpoint) *Caller {
	c := &Caller{Gateway: g, Endpoints: map[string]api.Endpoint{}}
	for _, ep := range eps {
		if slices.Contains(api.ConsoleMethods, ep.Method.Name) {
			c.Endpoints[ep.Method.Name] = ep
		}
	}
	return c
}

// Serves reports whether method is wired into this console.
func (c *Caller) Serves(method string) bool { _, ok := c.Endpoints[method]; return ok }

// Call invokes method with in as its JSON body on the viewer's behalf and
// decodes a 200 answer into out. Any other answer is a *CallError.
func (c *Caller) Call(ctx context.Context, v Viewer, method string, in, out any) error {
	ep, ok := c.Endpoints[method]
	if !ok {
		return &CallError{Status: http.StatusNotImplemented, Err: apierr.New(apierr.NotImplemented, "%s is not served by this console's build", method)}
	}
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("console: encode %s input: %w", method, err)
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version:  "2.0",
		RouteKey: "POST " + ep.Method.Path(),
		RawPath:  ep.Method.Path(),
		Headers:  map[string]string{"content-type": "application/json"},
		Body:     string(body),
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: "POST " + ep.Method.Path(),
			HTTP:     events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: http.MethodPost, Path: ep.Method.Path()},
		},
	}
	if v.Authorization != "" {
		ev.Headers["authorization"] = v.Authorization
	}
	if v.Claims != nil {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: v.Claims}}
	}
	resp := c.Gateway.Serve(ctx, ep, ev)
	if resp.StatusCode == http.StatusOK {
		if out == nil {
			return nil
		}
		if err := json.Unmarshal([]byte(resp.Body), out); err != nil {
			return fmt.Errorf("console: decode %s answer: %w", method, err)
		}
		return nil
	}
	// The envelope as any client reads it.
	r := &client.Response{Status: resp.StatusCode, RequestID: resp.Headers["x-request-id"], Body: []byte(resp.Body)}
	e, ok := client.ErrorOf(r).(*apierr.Error)
	if !ok {
		e = apierr.New(apierr.Internal, "an answer the console cannot read (HTTP %d)", resp.StatusCode)
	}
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	return &CallError{Status: resp.StatusCode, Err: e, RequestID: r.RequestID}
}
