package console

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// Lambda serves h for API Gateway (HTTP API, payload format 2.0) events:
// the request as net/http sees it, with the JWT authorizer's verified
// claims in its context (WithClaims) for the console's calls to hand to the
// gateway — on the routes behind the authorizer; the public shell and assets
// carry none.
func Lambda(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		body := ev.Body
		if ev.IsBase64Encoded {
			b, err := base64.StdEncoding.DecodeString(ev.Body)
			if err != nil {
				return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusBadRequest, Body: "bad body"}, nil
			}
			body = string(b)
		}
		u := &url.URL{Path: ev.RawPath, RawQuery: ev.RawQueryString}
		if u.Path == "" {
			u.Path = ev.RequestContext.HTTP.Path
		}
		r := httptest.NewRequestWithContext(ctx, ev.RequestContext.HTTP.Method, u.String(), strings.NewReader(body))
		for k, v := range ev.Headers {
			r.Header.Set(k, v)
		}
		if a := ev.RequestContext.Authorizer; a != nil && a.JWT != nil && len(a.JWT.Claims) > 0 {
			r = r.WithContext(WithClaims(r.Context(), a.JWT.Claims))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		resp := events.APIGatewayV2HTTPResponse{StatusCode: w.Code, Headers: map[string]string{"x-request-id": ev.RequestContext.RequestID}}
		for k, vs := range w.Header() {
			resp.Headers[k] = strings.Join(vs, ",")
		}
		if b := w.Body.Bytes(); utf8.Valid(b) {
			resp.Body = string(b)
		} else {
			resp.Body, resp.IsBase64Encoded = base64.StdEncoding.EncodeToString(b), true
		}
		return resp, nil
	}
}

// OIDCFromEnv is the sign-in a deployed console offers (the CDK app sets
// it from the JWT authorizer's issuer and audience).
func OIDCFromEnv() OIDC {
	return OIDC{Issuer: os.Getenv("BC_CONSOLE_OIDC_ISSUER"), ClientID: os.Getenv("BC_CONSOLE_OIDC_CLIENT_ID"),
		AuthorizationEndpoint: os.Getenv("BC_CONSOLE_OIDC_AUTHORIZE_URL"), TokenEndpoint: os.Getenv("BC_CONSOLE_OIDC_TOKEN_URL"),
		Scopes: os.Getenv("BC_CONSOLE_OIDC_SCOPES")}
}
