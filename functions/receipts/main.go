// Command receipts is the Lambda of the receipts route (template.yaml: ReceiptsFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("ReceiptsFunction")
}
