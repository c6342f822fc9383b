// Command ack is the Lambda of the ack route (template.yaml: AckFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("AckFunction", func(h *handler.Handler) any { return h.Ack })
}
