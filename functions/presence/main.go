// Command presence is the Lambda of the presence and presence.query routes (template.yaml: PresenceFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("PresenceFunction", func(d *handler.Deps) any { return d.Presence().Presence })
}
