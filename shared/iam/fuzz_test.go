package iam_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/iam"
)

// FuzzParsePolicy: a policy file is parsed as strictly as a request and
// never panics. A policy it accepts means what it says: encoded and parsed
// again it is the same policy, every grant allows what it names (a trailing
// * standing for any suffix), and a principal no grant names is denied.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(`{"grants":[{"principal":"admin","permissions":["*"],"scopes":["*"]}]}`))
	f.Add([]byte(`{"grants":[{"principal":"alice","permissions":["compute:reservations:*","compute:quotas:read"],"scopes":["tenant:acme"]}]}`))
	f.Add([]byte(`{"grants":[]}`))
	f.Add([]byte(`{"grants":[{"principal":"a","permissions":["p"],"scopes":["s"],"principal":"b"}]}`))
	f.Add([]byte(`{"grants":[{"principal":"a","permissions":[],"scopes":["s"]}]}`))
	f.Add([]byte(`{"grants":null}`))
	f.Add([]byte(`{"grants":[{"principal":"*","permissions":["x*"],"scopes":["*"]}]} trailing`))
	f.Add([]byte(`{"grants":[` + strings.Repeat("[", 100) + `]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := iam.ParsePolicy(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := iam.ParsePolicy(again)
		if err != nil || !reflect.DeepEqual(p.Grants, p2.Grants) {
			t.Fatalf("accepted %s; its encoding %s parses as %+v, %v", data, again, p2, err)
		}
		ctx := context.Background()
		// concrete is a value a pattern matches.
		concrete := func(pattern string) string {
			if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
				return prefix + "x"
			}
			return pattern
		}
		for _, g := range p.Grants {
			r := iam.Request{Principal: concrete(g.Principal), Permission: concrete(g.Permissions[0]), Scope: concrete(g.Scopes[0])}
			if d, err := p.Decide(ctx, r); err != nil || !d.Allow {
				t.Fatalf("grant %+v does not allow %+v: %+v %v", g, r, d, err)
			}
		}
		stranger := iam.Request{Principal: "\x00nobody", Permission: "compute:x", Scope: "tenant:x"}
		named := false
		for _, g := range p.Grants {
			named = named || strings.HasPrefix(stranger.Principal, strings.TrimSuffix(g.Principal, "*")) && strings.HasSuffix(g.Principal, "*") || g.Principal == stranger.Principal
		}
		if d, _ := p.Decide(ctx, stranger); d.Allow && !named {
			t.Fatalf("a principal no grant names is allowed: %+v", p.Grants)
		}
	})
}
