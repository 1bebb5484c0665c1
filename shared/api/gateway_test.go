package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/metrics"
)

// fakeDecider answers every request with one decision (or error) and
// records what it was asked.
type fakeDecider struct {
	decision iam.Decision
	err      error

	mu    sync.Mutex
	calls []iam.Request
}

func (f *fakeDecider) Decide(_ context.Context, r iam.Request) (iam.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r)
	return f.decision, f.err
}

func (f *fakeDecider) Calls() []iam.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]iam.Request(nil), f.calls...)
}

func allow() *fakeDecider { return &fakeDecider{decision: iam.Decision{Allow: true}} }
func deny(reason string) *fakeDecider {
	return &fakeDecider{decision: iam.Decision{Allow: false, Reason: reason}}
}

// handlerSpy records the calls of a pools.get handler.
type handlerSpy struct {
	calls int
	in    *api.GetPoolInput
	call  api.Call
}

// poolsGet binds pools.get to a handler that records its call and returns
// result and err (or runs do, when set).
func poolsGet(spy *handlerSpy, do func(ctx context.Context, call *api.Call, in *api.GetPoolInput) (any, error)) api.Endpoint {
	return api.Bind(api.Lookup("pools.get"), func(ctx context.Context, call *api.Call, in *api.GetPoolInput) (any, error) {
		spy.calls++
		spy.in = in
		spy.call = *call
		if do != nil {
			return do(ctx, call, in)
		}
		return map[string]any{"pool": map[string]any{"poolId": in.PoolID, "ownerTenantId": in.TenantID}}, nil
	})
}

func newGateway(d iam.Decider, devTokens bool) (*api.Gateway, *bytes.Buffer) {
	var buf bytes.Buffer
	return &api.Gateway{Decider: d, Logger: slog.New(slog.NewJSONHandler(&buf, nil)), AllowDevTokens: devTokens}, &buf
}

const goodBody = `{"tenantId":"acme","poolId":"pool-1"}`

// jwtRequest is a request as API Gateway delivers it after its JWT
// authorizer accepted a token whose sub is sub.
func jwtRequest(sub, body string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version:  "2.0",
		RouteKey: "POST /api/compute/pools/get",
		RawPath:  "/api/compute/pools/get",
		Headers:  map[string]string{"content-type": "application/json"},
		Body:     body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: "apigw-req-1",
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/api/compute/pools/get"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": sub, "iss": "https://issuer"}},
			},
		},
	}
}

// headerRequest is a request with only an Authorization header (or none).
func headerRequest(authorization, body string) events.APIGatewayV2HTTPRequest {
	h := map[string]string{"content-type": "application/json"}
	if authorization != "" {
		h["authorization"] = authorization
	}
	return events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/api/compute/pools/get", Headers: h, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "apigw-req-2",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/api/compute/pools/get"}}}
}

// envelope is the error body (docs/reference, Errors).
type envelope struct {
	Error struct {
		Code    apierr.Code    `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
	RequestID string `json:"requestId"`
}

// errorBody checks the exact shape of an error response and returns it.
func errorBody(t *testing.T, resp events.APIGatewayV2HTTPResponse) envelope {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(resp.Body), &top); err != nil {
		t.Fatalf("error body %q is not a JSON object: %v", resp.Body, err)
	}
	if len(top) != 2 || top["error"] == nil || top["requestId"] == nil {
		t.Errorf("error body %s: want exactly the keys error and requestId", resp.Body)
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(top["error"], &inner); err != nil {
		t.Fatalf("error member %s is not an object: %v", top["error"], err)
	}
	for k := range inner {
		if k != "code" && k != "message" && k != "details" {
			t.Errorf("error member has unexpected key %q: %s", k, resp.Body)
		}
	}
	if inner["code"] == nil || inner["message"] == nil {
		t.Errorf("error member lacks code or message: %s", resp.Body)
	}
	if d, ok := inner["details"]; ok && !bytes.HasPrefix(bytes.TrimSpace(d), []byte("{")) {
		t.Errorf("details is not an object: %s", d)
	}
	var env envelope
	if err := json.Unmarshal([]byte(resp.Body), &env); err != nil {
		t.Fatal(err)
	}
	if env.Error.Message == "" {
		t.Errorf("empty message: %s", resp.Body)
	}
	if env.RequestID == "" || resp.Headers["x-request-id"] != env.RequestID {
		t.Errorf("x-request-id header %q, body requestId %q: want equal and non-empty", resp.Headers["x-request-id"], env.RequestID)
	}
	if resp.Headers["content-type"] != "application/json" {
		t.Errorf("content-type = %q", resp.Headers["content-type"])
	}
	if got := apierr.HTTPStatus(env.Error.Code); got != resp.StatusCode {
		t.Errorf("status %d for code %s, want %d", resp.StatusCode, env.Error.Code, got)
	}
	return env
}

func wantError(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int, code apierr.Code) envelope {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status = %d, want %d (body %s)", resp.StatusCode, status, resp.Body)
	}
	env := errorBody(t, resp)
	if env.Error.Code != code {
		t.Errorf("code = %s, want %s (body %s)", env.Error.Code, code, resp.Body)
	}
	return env
}

// logLines parses the JSON log lines written to buf.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func oneLogLine(t *testing.T, buf *bytes.Buffer) map[string]any {
	t.Helper()
	lines := logLines(t, buf)
	if len(lines) != 1 {
		t.Fatalf("got %d log lines, want exactly 1:\n%s", len(lines), buf)
	}
	return lines[0]
}

func TestOrderOfChecks(t *testing.T) {
	const badBody = `{"tenantId":"acme","poolId":"pool-1","bogus":1}`
	tooLarge := strings.Repeat(" ", api.MaxBody+1)
	for _, tc := range []struct {
		name        string
		decider     *fakeDecider
		req         events.APIGatewayV2HTTPRequest
		status      int
		code        apierr.Code
		wantDecides int
		wantHandler int
	}{
		{"unauthenticated, bad body", allow(), headerRequest("", badBody), 401, apierr.Unauthenticated, 0, 0},
		{"unauthenticated, malformed body", allow(), headerRequest("", `{`), 401, apierr.Unauthenticated, 0, 0},
		{"unauthenticated, too large body", allow(), headerRequest("", tooLarge), 401, apierr.Unauthenticated, 0, 0},
		{"unauthenticated, good body", allow(), headerRequest("", goodBody), 401, apierr.Unauthenticated, 0, 0},
		{"would be denied, bad body", deny("no grant"), jwtRequest("mallory", badBody), 400, apierr.InvalidInput, 0, 0},
		{"would be denied, too large body", deny("no grant"), jwtRequest("mallory", tooLarge), 400, apierr.InvalidInput, 0, 0},
		{"denied, good body", deny("no grant"), jwtRequest("mallory", goodBody), 403, apierr.PermissionDenied, 1, 0},
		{"IAM down, good body", &fakeDecider{err: errors.New("connection refused")}, jwtRequest("alice", goodBody), 503, apierr.Unavailable, 1, 0},
		{"allowed, good body", allow(), jwtRequest("alice", goodBody), 200, "", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newGateway(tc.decider, false)
			spy := &handlerSpy{}
			resp := g.Serve(context.Background(), poolsGet(spy, nil), tc.req)
			if tc.status == 200 {
				if resp.StatusCode != 200 {
					t.Fatalf("status = %d, body %s", resp.StatusCode, resp.Body)
				}
			} else {
				wantError(t, resp, tc.status, tc.code)
			}
			if n := len(tc.decider.Calls()); n != tc.wantDecides {
				t.Errorf("Decide called %d times, want %d", n, tc.wantDecides)
			}
			if spy.calls != tc.wantHandler {
				t.Errorf("handler called %d times, want %d", spy.calls, tc.wantHandler)
			}
		})
	}
}

func TestDenyCarriesReason(t *testing.T) {
	g, _ := newGateway(deny("no grant gives mallory compute:pools:read on tenant:acme"), false)
	resp := g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), jwtRequest("mallory", goodBody))
	env := wantError(t, resp, 403, apierr.PermissionDenied)
	if env.Error.Details["reason"] != "no grant gives mallory compute:pools:read on tenant:acme" {
		t.Errorf("details = %v, want the decider's reason", env.Error.Details)
	}
}

func TestUnavailableWhenIAMFails(t *testing.T) {
	g, buf := newGateway(&fakeDecider{err: errors.New("dial tcp 10.0.0.1:443: connection refused")}, false)
	resp := g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), jwtRequest("alice", goodBody))
	env := wantError(t, resp, 503, apierr.Unavailable)
	if env.Error.Details["dependency"] != "better-iam" {
		t.Errorf("details = %v, want dependency better-iam", env.Error.Details)
	}
	if strings.Contains(resp.Body, "10.0.0.1") {
		t.Errorf("body leaks the cause: %s", resp.Body)
	}
	line := oneLogLine(t, buf)
	if line["outcome"] != "UNAVAILABLE" || !strings.Contains(fmt.Sprint(line["error"]), "connection refused") {
		t.Errorf("log line %v: want outcome UNAVAILABLE and the cause", line)
	}
}

func TestAuthentication(t *testing.T) {
	withJWTAndHeader := jwtRequest("carol", goodBody)
	withJWTAndHeader.Headers["authorization"] = "Bearer dev:mallory"
	emptySub := jwtRequest("", goodBody)
	noSub := jwtRequest("x", goodBody)
	delete(noSub.RequestContext.Authorizer.JWT.Claims, "sub")
	nilJWT := headerRequest("", goodBody)
	nilJWT.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{}
	capitalHeader := headerRequest("", goodBody)
	capitalHeader.Headers["Authorization"] = "Bearer dev:alice"

	for _, tc := range []struct {
		name      string
		devTokens bool
		req       events.APIGatewayV2HTTPRequest
		principal string // "" means 401
	}{
		{"jwt sub", false, jwtRequest("alice", goodBody), "alice"},
		{"jwt sub with dev tokens on", true, jwtRequest("alice", goodBody), "alice"},
		{"jwt wins over dev header", true, withJWTAndHeader, "carol"},
		{"jwt empty sub", false, emptySub, ""},
		{"jwt without sub", false, noSub, ""},
		{"authorizer without jwt", false, nilJWT, ""},
		{"no credentials", false, headerRequest("", goodBody), ""},
		{"no credentials, dev tokens on", true, headerRequest("", goodBody), ""},
		{"dev token without AllowDevTokens", false, headerRequest("Bearer dev:alice", goodBody), ""},
		{"dev token with AllowDevTokens", true, headerRequest("Bearer dev:alice", goodBody), "alice"},
		{"dev token, header name capitalized", true, capitalHeader, "alice"},
		{"dev token, empty principal", true, headerRequest("Bearer dev:", goodBody), ""},
		{"dev token, blank principal", true, headerRequest("Bearer dev:   ", goodBody), ""},
		{"other bearer token", true, headerRequest("Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", goodBody), ""},
		{"dev without Bearer", true, headerRequest("dev:alice", goodBody), ""},
		{"basic auth", true, headerRequest("Basic YWxpY2U6cHc=", goodBody), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := allow()
			g, buf := newGateway(d, tc.devTokens)
			spy := &handlerSpy{}
			resp := g.Serve(context.Background(), poolsGet(spy, nil), tc.req)
			if tc.principal == "" {
				env := wantError(t, resp, 401, apierr.Unauthenticated)
				if len(d.Calls()) != 0 || spy.calls != 0 {
					t.Errorf("unauthenticated request reached IAM (%d) or the handler (%d)", len(d.Calls()), spy.calls)
				}
				if strings.Contains(resp.Body, "mallory") || strings.Contains(resp.Body, "dev:") {
					t.Errorf("401 body echoes credentials: %s", env.Error.Message)
				}
				return
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status = %d, body %s", resp.StatusCode, resp.Body)
			}
			if spy.call.Principal != tc.principal {
				t.Errorf("handler saw principal %q, want %q", spy.call.Principal, tc.principal)
			}
			if calls := d.Calls(); len(calls) != 1 || calls[0].Principal != tc.principal {
				t.Errorf("Decide calls %+v, want one for %q", calls, tc.principal)
			}
			if line := oneLogLine(t, buf); line["principal"] != tc.principal {
				t.Errorf("log principal = %v, want %q", line["principal"], tc.principal)
			}
		})
	}
}

// padded returns goodBody padded with trailing spaces (valid JSON
// whitespace) to exactly n bytes.
func padded(n int) string {
	return goodBody + strings.Repeat(" ", n-len(goodBody))
}

func TestBodyLimit(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name   string
		body   string
		base64 bool
		status int
		reason string
	}{
		{"exactly 256 KiB", padded(api.MaxBody), false, 200, ""},
		{"256 KiB + 1", padded(api.MaxBody + 1), false, 400, "too_large"},
		{"1 MiB", padded(1 << 20), false, 400, "too_large"},
		{"base64, exactly 256 KiB decoded", b64(padded(api.MaxBody)), true, 200, ""},
		{"base64, 256 KiB - 1 decoded", b64(padded(api.MaxBody - 1)), true, 200, ""},
		{"base64, 256 KiB + 1 decoded", b64(padded(api.MaxBody + 1)), true, 400, "too_large"},
		{"base64, 256 KiB + 2 decoded", b64(padded(api.MaxBody + 2)), true, 400, "too_large"},
		{"base64, 256 KiB + 3 decoded", b64(padded(api.MaxBody + 3)), true, 400, "too_large"},
		{"base64, 1 MiB decoded", b64(padded(1 << 20)), true, 400, "too_large"},
		{"base64, small", b64(goodBody), true, 200, ""},
		{"base64, invalid", "!!!not base64!!!", true, 400, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := allow()
			g, _ := newGateway(d, false)
			spy := &handlerSpy{}
			req := jwtRequest("alice", tc.body)
			req.IsBase64Encoded = tc.base64
			resp := g.Serve(context.Background(), poolsGet(spy, nil), req)
			if tc.status == 200 {
				if resp.StatusCode != 200 {
					t.Fatalf("status = %d, body %s", resp.StatusCode, resp.Body)
				}
				if spy.in == nil || spy.in.PoolID != "pool-1" {
					t.Errorf("handler input = %+v", spy.in)
				}
				return
			}
			env := wantError(t, resp, tc.status, apierr.InvalidInput)
			if env.Error.Details["reason"] != tc.reason {
				t.Errorf("details = %v, want reason %s", env.Error.Details, tc.reason)
			}
			if spy.calls != 0 || len(d.Calls()) != 0 {
				t.Errorf("a refused body reached the handler (%d) or IAM (%d)", spy.calls, len(d.Calls()))
			}
		})
	}
}

// A body declared as anything but JSON is refused before it is read; one
// without a Content-Type is read as JSON.
func TestContentType(t *testing.T) {
	for _, tc := range []struct {
		contentType string
		ok          bool
	}{
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"Application/JSON;charset=UTF-8", true},
		{"", true},
		{"text/plain", false},
		{"application/x-www-form-urlencoded", false},
		{"application/json; charset=latin1", false},
		{"application/vnd.api+json", false},
		{"json", false},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			d := allow()
			g, _ := newGateway(d, false)
			spy := &handlerSpy{}
			req := jwtRequest("alice", goodBody)
			if tc.contentType == "" {
				delete(req.Headers, "content-type")
			} else {
				req.Headers["content-type"] = tc.contentType
			}
			resp := g.Serve(context.Background(), poolsGet(spy, nil), req)
			if tc.ok {
				if resp.StatusCode != 200 || spy.calls != 1 {
					t.Fatalf("status %d, %d calls: %s", resp.StatusCode, spy.calls, resp.Body)
				}
				return
			}
			env := wantError(t, resp, 400, apierr.InvalidInput)
			if env.Error.Details["reason"] != api.ReasonContentType || env.Error.Details["field"] != nil ||
				!strings.Contains(env.Error.Message, "Content-Type") {
				t.Errorf("details %v, message %q", env.Error.Details, env.Error.Message)
			}
			if spy.calls != 0 || len(d.Calls()) != 0 {
				t.Errorf("a refused body reached the handler (%d) or IAM (%d)", spy.calls, len(d.Calls()))
			}
		})
	}
	// curl -d without -H: the message says what to add.
	g, _ := newGateway(allow(), false)
	req := jwtRequest("alice", goodBody)
	req.Headers["content-type"] = "application/x-www-form-urlencoded"
	if env := wantError(t, g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), req), 400, apierr.InvalidInput); !strings.Contains(env.Error.Message, "-H 'Content-Type: application/json'") {
		t.Errorf("message %q", env.Error.Message)
	}
}

func TestDecodingErrors(t *testing.T) {
	long := strings.Repeat("a", 129)
	for _, tc := range []struct {
		name, body, field, reason string
	}{
		{"unknown field", `{"tenantId":"acme","poolId":"pool-1","x":1}`, "x", "unknown_field"},
		{"duplicate key", `{"tenantId":"acme","tenantId":"evil","poolId":"pool-1"}`, "tenantId", "duplicate_key"},
		{"null tenantId", `{"tenantId":null,"poolId":"pool-1"}`, "tenantId", "type"},
		{"wrong type", `{"tenantId":"acme","poolId":7}`, "poolId", "type"},
		{"missing tenantId", `{"poolId":"pool-1"}`, "tenantId", "required"},
		{"missing poolId", `{"tenantId":"acme"}`, "poolId", "required"},
		{"tenantId too long", `{"tenantId":"` + long + `","poolId":"pool-1"}`, "tenantId", "constraint"},
		{"tenantId bad characters", `{"tenantId":"ac me","poolId":"pool-1"}`, "tenantId", "constraint"},
		{"empty tenantId", `{"tenantId":"","poolId":"pool-1"}`, "tenantId", "constraint"},
		{"bad poolId", `{"tenantId":"acme","poolId":"Pool_1"}`, "poolId", "constraint"},
		{"trailing data", goodBody + `{}`, "", "malformed"},
		{"malformed value", `{"tenantId":`, "tenantId", "malformed"},
		{"malformed document", `{"tenantId":"acme"`, "", "malformed"},
		{"empty body", ``, "", "malformed"},
		{"not an object", `[]`, "", "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := allow()
			g, _ := newGateway(d, false)
			spy := &handlerSpy{}
			resp := g.Serve(context.Background(), poolsGet(spy, nil), jwtRequest("alice", tc.body))
			env := wantError(t, resp, 400, apierr.InvalidInput)
			if tc.field != "" && env.Error.Details["field"] != tc.field {
				t.Errorf("details.field = %v, want %q (body %s)", env.Error.Details["field"], tc.field, resp.Body)
			}
			if tc.field == "" && env.Error.Details["field"] != nil {
				t.Errorf("details.field = %v, want none", env.Error.Details["field"])
			}
			if env.Error.Details["reason"] != tc.reason {
				t.Errorf("details.reason = %v, want %q", env.Error.Details["reason"], tc.reason)
			}
			if spy.calls != 0 || len(d.Calls()) != 0 {
				t.Errorf("invalid input reached the handler (%d) or IAM (%d)", spy.calls, len(d.Calls()))
			}
		})
	}
	t.Run("128-character tenantId accepted", func(t *testing.T) {
		g, _ := newGateway(allow(), false)
		spy := &handlerSpy{}
		tenant := strings.Repeat("a", 127) + ":"
		resp := g.Serve(context.Background(), poolsGet(spy, nil), jwtRequest("alice", `{"tenantId":"`+tenant+`","poolId":"pool-1"}`))
		if resp.StatusCode != 200 || spy.in == nil || spy.in.TenantID != tenant {
			t.Errorf("status %d, body %s", resp.StatusCode, resp.Body)
		}
	})
}

func TestDecideArguments(t *testing.T) {
	d := allow()
	g, _ := newGateway(d, false)
	spy := &handlerSpy{}
	resp := g.Serve(context.Background(), poolsGet(spy, nil), jwtRequest("alice", goodBody))
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d, body %s", resp.StatusCode, resp.Body)
	}
	calls := d.Calls()
	if len(calls) != 1 {
		t.Fatalf("Decide called %d times, want 1", len(calls))
	}
	want := iam.Request{Principal: "alice", Permission: "compute:pools:read", Scope: "tenant:acme", TenantID: "acme"}
	got := calls[0]
	if got.Principal != want.Principal || got.Permission != want.Permission || got.Scope != want.Scope || got.TenantID != want.TenantID || len(got.Attributes) != 0 {
		t.Errorf("Decide(%+v), want %+v", got, want)
	}
	if spy.call.TenantID != "acme" || spy.call.Method != api.Lookup("pools.get") || spy.call.RequestID != "apigw-req-1" {
		t.Errorf("handler call = %+v", spy.call)
	}
}

func TestSuccessResponse(t *testing.T) {
	g, _ := newGateway(allow(), false)
	resp := g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), jwtRequest("alice", goodBody))
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d, body %s", resp.StatusCode, resp.Body)
	}
	if want := `{"pool":{"ownerTenantId":"acme","poolId":"pool-1"}}`; resp.Body != want {
		t.Errorf("body = %s, want %s", resp.Body, want)
	}
	if resp.Headers["content-type"] != "application/json" || resp.Headers["x-request-id"] != "apigw-req-1" {
		t.Errorf("headers = %v", resp.Headers)
	}
}

func TestRequestID(t *testing.T) {
	t.Run("API Gateway id used", func(t *testing.T) {
		g, buf := newGateway(allow(), false)
		req := jwtRequest("alice", `{`)
		req.RequestContext.RequestID = "Jq7kAhX2oAMEbxw="
		env := wantError(t, g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), req), 400, apierr.InvalidInput)
		if env.RequestID != "Jq7kAhX2oAMEbxw=" {
			t.Errorf("requestId = %q, want the API Gateway id", env.RequestID)
		}
		if line := oneLogLine(t, buf); line["request_id"] != "Jq7kAhX2oAMEbxw=" {
			t.Errorf("log request_id = %v", line["request_id"])
		}
	})
	t.Run("generated when absent, unique", func(t *testing.T) {
		g, buf := newGateway(allow(), false)
		seen := map[string]bool{}
		for i := 0; i < 5; i++ {
			req := headerRequest("", goodBody)
			req.RequestContext.RequestID = ""
			env := wantError(t, g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), req), 401, apierr.Unauthenticated)
			if env.RequestID == "" || seen[env.RequestID] {
				t.Errorf("requestId %q empty or repeated", env.RequestID)
			}
			seen[env.RequestID] = true
		}
		for _, line := range logLines(t, buf) {
			if !seen[fmt.Sprint(line["request_id"])] {
				t.Errorf("log request_id %v is not a response's requestId", line["request_id"])
			}
		}
	})
	t.Run("success carries the header", func(t *testing.T) {
		g, _ := newGateway(allow(), false)
		req := jwtRequest("alice", goodBody)
		req.RequestContext.RequestID = ""
		resp := g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), req)
		if resp.StatusCode != 200 || resp.Headers["x-request-id"] == "" {
			t.Errorf("status %d, headers %v", resp.StatusCode, resp.Headers)
		}
	})
}

func TestHandlerErrors(t *testing.T) {
	const secret = "arn:aws:dynamodb:eu-west-1:123456789012:table/bc"
	for _, tc := range []struct {
		name    string
		do      func(context.Context, *api.Call, *api.GetPoolInput) (any, error)
		status  int
		code    apierr.Code
		message string // exact message wanted; "" to skip
		level   string
	}{
		{"panic", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			panic("index out of range near " + secret)
		}, 500, apierr.Internal, "", "ERROR"},
		{"panic with error value", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			panic(errors.New("nil map in " + secret))
		}, 500, apierr.Internal, "", "ERROR"},
		{"plain error", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			return nil, errors.New("ResourceNotFoundException: " + secret)
		}, 500, apierr.Internal, "", "ERROR"},
		{"INTERNAL *Error with a detailed message", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			return nil, apierr.New(apierr.Internal, "bad row in %s", secret)
		}, 500, apierr.Internal, "", "ERROR"},
		// A result that cannot be encoded is a bug like any other: 500, and
		// logged as INTERNAL with the encoding error.
		{"unmarshalable result", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			return map[string]any{"c": make(chan int), "where": secret}, nil
		}, 500, apierr.Internal, "", "ERROR"},
		{"wrapped NOT_FOUND", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			return nil, fmt.Errorf("get: %w", apierr.New(apierr.NotFound, "pool pool-1 not found"))
		}, 404, apierr.NotFound, "pool pool-1 not found", "INFO"},
		{"CONFLICT with details", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			return nil, apierr.New(apierr.Conflict, "pool exists").With("poolId", "pool-1")
		}, 409, apierr.Conflict, "pool exists", "INFO"},
		{"QUOTA_EXCEEDED", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			return nil, apierr.New(apierr.QuotaExceeded, "no quota")
		}, 429, apierr.QuotaExceeded, "no quota", "INFO"},
		{"UNAVAILABLE with a cause", func(context.Context, *api.Call, *api.GetPoolInput) (any, error) {
			return nil, apierr.Dependency("dynamodb", errors.New("throttled on "+secret))
		}, 503, apierr.Unavailable, "dynamodb is unavailable; retry the request", "ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, buf := newGateway(allow(), false)
			var resp events.APIGatewayV2HTTPResponse
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Serve panicked: %v", p)
					}
				}()
				resp = g.Serve(context.Background(), poolsGet(&handlerSpy{}, tc.do), jwtRequest("alice", goodBody))
			}()
			env := wantError(t, resp, tc.status, tc.code)
			if strings.Contains(resp.Body, secret) || strings.Contains(resp.Body, "panic") || strings.Contains(resp.Body, "goroutine") {
				t.Errorf("body leaks internals: %s", resp.Body)
			}
			if tc.message != "" && env.Error.Message != tc.message {
				t.Errorf("message = %q, want %q", env.Error.Message, tc.message)
			}
			if tc.code == apierr.Internal && !strings.Contains(env.Error.Message, "internal error") {
				t.Errorf("INTERNAL message = %q, want a generic one", env.Error.Message)
			}
			line := oneLogLine(t, buf)
			if line["outcome"] != string(tc.code) || line["status"] != float64(tc.status) {
				t.Errorf("log outcome %v status %v, want %s %d", line["outcome"], line["status"], tc.code, tc.status)
			}
			if tc.level != "" && line["level"] != tc.level {
				t.Errorf("log level = %v, want %s", line["level"], tc.level)
			}
			if tc.level == "ERROR" {
				cause := secret
				if tc.name == "unmarshalable result" {
					cause = "unsupported type"
				}
				if !strings.Contains(fmt.Sprint(line["error"]), cause) {
					t.Errorf("log line %v does not carry the cause %q (it is where internals go)", line, cause)
				}
			}
			if line["request_id"] != env.RequestID {
				t.Errorf("log request_id %v, body requestId %s", line["request_id"], env.RequestID)
			}
		})
	}
}

func TestOneLogLinePerRequest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		decider   *fakeDecider
		req       events.APIGatewayV2HTTPRequest
		status    float64
		outcome   string
		tenant    string
		principal string
	}{
		{"ok", allow(), jwtRequest("alice", goodBody), 200, "ok", "acme", "alice"},
		{"unauthenticated", allow(), headerRequest("", goodBody), 401, "UNAUTHENTICATED", "", ""},
		{"invalid input", allow(), jwtRequest("alice", `{"poolId":"pool-1"}`), 400, "INVALID_INPUT", "", "alice"},
		{"denied", deny("nope"), jwtRequest("bob", goodBody), 403, "PERMISSION_DENIED", "acme", "bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, buf := newGateway(tc.decider, false)
			resp := g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), tc.req)
			line := oneLogLine(t, buf)
			for _, k := range []string{"request_id", "method", "tenant", "principal", "outcome", "latency_ms", "status"} {
				if _, ok := line[k]; !ok {
					t.Errorf("log line lacks %q: %v", k, line)
				}
			}
			if line["request_id"] != resp.Headers["x-request-id"] {
				t.Errorf("request_id = %v, header %q", line["request_id"], resp.Headers["x-request-id"])
			}
			if line["method"] != "pools.get" || line["outcome"] != tc.outcome || line["tenant"] != tc.tenant || line["principal"] != tc.principal {
				t.Errorf("log line %v: want method pools.get, outcome %s, tenant %q, principal %q", line, tc.outcome, tc.tenant, tc.principal)
			}
			if line["status"] != tc.status || float64(resp.StatusCode) != tc.status {
				t.Errorf("status: log %v, response %d, want %v", line["status"], resp.StatusCode, tc.status)
			}
			if ms, ok := line["latency_ms"].(float64); !ok || ms < 0 {
				t.Errorf("latency_ms = %v, want a number >= 0", line["latency_ms"])
			}
			// A 4xx line says why, in the words the caller was shown.
			var env struct {
				Error struct{ Message string } `json:"error"`
			}
			_ = json.Unmarshal([]byte(resp.Body), &env)
			if line["error"] != nil && line["error"] != env.Error.Message || (line["error"] == nil) != (tc.status == 200) {
				t.Errorf("log line error %q, answer's message %q", line["error"], env.Error.Message)
			}
		})
	}
}

const draftBody = `{"tenantId":"acme","poolId":"pool-1","resource":"gpu","count":2,"window":{"end":"2030-01-01T00:00:00Z"}}`

func TestDecideOnDraft(t *testing.T) {
	m := api.Lookup("reservations.create")
	if m == nil || !m.DecideOnDraft {
		t.Fatalf("reservations.create is not DecideOnDraft: %+v", m)
	}
	for _, tc := range []struct {
		name    string
		decider *fakeDecider
		status  int
		code    apierr.Code
	}{
		{"allowed", allow(), 200, ""},
		{"denied on the draft", deny("tenant over policy"), 403, apierr.PermissionDenied},
		{"IAM down", &fakeDecider{err: errors.New("timeout")}, 503, apierr.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newGateway(tc.decider, false)
			handled := 0
			ep := api.Bind(m, func(ctx context.Context, call *api.Call, in *api.CreateReservationInput) (any, error) {
				handled++
				if n := len(tc.decider.Calls()); n != 0 {
					t.Errorf("gateway called Decide %d times before the handler wrote its draft", n)
				}
				if call.TenantID != "acme" || call.Principal != "alice" {
					t.Errorf("call = %+v", call)
				}
				// The draft is written here; then the one decision.
				if err := call.Decide(ctx, map[string]any{"reservationId": "r1", "count": in.Count}); err != nil {
					return nil, err.(*apierr.Error).With("reservationId", "r1")
				}
				return map[string]any{"reservation": map[string]any{"reservationId": "r1"}}, nil
			})
			resp := g.Serve(context.Background(), ep, jwtRequest("alice", draftBody))
			if handled != 1 {
				t.Fatalf("handler ran %d times, want 1", handled)
			}
			calls := tc.decider.Calls()
			if len(calls) != 1 {
				t.Fatalf("Decide called %d times, want exactly once", len(calls))
			}
			c := calls[0]
			if c.Permission != "compute:reservations:create" || c.Scope != "tenant:acme" || c.TenantID != "acme" || c.Principal != "alice" ||
				c.Attributes["reservationId"] != "r1" || c.Attributes["count"] != 2 {
				t.Errorf("Decide(%+v)", c)
			}
			if tc.status == 200 {
				if resp.StatusCode != 200 {
					t.Errorf("status = %d, body %s", resp.StatusCode, resp.Body)
				}
				return
			}
			env := wantError(t, resp, tc.status, tc.code)
			if env.Error.Details["reservationId"] != "r1" {
				t.Errorf("details = %v, want reservationId", env.Error.Details)
			}
			if tc.code == apierr.PermissionDenied && env.Error.Details["reason"] != "tenant over policy" {
				t.Errorf("details = %v, want the deny reason", env.Error.Details)
			}
		})
	}
	t.Run("invalid draft input never reaches the handler", func(t *testing.T) {
		d := allow()
		g, _ := newGateway(d, false)
		handled := 0
		ep := api.Bind(m, func(context.Context, *api.Call, *api.CreateReservationInput) (any, error) {
			handled++
			return nil, nil
		})
		resp := g.Serve(context.Background(), ep, jwtRequest("alice", `{"tenantId":"acme","poolId":"pool-1","resource":"gpu","count":2,"window":{"end":"2030-01-01T00:00:00"}}`))
		env := wantError(t, resp, 400, apierr.InvalidInput)
		if env.Error.Details["field"] != "window.end" {
			t.Errorf("details = %v, want field window.end", env.Error.Details)
		}
		if handled != 0 || len(d.Calls()) != 0 {
			t.Errorf("handler %d, Decide %d; want 0, 0", handled, len(d.Calls()))
		}
	})
}

func TestCallDecide(t *testing.T) {
	// Call.Decide on a method with a fixed scope (releases.*).
	d := deny("")
	g, _ := newGateway(d, false)
	ep := api.Bind(api.Lookup("releases.list"), func(ctx context.Context, call *api.Call, in *api.ListReleasesInput) (any, error) {
		return nil, errors.New("not reached")
	})
	resp := g.Serve(context.Background(), ep, jwtRequest("alice", `{"tenantId":"acme"}`))
	env := wantError(t, resp, 403, apierr.PermissionDenied)
	if _, ok := env.Error.Details["reason"]; ok {
		t.Errorf("details = %v: an empty deny reason should not appear", env.Error.Details)
	}
	calls := d.Calls()
	if len(calls) != 1 || calls[0].Permission != "compute:fleet:admin" || calls[0].Scope != "compute-fleet" || calls[0].TenantID != "acme" {
		t.Errorf("Decide calls %+v, want compute:fleet:admin @ compute-fleet for tenant acme", calls)
	}
}

func TestBindChecksInputType(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bind  func()
		panic bool
	}{
		{"matching", func() {
			api.Bind(api.Lookup("pools.get"), func(context.Context, *api.Call, *api.GetPoolInput) (any, error) { return nil, nil })
		}, false},
		{"another input type", func() {
			api.Bind(api.Lookup("pools.get"), func(context.Context, *api.Call, *api.ListPoolsInput) (any, error) { return nil, nil })
		}, true},
		{"a same-shaped type", func() {
			api.Bind(api.Lookup("reservations.release"), func(context.Context, *api.Call, *api.GetReservationInput) (any, error) { return nil, nil })
		}, true},
		{"a non-input type", func() {
			api.Bind(api.Lookup("pools.list"), func(context.Context, *api.Call, *api.Tenant) (any, error) { return nil, nil })
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p any
			func() {
				defer func() { p = recover() }()
				tc.bind()
			}()
			if (p != nil) != tc.panic {
				t.Errorf("panic = %v, want panic %v", p, tc.panic)
			}
		})
	}
}

func TestNotServed(t *testing.T) {
	m := api.Lookup("reservations.get")
	ep := api.NotServed(m)
	if ep.Method != m {
		t.Errorf("endpoint method = %v", ep.Method)
	}
	t.Run("authenticated", func(t *testing.T) {
		d := allow()
		g, buf := newGateway(d, false)
		resp := g.Serve(context.Background(), ep, jwtRequest("alice", `{"tenantId":"acme","reservationId":"r1"}`))
		env := wantError(t, resp, 501, apierr.NotImplemented)
		if !strings.Contains(env.Error.Message, "reservations.get") {
			t.Errorf("message = %q, want the method name", env.Error.Message)
		}
		if line := oneLogLine(t, buf); line["outcome"] != "NOT_IMPLEMENTED" || line["method"] != "reservations.get" {
			t.Errorf("log line %v", line)
		}
	})
	t.Run("unauthenticated first", func(t *testing.T) {
		g, _ := newGateway(allow(), false)
		wantError(t, g.Serve(context.Background(), ep, headerRequest("", `{}`)), 401, apierr.Unauthenticated)
	})
}

func payload(t *testing.T, req events.APIGatewayV2HTTPRequest) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLambdaAdapter(t *testing.T) {
	g, _ := newGateway(allow(), false)
	spy := &handlerSpy{}
	fn := g.Lambda(poolsGet(spy, nil))
	resp, err := fn(context.Background(), payload(t, jwtRequest("alice", goodBody)))
	if err != nil {
		t.Fatalf("Lambda handler returned a Go error: %v", err)
	}
	if resp.StatusCode != 200 {
		t.Errorf("status = %d, body %s", resp.StatusCode, resp.Body)
	}
	resp, err = fn(context.Background(), payload(t, headerRequest("", goodBody)))
	if err != nil || resp.StatusCode != 401 {
		t.Errorf("unauthenticated: %d, %v; want 401, nil", resp.StatusCode, err)
	}
	if spy.calls != 1 {
		t.Errorf("handler ran %d times, want 1", spy.calls)
	}
}

// Whatever else reaches the function is answered INVALID_INPUT, never served
// as an empty (unauthenticated) request and never a crash.
func TestLambdaAdapterRefusesOtherPayloads(t *testing.T) {
	v1 := jwtRequest("alice", goodBody)
	v1.Version = "1.0"
	for _, tc := range []struct{ name, payload, says string }{
		{"empty object", `{}`, "without the HTTP API request context"},
		{"null", `null`, "without the HTTP API request context"},
		{"array", `[1,2]`, "a JSON array"},
		{"string", `"ping"`, "a JSON string"},
		{"number", `42`, "not an object"},
		{"scheduled event", `{"version":"0","id":"x","detail-type":"Scheduled Event","source":"aws.events","detail":{}}`, "EventBridge event (Scheduled Event from aws.events)"},
		{"payload format 1.0", string(payload(t, v1)), `version "1.0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, buf := newGateway(allow(), false)
			spy := &handlerSpy{}
			resp, err := g.Lambda(poolsGet(spy, nil))(context.Background(), json.RawMessage(tc.payload))
			if err != nil {
				t.Fatalf("Go error %v", err)
			}
			env := wantError(t, resp, 400, apierr.InvalidInput)
			if env.Error.Details["reason"] != "not_api_gateway_event" || !strings.Contains(env.Error.Message, tc.says) {
				t.Errorf("error %+v, want reason not_api_gateway_event and a message saying %q", env.Error, tc.says)
			}
			if spy.calls != 0 {
				t.Errorf("the handler ran")
			}
			if line := oneLogLine(t, buf); line["outcome"] != "INVALID_INPUT" || line["method"] != "pools.get" {
				t.Errorf("log line %v", line)
			}
		})
	}
}

// With Table set, the request line is an EMF record of RequestMetrics.
func TestRequestLineIsAnEMFRecord(t *testing.T) {
	g, buf := newGateway(allow(), false)
	g.Table = "bc-prod"
	resp := g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), jwtRequest("alice", goodBody))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	points, ok, err := metrics.Parse(buf.Bytes())
	if err != nil || !ok {
		t.Fatalf("request line %s: record %v, %v", buf.Bytes(), ok, err)
	}
	got := map[string]metrics.Point{}
	for _, p := range points {
		got[p.Key()] = p
	}
	for _, d := range api.RequestMetrics {
		for _, dims := range d.Dimensions {
			for _, m := range d.Metrics {
				p, ok := got[metrics.Key(metrics.Namespace, m.Name, dims...)]
				if !ok || p.Unit != m.Unit || p.Dimensions[metrics.DimensionTable] != "bc-prod" {
					t.Errorf("%s %v: %+v", m.Name, dims, p)
				}
				if dim, ok := p.Dimensions[api.DimensionOutcome]; ok && dim != api.OutcomeOK {
					t.Errorf("outcome %q", dim)
				}
			}
		}
	}
	// Without a table the line stays a plain log line.
	g.Table = ""
	buf.Reset()
	g.Serve(context.Background(), poolsGet(&handlerSpy{}, nil), jwtRequest("alice", goodBody))
	if _, ok, _ := metrics.Parse(buf.Bytes()); ok {
		t.Errorf("a gateway without Table wrote an EMF record")
	}
}

func TestDecodeInput(t *testing.T) {
	var in api.GetPoolInput
	if err := api.DecodeInput([]byte(goodBody), &in); err != nil || in.TenantID != "acme" || in.PoolID != "pool-1" {
		t.Fatalf("DecodeInput = %v, %+v", err, in)
	}
	err := api.DecodeInput([]byte(`{"tenantId":"acme","poolId":"pool-1","window":{}}`), &in)
	e := apierr.As(err)
	if e == nil || e.Code != apierr.InvalidInput || e.Details["field"] != "window" || e.Details["reason"] != "unknown_field" {
		t.Errorf("DecodeInput(unknown) = %v (%+v)", err, e)
	}
}
