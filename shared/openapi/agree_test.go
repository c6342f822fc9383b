package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// reference compiles the named schemas of the document with a full JSON
// Schema 2020-12 implementation, the one the alerts function used before
// it had its own validator.
func reference(t testing.TB, names ...string) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("openapi.json", bytes.NewReader(document)); err != nil {
		t.Fatal(err)
	}
	out := map[string]*jsonschema.Schema{}
	for _, name := range names {
		sch, err := c.Compile("openapi.json#/components/schemas/" + name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = sch
	}
	return out
}

// agree fails t unless both validators give body the same verdict.
func agree(t testing.TB, v *Validator, ref map[string]*jsonschema.Schema, name string, body []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var inst any
	if err := dec.Decode(&inst); err != nil || dec.More() {
		if v.Validate(name, body) == nil {
			t.Fatalf("%s: %q is not JSON, and was accepted", name, body)
		}
		return
	}
	want := ref[name].Validate(inst)
	got := v.Validate(name, body)
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: %s\n  this validator: %v\n  jsonschema:     %v", name, body, got, want)
	}
}

// requestParts are values, valid and not, for each field of the request
// schemas, mixed at random into bodies below.
var requestParts = map[string][]string{
	"to":            {`["bob"]`, `["bob","carol"]`, `[]`, `["bob","bob"]`, `["a:b"]`, `[""]`, `"bob"`, `[1]`, `["` + strings.Repeat("u", 64) + `"]`, `["` + strings.Repeat("u", 65) + `"]`, manyUsers(100), manyUsers(101), `null`},
	"group":         {`"ops"`, `"g:ops"`, `""`, `"` + strings.Repeat("g", 65) + `"`, `7`, `null`},
	"title":         {`"t"`, `""`, `"` + strings.Repeat("é", 200) + `"`, `"` + strings.Repeat("é", 201) + `"`, `"\u0000"`, `1`, `true`},
	"body":          {`"b"`, `""`, `"` + strings.Repeat("x", 8192) + `"`, `"` + strings.Repeat("x", 8193) + `"`, `{}`, `null`},
	"priority":      {`"normal"`, `"high"`, `"urgent"`, `"asap"`, `"URGENT"`, `0`},
	"ttlSeconds":    {`60`, `59`, `2592000`, `2592001`, `600.0`, `600.5`, `6e2`, `-1`, `"600"`, `1e400`},
	"extra":         {`1`, `"x"`},
	"name":          {`"ops"`, `"ops_bot"`, `""`, `"` + strings.Repeat("n", 48) + `"`, `"` + strings.Repeat("n", 49) + `"`, `3`},
	"allowUsers":    {`["*"]`, `["*","bob"]`, `["a b"]`, `[]`, `"*"`, `[null]`},
	"allowGroups":   {`["ops"]`, `["*"]`, `["g:ops"]`, `[]`, `{}`},
	"ratePerMinute": {`1`, `0`, `100000`, `100001`, `1.5`, `10.0`, `"5"`},
}

func manyUsers(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"u%d"`, i)
	}
	b.WriteString("]")
	return b.String()
}

// fieldsOf are the fields of each request schema, and one it does not
// have.
var fieldsOf = map[string][]string{
	"AlertRequest": {"to", "group", "title", "body", "priority", "ttlSeconds", "extra"},
	"AppRequest":   {"name", "allowUsers", "allowGroups", "ratePerMinute", "extra"},
}

// randomBody builds an object of a random subset of fields (an unknown
// one rarely), each with one of its values, its first (valid) one half of
// the time.
func randomBody(r *rand.Rand, fields []string) []byte {
	var parts []string
	for _, field := range fields {
		if r.IntN(3) == 0 || (field == "extra" && r.IntN(8) != 0) {
			continue
		}
		vals := requestParts[field]
		val := vals[0]
		if r.IntN(2) == 0 {
			val = vals[r.IntN(len(vals))]
		}
		parts = append(parts, fmt.Sprintf("%q:%s", field, val))
	}
	r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	return []byte("{" + strings.Join(parts, ",") + "}")
}

// This validator and a full JSON Schema implementation give the same
// verdict on thousands of request bodies built from valid and invalid
// values of every field, and on bodies that are not objects.
func TestTheValidatorAgreesWithJSONSchema(t *testing.T) {
	t.Parallel()
	names := []string{"AlertRequest", "AppRequest"}
	v, err := Load(document, names...)
	if err != nil {
		t.Fatal(err)
	}
	ref := reference(t, names...)
	r := rand.New(rand.NewPCG(1, 2))
	accepted := map[string]int{}
	for range 3000 {
		for _, name := range names {
			body := randomBody(r, fieldsOf[name])
			for _, against := range names {
				agree(t, v, ref, against, body)
			}
			if v.Validate(name, body) == nil {
				accepted[name]++
			}
		}
	}
	for _, body := range []string{`[]`, `"x"`, `null`, `1`, `{}`, `{"to":["bob"],"title":"t","body":"b"}`, `{"group":"ops","title":"t","body":"b"}`, `{`, `{} {}`} {
		for _, name := range names {
			agree(t, v, ref, name, []byte(body))
		}
	}
	// The bodies are not all refused: both schemas accepted some.
	if accepted["AlertRequest"] < 20 || accepted["AppRequest"] < 20 {
		t.Fatalf("accepted %v of 3000 random bodies each: the generator makes too few valid ones to compare", accepted)
	}
}

// A keyword the validator does not implement fails Load, so the document
// cannot come to assert something the alerts function ignores.
func TestAnUnsupportedKeywordFailsLoad(t *testing.T) {
	t.Parallel()
	for _, kw := range []string{`"not":{"type":"string"}`, `"const":1`, `"patternProperties":{}`, `"exclusiveMinimum":1`, `"$ref":"other.json#/x"`} {
		doc := []byte(`{"components":{"schemas":{"A":{"type":"object","properties":{"x":{` + kw + `}}}}}}`)
		if _, err := Load(doc, "A"); err == nil {
			t.Errorf("%s: loaded", kw)
		}
	}
	doc := []byte(`{"components":{"schemas":{"A":{"type":"object","description":"d","properties":{"x":{"$ref":"#/components/schemas/B"}}},"B":{"type":"integer","format":"int32","default":1}}}}`)
	v, err := Load(doc, "A")
	if err != nil {
		t.Fatal(err)
	}
	if v.Validate("A", []byte(`{"x":1}`)) != nil || v.Validate("A", []byte(`{"x":"1"}`)) == nil {
		t.Error("a $ref to another component is not followed")
	}
}

// FuzzValidatorAgreesWithJSONSchema: any body gets the same verdict from
// both validators (make fuzz-go runs it).
func FuzzValidatorAgreesWithJSONSchema(f *testing.F) {
	names := []string{"AlertRequest", "AppRequest"}
	v, err := Load(document, names...)
	if err != nil {
		f.Fatal(err)
	}
	ref := reference(f, names...)
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		for _, name := range names {
			f.Add(randomBody(r, fieldsOf[name]))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, name := range names {
			agree(t, v, ref, name, body)
		}
	})
}

// Numbers are read exactly only within float64's range and 64 characters,
// and an array over its maxItems gets no pairwise or per-item checks: a
// body of thousands of 1e1000000s costs the validator next to nothing
// (each would take ~25 ms to read exactly) and is refused.
func TestHugeNumbersAndLongArraysAreRefusedCheaply(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"1e1000000", "-1e400", strings.Repeat("9", 65)} {
		if _, err := rat(json.Number(n)); err == nil {
			t.Errorf("%s: read", n)
		}
	}
	if r, err := rat(json.Number("2592000")); err != nil || r.Num().Int64() != 2592000 {
		t.Errorf("2592000: %v, %v", r, err)
	}
	v, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.TrimSuffix(strings.Repeat("1e1000000,", 5000), ",")
	err = v.Validate("AlertRequest", []byte(`{"to":[`+huge+`],"title":"t","body":"b"}`))
	if err == nil || !strings.Contains(err.Error(), "at /to: maximum 100 items") || strings.Contains(err.Error(), "equal") {
		t.Errorf("5,000 huge numbers in to: %v", err)
	}
	err = v.Validate("AlertRequest", []byte(`{"to":["bob"],"title":"t","body":"b","ttlSeconds":1e1000000}`))
	if err == nil || !strings.Contains(err.Error(), "/ttlSeconds") {
		t.Errorf("a huge ttlSeconds: %v", err)
	}
}
