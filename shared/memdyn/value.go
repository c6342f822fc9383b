// Package memdyn is an in-memory DynamoDB for the local stack and tests,
// spoken to over DynamoDB's own JSON protocol by the real SDK. It keeps
// each table in a B-tree ordered by (partition key, sort key), so a Query
// reads only its partition's range — where minidyn reads every item of the
// table — and a transaction touches only its items. It implements the
// subset Signet uses (tables with a hash and optional range key, TTL
// settings, Get/Put/Update/Delete with condition expressions, Query with
// key conditions, filters, projections and paging, Batch{Get,Write}Item,
// Transact{Get,Write}Items with cancellation reasons) and answers anything
// else with a ValidationException, never a silent approximation. The
// store contract suite runs unchanged against it, minidyn and moto.
package memdyn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
)

// Value is a DynamoDB attribute value in its JSON wire form
// ({"S":"x"}, {"N":"1"}, {"M":{…}}, …): exactly one field is set.
type Value struct {
	S    *string           `json:"S,omitempty"`
	N    *string           `json:"N,omitempty"`
	B    []byte            `json:"B,omitempty"`
	BOOL *bool             `json:"BOOL,omitempty"`
	NULL *bool             `json:"NULL,omitempty"`
	M    map[string]*Value `json:"M,omitempty"`
	L    []*Value          `json:"L,omitempty"`
	SS   []string          `json:"SS,omitempty"`
	NS   []string          `json:"NS,omitempty"`
	BS   [][]byte          `json:"BS,omitempty"`
	// isL/isM mark an empty list or map (omitempty would drop them).
	isL, isM bool
}

// UnmarshalJSON reads the typed field (encoding/json leaves an absent
// list or map nil and makes an empty one non-nil, which keeps them apart).
func (v *Value) UnmarshalJSON(b []byte) error {
	type plain Value
	if err := json.Unmarshal(b, (*plain)(v)); err != nil {
		return err
	}
	v.isL, v.isM = v.L != nil, v.M != nil
	if v.typ() == "" {
		return fmt.Errorf("an attribute value needs a type: %s", b)
	}
	return nil
}

// MarshalJSON writes empty lists and maps.
func (v *Value) MarshalJSON() ([]byte, error) {
	switch {
	case v.isL && len(v.L) == 0:
		return []byte(`{"L":[]}`), nil
	case v.isM && len(v.M) == 0:
		return []byte(`{"M":{}}`), nil
	}
	type plain Value
	return json.Marshal((*plain)(v))
}

// Item is one item: attribute name → value.
type Item map[string]*Value

func num(s string) *Value { return &Value{N: &s} }

// typ is the value's DynamoDB type name.
func (v *Value) typ() string {
	switch {
	case v == nil:
		return ""
	case v.S != nil:
		return "S"
	case v.N != nil:
		return "N"
	case v.B != nil:
		return "B"
	case v.BOOL != nil:
		return "BOOL"
	case v.NULL != nil:
		return "NULL"
	case v.M != nil || v.isM:
		return "M"
	case v.L != nil || v.isL:
		return "L"
	case v.SS != nil:
		return "SS"
	case v.NS != nil:
		return "NS"
	case v.BS != nil:
		return "BS"
	}
	return ""
}

func rat(s string) (*big.Rat, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("the number %q is not valid", s)
	}
	return r, nil
}

// formatRat writes a number the way DynamoDB does: no exponent, no
// trailing zeros.
func formatRat(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	s := strings.TrimRight(r.FloatString(38), "0")
	return strings.TrimSuffix(s, ".")
}

// compare orders two scalars of the same type (S, N or B): -1, 0, 1; ok is
// false when they are not comparable.
func compare(a, b *Value) (int, bool) {
	if a == nil || b == nil || a.typ() != b.typ() {
		return 0, false
	}
	switch a.typ() {
	case "S":
		return strings.Compare(*a.S, *b.S), true
	case "B":
		return bytes.Compare(a.B, b.B), true
	case "N":
		x, err1 := rat(*a.N)
		y, err2 := rat(*b.N)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		return x.Cmp(y), true
	}
	return 0, false
}

// equal is DynamoDB's = on any two values.
func equal(a, b *Value) bool {
	if a == nil || b == nil || a.typ() != b.typ() {
		return false
	}
	switch a.typ() {
	case "S", "N", "B":
		c, _ := compare(a, b)
		return c == 0
	case "BOOL":
		return *a.BOOL == *b.BOOL
	case "NULL":
		return true
	case "M":
		if len(a.M) != len(b.M) {
			return false
		}
		for k, v := range a.M {
			if !equal(v, b.M[k]) {
				return false
			}
		}
		return true
	case "L":
		if len(a.L) != len(b.L) {
			return false
		}
		for i := range a.L {
			if !equal(a.L[i], b.L[i]) {
				return false
			}
		}
		return true
	case "SS":
		return sameSet(a.SS, b.SS)
	case "NS":
		return sameNumSet(a.NS, b.NS)
	case "BS":
		as, bs := make([]string, len(a.BS)), make([]string, len(b.BS))
		for i := range a.BS {
			as[i] = string(a.BS[i])
		}
		for i := range b.BS {
			bs[i] = string(b.BS[i])
		}
		return sameSet(as, bs)
	}
	return false
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

func sameNumSet(a, b []string) bool {
	norm := func(in []string) []string {
		out := make([]string, 0, len(in))
		for _, s := range in {
			if r, err := rat(s); err == nil {
				out = append(out, formatRat(r))
			}
		}
		return out
	}
	return sameSet(norm(a), norm(b))
}

// clone copies a value deeply (stored items never share memory with
// requests or responses).
func (v *Value) clone() *Value {
	if v == nil {
		return nil
	}
	out := &Value{isL: v.isL, isM: v.isM}
	if v.S != nil {
		s := *v.S
		out.S = &s
	}
	if v.N != nil {
		s := *v.N
		out.N = &s
	}
	if v.BOOL != nil {
		b := *v.BOOL
		out.BOOL = &b
	}
	if v.NULL != nil {
		b := *v.NULL
		out.NULL = &b
	}
	out.B = slices.Clone(v.B)
	out.SS, out.NS = slices.Clone(v.SS), slices.Clone(v.NS)
	for _, b := range v.BS {
		out.BS = append(out.BS, slices.Clone(b))
	}
	if v.M != nil {
		out.M = make(map[string]*Value, len(v.M))
		for k, x := range v.M {
			out.M[k] = x.clone()
		}
	}
	if v.L != nil {
		out.L = make([]*Value, len(v.L))
		for i, x := range v.L {
			out.L[i] = x.clone()
		}
	}
	return out
}

func (it Item) clone() Item {
	if it == nil {
		return nil
	}
	out := make(Item, len(it))
	for k, v := range it {
		out[k] = v.clone()
	}
	return out
}

// validate checks a value as DynamoDB does on write.
func (v *Value) validate() error {
	switch v.typ() {
	case "":
		return fmt.Errorf("an attribute value has no type")
	case "N":
		if _, err := rat(*v.N); err != nil {
			return err
		}
	case "SS", "NS", "BS":
		if len(v.SS)+len(v.NS)+len(v.BS) == 0 {
			return fmt.Errorf("an empty set is not allowed")
		}
	case "M":
		for _, x := range v.M {
			if err := x.validate(); err != nil {
				return err
			}
		}
	case "L":
		for _, x := range v.L {
			if err := x.validate(); err != nil {
				return err
			}
		}
	}
	return nil
}
