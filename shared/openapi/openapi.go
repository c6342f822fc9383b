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

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// document is docs/openapi.yaml as JSON (TestTheEmbeddedJSONIsTheDocument
// keeps the two equal, and rewrites this file with SIGNET_UPDATE_OPENAPI=1),
// so that the alerts function links no YAML parser (issue 13: its binary
// size).
//
//go:embed openapi.json
var document []byte

// Alerts returns the validator of the HTTP alerts API's request bodies
// (AlertRequest, AppRequest of docs/openapi.yaml). Only the alerts
// function (and the local stack) builds it: compiling the schemas costs a
// cold start 7–10 ms of CPU, and linking this package and JSON Schema
// ~1.5 MB of binary, which no other function needs (issue 13).
func Alerts() (*Validator, error) {
	return Load(document, "AlertRequest", "AppRequest")
}

// Validator validates JSON values against named component schemas.
type Validator struct {
	schemas map[string]*jsonschema.Schema
}

// Load compiles the named schemas of components.schemas in an OpenAPI 3.1
// document in JSON.
func Load(b []byte, names ...string) (*Validator, error) {
	if !json.Valid(b) {
		return nil, fmt.Errorf("openapi: the document is not JSON")
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("openapi.json", bytes.NewReader(b)); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	v := &Validator{schemas: map[string]*jsonschema.Schema{}}
	for _, name := range names {
		sch, err := c.Compile("openapi.json#/components/schemas/" + name)
		if err != nil {
			return nil, fmt.Errorf("openapi schema %s: %w", name, err)
		}
		v.schemas[name] = sch
	}
	return v, nil
}

// Validate checks a JSON document against schema name and returns a short,
// client-safe description of the first problems.
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
	if err := sch.Validate(inst); err != nil {
		if ve, ok := err.(*jsonschema.ValidationError); ok {
			return fmt.Errorf("%s", describe(ve))
		}
		return err
	}
	return nil
}

// describe flattens a validation error into "at /path: reason" lines.
func describe(ve *jsonschema.ValidationError) string {
	var parts []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := e.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			parts = append(parts, fmt.Sprintf("at %s: %s", loc, e.Message))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("and %d more", len(parts)-3))
	}
	return strings.Join(parts, "; ")
}
