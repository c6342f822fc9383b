package handler

import (
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/wire"
)

// FuzzAlertRequestBody runs the HTTP body decoder of POST /v1/messages
// (size, canonical JSON, then the checks past the schema): it never panics
// and refuses with a 4xx, never a 5xx.
func FuzzAlertRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"to":["ann"],"title":"Sign the form","body":"today","priority":"high","ttlSeconds":600}`,
		`{"group":"ops","title":"Disk full","body":"db-1"}`,
		"{\"to\":[\"ann\"],\"title\":\"t\xff\",\"body\":\"b\"}",
		`{"to":["ann"],"title":"t","title":"u","body":"b"}`,
		`{"to":["ann"],"title":"Invoice \u202egpj.exe","body":"b"}`,
		`{"to":["app.ops"],"title":"t","body":"b"}`,
		`{"to":["ann"],"title":"t\u0000","body":"b","ttlSeconds":1e309}`,
		`{"to":`, `[]`, `""`,
	} {
		f.Add(s, false)
	}
	f.Add("eyJ0byI6WyJhbm4iXSwidGl0bGUiOiJ0IiwiYm9keSI6ImIifQ==", true)
	f.Fuzz(func(t *testing.T, body string, base64 bool) {
		raw, err := requestBody(events.APIGatewayV2HTTPRequest{Body: body, IsBase64Encoded: base64})
		if err == nil {
			_, _, err = decodeAlert(raw)
		}
		if err == nil {
			return
		}
		var p *wire.Problem
		if status := wire.HTTPStatus(wire.ProblemOf(err).Code); !errors.As(err, &p) || status < 400 || status >= 500 {
			t.Fatalf("body %q: %v, want a 4xx", body, err)
		}
	})
}
