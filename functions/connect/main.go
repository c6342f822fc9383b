// Command connect is the Lambda of the $connect route (template.yaml: ConnectFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("ConnectFunction", func(h *handler.Handler) any { return h.Connect })
}
