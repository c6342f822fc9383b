// Command connect is the Lambda of the $connect route (template.yaml: ConnectFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("ConnectFunction", func(d *handler.Deps) any { return d.Sessions().Connect })
}
