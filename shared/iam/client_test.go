package iam_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/iam"
)

// fakeIAM is a Better IAM server that answers with a fixed status and body
// and records what it was sent.
type fakeIAM struct {
	status int
	body   string

	mu          sync.Mutex
	method      string
	path        string
	contentType string
	sent        []byte
	calls       int
}

func (f *fakeIAM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.method, f.path, f.contentType, f.sent = r.Method, r.URL.Path, r.Header.Get("Content-Type"), b
	f.calls++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, f.body)
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func testClient(url string) *iam.Client {
	return &iam.Client{URL: url, HTTP: &http.Client{Timeout: 5 * time.Second}}
}

var sampleRequest = iam.Request{
	Principal:  "alice",
	Permission: "compute:reservations:create",
	Scope:      "tenant:acme",
	TenantID:   "acme",
	Attributes: map[string]any{"poolId": "p1", "count": 2, "window": map[string]any{"end": "2025-01-01T00:00:00Z"}},
}

func TestClientDecisions(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want iam.Decision
	}{
		{"allow", `{"allow":true}`, iam.Decision{Allow: true}},
		{"allow ignores reason", `{"allow":true,"reason":""}`, iam.Decision{Allow: true}},
		{"deny with reason", `{"allow":false,"reason":"no grant for alice"}`, iam.Decision{Allow: false, Reason: "no grant for alice"}},
		{"deny without reason", `{"allow":false}`, iam.Decision{Allow: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeIAM{status: 200, body: tc.body}
			srv := newServer(t, f)
			d, err := testClient(srv.URL).Decide(context.Background(), sampleRequest)
			if err != nil {
				t.Fatalf("Decide = %v", err)
			}
			if d != tc.want {
				t.Errorf("Decide = %+v, want %+v", d, tc.want)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.calls != 1 {
				t.Errorf("server called %d times, want 1", f.calls)
			}
		})
	}
}

func TestClientSendsRequest(t *testing.T) {
	f := &fakeIAM{status: 200, body: `{"allow":true}`}
	srv := newServer(t, f)
	if _, err := testClient(srv.URL).Decide(context.Background(), sampleRequest); err != nil {
		t.Fatalf("Decide = %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.method != http.MethodPost || f.path != "/v1/decide" {
		t.Errorf("request %s %s, want POST /v1/decide", f.method, f.path)
	}
	if !strings.HasPrefix(f.contentType, "application/json") {
		t.Errorf("Content-Type %q, want application/json", f.contentType)
	}
	var got map[string]any
	if err := json.Unmarshal(f.sent, &got); err != nil {
		t.Fatalf("body %s is not JSON: %v", f.sent, err)
	}
	want := map[string]any{
		"principal":  "alice",
		"permission": "compute:reservations:create",
		"scope":      "tenant:acme",
		"tenantId":   "acme",
		"attributes": map[string]any{"poolId": "p1", "count": float64(2), "window": map[string]any{"end": "2025-01-01T00:00:00Z"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sent %s\nwant %v", f.sent, want)
	}
}

func TestClientFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"500", 500, `{"allow":true}`},
		{"503", 503, ``},
		{"403 even with allow true", 403, `{"allow":true}`},
		{"404", 404, `not found`},
		{"201 is not 200", 201, `{"allow":true}`},
		{"204 no content", 204, ``},
		{"malformed body", 200, `allow`},
		{"truncated body", 200, `{"allow":tr`},
		{"empty body", 200, ``},
		{"missing allow", 200, `{"reason":"x"}`},
		{"empty object", 200, `{}`},
		{"allow null", 200, `{"allow":null}`},
		{"allow is a string", 200, `{"allow":"true"}`},
		{"allow is a number", 200, `{"allow":1}`},
		{"array", 200, `[true]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, &fakeIAM{status: tc.status, body: tc.body})
			d, err := testClient(srv.URL).Decide(context.Background(), sampleRequest)
			if err == nil {
				t.Fatalf("Decide = %+v, nil error; want an error (fail closed)", d)
			}
			if d.Allow {
				t.Errorf("Decide returned allow with an error")
			}
		})
	}
}

func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	// Cleanups run last-in first-out: release the handler, then close.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })

	c := &iam.Client{URL: srv.URL, HTTP: &http.Client{Timeout: 50 * time.Millisecond}}
	start := time.Now()
	d, err := c.Decide(context.Background(), sampleRequest)
	if err == nil {
		t.Fatalf("Decide = %+v, nil error; want a timeout error", d)
	}
	if d.Allow {
		t.Error("allow with an error")
	}
	if elapsed := time.Since(start); elapsed > iam.DefaultTimeout {
		t.Errorf("Decide took %v; the client's own timeout was 50ms", elapsed)
	}
}

func TestClientCallerContext(t *testing.T) {
	f := &fakeIAM{status: 200, body: `{"allow":true}`}
	srv := newServer(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d, err := testClient(srv.URL).Decide(ctx, sampleRequest); err == nil {
		t.Fatalf("Decide(cancelled ctx) = %+v, nil error", d)
	}
}

func TestClientUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if d, err := testClient(url).Decide(context.Background(), sampleRequest); err == nil {
		t.Fatalf("Decide(closed server) = %+v, nil error", d)
	}
}

func TestNewClient(t *testing.T) {
	c := iam.NewClient("http://iam.example")
	if c.URL != "http://iam.example" {
		t.Errorf("URL = %q", c.URL)
	}
	if c.HTTP == nil || c.HTTP.Timeout != iam.DefaultTimeout {
		t.Errorf("HTTP = %+v, want timeout %v", c.HTTP, iam.DefaultTimeout)
	}
	if iam.DefaultTimeout != 2*time.Second {
		t.Errorf("DefaultTimeout = %v, want 2s", iam.DefaultTimeout)
	}
}
