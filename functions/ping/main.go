// Command ping is the Lambda of the ping route (template.yaml: PingFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("PingFunction", func(d *handler.Deps) any { return d.Sessions().Ping })
}
