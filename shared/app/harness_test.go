package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/cursorkey"
	"github.com/bettercompute/control-plane/shared/app/kmskeys"
	"github.com/bettercompute/control-plane/shared/app/modules"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// testPolicy: admin may do anything; alice makes reservations for acme;
// bob only reads acme's reservations.
var testPolicy = &iam.Policy{Grants: []iam.Grant{
	{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}},
	{Principal: "alice", Permissions: []string{"compute:reservations:*", "compute:quotas:read", "compute:pools:read"}, Scopes: []string{"tenant:acme"}},
	{Principal: "bob", Permissions: []string{"compute:reservations:read"}, Scopes: []string{"tenant:acme"}},
}}

// harness is an App on a fresh table of the shared local stack, on a clock
// the test moves, serving its endpoints through the gateway: the same path
// an API Gateway event takes in a Lambda.
type harness struct {
	tb    testing.TB
	app   *modules.App
	clock *teststack.Clock
	eps   map[string]api.Endpoint
}

// setup adjusts a harness. The zero value serves every module under
// testPolicy on a configuration without release pins.
type setup struct {
	module  string            // serve only this catalog module ("" every module)
	config  func(*app.Config) // adjusts the configuration before start
	options []app.Option      // more app options (dev tokens, a RoundTrips counter)
}

// newHarness starts a harness; a failing start fails tb.
func newHarness(tb testing.TB, s setup) *harness {
	tb.Helper()
	h, err := startHarness(tb, s)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// startHarness starts a harness, returning what the app's start refused.
func startHarness(tb testing.TB, s setup) (*harness, error) {
	tb.Helper()
	dev := devstack.Shared(tb)
	cfg := app.Config{Table: devstack.NewTable(tb, dev), Region: dev.Region, DynamoEndpoint: dev.DynamoEndpoint,
		KMSEndpoint: dev.KMSEndpoint, ReleaseThreshold: 1, CursorKey: "test-key",
		ReleaseLogKey: devstack.DevReleaseLogKeyID, ReleaseLogOrigin: devstack.DevReleaseLogOrigin}
	if s.config != nil {
		s.config(&cfg)
	}
	h := &harness{tb: tb, clock: teststack.NewClock(time.Now().UTC().Truncate(time.Second)), eps: map[string]api.Endpoint{}}
	opts := append([]app.Option{app.WithDecider(testPolicy), app.WithClock(h.clock.Now),
		app.WithLogger(slog.New(slog.NewJSONHandler(testLog{tb}, &slog.HandlerOptions{Level: slog.LevelWarn})))}, s.options...)
	a, err := modules.New(context.Background(), cfg, append([]app.Option{cursorkey.FromSecretsManager(), kmskeys.FromKMS()}, opts...)...)
	if err != nil {
		return nil, err
	}
	h.app = a
	if s.module == "" {
		eps, err := a.Endpoints(context.Background())
		if err != nil {
			return nil, err
		}
		for _, ep := range eps {
			h.eps[ep.Method.Name] = ep
		}
		return h, nil
	}
	mod := a.List()[slices.IndexFunc(a.List(), func(m app.Module) bool { return m.Name() == s.module })]
	for _, m := range mod.Methods() {
		ep, err := a.App.Endpoint(context.Background(), m)
		if err != nil {
			return nil, err
		}
		h.eps[m.Name] = ep
	}
	return h, nil
}

// endpoint is the served endpoint of method name.
func (h *harness) endpoint(name string) api.Endpoint {
	h.tb.Helper()
	ep, ok := h.eps[name]
	if !ok {
		h.tb.Fatalf("the harness does not serve %s", name)
	}
	return ep
}

// reply is what the gateway answered: the status and the JSON body, decoded
// and as sent.
type reply struct {
	Status int
	Body   map[string]any
	Raw    string
}

// code is the error envelope's code ("" when the call succeeded).
func (r reply) code() string {
	e, _ := r.Body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// detail is one of the error envelope's details.
func (r reply) detail(k string) any {
	e, _ := r.Body["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	return d[k]
}

// obj walks a path of object keys ("reservation", "state").
func (r reply) obj(path ...string) any {
	var v any = r.Body
	for _, k := range path {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// raw calls method as principal (the JWT's sub claim) with body as sent.
func (h *harness) raw(principal, method, body string) reply {
	h.tb.Helper()
	req := events.APIGatewayV2HTTPRequest{Body: body}
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": principal}}}
	resp := h.app.Gateway.Serve(context.Background(), h.endpoint(method), req)
	var out map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &out); err != nil {
		h.tb.Fatalf("%s: body is not JSON: %q", method, resp.Body)
	}
	return reply{Status: resp.StatusCode, Body: out, Raw: resp.Body}
}

// call calls method as principal with body encoded as JSON.
func (h *harness) call(principal, method string, body any) reply {
	h.tb.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		h.tb.Fatal(err)
	}
	return h.raw(principal, method, string(b))
}

// ok is call for calls that must succeed.
func (h *harness) ok(principal, method string, body any) reply {
	h.tb.Helper()
	r := h.call(principal, method, body)
	if r.Status != 200 {
		h.tb.Fatalf("%s %v: %d %v", method, body, r.Status, r.Body)
	}
	return r
}

// testLog shows warnings and errors in the failing test's output.
type testLog struct{ tb testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.tb.Log(string(bytes.TrimSpace(p)))
	return len(p), nil
}
