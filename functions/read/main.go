// Command read is the Lambda of the read route (template.yaml: ReadFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("ReadFunction", func(d *handler.Deps) any { return d.ReadRoutes().Read })
}
