package openapi

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/signet-im/signet"
)

// asJSON converts the request schemas of docs/openapi.yaml (and what they
// refer to) to compact JSON without their descriptions: all the validator reads (the whole
// document, indented, took 30 KB of the alerts function's 9 MB).
func asJSON(t *testing.T) []byte {
	t.Helper()
	var tree struct {
		Components struct {
			Schemas map[string]any `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(signet.OpenAPI, &tree); err != nil {
		t.Fatal(err)
	}
	// The request schemas and, transitively, the schemas they refer to.
	kept := map[string]any{}
	todo := append([]string(nil), RequestSchemas...)
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if _, done := kept[name]; done {
			continue
		}
		kept[name] = undescribed(tree.Components.Schemas[name])
		b, _ := json.Marshal(kept[name])
		for _, m := range regexp.MustCompile(`"#/components/schemas/([A-Za-z0-9]+)"`).FindAllStringSubmatch(string(b), -1) {
			todo = append(todo, m[1])
		}
	}
	b, err := json.Marshal(map[string]any{"components": map[string]any{"schemas": kept}})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// undescribed is v without the text of its "description" keywords.
func undescribed(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if _, text := e.(string); k == "description" && text {
				continue
			}
			out[k] = undescribed(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = undescribed(e)
		}
		return out
	}
	return v
}

// The JSON the alerts function validates with is docs/openapi.yaml: a
// changed document fails this test until openapi.json is regenerated
// (SIGNET_UPDATE_OPENAPI=1 go test ./shared/openapi).
func TestTheEmbeddedJSONIsTheDocument(t *testing.T) {
	want := asJSON(t)
	if os.Getenv("SIGNET_UPDATE_OPENAPI") == "1" {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	var a, b any
	if err := json.Unmarshal(want, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(document, &b); err != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("shared/openapi/openapi.json is not docs/openapi.yaml (%v): run SIGNET_UPDATE_OPENAPI=1 go test ./shared/openapi", err)
	}
}

func TestAlertRequestSchemaFromTheDocument(t *testing.T) {
	t.Parallel()
	v, err := Load(document, "AlertRequest", "AppRequest")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		body string
		ok   bool
		want string
	}{
		{`{"to":["bob"],"title":"t","body":"b","priority":"urgent","ttlSeconds":600}`, true, ""},
		{`{"to":["bob"],"title":"t","body":"b","extra":1}`, false, "additional"},
		{`{"to":[],"title":"t","body":"b"}`, false, "/to"},
		{`{"to":["bob","bob"],"title":"t","body":"b"}`, false, "/to"},
		{`{"to":["a:b"],"title":"t","body":"b"}`, false, "/to/0"},
		{`{"to":["bob"],"title":"","body":"b"}`, false, "/title"},
		{`{"to":["bob"],"title":"t","body":"b","priority":"asap"}`, false, "/priority"},
		{`{"to":["bob"],"title":"t"}`, false, "body"},
		{`[1]`, false, ""},
		{`{`, false, "JSON"},
	}
	for _, tc := range cases {
		err := v.Validate("AlertRequest", []byte(tc.body))
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v", tc.body, err)
		}
	}
	if err := v.Validate("AppRequest", []byte(`{"name":"ops","allowUsers":["*","bob"]}`)); err != nil {
		t.Errorf("app request: %v", err)
	}
}
