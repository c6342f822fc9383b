// Command sync is the Lambda of the sync route (template.yaml: SyncFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	app.Start("SyncFunction", func(d *handler.Deps) any { return d.Messages().Sync })
}
