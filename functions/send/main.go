// Command send is the Lambda of the send route (template.yaml: SendFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("SendFunction", func(d *handler.Deps) any { return d.Messages().Send })
}
