// Command group is the Lambda of the group route (template.yaml: GroupFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("GroupFunction", func(d *handler.Deps) any { return d.GroupRoutes().Group })
}
