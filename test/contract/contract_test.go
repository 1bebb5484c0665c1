// Package contract checks the real app's answers against the committed
// OpenAPI document (docs/openapi.json): the app runs behind the local
// gateway on the real local servers (test/teststack), every method is
// called for a success and for errors, and kin-openapi validates each
// request against its request body schema and each answer — status,
// headers, body — against the operation's responses.
//
// The document is made stricter for the check than it is published: every
// object of a result and every error's details refuse members the document
// does not name, so an undocumented output field or details key fails here
// (clients are told nothing of the kind, so the API may add members).
package contract

import (
	"bytes"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// loadDoc reads the committed document, validates it, and makes every
// result object and every error's details closed.
func loadDoc(t *testing.T, root string) *openapi3.T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("docs/openapi.json: %v", err)
	}
	closed := func(s *openapi3.Schema) {
		if s.Type.Is("object") && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties.Has = new(bool)
		}
	}
	for _, ref := range doc.Components.Schemas {
		if len(ref.Value.Properties) > 0 { // not Error's open details
			closed(ref.Value)
		}
	}
	for _, item := range doc.Paths.Map() {
		for code, resp := range item.Post.Responses.Map() {
			if code == "200" {
				continue
			}
			envelope := resp.Value.Content.Get("application/json").Schema.Value
			closed(envelope.Properties["error"].Value.Properties["details"].Value)
		}
	}
	return doc
}

// exchange is one call and what it must answer.
type exchange struct {
	method    string
	principal string // "" sends no Authorization header
	body      any    // marshalled, or []byte sent as is
	status    int
	code      apierr.Code    // for errors
	details   map[string]any // members details must carry (numbers as float64)
	badBody   bool           // the body breaks the request schema too
	// contentType replaces application/json as the request's Content-Type.
	contentType string
}

// checker sends exchanges and validates them against the document.
type checker struct {
	t    *testing.T
	url  string
	doc  *openapi3.T
	seen map[string]map[int]bool // method → statuses answered
	n    int
}

// do sends x, checks status, code and details, validates request and
// answer against the document, and returns the decoded answer.
func (c *checker) do(x exchange) map[string]any {
	c.t.Helper()
	m := api.Lookup(x.method)
	body, ok := x.body.([]byte)
	if !ok {
		var err error
		if body, err = json.Marshal(x.body); err != nil {
			c.t.Fatal(err)
		}
	}
	name := fmt.Sprintf("%s as %q → %d %s", x.method, x.principal, x.status, x.code)
	req := func() *http.Request {
		r, err := http.NewRequest(http.MethodPost, c.url+m.Path(), bytes.NewReader(body))
		if err != nil {
			c.t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		if x.contentType != "" {
			r.Header.Set("Content-Type", x.contentType)
		}
		if x.principal != "" {
			r.Header.Set("Authorization", "Bearer dev:"+x.principal)
		}
		return r
	}
	resp, err := http.DefaultClient.Do(req())
	if err != nil {
		c.t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		c.t.Fatalf("%s: answer is not a JSON object: %s", name, data)
	}
	if resp.StatusCode != x.status {
		c.t.Fatalf("%s: got %d %s", name, resp.StatusCode, data)
	}
	if x.status != http.StatusOK {
		e, _ := got["error"].(map[string]any)
		if e == nil || e["code"] != string(x.code) {
			c.t.Fatalf("%s: got %s", name, data)
		}
		details, _ := e["details"].(map[string]any)
		for k, v := range x.details {
			if fmt.Sprint(details[k]) != fmt.Sprint(v) {
				c.t.Errorf("%s: details.%s = %v, want %v (%s)", name, k, details[k], v, data)
			}
		}
	}
	if c.seen[x.method] == nil {
		c.seen[x.method] = map[int]bool{}
	}
	c.seen[x.method][resp.StatusCode] = true
	c.n++

	route := &routers.Route{Spec: c.doc, Path: m.Path(), PathItem: c.doc.Paths.Value(m.Path()), Method: http.MethodPost}
	route.Operation = route.PathItem.Post
	in := &openapi3filter.RequestValidationInput{Request: req(), Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	rerr := openapi3filter.ValidateRequest(context.Background(), in)
	switch {
	case x.badBody && rerr == nil:
		c.t.Errorf("%s: the request schema accepts a body the API refuses: %s", name, body)
	case !x.badBody && rerr != nil:
		c.t.Errorf("%s: the request schema refuses a body the API takes as valid: %v", name, rerr)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(data)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.t.Errorf("%s: the answer breaks docs/openapi.json: %v\n%s", name, err, data)
	}
	return got
}

// iamDown is the dev policy, except that no decision can be had for the
// principal "iam-down".
type iamDown struct{ iam.Decider }

func (d iamDown) Decide(ctx context.Context, r iam.Request) (iam.Decision, error) {
	if r.Principal == "iam-down" {
		return iam.Decision{}, errors.New("contract test: Better IAM is down")
	}
	return d.Decider.Decide(ctx, r)
}

type obj = map[string]any

// Every method answers a success and errors that match the document.
func TestLiveAnswersMatchOpenAPI(t *testing.T) {
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	policy, err := iam.LoadPolicy(filepath.Join(root, devstack.PolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	// DynamoDB down: every request fails before it is sent and not
	// retryably, so each method answers UNAVAILABLE without the SDK's retries.
	dynamoFaults := dynamo.NewFaults(1)
	st := teststack.Start(t, teststack.WithCursorKey("contract"), teststack.WithDecider(iamDown{policy}),
		teststack.WithAppOptions(app.WithDynamoOptions(dynamoFaults.Option())))
	c := &checker{t: t, url: st.URL, doc: loadDoc(t, root), seen: map[string]map[int]bool{}}
	ok := http.StatusOK

	// Releases, signed with the dev key the stack pins.
	key := teststack.DevReleaseKey(t)
	stranger, err := release.GenerateKey("ed25519")
	if err != nil {
		t.Fatal(err)
	}
	manifest := func(version string, seq int, signer crypto.Signer) json.RawMessage {
		stmt := fmt.Sprintf(`{"version":%q,"sequence":%d,"expires":"2099-01-01T00:00:00Z","binaries":[{"platform":"linux/arm64","url":"https://dl.example.com/bcd","sha256":"%064x","size":1},{"platform":"linux/amd64","url":"https://dl.example.com/bcd-amd64","sha256":"%064x","size":1}]}`, version, seq, seq, seq)
		env, err := release.SignEnvelope([]byte(stmt), signer)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	const platform = "platform"
	register := func(version string, seq int, signer crypto.Signer) obj {
		return obj{"tenantId": platform, "manifest": manifest(version, seq, signer)}
	}
	c.do(exchange{method: "releases.register", principal: "admin", body: register("1.0.0", 1, key), status: ok})
	reg := c.do(exchange{method: "releases.register", principal: "admin", body: register("1.0.0", 1, key), status: ok})
	if reg["replayed"] != true {
		t.Errorf("the same manifest again: replayed %v", reg["replayed"])
	}
	c.do(exchange{method: "releases.register", principal: "admin", body: register("1.1.0", 2, key), status: ok})
	// DSSE: members the envelope or a signature does not define are
	// ignored, as the document says (additionalProperties: true).
	var extended map[string]any
	if err := json.Unmarshal(manifest("1.2.0", 3, key), &extended); err != nil {
		t.Fatal(err)
	}
	extended["extension"] = obj{"kind": "example", "ext": []any{1, nil}}
	extended["signatures"].([]any)[0].(map[string]any)["cert"] = "-----BEGIN CERTIFICATE-----"
	c.do(exchange{method: "releases.register", principal: "admin", body: obj{"tenantId": platform, "manifest": extended}, status: ok})
	delete(extended, "payloadType")
	c.do(exchange{method: "releases.register", principal: "admin", body: obj{"tenantId": platform, "manifest": extended}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "malformed", "field": "manifest.payloadType"}, badBody: true})
	c.do(exchange{method: "releases.register", principal: "admin", body: register("2.0.0", 3, stranger), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "unknown_key", "field": "manifest.signatures"}})
	c.do(exchange{method: "releases.register", principal: "admin", body: register("0.9.0", 1, key), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "rollback", "latestSequence": 3}})
	c.do(exchange{method: "releases.register", principal: "admin", body: register("1.0.0", 5, key), status: 409, code: apierr.Conflict,
		details: obj{"version": "1.0.0", "sequence": 1}})
	c.do(exchange{method: "releases.register", principal: "admin", body: obj{"tenantId": platform}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "required", "field": "manifest"}, badBody: true})
	c.do(exchange{method: "releases.register", principal: "alice", body: register("3.0.0", 4, key), status: 403, code: apierr.PermissionDenied})
	// The release log: its checkpoint, proofs, and sizes beyond it.
	c.do(exchange{method: "releases.log", principal: "admin", body: obj{"tenantId": platform}, status: ok})
	c.do(exchange{method: "releases.prove", principal: "admin", body: obj{"tenantId": platform, "version": "1.1.0", "fromSize": 1}, status: ok})
	c.do(exchange{method: "releases.prove", principal: "admin", body: obj{"tenantId": platform, "size": 99}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "size"}})
	c.do(exchange{method: "releases.prove", principal: "admin", body: obj{"tenantId": platform, "version": "7.7.7"}, status: 404, code: apierr.NotFound})
	page := c.do(exchange{method: "releases.list", principal: "admin", body: obj{"tenantId": platform, "limit": 1}, status: ok})
	c.do(exchange{method: "releases.list", principal: "admin", body: obj{"tenantId": platform, "cursor": page["nextCursor"]}, status: ok})
	c.do(exchange{method: "releases.list", principal: "admin", body: obj{"tenantId": platform, "cursor": "x.y"}, status: 400, code: apierr.InvalidInput,
		details: obj{"field": "cursor"}})
	c.do(exchange{method: "releases.list", principal: "", body: obj{"tenantId": platform}, status: 401, code: apierr.Unauthenticated})

	// Pools: acme owns p1 (16 devices, nodes of 8) and p2 (4 devices, nodes of 4); globex is offered p1.
	c.do(exchange{method: "pools.create", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "resources": obj{"gpu": 16}}, status: ok})
	c.do(exchange{method: "pools.create", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "resources": obj{"gpu": 16}}, status: ok})
	c.do(exchange{method: "pools.create", principal: "ops", body: obj{"tenantId": "acme", "poolId": "p2", "resources": obj{"gpu": 4}, "nodeSize": obj{"gpu": 4}}, status: ok})
	c.do(exchange{method: "pools.create", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "resources": obj{"gpu": 8}}, status: 409, code: apierr.Conflict,
		details: obj{"field": "resources"}})
	c.do(exchange{method: "pools.create", principal: "admin", body: obj{"tenantId": "globex", "poolId": "p1", "resources": obj{"gpu": 16}}, status: 409, code: apierr.Conflict,
		details: obj{"field": "poolId"}})
	c.do(exchange{method: "pools.create", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p3", "resources": obj{"gpu": 8}, "nodeSize": obj{"tpu": 4}},
		status: 400, code: apierr.InvalidInput, details: obj{"reason": "unknown_resource", "field": "nodeSize.tpu"}})
	c.do(exchange{method: "pools.create", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p3", "resources": obj{"gpu": 8}, "colour": "red"},
		status: 400, code: apierr.InvalidInput, details: obj{"reason": "unknown_field", "field": "colour"}, badBody: true})
	c.do(exchange{method: "pools.create", principal: "admin", body: obj{"tenantId": "acme", "poolId": "P3", "resources": obj{}},
		status: 400, code: apierr.InvalidInput, details: obj{"reason": "constraint", "field": "poolId"}, badBody: true})
	c.do(exchange{method: "pools.create", principal: "admin", body: []byte(`{"tenantId": "acme",`), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "malformed"}, badBody: true})
	c.do(exchange{method: "pools.create", principal: "alice", body: obj{"tenantId": "acme", "poolId": "p3", "resources": obj{"gpu": 8}}, status: 403, code: apierr.PermissionDenied})
	c.do(exchange{method: "pools.create", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p3", "resources": obj{"gpu": 8}}, contentType: "text/plain",
		status: 400, code: apierr.InvalidInput, details: obj{"reason": "content_type"}, badBody: true})
	c.do(exchange{method: "pools.create", principal: "admin", body: []byte(`{"tenantId":"acme","poolId":"p3","resources":{"gpu":8.0},"nodeSize":{"gpu":4e0}}`),
		contentType: "application/json; charset=utf-8", status: ok})
	c.do(exchange{method: "pools.offer", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "toTenantId": "globex", "resource": "gpu", "max": 4}, status: ok})
	c.do(exchange{method: "pools.offer", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "toTenantId": "globex", "resource": "tpu", "max": 4},
		status: 400, code: apierr.InvalidInput, details: obj{"reason": "unknown_resource", "field": "resource"}})
	c.do(exchange{method: "pools.offer", principal: "admin", body: obj{"tenantId": "globex", "poolId": "p1", "toTenantId": "globex", "resource": "gpu", "max": 99},
		status: 404, code: apierr.NotFound})
	c.do(exchange{method: "pools.offer", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "toTenantId": "globex", "resource": "gpu", "max": -1},
		status: 400, code: apierr.InvalidInput, details: obj{"reason": "constraint", "field": "max"}, badBody: true})
	c.do(exchange{method: "pools.get", principal: "admin", body: obj{"tenantId": "globex", "poolId": "p1"}, status: ok})
	c.do(exchange{method: "pools.get", principal: "admin", body: obj{"tenantId": "globex", "poolId": "p2"}, status: 404, code: apierr.NotFound})
	pools := c.do(exchange{method: "pools.list", principal: "admin", body: obj{"tenantId": "acme", "limit": 1}, status: ok})
	c.do(exchange{method: "pools.list", principal: "admin", body: obj{"tenantId": "acme", "cursor": pools["nextCursor"]}, status: ok})
	c.do(exchange{method: "pools.list", principal: "admin", body: obj{"tenantId": "globex", "cursor": pools["nextCursor"]}, status: 400, code: apierr.InvalidInput,
		details: obj{"field": "cursor"}})
	c.do(exchange{method: "pools.list", principal: "admin", body: obj{"tenantId": "acme", "limit": 0}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "limit"}, badBody: true})

	// Quotas.
	c.do(exchange{method: "quotas.get", principal: "alice", body: obj{"tenantId": "acme", "poolId": "p1", "resource": "gpu"}, status: ok})
	c.do(exchange{method: "quotas.get", principal: "admin", body: obj{"tenantId": "acme", "poolId": "nowhere", "resource": "gpu"}, status: ok})
	c.do(exchange{method: "quotas.get", principal: "alice", body: obj{"tenantId": "globex", "poolId": "p1", "resource": "gpu"}, status: 403, code: apierr.PermissionDenied})
	c.do(exchange{method: "quotas.get", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "resource": "gpu", "extra": 1}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "unknown_field", "field": "extra"}, badBody: true})
	quotas := c.do(exchange{method: "quotas.list", principal: "admin", body: obj{"tenantId": "acme", "limit": 1}, status: ok})
	c.do(exchange{method: "quotas.list", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "cursor": quotas["nextCursor"]}, status: 400, code: apierr.InvalidInput,
		details: obj{"field": "cursor"}})

	// Reservations.
	now := time.Now().UTC()
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	create := func(tenant, pool string, count int, token string) obj {
		in := obj{"tenantId": tenant, "poolId": pool, "resource": "gpu", "count": count, "window": obj{"start": at(time.Hour), "end": at(3 * time.Hour)}}
		if token != "" {
			in["clientToken"] = token
		}
		return in
	}
	r := c.do(exchange{method: "reservations.create", principal: "alice", body: create("acme", "p1", 2, "t1"), status: ok})["reservation"].(map[string]any)
	id := r["reservationId"].(string)
	c.do(exchange{method: "reservations.create", principal: "alice", body: create("acme", "p1", 2, "t1"), status: ok})
	c.do(exchange{method: "reservations.create", principal: "alice", body: create("acme", "p1", 3, "t1"), status: 409, code: apierr.Conflict,
		details: obj{"field": "clientToken"}})
	c.do(exchange{method: "reservations.create", principal: "admin", body: create("globex", "p1", 5, ""), status: 429, code: apierr.QuotaExceeded,
		details: obj{"requested": 5, "used": 0, "max": 4}})
	c.do(exchange{method: "reservations.create", principal: "admin", body: create("acme", "p2", 4, ""), status: ok})
	// The owner offers itself more than p2 has: a quota is a cap, not a guarantee.
	c.do(exchange{method: "pools.offer", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p2", "toTenantId": "acme", "resource": "gpu", "max": 8}, status: ok})
	c.do(exchange{method: "reservations.create", principal: "admin", body: create("acme", "p2", 1, ""), status: 409, code: apierr.CapacityExhausted,
		details: obj{"reason": "capacity"}})
	c.do(exchange{method: "reservations.create", principal: "admin", body: create("acme", "nowhere", 1, ""), status: 404, code: apierr.NotFound})
	bad := create("acme", "p1", 1, "")
	bad["resource"] = "tpu"
	c.do(exchange{method: "reservations.create", principal: "admin", body: bad, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "unknown_resource", "field": "resource"}})
	denied := c.do(exchange{method: "reservations.create", principal: "nobody", body: create("acme", "p1", 1, ""), status: 403, code: apierr.PermissionDenied})
	deniedID := denied["error"].(map[string]any)["details"].(map[string]any)["reservationId"]
	for rule, window := range map[string]obj{
		"start_in_past":       {"start": at(-time.Hour), "end": at(time.Hour)},
		"start_too_far_ahead": {"start": at(400 * 24 * time.Hour), "end": at(401 * 24 * time.Hour)},
		"end_in_past":         {"end": at(-time.Hour)},
		"end_before_start":    {"start": at(2 * time.Hour), "end": at(time.Hour)},
		"window_too_long":     {"start": at(time.Hour), "end": at(100 * 24 * time.Hour)},
	} {
		in := create("acme", "p1", 1, "")
		in["window"] = window
		c.do(exchange{method: "reservations.create", principal: "admin", body: in, status: 400, code: apierr.InvalidInput,
			details: obj{"reason": "constraint", "rule": rule}})
	}
	topo := create("acme", "p1", 1, "")
	topo["topology"] = "ring"
	c.do(exchange{method: "reservations.create", principal: "admin", body: topo, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "topology"}, badBody: true})
	c.do(exchange{method: "reservations.create", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p1", "resource": "gpu", "count": 2000,
		"window": obj{"end": at(time.Hour)}}, status: 400, code: apierr.InvalidInput, details: obj{"reason": "constraint", "field": "count"}, badBody: true})
	c.do(exchange{method: "reservations.create", principal: "admin", body: bytes.Repeat([]byte(" "), api.MaxBody+1), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "too_large"}, badBody: true})
	c.do(exchange{method: "reservations.create", principal: "iam-down", body: create("acme", "p1", 1, ""), status: 503, code: apierr.Unavailable,
		details: obj{"dependency": "better-iam"}})
	c.do(exchange{method: "reservations.get", principal: "alice", body: obj{"tenantId": "acme", "reservationId": id}, status: ok})
	c.do(exchange{method: "reservations.get", principal: "admin", body: obj{"tenantId": "globex", "reservationId": id}, status: 404, code: apierr.NotFound})
	list := c.do(exchange{method: "reservations.list", principal: "alice", body: obj{"tenantId": "acme", "limit": 1}, status: ok})
	c.do(exchange{method: "reservations.list", principal: "alice", body: obj{"tenantId": "acme", "cursor": list["nextCursor"]}, status: ok})
	ds := c.do(exchange{method: "reservations.list", principal: "admin", body: obj{"tenantId": "acme", "state": "denied"}, status: ok})["reservations"].([]any)
	if len(ds) != 1 || ds[0].(map[string]any)["reservationId"] != deniedID {
		t.Errorf("state denied lists %v, want the one denied create %v", ds, deniedID)
	}
	c.do(exchange{method: "reservations.list", principal: "admin", body: obj{"tenantId": "acme", "state": "gone"}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "state"}, badBody: true})
	c.do(exchange{method: "reservations.release", principal: "alice", body: obj{"tenantId": "acme", "reservationId": id}, status: ok})
	c.do(exchange{method: "reservations.release", principal: "alice", body: obj{"tenantId": "acme", "reservationId": "nope"}, status: 404, code: apierr.NotFound})

	// Nodes: registered, heartbeating (the answer carries the release the
	// node runs, its manifest typed as an Envelope), cordoned (cordon an
	// object, not null), refused reports.
	nodeKey, err := dsse.GenerateKey(dsse.AlgECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	nodePEM, _ := dsse.MarshalPublicKeyPEM(nodeKey.Public())
	nodeRef := obj{"tenantId": "acme", "poolId": "p1", "nodeId": "gpu-node-0"}
	with := func(base obj, kv ...any) obj {
		out := obj{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	counter := 0
	beat := func(signer crypto.Signer, mutate func(obj)) obj {
		counter++
		rep := obj{"poolId": "p1", "nodeId": "gpu-node-0", "counter": counter, "at": time.Now().UTC().Format(time.RFC3339),
			"running": obj{"version": "1.0.0", "sequence": 1},
			"health":  obj{"devicesExpected": 8, "devicesVisible": 8, "checks": []obj{{"name": "nvidia-smi", "ok": true}}}, "bindings": []obj{}}
		if mutate != nil {
			mutate(rep)
		}
		payload, _ := json.Marshal(rep)
		env, err := dsse.Sign(api.ReportPayloadType, payload, signer)
		if err != nil {
			t.Fatal(err)
		}
		return with(nodeRef, "report", json.RawMessage(env))
	}
	c.do(exchange{method: "nodes.register", principal: "admin", body: with(nodeRef, "publicKey", string(nodePEM), "platform", "linux/amd64"), status: ok})
	c.do(exchange{method: "nodes.register", principal: "admin", body: with(nodeRef, "publicKey", string(nodePEM), "platform", "linux/arm64"), status: 409, code: apierr.Conflict,
		details: obj{"field": "platform"}})
	c.do(exchange{method: "nodes.register", principal: "admin", body: with(nodeRef, "nodeId", "gpu-node-99", "publicKey", string(nodePEM), "platform", "linux/amd64"), status: 400, code: apierr.InvalidInput,
		details: obj{"field": "nodeId"}})
	c.do(exchange{method: "nodes.get", principal: "alice", body: nodeRef, status: ok})
	hb := c.do(exchange{method: "nodes.heartbeat", principal: "admin", body: beat(nodeKey, nil), status: ok})
	if d := hb["desired"].(map[string]any); d["release"] == nil || d["floorSequence"] != float64(1) {
		t.Errorf("heartbeat desired: %v", d)
	}
	c.do(exchange{method: "nodes.heartbeat", principal: "admin", body: beat(stranger, nil), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "bad_signature"}})
	c.do(exchange{method: "nodes.heartbeat", principal: "admin", body: beat(nodeKey, func(r obj) { r["counter"] = 1 }), status: 409, code: apierr.Conflict,
		details: obj{"reason": "replay", "latestCounter": 1}})
	c.do(exchange{method: "nodes.heartbeat", principal: "admin", body: beat(nodeKey, func(r obj) { r["at"] = "2020-01-01T00:00:00Z" }), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "stale", "field": "report.payload.at"}})
	c.do(exchange{method: "nodes.heartbeat", principal: "admin", body: with(beat(nodeKey, nil), "nodeId", "gpu-node-1"), status: 404, code: apierr.NotFound})
	c.do(exchange{method: "nodes.cordon", principal: "admin", body: with(nodeRef, "reason", "fan"), status: ok})
	c.do(exchange{method: "nodes.list", principal: "alice", body: obj{"tenantId": "acme", "poolId": "p1", "state": "ready"}, status: ok})
	c.do(exchange{method: "nodes.list", principal: "alice", body: obj{"tenantId": "acme", "poolId": "p1", "state": "gone"}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "state"}, badBody: true})
	c.do(exchange{method: "nodes.uncordon", principal: "admin", body: nodeRef, status: ok})
	c.do(exchange{method: "nodes.get", principal: "admin", body: with(nodeRef, "tenantId", "globex"), status: 404, code: apierr.NotFound})
	c.do(exchange{method: "nodes.register", principal: "admin", body: with(nodeRef, "tenantId", "globex", "publicKey", string(nodePEM), "platform", "linux/amd64"), status: 404, code: apierr.NotFound})
	c.do(exchange{method: "nodes.list", principal: "admin", body: obj{"tenantId": "globex", "poolId": "p1"}, status: 404, code: apierr.NotFound})
	c.do(exchange{method: "nodes.cordon", principal: "admin", body: with(nodeRef, "nodeId", "gpu-node-1", "reason", "fan"), status: 404, code: apierr.NotFound})
	c.do(exchange{method: "nodes.uncordon", principal: "admin", body: with(nodeRef, "nodeId", "gpu-node-1"), status: 404, code: apierr.NotFound})

	// rollouts: the platform's, over pools by id. p1's one managed node
	// runs 1.0.0; the rollout is never advanced here (no reconciler), so
	// pause, resume and abort each answer at once.
	roll := obj{"tenantId": platform, "version": "1.1.0", "pools": []string{"p1"}, "waves": []obj{{"nodes": 1}},
		"maxUnavailable": 1, "bakeSeconds": 0, "drain": obj{"waitSeconds": 60, "onTimeout": "skip"}}
	created := c.do(exchange{method: "rollouts.create", principal: "admin", body: roll, status: ok})
	rid, _ := created["rollout"].(map[string]any)["rolloutId"].(string)
	c.do(exchange{method: "rollouts.create", principal: "admin", body: with(roll, "version", "1.2.0"), status: 409, code: apierr.Conflict,
		details: obj{"rolloutId": rid}})
	c.do(exchange{method: "rollouts.create", principal: "admin", body: with(roll, "version", "7.7.7"), status: 404, code: apierr.NotFound})
	c.do(exchange{method: "rollouts.create", principal: "admin", body: with(roll, "pools", []string{"p404"}), status: 404, code: apierr.NotFound,
		details: obj{"poolId": "p404"}})
	c.do(exchange{method: "rollouts.create", principal: "admin", body: with(roll, "waves", []obj{{"nodes": 1, "percent": 100}}), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "waves[0]"}})
	c.do(exchange{method: "rollouts.create", principal: "admin", body: with(roll, "pools", []string{"p1", "p1"}), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "pools"}})
	rref := obj{"tenantId": platform, "rolloutId": rid}
	c.do(exchange{method: "rollouts.get", principal: "admin", body: rref, status: ok})
	c.do(exchange{method: "rollouts.get", principal: "alice", body: rref, status: 403, code: apierr.PermissionDenied})
	c.do(exchange{method: "rollouts.get", principal: "admin", body: with(rref, "rolloutId", "01ARZ3NDEKTSV4RRFFQ69G5FAV"), status: 404, code: apierr.NotFound})
	c.do(exchange{method: "rollouts.list", principal: "admin", body: obj{"tenantId": platform}, status: ok})
	c.do(exchange{method: "rollouts.list", principal: "admin", body: obj{"tenantId": platform, "state": "progressing", "limit": 1}, status: ok})
	c.do(exchange{method: "rollouts.list", principal: "admin", body: obj{"tenantId": platform, "state": "gone"}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "state"}, badBody: true})
	c.do(exchange{method: "rollouts.nodes", principal: "admin", body: rref, status: ok})
	c.do(exchange{method: "rollouts.nodes", principal: "admin", body: with(rref, "step", "gone"), status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "step"}, badBody: true})
	c.do(exchange{method: "rollouts.nodes", principal: "admin", body: with(rref, "rolloutId", "01ARZ3NDEKTSV4RRFFQ69G5FAV"), status: 404, code: apierr.NotFound})
	c.do(exchange{method: "rollouts.pause", principal: "admin", body: rref, status: ok})
	c.do(exchange{method: "rollouts.resume", principal: "admin", body: rref, status: ok})
	for _, m := range []string{"rollouts.pause", "rollouts.resume", "rollouts.abort"} {
		c.do(exchange{method: m, principal: "admin", body: with(rref, "rolloutId", "01ARZ3NDEKTSV4RRFFQ69G5FAV"), status: 404, code: apierr.NotFound})
	}
	c.do(exchange{method: "rollouts.abort", principal: "admin", body: rref, status: ok})

	// pools.usage shows the owner p2's reservation.
	c.do(exchange{method: "pools.usage", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p2", "resource": "gpu", "from": at(0), "hours": 6}, status: ok})
	c.do(exchange{method: "pools.usage", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p2", "resource": "tpu"}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "unknown_resource", "field": "resource"}})
	c.do(exchange{method: "pools.usage", principal: "admin", body: obj{"tenantId": "globex", "poolId": "p2", "resource": "gpu"}, status: 404, code: apierr.NotFound})
	c.do(exchange{method: "pools.usage", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p2", "resource": "gpu", "hours": 48}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "hours"}, badBody: true})

	// pools.availability: p2's one node is held from +1h to +3h (its hours
	// from the next through the third), so two hours fit first at the
	// fourth hour from the current one.
	av := c.do(exchange{method: "pools.availability", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p2", "resource": "gpu", "count": 4, "hours": 2}, status: ok})
	offers := av["availability"].(map[string]any)["offerings"].([]any)
	if want := now.Truncate(time.Hour).Add(4 * time.Hour).Format(time.RFC3339); len(offers) == 0 || offers[0].(map[string]any)["earliestStart"] != want {
		t.Errorf("pools.availability of p2: offerings %v, want the first from %s", offers, want)
	}
	c.do(exchange{method: "pools.availability", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p2", "resource": "tpu", "count": 1, "hours": 1}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "unknown_resource", "field": "resource"}})
	c.do(exchange{method: "pools.availability", principal: "admin", body: obj{"tenantId": "globex", "poolId": "p2", "resource": "gpu", "count": 1, "hours": 1}, status: 404, code: apierr.NotFound})
	c.do(exchange{method: "pools.availability", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p2", "resource": "gpu", "count": 1, "hours": 1, "from": at(0), "to": at(40 * 24 * time.Hour)}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "to"}})
	c.do(exchange{method: "pools.availability", principal: "admin", body: obj{"tenantId": "acme", "poolId": "p2", "resource": "gpu", "count": 1, "hours": 0}, status: 400, code: apierr.InvalidInput,
		details: obj{"reason": "constraint", "field": "hours"}, badBody: true})

	// Every method, with a body it takes: without credentials
	// (UNAUTHENTICATED), with an unknown member (INVALID_INPUT), as a
	// principal granted nothing (PERMISSION_DENIED), and with DynamoDB down
	// (UNAVAILABLE, dependency dynamodb).
	valid := map[string]obj{
		"releases.register":    register("4.0.0", 9, key),
		"releases.list":        {"tenantId": platform},
		"releases.log":         {"tenantId": platform},
		"releases.prove":       {"tenantId": platform, "version": "1.0.0"},
		"pools.create":         {"tenantId": "acme", "poolId": "p9", "resources": obj{"gpu": 8}},
		"pools.offer":          {"tenantId": "acme", "poolId": "p1", "toTenantId": "globex", "resource": "gpu", "max": 4},
		"pools.get":            {"tenantId": "acme", "poolId": "p1"},
		"pools.list":           {"tenantId": "acme"},
		"pools.usage":          {"tenantId": "acme", "poolId": "p1", "resource": "gpu"},
		"pools.availability":   {"tenantId": "acme", "poolId": "p1", "resource": "gpu", "count": 1, "hours": 1},
		"quotas.get":           {"tenantId": "acme", "poolId": "p1", "resource": "gpu"},
		"quotas.list":          {"tenantId": "acme"},
		"reservations.create":  create("acme", "p1", 1, ""),
		"reservations.get":     {"tenantId": "acme", "reservationId": id},
		"reservations.list":    {"tenantId": "acme"},
		"reservations.release": {"tenantId": "acme", "reservationId": id},
		"nodes.register":       with(nodeRef, "publicKey", string(nodePEM), "platform", "linux/amd64"),
		"nodes.get":            nodeRef,
		"nodes.list":           {"tenantId": "acme", "poolId": "p1"},
		"nodes.cordon":         with(nodeRef, "reason", "fan"),
		"nodes.uncordon":       nodeRef,
		"nodes.heartbeat":      beat(nodeKey, nil),
		"rollouts.create":      with(roll, "pools", []string{"p2"}),
		"rollouts.get":         rref,
		"rollouts.list":        {"tenantId": platform},
		"rollouts.nodes":       rref,
		"rollouts.pause":       rref,
		"rollouts.resume":      rref,
		"rollouts.abort":       rref,
	}
	for _, m := range api.Catalog {
		body, ok := valid[m.Name]
		if !ok {
			t.Fatalf("no valid body for %s", m.Name)
		}
		c.do(exchange{method: m.Name, body: body, status: 401, code: apierr.Unauthenticated})
		unknown := obj{"unknownMember": true}
		for k, v := range body {
			unknown[k] = v
		}
		c.do(exchange{method: m.Name, principal: "admin", body: unknown, status: 400, code: apierr.InvalidInput, badBody: true})
		c.do(exchange{method: m.Name, principal: "nobody", body: body, status: 403, code: apierr.PermissionDenied})
	}
	dynamoFaults.SetDown(true)
	for _, m := range api.Catalog {
		c.do(exchange{method: m.Name, principal: "admin", body: valid[m.Name], status: 503, code: apierr.Unavailable, details: obj{"dependency": "dynamodb"}})
	}
	dynamoFaults.SetDown(false)

	// Every documented (method, status) pair was answered live, except
	// INTERNAL's 500: a bug cannot be provoked on purpose.
	documented, reached := 0, 0
	for _, m := range api.Catalog {
		statuses := []int{http.StatusOK}
		for _, s := range m.ErrorStatuses() {
			statuses = append(statuses, s.Status)
		}
		for _, s := range statuses {
			documented++
			switch {
			case c.seen[m.Name][s]:
				reached++
			case s != http.StatusInternalServerError:
				t.Errorf("%s: documented status %d was never answered", m.Name, s)
			}
		}
	}
	t.Logf("%d exchanges; %d of %d documented (method, status) pairs answered live and validated against docs/openapi.json (the rest: INTERNAL)",
		c.n, reached, documented)
}
