// Command group is the Lambda of the group route (template.yaml: GroupFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("GroupFunction", func(h *handler.Handler) any { return h.Group })
}
