// Command default is the Lambda of the $default route (template.yaml: DefaultFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("DefaultFunction", func(d *handler.Deps) any { return d.Sessions().Default })
}
