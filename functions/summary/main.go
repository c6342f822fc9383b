// Command summary is the Lambda of the summary route (template.yaml: SummaryFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("SummaryFunction", func(d *handler.Deps) any { return d.SummaryRoutes().Summary })
}
