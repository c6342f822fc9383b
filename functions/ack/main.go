// Command ack is the Lambda of the ack route (template.yaml: AckFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("AckFunction", func(d *handler.Deps) any { return d.Messages().Ack })
}
