// Package openapi validates HTTP API requests against the schemas of the
// project's OpenAPI 3.1 document (docs/openapi.yaml), so that the document
// and the code cannot disagree about what a valid request is.
package openapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// document is the request schemas of docs/openapi.yaml (and the schemas
// they refer to) as compact JSON without descriptions (TestTheEmbeddedJSONIsTheDocument keeps the two
// equal, and rewrites this file with SIGNET_UPDATE_OPENAPI=1), so that the
// alerts function links no YAML parser and carries no prose (issue 13: its
// binary size).
//
//go:embed openapi.json
var document []byte

// Alerts returns the validator of the HTTP alerts API's request bodies
// (AlertRequest, AppRequest, WebhookRequest, RetryEventsRequest of
// docs/openapi.yaml). Only the alerts
// function (and the local stack) builds it. The validator is this
// package's own, of the subset of JSON Schema the document uses: a full
// implementation (santhosh-tekuri/jsonschema) took 7–10 ms of a cold
// start to compile the schemas and ~330 KB of the alerts binary, which
// put it over issue 13's 9 MB; the tests hold the two to the same
// verdicts.
func Alerts() (*Validator, error) {
	return Load(document, RequestSchemas...)
}

// RequestSchemas are the component schemas of the requests the alerts
// function validates (the embedded document holds them and those they
// refer to).
var RequestSchemas = []string{"AlertRequest", "AppRequest", "WebhookRequest", "RetryEventsRequest"}

// Validator validates JSON values against named component schemas.
type Validator struct {
	schemas map[string]*schema
	v       validator
}

// Load compiles the named schemas of components.schemas in an OpenAPI 3.1
// document in JSON, and the component schemas they refer to.
func Load(b []byte, names ...string) (*Validator, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("openapi: the document is not JSON: %w", err)
	}
	const prefix = "#/components/schemas/"
	val := &Validator{schemas: map[string]*schema{}, v: validator{refs: map[string]*schema{}}}
	todo := make([]string, 0, len(names))
	for _, name := range names {
		todo = append(todo, prefix+name)
	}
	for len(todo) > 0 {
		ref := todo[0]
		todo = todo[1:]
		if _, done := val.v.refs[ref]; done {
			continue
		}
		raw, ok := doc.Components.Schemas[strings.TrimPrefix(ref, prefix)]
		if !ok {
			return nil, fmt.Errorf("openapi: no schema %s", ref)
		}
		sch, err := compile(raw)
		if err != nil {
			return nil, fmt.Errorf("openapi schema %s: %w", strings.TrimPrefix(ref, prefix), err)
		}
		val.v.refs[ref] = sch
		todo = append(todo, sch.refs()...)
	}
	for _, name := range names {
		val.schemas[name] = val.v.refs[prefix+name]
	}
	return val, nil
}

// Validate checks a JSON document against schema name and returns a short,
// client-safe description of the first problems ("at /to/0: does not
// match pattern ...").
func (v *Validator) Validate(name string, body []byte) error {
	sch, ok := v.schemas[name]
	if !ok {
		return fmt.Errorf("no schema %s", name)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var inst any
	if err := dec.Decode(&inst); err != nil || dec.More() {
		return fmt.Errorf("body is not valid JSON")
	}
	var problems []problem
	v.v.check(sch, inst, "", &problems)
	if len(problems) == 0 {
		return nil
	}
	var parts []string
	for _, p := range problems {
		at := p.at
		if at == "" {
			at = "/"
		}
		parts = append(parts, fmt.Sprintf("at %s: %s", at, p.why))
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("and %d more", len(parts)-3))
	}
	return fmt.Errorf("%s", strings.Join(parts, "; "))
}
