// Command disconnect is the Lambda of the $disconnect route (template.yaml: DisconnectFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("DisconnectFunction", func(d *handler.Deps) any { return d.Sessions().Disconnect })
}
