// Command default is the Lambda of the $default route (template.yaml: DefaultFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("DefaultFunction", func(h *handler.Handler) any { return h.Default })
}
