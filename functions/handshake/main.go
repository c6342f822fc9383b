// Command handshake is the Lambda of the HTTP API's GET /v1/handshake (template.yaml: HandshakeFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("HandshakeFunction", func(d *handler.Deps) any { return d.Handshakes().Handshake })
}
