// Command history is the Lambda of the history route (template.yaml: HistoryFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("HistoryFunction", func(d *handler.Deps) any { return d.HistoryRoutes().History })
}
