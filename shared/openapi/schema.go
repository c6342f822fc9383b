package openapi

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// schema is one compiled JSON Schema (draft 2020-12) of the subset the
// document uses: the assertions below, $ref to the document's own
// components, and annotations, which are ignored. A keyword outside the
// subset fails Load, so the document cannot outgrow the validator
// unnoticed; TestTheValidatorAgreesWithJSONSchema holds its verdicts to
// a full implementation's.
type schema struct {
	ref     string // "#/components/schemas/X", resolved when validated
	never   bool   // the schema false
	types   []string
	enum    []any
	pattern *regexp.Regexp

	minLength, maxLength int // -1: absent
	minItems, maxItems   int
	uniqueItems          bool
	minimum, maximum     *big.Rat
	items                *schema

	properties          map[string]*schema
	required            []string
	additional          *schema // nil: any additional property is allowed
	anyOf, allOf, oneOf []*schema
}

// refs returns the $refs of s and of the schemas inside it.
func (s *schema) refs() []string {
	var out []string
	var walk func(*schema)
	walk = func(s *schema) {
		if s == nil {
			return
		}
		if s.ref != "" {
			out = append(out, s.ref)
		}
		walk(s.items)
		walk(s.additional)
		for _, p := range s.properties {
			walk(p)
		}
		for _, list := range [][]*schema{s.anyOf, s.allOf, s.oneOf} {
			for _, sub := range list {
				walk(sub)
			}
		}
	}
	walk(s)
	return out
}

// annotations are keywords that assert nothing (format is an annotation
// in draft 2020-12 unless a validator opts in; this one does not).
var annotations = map[string]bool{
	"description": true, "default": true, "title": true, "examples": true, "example": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "format": true, "$comment": true,
}

// compile builds the schema of a decoded JSON Schema value.
func compile(v any) (*schema, error) {
	if b, ok := v.(bool); ok {
		return &schema{never: !b, minLength: -1, maxLength: -1, minItems: -1, maxItems: -1}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a schema is an object or a boolean, not %T", v)
	}
	s := &schema{minLength: -1, maxLength: -1, minItems: -1, maxItems: -1}
	for k, val := range m {
		var err error
		switch k {
		case "$ref":
			ref, _ := val.(string)
			if !strings.HasPrefix(ref, "#/components/schemas/") {
				return nil, fmt.Errorf("$ref %q: only #/components/schemas/... is supported", ref)
			}
			s.ref = ref
		case "type":
			switch t := val.(type) {
			case string:
				s.types = []string{t}
			case []any:
				for _, x := range t {
					name, _ := x.(string)
					s.types = append(s.types, name)
				}
			}
			for _, t := range s.types {
				if !slices.Contains([]string{"object", "array", "string", "integer", "number", "boolean", "null"}, t) {
					return nil, fmt.Errorf("type %q", t)
				}
			}
		case "enum":
			list, ok := val.([]any)
			if !ok {
				return nil, fmt.Errorf("enum is not an array")
			}
			s.enum = list
		case "pattern":
			p, _ := val.(string)
			if s.pattern, err = regexp.Compile(p); err != nil {
				return nil, fmt.Errorf("pattern %q: %w", p, err)
			}
		case "minLength":
			s.minLength, err = count(val)
		case "maxLength":
			s.maxLength, err = count(val)
		case "minItems":
			s.minItems, err = count(val)
		case "maxItems":
			s.maxItems, err = count(val)
		case "uniqueItems":
			s.uniqueItems, _ = val.(bool)
		case "minimum":
			s.minimum, err = rat(val)
		case "maximum":
			s.maximum, err = rat(val)
		case "items":
			s.items, err = compile(val)
		case "properties":
			props, ok := val.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("properties is not an object")
			}
			s.properties = map[string]*schema{}
			for name, p := range props {
				if s.properties[name], err = compile(p); err != nil {
					return nil, fmt.Errorf("properties/%s: %w", name, err)
				}
			}
		case "required":
			list, _ := val.([]any)
			for _, x := range list {
				name, _ := x.(string)
				s.required = append(s.required, name)
			}
		case "additionalProperties":
			s.additional, err = compile(val)
		case "anyOf", "allOf", "oneOf":
			list, ok := val.([]any)
			if !ok || len(list) == 0 {
				return nil, fmt.Errorf("%s is not a non-empty array", k)
			}
			var subs []*schema
			for i, x := range list {
				sub, err := compile(x)
				if err != nil {
					return nil, fmt.Errorf("%s/%d: %w", k, i, err)
				}
				subs = append(subs, sub)
			}
			switch k {
			case "anyOf":
				s.anyOf = subs
			case "allOf":
				s.allOf = subs
			default:
				s.oneOf = subs
			}
		default:
			if !annotations[k] {
				return nil, fmt.Errorf("keyword %q is not supported by this validator", k)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return s, nil
}

// count reads a non-negative integer keyword value.
func count(v any) (int, error) {
	r, err := rat(v)
	if err != nil || !r.IsInt() || r.Sign() < 0 || !r.Num().IsInt64() {
		return 0, fmt.Errorf("not a non-negative integer")
	}
	return int(r.Num().Int64()), nil
}

// maxNumberLen bounds the digits of a number read exactly.
const maxNumberLen = 64

// rat reads a JSON number (decoded with UseNumber) exactly. A number
// beyond float64's range or longer than maxNumberLen is refused: reading
// 1e1000000 exactly takes ~25 ms, and a body can hold thousands of them
// (every schema of the document bounds its numbers far below).
func rat(v any) (*big.Rat, error) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, fmt.Errorf("not a number")
	}
	if len(n) > maxNumberLen {
		return nil, fmt.Errorf("number too long")
	}
	if f, err := strconv.ParseFloat(string(n), 64); err != nil || math.IsInf(f, 0) {
		return nil, fmt.Errorf("number out of range: %s", n)
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return nil, fmt.Errorf("not a number: %s", n)
	}
	return r, nil
}

// problem is one failed assertion: where in the instance, and why.
type problem struct{ at, why string }

// validator validates instances against compiled schemas; refs finds the
// document's component schemas.
type validator struct {
	refs map[string]*schema
}

// check appends to out the problems of inst (at pointer at) against s.
func (v *validator) check(s *schema, inst any, at string, out *[]problem) {
	fail := func(format string, args ...any) { *out = append(*out, problem{at, fmt.Sprintf(format, args...)}) }
	if s.ref != "" {
		target, ok := v.refs[s.ref]
		if !ok {
			fail("unresolved $ref %s", s.ref)
			return
		}
		v.check(target, inst, at, out)
	}
	if s.never {
		fail("not allowed")
		return
	}
	if len(s.types) > 0 && !slices.ContainsFunc(s.types, func(t string) bool { return isType(inst, t) }) {
		fail("got %s, want %s", typeOf(inst), strings.Join(s.types, " or "))
		return
	}
	if s.enum != nil && !slices.ContainsFunc(s.enum, func(e any) bool { return equal(e, inst) }) {
		var vals []string
		for _, e := range s.enum {
			b, _ := json.Marshal(e)
			vals = append(vals, string(b))
		}
		fail("value must be one of %s", strings.Join(vals, ", "))
	}
	switch x := inst.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if s.minLength >= 0 && n < s.minLength {
			fail("length must be >= %d, but got %d", s.minLength, n)
		}
		if s.maxLength >= 0 && n > s.maxLength {
			fail("length must be <= %d, but got %d", s.maxLength, n)
		}
		if s.pattern != nil && !s.pattern.MatchString(x) {
			fail("does not match pattern %s", strconv.Quote(s.pattern.String()))
		}
	case json.Number:
		r, _ := rat(x)
		if s.minimum != nil && r != nil && r.Cmp(s.minimum) < 0 {
			fail("must be >= %s but found %s", s.minimum.RatString(), x)
		}
		if s.maximum != nil && r != nil && r.Cmp(s.maximum) > 0 {
			fail("must be <= %s but found %s", s.maximum.RatString(), x)
		}
	case []any:
		if s.minItems >= 0 && len(x) < s.minItems {
			fail("minimum %d items required, but found %d items", s.minItems, len(x))
		}
		if s.maxItems >= 0 && len(x) > s.maxItems {
			// Refused already: no pairwise or per-item checks of an array
			// of any length (a body can hold thousands of items).
			fail("maximum %d items required, but found %d items", s.maxItems, len(x))
			return
		}
		if s.uniqueItems {
			for i := range x {
				for j := range i {
					if equal(x[i], x[j]) {
						fail("items at index %d and %d are equal", j, i)
					}
				}
			}
		}
		if s.items != nil {
			for i, item := range x {
				v.check(s.items, item, at+"/"+strconv.Itoa(i), out)
			}
		}
	case map[string]any:
		var missing []string
		for _, name := range s.required {
			if _, ok := x[name]; !ok {
				missing = append(missing, strconv.Quote(name))
			}
		}
		if len(missing) > 0 {
			fail("missing properties: %s", strings.Join(missing, ", "))
		}
		var extra []string
		for _, name := range sortedKeys(x) {
			if p, ok := s.properties[name]; ok {
				v.check(p, x[name], at+"/"+pointerToken(name), out)
				continue
			}
			if s.additional == nil {
				continue
			}
			if s.additional.never {
				extra = append(extra, strconv.Quote(name))
				continue
			}
			v.check(s.additional, x[name], at+"/"+pointerToken(name), out)
		}
		if len(extra) > 0 {
			fail("additionalProperties %s not allowed", strings.Join(extra, ", "))
		}
	}
	for _, sub := range s.allOf {
		v.check(sub, inst, at, out)
	}
	if len(s.anyOf) > 0 || len(s.oneOf) > 0 {
		subs, kw := s.anyOf, "anyOf"
		if len(s.oneOf) > 0 {
			subs, kw = s.oneOf, "oneOf"
		}
		var why []string
		matched := 0
		for _, sub := range subs {
			var p []problem
			v.check(sub, inst, at, &p)
			if len(p) == 0 {
				matched++
				continue
			}
			why = append(why, p[0].why)
		}
		switch {
		case matched == 0:
			fail("%s failed: %s", kw, strings.Join(why, " / "))
		case kw == "oneOf" && matched > 1:
			fail("oneOf failed: %d subschemas matched", matched)
		}
	}
}

// isType reports whether inst is of JSON Schema type t.
func isType(inst any, t string) bool {
	switch x := inst.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case json.Number:
		if t == "number" {
			return true
		}
		r, err := rat(x)
		return t == "integer" && err == nil && r.IsInt()
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

// typeOf names inst's JSON type.
func typeOf(inst any) string {
	for _, t := range []string{"null", "boolean", "string", "integer", "number", "array", "object"} {
		if isType(inst, t) {
			return t
		}
	}
	return fmt.Sprintf("%T", inst)
}

// equal is JSON Schema's equality: numbers by value, objects by members,
// arrays by items in order.
func equal(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, err1 := rat(x)
		ry, err2 := rat(y)
		return err1 == nil && err2 == nil && rx.Cmp(ry) == 0
	case []any:
		y, ok := b.([]any)
		return ok && slices.EqualFunc(x, y, equal)
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, vx := range x {
			vy, ok := y[k]
			if !ok || !equal(vx, vy) {
				return false
			}
		}
		return true
	}
	return a == b
}

// pointerToken escapes a property name for a JSON Pointer.
func pointerToken(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
