// Command sync is the Lambda of the sync route (template.yaml: SyncFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("SyncFunction")
}
