// Command receipts is the Lambda of the receipts route (template.yaml: ReceiptsFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("ReceiptsFunction", func(d *handler.Deps) any { return d.SummaryRoutes().Receipts })
}
