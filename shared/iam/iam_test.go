package iam_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/iam"
)

// Both backends are Deciders.
var (
	_ iam.Decider = (*iam.Policy)(nil)
	_ iam.Decider = (*iam.Client)(nil)
)

// specPolicy is the contract's example policy, verbatim.
const specPolicy = `{"grants": [
  {"principal": "admin", "permissions": ["*"], "scopes": ["*"]},
  {"principal": "alice", "permissions": ["compute:reservations:*", "compute:quotas:read", "compute:pools:read"],
   "scopes": ["tenant:acme"]}
]}`

type decideCase struct {
	name       string
	principal  string
	permission string
	scope      string
	allow      bool
}

func runDecide(t *testing.T, p *iam.Policy, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := iam.Request{Principal: tc.principal, Permission: tc.permission, Scope: tc.scope,
				TenantID: strings.TrimPrefix(tc.scope, "tenant:"), Attributes: map[string]any{"count": 1}}
			d, err := p.Decide(context.Background(), req)
			if err != nil {
				t.Fatalf("Decide = %v; the policy engine always decides", err)
			}
			if d.Allow != tc.allow {
				t.Fatalf("Decide(%s %s @ %s) allow = %v, want %v", tc.principal, tc.permission, tc.scope, d.Allow, tc.allow)
			}
			if tc.allow && d.Reason != "" {
				t.Errorf("allow carries reason %q", d.Reason)
			}
			if !tc.allow {
				if d.Reason == "" {
					t.Fatal("deny without a reason")
				}
				for _, part := range []string{tc.principal, tc.permission, tc.scope} {
					if !strings.Contains(d.Reason, part) {
						t.Errorf("reason %q does not name %q", d.Reason, part)
					}
				}
			}
		})
	}
}

func TestSpecPolicy(t *testing.T) {
	p, err := iam.ParsePolicy([]byte(specPolicy))
	if err != nil {
		t.Fatalf("ParsePolicy(spec example) = %v", err)
	}
	runDecide(t, p, []decideCase{
		// admin: * on *.
		{"admin fleet", "admin", "compute:fleet:admin", "compute-fleet", true},
		{"admin pools on any tenant", "admin", "compute:pools:admin", "tenant:globex", true},
		{"admin anything", "admin", "x", "y", true},
		// alice: her three patterns on tenant:acme.
		{"alice create reservation", "alice", "compute:reservations:create", "tenant:acme", true},
		{"alice read reservations", "alice", "compute:reservations:read", "tenant:acme", true},
		{"alice release reservation", "alice", "compute:reservations:release", "tenant:acme", true},
		{"alice quotas read", "alice", "compute:quotas:read", "tenant:acme", true},
		{"alice pools read", "alice", "compute:pools:read", "tenant:acme", true},
		// Anything not granted is denied.
		{"alice pools admin", "alice", "compute:pools:admin", "tenant:acme", false},
		{"alice quotas write", "alice", "compute:quotas:write", "tenant:acme", false},
		{"alice fleet", "alice", "compute:fleet:admin", "compute-fleet", false},
		{"alice other tenant", "alice", "compute:reservations:create", "tenant:globex", false},
		{"alice tenant with acme as prefix", "alice", "compute:pools:read", "tenant:acme2", false},
		{"alice tenant prefix of acme", "alice", "compute:pools:read", "tenant:acm", false},
		{"alice scope without tenant prefix", "alice", "compute:pools:read", "acme", false},
		{"wildcard needs the colon", "alice", "compute:reservations", "tenant:acme", false},
		{"exact permission, no suffix", "alice", "compute:quotas:read:all", "tenant:acme", false},
		{"exact permission, no prefix", "alice", "compute:quotas:rea", "tenant:acme", false},
		{"principal case matters", "Alice", "compute:pools:read", "tenant:acme", false},
		{"admin case matters", "Admin", "compute:fleet:admin", "compute-fleet", false},
		{"principal with space", "alice ", "compute:pools:read", "tenant:acme", false},
		{"unknown principal", "bob", "compute:pools:read", "tenant:acme", false},
		{"empty principal", "", "compute:pools:read", "tenant:acme", false},
	})
}

func TestWildcards(t *testing.T) {
	p := &iam.Policy{Grants: []iam.Grant{
		{Principal: "svc-*", Permissions: []string{"compute:*"}, Scopes: []string{"tenant:*"}},
		{Principal: "ops", Permissions: []string{"compute:fleet:admin"}, Scopes: []string{"compute-fleet"}},
		{Principal: "lit", Permissions: []string{"compute:*:read"}, Scopes: []string{"tenant:acme"}},
		{Principal: "*", Permissions: []string{"public:read"}, Scopes: []string{"*"}},
	}}
	runDecide(t, p, []decideCase{
		{"principal suffix wildcard", "svc-reconciler", "compute:pools:read", "tenant:acme", true},
		{"principal wildcard with empty suffix", "svc-", "compute:pools:read", "tenant:acme", true},
		{"principal wildcard prefix must match", "svc", "compute:pools:read", "tenant:acme", false},
		{"principal wildcard is a prefix, not a substring", "my-svc-x", "compute:pools:read", "tenant:acme", false},
		{"permission suffix wildcard", "svc-a", "compute:anything:at:all", "tenant:x", true},
		{"permission wildcard prefix must match", "svc-a", "billing:read", "tenant:x", false},
		{"scope suffix wildcard", "svc-a", "compute:pools:read", "tenant:", true},
		{"scope wildcard prefix must match", "svc-a", "compute:pools:read", "compute-fleet", false},
		{"exact permission and scope", "ops", "compute:fleet:admin", "compute-fleet", true},
		{"exact scope only", "ops", "compute:fleet:admin", "compute-fleet-2", false},
		{"exact permission only", "ops", "compute:fleet:admin2", "compute-fleet", false},
		{"* inside a pattern is literal", "lit", "compute:pools:read", "tenant:acme", false},
		{"* inside a pattern matches itself", "lit", "compute:*:read", "tenant:acme", true},
		{"principal * matches anyone", "zed", "public:read", "anything", true},
		{"principal * only for its grant", "zed", "compute:pools:read", "tenant:acme", false},
	})
}

func TestGrantsDoNotCombine(t *testing.T) {
	// Every permission of a grant applies on every scope of that grant, but a
	// permission of one grant never applies on a scope of another.
	p := &iam.Policy{Grants: []iam.Grant{
		{Principal: "carol", Permissions: []string{"p:a", "p:b"}, Scopes: []string{"s:x", "s:y"}},
		{Principal: "carol", Permissions: []string{"p:c"}, Scopes: []string{"s:z"}},
		{Principal: "dave", Permissions: []string{"p:a"}, Scopes: nil},
		{Principal: "erin", Permissions: nil, Scopes: []string{"*"}},
	}}
	runDecide(t, p, []decideCase{
		{"a on x", "carol", "p:a", "s:x", true},
		{"a on y", "carol", "p:a", "s:y", true},
		{"b on x", "carol", "p:b", "s:x", true},
		{"b on y", "carol", "p:b", "s:y", true},
		{"c on z", "carol", "p:c", "s:z", true},
		{"a on z (cross grant)", "carol", "p:a", "s:z", false},
		{"c on x (cross grant)", "carol", "p:c", "s:x", false},
		{"grant without scopes", "dave", "p:a", "s:x", false},
		{"grant without permissions", "erin", "p:a", "s:x", false},
		{"another principal's grant", "dave", "p:c", "s:z", false},
	})
}

// An empty grants list denies everything; a policy without the grants
// member is refused (a misspelt or missing key must not deny silently).
func TestEmptyPolicyDeniesEverything(t *testing.T) {
	for _, doc := range []string{`{"grants":null}`, `{}`} {
		if _, err := iam.ParsePolicy([]byte(doc)); err == nil {
			t.Errorf("ParsePolicy accepted %s; policy files are decoded strictly", doc)
		}
	}
	for _, doc := range []string{`{"grants":[]}`} {
		p, err := iam.ParsePolicy([]byte(doc))
		if err != nil {
			t.Fatalf("ParsePolicy(%s) = %v", doc, err)
		}
		runDecide(t, p, []decideCase{{"deny " + doc, "admin", "compute:fleet:admin", "compute-fleet", false}})
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := iam.ParsePolicy([]byte(specPolicy))
	if err != nil {
		t.Fatalf("ParsePolicy = %v", err)
	}
	want := &iam.Policy{Grants: []iam.Grant{
		{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}},
		{Principal: "alice", Permissions: []string{"compute:reservations:*", "compute:quotas:read", "compute:pools:read"},
			Scopes: []string{"tenant:acme"}},
	}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("ParsePolicy = %+v, want %+v", p, want)
	}

	for _, tc := range []struct {
		name, doc, wantErr string
	}{
		{"unknown top-level field", `{"grants":[],"grant":[]}`, "grant"},
		{"unknown grant field", `{"grants":[{"principal":"a","permissions":["*"],"scopes":["*"],"effect":"deny"}]}`, "effect"},
		{"singular permission typo", `{"grants":[{"principal":"a","permission":["*"],"scopes":["*"]}]}`, "permission"},
		{"empty principal", `{"grants":[{"principal":"admin","permissions":["*"],"scopes":["*"]},{"principal":"","permissions":["*"],"scopes":["*"]}]}`, "grants[1]"},
		{"missing principal", `{"grants":[{"permissions":["*"],"scopes":["*"]}]}`, "grants[0]"},
		{"malformed", `{"grants":[`, ""},
		{"wrong type", `{"grants":{"principal":"a"}}`, ""},
		{"permissions not strings", `{"grants":[{"principal":"a","permissions":[1],"scopes":["*"]}]}`, ""},
		{"empty document", ``, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := iam.ParsePolicy([]byte(tc.doc))
			if err == nil {
				t.Fatalf("ParsePolicy(%s) = %+v, want error", tc.doc, p)
			}
			if p != nil {
				t.Errorf("ParsePolicy returned a policy with the error")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestLoadPolicy(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(good, []byte(specPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := iam.LoadPolicy(good)
	if err != nil {
		t.Fatalf("LoadPolicy = %v", err)
	}
	if len(p.Grants) != 2 || p.Grants[1].Principal != "alice" {
		t.Errorf("LoadPolicy = %+v", p)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"grants":[{"principal":"a","scope":["*"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := iam.LoadPolicy(bad); err == nil {
		t.Error("LoadPolicy(unknown field) = nil error")
	}
	if _, err := iam.LoadPolicy(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("LoadPolicy(missing file) = nil error")
	}
}
