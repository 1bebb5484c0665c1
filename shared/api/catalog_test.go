package api_test

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// specMethods is the contract's method table (its order is the docs' order).
var specMethods = []struct {
	name, kind, permission, scope, module string
	decideOnDraft                         bool
	phase                                 string
}{
	{"releases.register", "mutation", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.4"},
	{"releases.list", "read", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.4"},
	{"releases.log", "read", "compute:releases:read", "compute-fleet", "rollout", false, "v0.7"},
	{"releases.prove", "read", "compute:releases:read", "compute-fleet", "rollout", false, "v0.7"},
	{"pools.create", "mutation", "compute:pools:admin", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"pools.offer", "mutation", "compute:pools:admin", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"pools.get", "read", "compute:pools:read", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"pools.list", "read", "compute:pools:read", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"pools.availability", "read", "compute:reservations:read", "tenant:{tenantId}", "capacity", false, "v0.8"},
	{"quotas.get", "read", "compute:quotas:read", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"quotas.list", "read", "compute:quotas:read", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"reservations.create", "mutation", "compute:reservations:create", "tenant:{tenantId}", "capacity", true, "v0.4"},
	{"reservations.get", "read", "compute:reservations:read", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"reservations.list", "read", "compute:reservations:read", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"reservations.release", "mutation", "compute:reservations:release", "tenant:{tenantId}", "capacity", false, "v0.4"},
	{"nodes.register", "mutation", "compute:pools:admin", "tenant:{tenantId}", "fleet", false, "v0.6"},
	{"nodes.get", "read", "compute:pools:read", "tenant:{tenantId}", "fleet", false, "v0.6"},
	{"nodes.list", "read", "compute:pools:read", "tenant:{tenantId}", "fleet", false, "v0.6"},
	{"nodes.cordon", "mutation", "compute:pools:admin", "tenant:{tenantId}", "fleet", false, "v0.6"},
	{"nodes.uncordon", "mutation", "compute:pools:admin", "tenant:{tenantId}", "fleet", false, "v0.6"},
	{"nodes.heartbeat", "mutation", "compute:nodes:report", "node:{poolId}/{nodeId}", "fleet", false, "v0.6"},
	{"rollouts.create", "mutation", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.6"},
	{"rollouts.get", "read", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.6"},
	{"rollouts.list", "read", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.6"},
	{"rollouts.nodes", "read", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.6"},
	{"rollouts.pause", "mutation", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.6"},
	{"rollouts.resume", "mutation", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.6"},
	{"rollouts.abort", "mutation", "compute:fleet:admin", "compute-fleet", "rollout", false, "v0.6"},
}

// extensions are methods the contract's table does not list (their reference
// pages say what each adds).
var extensions = map[string]string{"pools.usage": "v0.5"}

func TestCatalogMatchesSpec(t *testing.T) {
	if len(api.Catalog) != len(specMethods)+len(extensions) {
		t.Errorf("catalog has %d methods, want %d", len(api.Catalog), len(specMethods)+len(extensions))
	}
	var spec []*api.Method
	for _, m := range api.Catalog {
		if phase, ok := extensions[m.Name]; ok {
			if m.Phase != phase {
				t.Errorf("%s: phase %q, want %q", m.Name, m.Phase, phase)
			}
			continue
		}
		spec = append(spec, m)
	}
	for i, want := range specMethods {
		t.Run(want.name, func(t *testing.T) {
			m := api.Lookup(want.name)
			if m == nil {
				t.Fatalf("Lookup(%q) = nil", want.name)
			}
			if i < len(spec) && spec[i] != m {
				t.Errorf("table position %d holds %s; the table order is the docs order", i, spec[i].Name)
			}
			if string(m.Kind) != want.kind || m.Permission != want.permission || m.Scope != want.scope ||
				m.Module != want.module || m.DecideOnDraft != want.decideOnDraft {
				t.Errorf("got kind %s, %s @ %s, module %s, decideOnDraft %v; want %s, %s @ %s, %s, %v",
					m.Kind, m.Permission, m.Scope, m.Module, m.DecideOnDraft,
					want.kind, want.permission, want.scope, want.module, want.decideOnDraft)
			}
			if m.Phase != want.phase {
				t.Errorf("phase = %q, want %s", m.Phase, want.phase)
			}
		})
	}
}

func TestCatalogUnique(t *testing.T) {
	names, paths, functions := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, m := range api.Catalog {
		for _, u := range []struct {
			what string
			seen map[string]bool
			v    string
		}{{"name", names, m.Name}, {"path", paths, m.Path()}, {"function name", functions, m.FunctionName()}} {
			if u.seen[u.v] {
				t.Errorf("%s %q appears twice", u.what, u.v)
			}
			u.seen[u.v] = true
		}
	}
	if functions[api.ReconcilerFunction] {
		t.Errorf("a method's function is named %q, the reconciler's name", api.ReconcilerFunction)
	}
}

var (
	namePattern       = regexp.MustCompile(`^[a-z]+\.[a-z]+$`)
	pathPattern       = regexp.MustCompile(`^/api/compute/[a-z]+/[a-z]+$`)
	permissionPattern = regexp.MustCompile(`^compute:[a-z]+:[a-z]+$`)
	writeActions      = []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "kms:Sign",
		"dynamodb:TransactWriteItems"}
)

func TestCatalogMethods(t *testing.T) {
	resources := map[string]bool{}
	for _, r := range api.ResourceDocs {
		resources[r.Name] = true
	}
	var noActions []string
	for _, m := range api.Catalog {
		t.Run(m.Name, func(t *testing.T) {
			if !namePattern.MatchString(m.Name) {
				t.Errorf("name %q is not <resource>.<verb>", m.Name)
			}
			if m.Resource()+"."+m.Verb() != m.Name {
				t.Errorf("Resource %q + Verb %q != Name %q", m.Resource(), m.Verb(), m.Name)
			}
			if want := "/api/compute/" + m.Resource() + "/" + m.Verb(); m.Path() != want || !pathPattern.MatchString(m.Path()) {
				t.Errorf("Path = %q, want %q", m.Path(), want)
			}
			if want := m.Resource() + "-" + m.Verb(); m.FunctionName() != want {
				t.Errorf("FunctionName = %q, want %q", m.FunctionName(), want)
			}
			if api.Lookup(m.Name) != m || api.LookupPath(m.Path()) != m {
				t.Errorf("Lookup/LookupPath do not find %s", m.Name)
			}
			if !resources[m.Resource()] {
				t.Errorf("resource %q has no ResourceDocs entry", m.Resource())
			}
			if m.Kind != api.Mutation && m.Kind != api.Read {
				t.Errorf("kind = %q", m.Kind)
			}
			if !permissionPattern.MatchString(m.Permission) {
				t.Errorf("permission = %q", m.Permission)
			}
			if m.Scope == "" || m.Module == "" || m.Summary == "" || m.Status == "" {
				t.Errorf("scope %q, module %q, summary %q, status %q: none may be empty", m.Scope, m.Module, m.Summary, m.Status)
			}
			// Scope templates resolve for a tenant.
			got := m.ScopeFor("acme", map[string]string{"poolId": "p1", "nodeId": "gpu-node-0"})
			if strings.ContainsAny(got, "{}") {
				t.Errorf("ScopeFor(acme) = %q still holds a placeholder", got)
			}
			switch m.Scope {
			case "tenant:{tenantId}":
				if got != "tenant:acme" {
					t.Errorf("ScopeFor(acme) = %q, want tenant:acme", got)
				}
			case "compute-fleet":
				if got != "compute-fleet" {
					t.Errorf("ScopeFor(acme) = %q, want compute-fleet", got)
				}
			case api.NodeScope:
				if got != "node:p1/gpu-node-0" {
					t.Errorf("ScopeFor = %q, want node:p1/gpu-node-0", got)
				}
			default:
				t.Errorf("scope %q is neither the tenant nor the fleet scope", m.Scope)
			}
			checkInput(t, m)
			if len(m.Actions) == 0 {
				noActions = append(noActions, m.Name)
				return
			}
			if m.Kind == api.Read {
				for _, a := range m.Actions {
					if slices.Contains(writeActions, a) {
						t.Errorf("read method %s may call %s", m.Name, a)
					}
				}
			}
			checkIndexes(t, m.Actions, m.Indexes)
			if pages := hasField(m.Input, "cursor"); pages != slices.Contains(m.Actions, api.ReadsCursorKey) {
				t.Errorf("input pages with cursors: %v, declares %s: %v (exactly the methods that page read the cursor key)",
					pages, api.ReadsCursorKey, !pages)
			}
			for _, a := range m.Actions {
				if !strings.HasPrefix(a, "dynamodb:") && !strings.HasPrefix(a, "kms:") && a != api.ReadsCursorKey {
					t.Errorf("action %q is neither DynamoDB, KMS nor the cursor key's", a)
				}
				if strings.Contains(a, "*") {
					t.Errorf("action %q is a wildcard (least privilege)", a)
				}
			}
		})
	}
	if len(noActions) > 0 {
		t.Logf("methods without Actions (not checked for write actions): %v", noActions)
	}
}

func TestReconcilerIndexes(t *testing.T) {
	checkIndexes(t, api.ReconcilerActions, api.ReconcilerIndexes)
	if slices.Contains(api.ReconcilerActions, api.ReadsCursorKey) {
		t.Errorf("the reconciler pages no cursors, yet reads the cursor key")
	}
}

// checkIndexes: Query is declared exactly when Indexes says where it reads,
// and each is an index of the table definition (or the table itself).
func checkIndexes(t *testing.T, actions, indexes []string) {
	t.Helper()
	if queries := slices.Contains(actions, "dynamodb:Query"); queries != (len(indexes) > 0) {
		t.Errorf("declares dynamodb:Query: %v, Indexes: %v (Query needs them, and only Query)", queries, indexes)
	}
	for _, ix := range indexes {
		if ix != api.BaseTable && !slices.Contains(schema.IndexNames(), ix) {
			t.Errorf("index %q is not in the table definition (shared/dynamo/schema)", ix)
		}
	}
}

func hasField(typ reflect.Type, jsonName string) bool {
	for _, d := range strictjson.Describe(typ) {
		if d.Name == jsonName {
			return true
		}
	}
	return false
}

// checkInput: the method's Input is a struct that embeds api.Tenant, so
// tenantId is required and bounded as the wire conventions say.
func checkInput(t *testing.T, m *api.Method) {
	t.Helper()
	if m.Input == nil || m.Input.Kind() != reflect.Struct {
		t.Fatalf("Input = %v, want a struct type", m.Input)
	}
	embedsTenant := false
	for i := 0; i < m.Input.NumField(); i++ {
		f := m.Input.Field(i)
		if f.Anonymous && f.Type == reflect.TypeFor[api.Tenant]() {
			embedsTenant = true
		}
	}
	if !embedsTenant {
		t.Errorf("%v does not embed api.Tenant", m.Input)
	}
	// The gateway reads the acting tenant through this promoted method; a
	// method promoted under the embedded field's own name would be shadowed.
	if !reflect.PointerTo(m.Input).Implements(reflect.TypeFor[interface{ ActingTenant() string }]()) {
		t.Errorf("*%v has no promoted ActingTenant() method", m.Input)
	}
	docs := strictjson.Describe(m.Input)
	if len(docs) == 0 || docs[0].Name != "tenantId" || !docs[0].Required || docs[0].Type != "string" {
		t.Errorf("first documented field = %+v, want required string tenantId", docs)
	}
	// Decoding {} fails on the missing tenantId.
	in := reflect.New(m.Input).Interface()
	e := apierr.As(api.DecodeInput([]byte(`{}`), in))
	if e == nil || e.Code != apierr.InvalidInput || e.Details["field"] != "tenantId" || e.Details["reason"] != "required" {
		t.Errorf("DecodeInput({}) = %v, want INVALID_INPUT required at tenantId", e)
	}
	// List inputs take limit (1..1000) and cursor.
	if m.Verb() == "list" {
		var limit, cursor bool
		for _, d := range docs {
			switch d.Name {
			case "limit":
				limit = d.Type == "integer" && !d.Required && d.Constraints == "1..1000"
			case "cursor":
				cursor = d.Type == "string" && !d.Required
			}
		}
		if !limit || !cursor {
			t.Errorf("list input %v: limit ok %v, cursor ok %v; docs %+v", m.Input, limit, cursor, docs)
		}
	}
}

func TestTenantIDRule(t *testing.T) {
	// The wire conventions: a required string, at most 128 characters, ^[A-Za-z0-9._:-]{1,128}$.
	if got, want := api.TenantIDPattern.String(), `^[A-Za-z0-9._:-]{1,128}$`; got != want {
		t.Errorf("TenantIDPattern = %s, want %s", got, want)
	}
	for _, tc := range []struct {
		tenant string
		ok     bool
	}{
		{"acme", true},
		{"A.b_c:d-9", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"", false},
		{"ac me", false},
		{"acme/1", false},
		{"acmé", false},
		{"acme\n", false},
	} {
		var in api.GetPoolInput
		err := api.DecodeInput([]byte(`{"tenantId":"`+strings.ReplaceAll(tc.tenant, "\n", `\n`)+`","poolId":"p"}`), &in)
		if tc.ok && err != nil {
			t.Errorf("tenantId %q: %v", tc.tenant, err)
		}
		if !tc.ok {
			if e := apierr.As(err); e == nil || e.Details["field"] != "tenantId" {
				t.Errorf("tenantId %q: err %v, want INVALID_INPUT at tenantId", tc.tenant, err)
			}
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	for _, name := range []string{"", "pools", "pools.delete", "Pools.get", "pools.get "} {
		if m := api.Lookup(name); m != nil {
			t.Errorf("Lookup(%q) = %s", name, m.Name)
		}
	}
	for _, path := range []string{"", "/api/compute/pools", "/api/compute/pools/delete", "/api/compute/pools/get/", "/api/compute/Pools/get"} {
		if m := api.LookupPath(path); m != nil {
			t.Errorf("LookupPath(%q) = %s", path, m.Name)
		}
	}
}
