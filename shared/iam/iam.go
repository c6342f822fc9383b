// Package iam evaluates the identity-based policies of Signet's functions
// the way AWS IAM does for the cases the template uses: a request is allowed
// only when an Allow statement matches both its action and its resource and
// no Deny statement matches. Matching is case-insensitive for actions and
// case-sensitive for resources, with `*` and `?` wildcards, as IAM does.
//
// The local stack enforces these policies on every SDK call a function
// makes, so a permission the template lacks fails locally exactly where it
// would fail on AWS.
package iam

import (
	"fmt"
	"strings"
)

// Effect is Allow or Deny.
type Effect string

// Effects of a statement.
const (
	Allow Effect = "Allow"
	Deny  Effect = "Deny"
)

// Statement is one statement of a policy document.
type Statement struct {
	Effect   Effect
	Actions  []string // e.g. "dynamodb:GetItem", "sqs:SendMessage*"
	Resource []string // ARNs, wildcards allowed
}

// Policy is the union of the statements attached to one role.
type Policy struct {
	Statements []Statement
}

// Request is one authorization question: may the role do Action on Resource?
type Request struct {
	Action   string // service:Operation
	Resource string // ARN
}

func (r Request) String() string { return r.Action + " on " + r.Resource }

// Allows reports whether p allows r: some Allow statement matches and no
// Deny statement does (an explicit deny always wins).
func (p Policy) Allows(r Request) bool {
	allowed := false
	for _, s := range p.Statements {
		if !s.matches(r) {
			continue
		}
		if s.Effect == Deny {
			return false
		}
		if s.Effect == Allow {
			allowed = true
		}
	}
	return allowed
}

// Actions returns every action pattern some Allow statement grants on a
// resource matching resource (for least-privilege checks).
func (p Policy) Actions(resource string) []string {
	var out []string
	for _, s := range p.Statements {
		if s.Effect != Allow {
			continue
		}
		for _, res := range s.Resource {
			if Match(res, resource, true) {
				out = append(out, s.Actions...)
				break
			}
		}
	}
	return out
}

func (s Statement) matches(r Request) bool {
	action := false
	for _, a := range s.Actions {
		if Match(a, r.Action, false) {
			action = true
			break
		}
	}
	if !action {
		return false
	}
	for _, res := range s.Resource {
		if Match(res, r.Resource, true) {
			return true
		}
	}
	return false
}

// Match reports whether value matches pattern, where `*` matches any run of
// characters (also none) and `?` exactly one.
func Match(pattern, value string, caseSensitive bool) bool {
	if !caseSensitive {
		pattern, value = strings.ToLower(pattern), strings.ToLower(value)
	}
	// Iterative glob with backtracking to the last star.
	p, v, star, mark := 0, 0, -1, 0
	for v < len(value) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == value[v]):
			p++
			v++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, v
			p++
		case star >= 0:
			p, mark = star+1, mark+1
			v = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// DeniedError is what AWS answers when no statement allows a request.
type DeniedError struct {
	Principal string // the role's session ARN
	Request   Request
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s because no identity-based policy allows the %s action",
		e.Principal, e.Request.Action, e.Request.Resource, e.Request.Action)
}
