// Package iam asks Better IAM for authorization decisions. Two backends share
// the Decider interface: Policy (an embedded policy file, for local runs and
// tests) and Client (HTTP, for a remote Better IAM). Both fail closed.
package iam

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Request is what a decision is asked on (the README's Better IAM).
type Request struct {
	Principal  string         `json:"principal"`
	Permission string         `json:"permission"`
	Scope      string         `json:"scope"`
	TenantID   string         `json:"tenantId"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Decision is allow or deny, with a reason for deny.
type Decision struct {
	Allow  bool   `json:"allow"`
	Reason string `json:"reason,omitempty"`
}

// Decider decides. An error means no decision could be had (fail closed).
type Decider interface {
	Decide(ctx context.Context, r Request) (Decision, error)
}

// Grant gives principal every permission on every scope listed.
type Grant struct {
	Principal   string   `json:"principal" bc:"required,min=1"`
	Permissions []string `json:"permissions" bc:"required,min=1"`
	Scopes      []string `json:"scopes" bc:"required,min=1"`
}

// Policy is the embedded engine: anything not granted is denied.
type Policy struct {
	Grants []Grant `json:"grants" bc:"required"`
}

// LoadPolicy reads a policy file (BC_POLICY_FILE), strictly.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	return ParsePolicy(data)
}

// ParsePolicy parses a policy document as strictly as a request: unknown
// fields, duplicate keys and trailing data are errors, so a typo cannot
// silently grant or deny.
func ParsePolicy(data []byte) (*Policy, error) {
	var p Policy
	if err := strictjson.Decode(data, &p, ""); err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	return &p, nil
}

// Decide allows when one grant names the principal, a permission pattern
// matching r.Permission and a scope pattern matching r.Scope.
func (p *Policy) Decide(_ context.Context, r Request) (Decision, error) {
	for _, g := range p.Grants {
		if !match(g.Principal, r.Principal) {
			continue
		}
		if anyMatch(g.Permissions, r.Permission) && anyMatch(g.Scopes, r.Scope) {
			return Decision{Allow: true}, nil
		}
	}
	return Decision{Reason: fmt.Sprintf("no grant gives %s %s on %s", r.Principal, r.Permission, r.Scope)}, nil
}

func anyMatch(patterns []string, s string) bool {
	for _, p := range patterns {
		if match(p, s) {
			return true
		}
	}
	return false
}

// match: a trailing * matches any suffix; anything else matches exactly.
func match(pattern, s string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(s, prefix)
	}
	return pattern == s
}
