// Package signet embeds the project's SAM template, the one source of truth
// for tables, queues, functions and routes, so that the local stack, the
// provisioning command and the tests read exactly what is deployed.
package signet

import _ "embed"

// Template is the contents of template.yaml.
//
//go:embed template.yaml
var Template []byte

// OpenAPI is the contents of docs/openapi.yaml, the HTTP API's contract;
// the alerts handler validates requests against its schemas.
//
//go:embed docs/openapi.yaml
var OpenAPI []byte
