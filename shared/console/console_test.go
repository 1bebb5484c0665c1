package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/console"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

type env struct {
	st  *teststack.Stack
	log *teststack.RequestLog
}

func start(t *testing.T) env {
	log := &teststack.RequestLog{}
	return env{st: teststack.Start(t, teststack.WithRequestLog(log)), log: log}
}

// get fetches a console path with a dev token ("" for none).
func (e env) get(t *testing.T, path, principal string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.st.URL+path, nil)
	if principal != "" {
		req.Header.Set("Authorization", "Bearer dev:"+principal)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (e env) call(t *testing.T, principal, method string, in, out any) {
	t.Helper()
	b, _ := json.Marshal(in)
	req, _ := http.NewRequest(http.MethodPost, e.st.URL+api.Lookup(method).Path(), bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer dev:"+principal)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", method, resp.StatusCode, rb)
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			t.Fatal(err)
		}
	}
}

// Every answer carries the strict policy: scripts from the console only,
// no framing; the shell holds no inline script and no data.
func TestShellIsSafe(t *testing.T) {
	e := start(t)
	r := e.get(t, "/console/pools/gpu-pool-1?tenant=acme", "")
	b := body(t, r)
	csp := r.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self';", "frame-ancestors 'none'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %s", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("CSP allows unsafe sources: %s", csp)
	}
	if r.Header.Get("X-Frame-Options") != "DENY" || r.StatusCode != 200 {
		t.Errorf("shell: %d, X-Frame-Options %q", r.StatusCode, r.Header.Get("X-Frame-Options"))
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(b, -1) {
		if !strings.Contains(tag, `src="/console/assets/`) {
			t.Errorf("an inline script in the shell: %s", tag)
		}
	}
	if strings.Contains(b, "gpu.h100") {
		t.Error("the public shell holds data")
	}
}

// Assets are served under their hash, cached for good; htmx is the pinned
// npm package's file, byte for byte.
func TestAssets(t *testing.T) {
	e := start(t)
	for _, name := range []string{"console.js", "console.css", "htmx.min.js"} {
		u := console.AssetURL(name)
		if !regexp.MustCompile(`^/console/assets/[a-z.]+-[0-9a-f]{12}\.(min\.js|js|css)$`).MatchString(u) {
			t.Errorf("%s is served as %q", name, u)
		}
		r := e.get(t, u, "")
		if r.StatusCode != 200 || !strings.Contains(r.Header.Get("Cache-Control"), "immutable") {
			t.Errorf("%s: %d %q", u, r.StatusCode, r.Header.Get("Cache-Control"))
		}
	}
	root, _ := devstack.Root()
	pinned, err := os.ReadFile(filepath.Join(root, "node_modules", "htmx.org", "dist", "htmx.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	embedded, _ := os.ReadFile("assets/htmx.min.js")
	if !bytes.Equal(pinned, embedded) {
		t.Error("assets/htmx.min.js is not node_modules/htmx.org/dist/htmx.min.js (package-lock.json's version): copy it again")
	}
}

// Fragments need credentials and the API's grant; a viewer without one
// sees PERMISSION_DENIED in words and nothing of the tenant's.
func TestFragmentsDecideLikeTheAPI(t *testing.T) {
	e := start(t)
	e.call(t, "admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "gpu-pool-1", "resources": map[string]any{"gpu.h100": 16}}, nil)
	r := e.get(t, "/console/f/pools?tenant=acme", "")
	if b := body(t, r); r.StatusCode != 401 || !strings.Contains(b, "UNAUTHENTICATED") {
		t.Errorf("no token: %d %s", r.StatusCode, b)
	}
	r = e.get(t, "/console/f/pools?tenant=acme", "mallory")
	if b := body(t, r); r.StatusCode != 403 || !strings.Contains(b, "PERMISSION_DENIED") || strings.Contains(b, "gpu-pool-1") {
		t.Errorf("mallory: %d %s", r.StatusCode, b)
	}
	r = e.get(t, "/console/f/pools?tenant=acme", "alice")
	if b := body(t, r); r.StatusCode != 200 || !strings.Contains(b, "gpu-pool-1") || !strings.Contains(b, "16 gpu.h100 free now") {
		t.Errorf("alice: %d %s", r.StatusCode, b)
	}
	// alice reads acme's reservations, not its nodes: nodes.get says so.
	r = e.get(t, "/console/f/pools/gpu-pool-1/nodes/gpu.h100-node-0?tenant=acme", "alice")
	if b := body(t, r); r.StatusCode == 200 || !strings.Contains(b, "problem") {
		t.Errorf("alice on a node: %d %s", r.StatusCode, b)
	}
	r = e.get(t, "/console/f/pools?tenant=globex", "alice")
	if b := body(t, r); r.StatusCode != 403 || strings.Contains(b, "gpu-pool-1") {
		t.Errorf("alice as globex: %d %s", r.StatusCode, b)
	}
}

// Actions are POST with the bearer token: a GET changes nothing, and a
// form posted without the header (a cross-site one, say) is refused.
func TestActionsArePostWithBearer(t *testing.T) {
	e := start(t)
	r := e.get(t, "/console/a/cordon?tenant=acme", "admin")
	if r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %d", r.StatusCode)
	}
	form := url.Values{"pool": {"gpu-pool-1"}, "node": {"gpu.h100-node-0"}, "reason": {"x"}}
	resp, err := http.PostForm(e.st.URL+"/console/a/cordon?tenant=acme", form)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "UNAUTHENTICATED") {
		t.Errorf("an action without the bearer header: %d %s", resp.StatusCode, b)
	}
}

// An open rollout page that finds nothing changed costs one read: the
// rollout's own get, answered 304 without its nodes.
func TestRolloutRefreshReadsOnlyTheVersion(t *testing.T) {
	e := start(t)
	// No rollout: one that does not exist is the same single read, and a
	// real one is measured in the browser suite. Here: the ETag path.
	r := e.get(t, "/console/f/rollouts?tenant=platform", "admin")
	tag := r.Header.Get("ETag")
	if r.StatusCode != 200 || tag == "" {
		t.Fatalf("rollouts: %d, ETag %q", r.StatusCode, tag)
	}
	n := e.log.Len()
	r = e.get(t, "/console/f/rollouts?tenant=platform", "admin", "If-None-Match", tag)
	if r.StatusCode != http.StatusNotModified {
		t.Errorf("a refresh with the current ETag: %d", r.StatusCode)
	}
	if lines := e.log.Since(n); len(lines) != 1 || lines[0].Method != "rollouts.list" || lines[0].Calls != 1 {
		t.Errorf("an unchanged refresh called %+v", lines)
	}
}

// Behind API Gateway the viewer is the JWT authorizer's: the Lambda hands
// the claims to the gateway, which never accepts a dev token there.
func TestLambdaTakesTheAuthorizersClaims(t *testing.T) {
	e := start(t)
	e.call(t, "admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "gpu-pool-1", "resources": map[string]any{"gpu.h100": 16}}, nil)
	g := *e.st.App.Gateway
	g.AllowDevTokens = false
	c, err := console.New(console.Config{Caller: console.CallerFor(&g, e.st.Endpoints), OIDC: console.OIDC{Issuer: "https://issuer.example", ClientID: "console"}})
	if err != nil {
		t.Fatal(err)
	}
	fn := console.Lambda(c)
	ev := func(claims map[string]string, auth string) events.APIGatewayV2HTTPRequest {
		r := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/console/f/pools", RawQueryString: "tenant=acme",
			Headers:        map[string]string{"authorization": auth},
			RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: "/console/f/pools"}}}
		if claims != nil {
			r.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims}}
		}
		return r
	}
	resp, _ := fn(context.Background(), ev(map[string]string{"sub": "alice"}, "Bearer a.jwt.token"))
	if resp.StatusCode != 200 || !strings.Contains(resp.Body, "gpu-pool-1") {
		t.Errorf("alice's claims: %d %s", resp.StatusCode, resp.Body)
	}
	resp, _ = fn(context.Background(), ev(nil, "Bearer dev:admin"))
	if resp.StatusCode != 401 || !strings.Contains(resp.Body, "UNAUTHENTICATED") {
		t.Errorf("a dev token behind API Gateway: %d %s", resp.StatusCode, resp.Body)
	}
	resp, _ = fn(context.Background(), events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/console/signin",
		RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: "/console/signin"}}})
	if resp.StatusCode != 200 || !strings.Contains(resp.Body, `id="oidc-signin"`) || strings.Contains(resp.Body, "dev-signin") ||
		!strings.Contains(resp.Headers["Content-Security-Policy"], "connect-src 'self' https://issuer.example") {
		t.Errorf("the deployed sign-in: %d %v %s", resp.StatusCode, resp.Headers, resp.Body)
	}
}

// The timeline page draws the viewer's bookings with their state and the
// refusal page says why in words.
func TestPoolAndReservationPages(t *testing.T) {
	e := start(t)
	e.call(t, "admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "gpu-pool-1", "resources": map[string]any{"gpu.h100": 16}}, nil)
	var res api.ReservationResult
	e.call(t, "alice", "reservations.create", map[string]any{"tenantId": "acme", "poolId": "gpu-pool-1", "resource": "gpu.h100", "count": 4,
		"window": map[string]any{"start": time.Now().Add(24 * time.Hour), "end": time.Now().Add(30 * time.Hour)}}, &res)
	r := e.get(t, "/console/f/pools/gpu-pool-1?tenant=acme&days=7", "alice")
	b := body(t, r)
	if r.StatusCode != 200 || !strings.Contains(b, `class="b placed"`) || !strings.Contains(b, "../reservations/"+res.Reservation.ReservationID) {
		t.Errorf("the timeline: %d %s", r.StatusCode, b)
	}
	r = e.get(t, "/console/f/pools/gpu-pool-1?tenant=acme&count=8&hours=2", "alice")
	if b := body(t, r); r.StatusCode != 200 || !strings.Contains(b, "can start") || !strings.Contains(b, `class="offer"`) {
		t.Errorf("the availability answer: %d %s", r.StatusCode, b)
	}
	r = e.get(t, "/console/f/reservations/"+res.Reservation.ReservationID+"?tenant=acme", "alice")
	if b := body(t, r); r.StatusCode != 200 || !strings.Contains(b, "Placed: its devices are held") || !strings.Contains(b, "Release it now") {
		t.Errorf("the reservation: %d %s", r.StatusCode, b)
	}
}

// A 12,500-node pool pages its nodes, 64 at a time; the next page's link
// carries each day's cursor.
func TestBigPoolPagesItsNodes(t *testing.T) {
	e := start(t)
	e.call(t, "admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "big-pool", "resources": map[string]any{"gpu.h100": 100_000}}, nil)
	r := e.get(t, "/console/f/pools/big-pool?tenant=acme&days=2", "admin")
	b := body(t, r)
	next := regexp.MustCompile(`href="/console(/pools/big-pool\?[^"]*after=[^"]*)"`).FindStringSubmatch(b)
	if r.StatusCode != 200 || !strings.Contains(b, "Nodes 1–64 of 12500") || next == nil {
		t.Fatalf("the first page: %d %s", r.StatusCode, b)
	}
	link := strings.ReplaceAll(next[1], "&amp;", "&")
	if u, _ := url.Parse(link); len(u.Query()["after"]) != 2 {
		t.Errorf("the next page's link %s carries %d cursors, want one a day", link, len(u.Query()["after"]))
	}
	r = e.get(t, "/console/f"+link, "admin")
	if b := body(t, r); r.StatusCode != 200 || !strings.Contains(b, "Nodes 65–128 of 12500") || !strings.Contains(b, "gpu.h100-node-64") {
		t.Errorf("the second page: %d %s", r.StatusCode, b)
	}
	r = e.get(t, "/console/f/pools?tenant=acme", "admin")
	if b := body(t, r); r.StatusCode != 200 || !strings.Contains(b, "of the first 200 nodes") {
		t.Errorf("the pools list of a big pool: %d %s", r.StatusCode, b)
	}
}

// The fleet's bands of a pool with more registered nodes than a page are
// read node by node for the page in view: a cordon on the second page's
// node is drawn there (pages of 4 nodes here, 64 deployed).
func TestBandsOfABigManagedPool(t *testing.T) {
	e := start(t)
	c, err := console.New(console.Config{Caller: console.CallerFor(e.st.App.Gateway, e.st.Endpoints), Dev: true, PageNodes: 4})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	e.call(t, "admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "fleet-x", "resources": map[string]any{"gpu.h100": 8 * 7}}, nil)
	for k := range 6 {
		key, _ := dsse.GenerateKey(dsse.AlgEd25519)
		pem, _ := dsse.MarshalPublicKeyPEM(key.Public())
		e.call(t, "admin", "nodes.register", map[string]any{"tenantId": "acme", "poolId": "fleet-x", "nodeId": fmt.Sprintf("gpu.h100-node-%d", k),
			"publicKey": string(pem), "platform": "linux/amd64"}, nil)
	}
	e.call(t, "admin", "nodes.cordon", map[string]any{"tenantId": "acme", "poolId": "fleet-x", "nodeId": "gpu.h100-node-5", "reason": "psu-swap"}, nil)
	get := func(path string) string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer dev:admin")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	b := get("/console/f/pools/fleet-x?tenant=acme&days=1")
	next := regexp.MustCompile(`href="/console(/pools/fleet-x\?[^"]*after=[^"]*)"`).FindStringSubmatch(b)
	if next == nil || strings.Contains(b, "band cordoned") || !strings.Contains(b, "band registered") {
		t.Fatalf("the first page: %s", b)
	}
	b = get("/console/f" + strings.ReplaceAll(next[1], "&amp;", "&"))
	if !strings.Contains(b, "Nodes 5–7 of 7") || !strings.Contains(b, "band cordoned") || !strings.Contains(b, "psu-swap") {
		t.Errorf("the second page draws no cordon: %s", b)
	}
}
