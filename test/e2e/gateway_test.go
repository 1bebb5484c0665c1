// Package e2e drives the whole control plane over real HTTP: the local
// gateway (shared/localgw) in front of the very handlers the Lambdas run,
// against the real local servers (dynalite, local-kms) of shared/devstack.
package e2e

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/app/cursorkey"
	"github.com/bettercompute/control-plane/shared/app/kmskeys"
	"github.com/bettercompute/control-plane/shared/app/modules"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/kmssign"
	"github.com/bettercompute/control-plane/shared/localgw"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// newStack is the full app on a fresh table behind the local gateway. Release
// pins come only from local-kms (the seeded dev key), so a release that
// registers proves the KMS pin path end to end.
func newStack(t *testing.T, opts ...teststack.Option) *teststack.Stack {
	t.Helper()
	e2e := []teststack.Option{teststack.WithCursorKey("e2e"),
		teststack.WithPins(teststack.Pins{KMSKeys: []string{devstack.DevReleaseKeyID}})}
	return teststack.Start(t, append(e2e, opts...)...)
}

type response struct {
	Status    int
	RequestID string // x-request-id
	Body      []byte
}

// call POSTs body to a method's route; auth is the whole Authorization
// header ("" sends none).
func call(t *testing.T, base, method, auth string, body []byte) response {
	t.Helper()
	m := api.Lookup(method)
	if m == nil {
		t.Fatalf("no method %s in the catalog", method)
	}
	return do(t, http.MethodPost, base+m.Path(), auth, body)
}

func do(t *testing.T, httpMethod, url, auth string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(httpMethod, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"), Body: b}
}

type apiError struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
	RequestID string `json:"requestId"`
}

// wantError checks an error envelope: status, code, the details given, and
// the request id in both the body and the x-request-id header.
func wantError(t *testing.T, r response, status int, code string, details map[string]any) {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.Body, &e); err != nil {
		t.Fatalf("not an error envelope: %s", r.Body)
	}
	if r.Status != status || e.Error.Code != code {
		t.Fatalf("got %d %s, want %d %s: %s", r.Status, e.Error.Code, status, code, r.Body)
	}
	if e.Error.Message == "" {
		t.Errorf("no message: %s", r.Body)
	}
	if e.RequestID == "" || e.RequestID != r.RequestID {
		t.Errorf("requestId %q, x-request-id %q", e.RequestID, r.RequestID)
	}
	for k, v := range details {
		if e.Error.Details[k] != v {
			t.Errorf("details.%s = %v, want %v: %s", k, e.Error.Details[k], v, r.Body)
		}
	}
}

func TestHealthz(t *testing.T) {
	st := newStack(t)
	r := do(t, http.MethodGet, st.URL+localgw.HealthPath, "", nil)
	if r.Status != http.StatusOK || string(r.Body) != `{"status":"ok"}` {
		t.Fatalf("healthz: %d %s", r.Status, r.Body)
	}
	// The same app pointed at a DynamoDB endpoint nobody serves is unhealthy.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	cfg := st.App.Config
	cfg.DynamoEndpoint = dead
	a, err := modules.New(context.Background(), cfg, cursorkey.FromSecretsManager(), kmskeys.FromKMS(), app.WithDecider(st.App.Gateway.Decider), app.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(localgw.Handler(a.Gateway, nil, localgw.WithHealth(a.Health)))
	defer srv.Close()
	r = do(t, http.MethodGet, srv.URL+localgw.HealthPath, "", nil)
	wantError(t, r, http.StatusServiceUnavailable, "UNAVAILABLE", map[string]any{"dependency": "dynamodb"})
}

func TestErrors(t *testing.T) {
	st := newStack(t)
	admin := "Bearer dev:admin"
	list := []byte(`{"tenantId":"acme"}`)
	big := append([]byte(`{"tenantId":"acme","pad":"`), bytes.Repeat([]byte("x"), api.MaxBody)...)
	big = append(big, `"}`...)
	for _, tc := range []struct {
		name, method, auth string
		body               []byte
		status             int
		code               string
		details            map[string]any
	}{
		{"no credentials", "releases.list", "", list, 401, "UNAUTHENTICATED", nil},
		{"empty dev principal", "releases.list", "Bearer dev:", list, 401, "UNAUTHENTICATED", nil},
		{"blank dev principal", "releases.list", "Bearer dev:   ", list, 401, "UNAUTHENTICATED", nil},
		{"not a dev token", "releases.list", "Bearer admin", list, 401, "UNAUTHENTICATED", nil},
		{"body over 256 KiB", "releases.list", admin, big, 400, "INVALID_INPUT", map[string]any{"reason": "too_large"}},
		{"unknown field", "releases.list", admin, []byte(`{"tenantId":"acme","bogus":1}`), 400, "INVALID_INPUT", map[string]any{"field": "bogus"}},
		{"nested wrong type", "pools.create", admin, []byte(`{"tenantId":"acme","poolId":"p","resources":{"gpu":"8"}}`), 400, "INVALID_INPUT", map[string]any{"field": "resources.gpu"}},
		{"trailing data", "releases.list", admin, []byte(`{"tenantId":"acme"} {}`), 400, "INVALID_INPUT", nil},
		{"denied by the policy file", "releases.list", "Bearer dev:alice", list, 403, "PERMISSION_DENIED", nil},
		{"unknown pool", "pools.get", "Bearer dev:alice", []byte(`{"tenantId":"acme","poolId":"nope"}`), 404, "NOT_FOUND", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, call(t, st.URL, tc.method, tc.auth, tc.body), tc.status, tc.code, tc.details)
		})
	}
	t.Run("unknown path", func(t *testing.T) {
		wantError(t, do(t, http.MethodPost, st.URL+"/api/compute/releases/delete", admin, list), 404, "NOT_FOUND", nil)
	})
	t.Run("wrong HTTP method", func(t *testing.T) {
		wantError(t, do(t, http.MethodGet, st.URL+api.Lookup("releases.list").Path(), admin, nil),
			405, "INVALID_INPUT", map[string]any{"reason": "method_not_allowed"})
	})
}

// Every catalog method has a route: a bad request reaches its handler
// (INVALID_INPUT), never a 404 or 405.
func TestEveryMethodRouted(t *testing.T) {
	st := newStack(t)
	for _, m := range api.Catalog {
		r := call(t, st.URL, m.Name, "Bearer dev:admin", []byte(`{}`))
		if r.Status == http.StatusNotFound || r.Status == http.StatusMethodNotAllowed {
			t.Errorf("%s: %d %s", m.Name, r.Status, r.Body)
		}
	}
}

// A catalog method a build does not serve answers NOT_IMPLEMENTED from the
// catalog, not 404. Every v0.4 method is served by now, so one endpoint is
// swapped for api.NotServed as a build without that module would have it.
func TestNotServed(t *testing.T) {
	st := newStack(t)
	m := api.Lookup("reservations.release")
	eps := make([]api.Endpoint, len(st.Endpoints))
	for i, ep := range st.Endpoints {
		eps[i] = ep
		if ep.Method == m {
			eps[i] = api.NotServed(m)
		}
	}
	srv := httptest.NewServer(localgw.Handler(st.App.Gateway, eps))
	defer srv.Close()
	r := call(t, srv.URL, m.Name, "Bearer dev:admin", []byte(`{"tenantId":"acme","reservationId":"x"}`))
	wantError(t, r, http.StatusNotImplemented, "NOT_IMPLEMENTED", nil)
}

// The quickstart `make run` prints works as printed.
func TestQuickstart(t *testing.T) {
	st := newStack(t)
	for _, ex := range localgw.Examples(time.Now()) {
		r := call(t, st.URL, ex.Method, "Bearer dev:"+ex.Principal, []byte(ex.Body))
		if r.Status != http.StatusOK {
			t.Errorf("%s: %d %s", ex.Method, r.Status, r.Body)
		}
	}
}

type releaseAnswer struct {
	Version  string   `json:"version"`
	Sequence int64    `json:"sequence"`
	Signers  []string `json:"signers"`
}

func statement(version string, seq int) []byte {
	return fmt.Appendf(nil, `{"version":%q,"sequence":%d,"binaries":[{"platform":"linux/amd64",`+
		`"url":"https://downloads.example.com/bcd/%s/bcd-linux-amd64","sha256":"%s","size":1048576}]}`,
		version, seq, version, strings.Repeat("ab", 32))
}

// Releases end to end: list, register a release signed with kms:Sign on
// local-kms and verified under the KMS-fetched pin, replay it, register the
// next one signed with the same key from its PEM file, list both.
func TestReleases(t *testing.T) {
	st := newStack(t)
	ctx := context.Background()
	admin := "Bearer dev:admin"
	listBody := []byte(`{"tenantId":"platform"}`)

	r := call(t, st.URL, "releases.list", admin, listBody)
	if r.Status != 200 || string(r.Body) != `{"releases":[]}` {
		t.Fatalf("empty list: %d %s", r.Status, r.Body)
	}

	kmsKey, err := kmssign.NewSigner(ctx, st.Dev.KMS(), devstack.DevReleaseKeyID)
	if err != nil {
		t.Fatal(err)
	}
	fileKey := teststack.DevReleaseKey(t)
	keyID, err := release.KeyID(fileKey.Public())
	if err != nil {
		t.Fatal(err)
	}

	type registered struct {
		Release  releaseAnswer `json:"release"`
		Replayed bool          `json:"replayed"`
	}
	register := func(payload []byte, signer crypto.Signer) registered {
		t.Helper()
		env, err := release.SignEnvelope(payload, signer)
		if err != nil {
			t.Fatal(err)
		}
		r := call(t, st.URL, "releases.register", admin, fmt.Appendf(nil, `{"tenantId":"platform","manifest":%s}`, env))
		if r.Status != 200 {
			t.Fatalf("register: %d %s", r.Status, r.Body)
		}
		var out registered
		if err := json.Unmarshal(r.Body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	first := register(statement("1.0.0", 1), kmsKey)
	if first.Replayed || first.Release.Version != "1.0.0" || first.Release.Sequence != 1 ||
		len(first.Release.Signers) != 1 || first.Release.Signers[0] != keyID {
		t.Fatalf("first register: %+v", first)
	}
	if again := register(statement("1.0.0", 1), fileKey); !again.Replayed || again.Release.Sequence != 1 {
		t.Fatalf("replay: %+v", again)
	}
	if next := register(statement("1.1.0", 2), fileKey); next.Replayed || next.Release.Sequence != 2 {
		t.Fatalf("second register: %+v", next)
	}
	// A rollback is refused with the reason.
	env, err := release.SignEnvelope(statement("0.9.0", 1), fileKey)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, call(t, st.URL, "releases.register", admin, fmt.Appendf(nil, `{"tenantId":"platform","manifest":%s}`, env)),
		400, "INVALID_INPUT", map[string]any{"reason": "rollback"})

	r = call(t, st.URL, "releases.list", admin, listBody)
	var list struct {
		Releases []releaseAnswer `json:"releases"`
	}
	if err := json.Unmarshal(r.Body, &list); r.Status != 200 || err != nil {
		t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	if len(list.Releases) != 2 || list.Releases[0].Version != "1.1.0" || list.Releases[1].Version != "1.0.0" {
		t.Fatalf("list, highest sequence first: %s", r.Body)
	}
}
