package localgw

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/iam"
)

// recorder is a releases.list endpoint that records its call and answers it.
type recorder struct {
	mu    sync.Mutex
	calls []*api.Call
	ins   []*api.ListReleasesInput
}

func (rec *recorder) endpoint() api.Endpoint {
	return api.Bind(api.Lookup("releases.list"), func(_ context.Context, call *api.Call, in *api.ListReleasesInput) (any, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.calls = append(rec.calls, call)
		rec.ins = append(rec.ins, in)
		return map[string]any{"releases": []any{}, "echo": in.TenantID}, nil
	})
}

func newServer(t *testing.T) (*httptest.Server, *recorder) {
	t.Helper()
	policy, err := iam.ParsePolicy([]byte(`{"grants":[{"principal":"admin","permissions":["*"],"scopes":["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	var eps []api.Endpoint
	for _, m := range api.Catalog {
		if m.Name == "releases.list" {
			eps = append(eps, rec.endpoint())
		} else {
			eps = append(eps, api.NotServed(m))
		}
	}
	g := &api.Gateway{Decider: policy, Logger: slog.New(slog.DiscardHandler), AllowDevTokens: true}
	srv := httptest.NewServer(Handler(g, eps))
	t.Cleanup(srv.Close)
	return srv, rec
}

type envelope struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
	RequestID string `json:"requestId"`
}

func do(t *testing.T, method, url, principal string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if principal != "" {
		req.Header.Set("Authorization", "Bearer dev:"+principal)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// checkEnvelope asserts status, code and the request id in body and header.
func checkEnvelope(t *testing.T, resp *http.Response, body []byte, status int, code string) envelope {
	t.Helper()
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if resp.StatusCode != status || e.Error.Code != code {
		t.Fatalf("got %d %s, want %d %s: %s", resp.StatusCode, e.Error.Code, status, code, body)
	}
	if e.RequestID == "" || resp.Header.Get("X-Request-Id") != e.RequestID {
		t.Errorf("x-request-id %q, body requestId %q", resp.Header.Get("X-Request-Id"), e.RequestID)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type %q", ct)
	}
	return e
}

func TestHealthz(t *testing.T) {
	srv, _ := newServer(t)
	resp, body := do(t, http.MethodGet, srv.URL+HealthPath, "", nil)
	if resp.StatusCode != 200 || string(body) != `{"status":"ok"}` {
		t.Fatalf("healthz: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, http.MethodPost, srv.URL+HealthPath, "", nil)
	checkEnvelope(t, resp, body, http.StatusMethodNotAllowed, "INVALID_INPUT")
}

func TestRouting(t *testing.T) {
	srv, rec := newServer(t)
	path := api.Lookup("releases.list").Path()

	t.Run("served", func(t *testing.T) {
		resp, body := do(t, http.MethodPost, srv.URL+path, "admin", []byte(`{"tenantId":"acme"}`))
		if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil || got["echo"] != "acme" {
			t.Fatalf("body %s", body)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if n := len(rec.calls); n != 1 {
			t.Fatalf("%d calls", n)
		}
		if c := rec.calls[0]; c.Principal != "admin" || c.RequestID != resp.Header.Get("X-Request-Id") {
			t.Errorf("call %+v", c)
		}
	})
	t.Run("unknown path", func(t *testing.T) {
		resp, body := do(t, http.MethodPost, srv.URL+"/api/compute/nothing/here", "admin", []byte(`{}`))
		checkEnvelope(t, resp, body, http.StatusNotFound, "NOT_FOUND")
	})
	t.Run("wrong method", func(t *testing.T) {
		resp, body := do(t, http.MethodGet, srv.URL+path, "admin", nil)
		e := checkEnvelope(t, resp, body, http.StatusMethodNotAllowed, "INVALID_INPUT")
		if e.Error.Details["reason"] != "method_not_allowed" || resp.Header.Get("Allow") != "POST" {
			t.Errorf("details %v, Allow %q", e.Error.Details, resp.Header.Get("Allow"))
		}
	})
	t.Run("not served", func(t *testing.T) {
		resp, body := do(t, http.MethodPost, srv.URL+api.Lookup("pools.create").Path(), "admin", []byte(`{}`))
		checkEnvelope(t, resp, body, http.StatusNotImplemented, "NOT_IMPLEMENTED")
	})
	t.Run("unauthenticated", func(t *testing.T) {
		resp, body := do(t, http.MethodPost, srv.URL+path, "", []byte(`{"tenantId":"acme"}`))
		checkEnvelope(t, resp, body, http.StatusUnauthorized, "UNAUTHENTICATED")
	})
	t.Run("too large", func(t *testing.T) {
		for _, n := range []int{api.MaxBody + 1, 4 * api.MaxBody} {
			big := append([]byte(`{"tenantId":"acme","x":"`), bytes.Repeat([]byte("a"), n)...)
			resp, body := do(t, http.MethodPost, srv.URL+path, "admin", big[:n])
			e := checkEnvelope(t, resp, body, http.StatusBadRequest, "INVALID_INPUT")
			if e.Error.Details["reason"] != "too_large" {
				t.Errorf("%d bytes: details %v", n, e.Error.Details)
			}
		}
	})
	t.Run("exactly the limit is read whole", func(t *testing.T) {
		body := []byte(`{"tenantId":"acme"}`)
		body = append(body, bytes.Repeat([]byte(" "), api.MaxBody-len(body))...)
		resp, got := do(t, http.MethodPost, srv.URL+path, "admin", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
	})
	t.Run("binary body", func(t *testing.T) {
		resp, body := do(t, http.MethodPost, srv.URL+path, "admin", []byte{0xff, 0xfe, '{'})
		checkEnvelope(t, resp, body, http.StatusBadRequest, "INVALID_INPUT")
	})
}

func TestEvent(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	h := &handler{now: func() time.Time { return now }}
	m := api.Lookup("pools.create")
	r := httptest.NewRequest(http.MethodPost, "http://gw.example:8080"+m.Path()+"?a=1&a=2&b=x%20y", strings.NewReader(`{"tenantId":"é"}`))
	r.RemoteAddr = "10.1.2.3:5555"
	r.Header.Set("Authorization", "Bearer dev:admin")
	r.Header.Add("X-Multi", "one")
	r.Header.Add("X-Multi", "two")
	r.Header.Set("User-Agent", "curl/8")
	r.Header.Set("Cookie", "a=1; b=2")
	ev, err := h.event(r, m)
	if err != nil {
		t.Fatal(err)
	}
	want := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /api/compute/pools/create", RawPath: "/api/compute/pools/create",
		RawQueryString: "a=1&a=2&b=x%20y", Cookies: []string{"a=1", "b=2"},
		Headers: map[string]string{"authorization": "Bearer dev:admin", "x-multi": "one,two",
			"user-agent": "curl/8", "host": "gw.example:8080"},
		QueryStringParameters: map[string]string{"a": "1,2", "b": "x y"},
		Body:                  `{"tenantId":"é"}`,
	}
	if ev.RequestContext.RequestID == "" {
		t.Error("no request id")
	}
	ctx := ev.RequestContext
	if ctx.RouteKey != want.RouteKey || ctx.Stage != "$default" || ctx.DomainName != "gw.example:8080" ||
		ctx.TimeEpoch != now.UnixMilli() || ctx.Time != "04/Mar/2026:05:06:07 +0000" ||
		ctx.HTTP.Method != "POST" || ctx.HTTP.Path != m.Path() || ctx.HTTP.SourceIP != "10.1.2.3" ||
		ctx.HTTP.UserAgent != "curl/8" || ctx.HTTP.Protocol != "HTTP/1.1" {
		t.Errorf("request context %+v", ctx)
	}
	ev.RequestContext = events.APIGatewayV2HTTPRequestContext{}
	got, _ := json.Marshal(ev)
	exp, _ := json.Marshal(want)
	if !bytes.Equal(got, exp) {
		t.Errorf("event\n got %s\nwant %s", got, exp)
	}

	bin := []byte{0, 0xff, 0x10}
	ev, err = h.event(httptest.NewRequest(http.MethodPost, m.Path(), bytes.NewReader(bin)), m)
	if err != nil {
		t.Fatal(err)
	}
	if !ev.IsBase64Encoded || ev.Body != base64.StdEncoding.EncodeToString(bin) {
		t.Errorf("binary body: %v %q", ev.IsBase64Encoded, ev.Body)
	}
}

func TestWriteResponse(t *testing.T) {
	w := httptest.NewRecorder()
	writeResponse(w, events.APIGatewayV2HTTPResponse{StatusCode: 201,
		Headers:           map[string]string{"content-type": "text/plain", "x-request-id": "r1"},
		MultiValueHeaders: map[string][]string{"x-m": {"1", "2"}},
		Cookies:           []string{"c=1"},
		Body:              base64.StdEncoding.EncodeToString([]byte("hi")), IsBase64Encoded: true})
	if w.Code != 201 || w.Body.String() != "hi" || w.Header().Get("Content-Type") != "text/plain" ||
		w.Header().Get("X-Request-Id") != "r1" || len(w.Header().Values("X-M")) != 2 || w.Header().Get("Set-Cookie") != "c=1" {
		t.Fatalf("%d %q %v", w.Code, w.Body.String(), w.Header())
	}
}

var testStack = Stack{URL: "http://127.0.0.1:8080", DynamoEndpoint: "http://127.0.0.1:41001",
	KMSEndpoint: "http://127.0.0.1:41002", Table: "better-compute", Region: "us-east-1",
	LogVerifierKey: "dev.bettercompute.local/releases+0a1b2c3d+AgMwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQ="}

// Every quickstart call is a valid request of its method.
func TestQuickstart(t *testing.T) {
	now := time.Now()
	text := Quickstart(testStack, now)
	if !strings.Contains(text, "Console: http://127.0.0.1:8080/console/ ") {
		t.Errorf("quickstart does not name the console's URL:\n%s", text)
	}
	for _, ex := range Examples(now) {
		m := api.Lookup(ex.Method)
		if m == nil {
			t.Fatalf("quickstart names unknown method %s", ex.Method)
		}
		if err := api.DecodeInput([]byte(ex.Body), reflect.New(m.Input).Interface()); err != nil {
			t.Errorf("%s: %s: %v", ex.Method, ex.Body, err)
		}
		body, _ := ex.Printed(now)
		if !strings.Contains(text, "http://127.0.0.1:8080"+m.Path()) || !strings.Contains(text, body) {
			t.Errorf("quickstart text misses %s", ex.Method)
		}
	}
}

// The printed reservation ends an hour after the minute it is pasted in,
// not a fixed time: no timestamp is printed, and the line that sets $END,
// run in a shell, gives the next hour's minute.
func TestQuickstartEndIsRelative(t *testing.T) {
	before := time.Now().UTC()
	text := Quickstart(testStack, before.Add(-3*time.Hour)) // a stack started three hours ago
	if ts := regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}`).FindString(text); ts != "" {
		t.Errorf("the quickstart prints a fixed time %s:\n%s", ts, text)
	}
	if !strings.Contains(text, "\n"+EndLine+"\ncurl ") || !strings.Contains(text, `"window":{"end":"'"$END"'"}`) {
		t.Fatalf("the reservation does not send $END:\n%s", text)
	}
	out, err := exec.Command("bash", "-c", EndLine+` && printf %s "$END"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	end, err := time.Parse(time.RFC3339, string(out))
	after := time.Now().UTC()
	if err != nil || end.Before(before.Add(time.Hour).Truncate(time.Minute)) || end.After(after.Add(time.Hour)) {
		t.Errorf("$END = %q (%v), want an hour from now's minute", out, err)
	}
}

// The printed export command, pasted into a shell, sets every variable the
// bcctl CLI reads to this stack's values.
func TestExportsSetWhatTheCLIReads(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	s := testStack
	s.Table = "it's a table" // a value that needs quoting
	if !strings.Contains(Quickstart(s, time.Now()), s.Exports()) {
		t.Fatal("the quickstart does not print the exports")
	}
	out, err := exec.Command("bash", "-c", s.Exports()+"\nenv").Output()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, s.Exports())
	}
	env := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok {
			env[k] = v
		}
	}
	exported := map[string]bool{}
	for _, kv := range s.CLIEnv() {
		exported[kv[0]] = true
		if env[kv[0]] != kv[1] || kv[1] == "" {
			t.Errorf("%s=%q after the export, want %q", kv[0], env[kv[0]], kv[1])
		}
	}
	// What cmd/bcctl reads, from its source: a variable it starts reading
	// must be exported too (or listed here with why not).
	notExported := map[string]string{"AWS_ACCESS_KEY_ID": "unset, the CLI uses dummy credentials against local endpoints",
		"BC_RELEASE_LOG_CHECKPOINT": "optional: releases verify keeps its checkpoint in the user's config directory without it",
		"XDG_CONFIG_HOME":           "the user's own: where releases verify keeps its checkpoint"}
	files, _ := filepath.Glob("../../cmd/bcctl/*.go")
	reads := regexp.MustCompile(`(?:[Gg]etenv|envOr)\("([A-Z0-9_]+)"`)
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range reads.FindAllSubmatch(src, -1) {
			seen++
			if v := string(m[1]); !exported[v] && notExported[v] == "" {
				t.Errorf("cmd/bcctl reads %s (%s), which the quickstart does not export", v, f)
			}
		}
	}
	if seen == 0 {
		t.Fatal("found no variable cmd/bcctl reads: the pattern is stale")
	}
}

func TestServeShutsDownGracefully(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		_, _ = io.WriteString(w, "done")
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, h, slog.New(slog.DiscardHandler)) }()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	<-started
	cancel() // shutdown begins with a request in flight
	close(release)
	if s := <-got; s != "done" {
		t.Errorf("in-flight request got %q", s)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String()); err == nil {
		t.Error("still serving after shutdown")
	}
}

func TestReconcileLoop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	passes := make(chan struct{})
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Reconcile(ctx, time.Millisecond, func(context.Context) error {
			n++
			passes <- struct{}{}
			if n == 1 {
				return io.ErrUnexpectedEOF // logged; the loop goes on
			}
			return nil
		}, slog.New(slog.DiscardHandler))
	}()
	for range 3 {
		<-passes
	}
	cancel()
	go func() {
		for range passes { // a pass racing with cancel may still report
		}
	}()
	<-done
	close(passes)
}

// /healthz reports what the dependencies say, and reuses a result briefly.
func TestHealthzChecksDependencies(t *testing.T) {
	policy, _ := iam.ParsePolicy([]byte(`{"grants":[]}`))
	g := &api.Gateway{Decider: policy, Logger: slog.New(slog.DiscardHandler)}
	var mu sync.Mutex
	var failing error
	calls := 0
	h := Handler(g, nil, WithHealth(func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return failing
	})).(*handler)
	clock := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	h.now = func() time.Time { return clock }
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if resp, body := do(t, http.MethodGet, srv.URL+HealthPath, "", nil); resp.StatusCode != 200 {
		t.Fatalf("healthy: %d %s", resp.StatusCode, body)
	}
	mu.Lock()
	failing = apierr.Dependency("dynamodb", io.ErrUnexpectedEOF)
	mu.Unlock()
	// Within HealthTTL the last result stands…
	if resp, _ := do(t, http.MethodGet, srv.URL+HealthPath, "", nil); resp.StatusCode != 200 || calls != 1 {
		t.Fatalf("cached: %d after %d checks", resp.StatusCode, calls)
	}
	// …after it, the failing dependency shows.
	clock = clock.Add(HealthTTL)
	resp, body := do(t, http.MethodGet, srv.URL+HealthPath, "", nil)
	e := checkEnvelope(t, resp, body, http.StatusServiceUnavailable, "UNAVAILABLE")
	if e.Error.Details["dependency"] != "dynamodb" {
		t.Errorf("details %v", e.Error.Details)
	}
}

// An encoded slash is not a path separator for routing.
func TestEncodedSlashIsNotARoute(t *testing.T) {
	srv, rec := newServer(t)
	resp, body := do(t, http.MethodPost, srv.URL+"/api/compute/releases%2Flist", "admin", []byte(`{"tenantId":"acme"}`))
	checkEnvelope(t, resp, body, http.StatusNotFound, "NOT_FOUND")
	if len(rec.calls) != 0 {
		t.Errorf("the endpoint was called")
	}
}

// The console is served under /console as API Gateway routes it there; the
// API's routes and unknown paths stay the gateway's.
func TestConsoleRoute(t *testing.T) {
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "console "+r.URL.Path) })
	h := Handler(&api.Gateway{Logger: slog.New(slog.DiscardHandler)}, nil, WithConsole(console))
	for path, want := range map[string]string{"/console": "console /console", "/console/pools": "console /console/pools", "/consolex": "NOT_FOUND"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("GET %s: %d %s, want %q", path, w.Code, w.Body.String(), want)
		}
	}
}
