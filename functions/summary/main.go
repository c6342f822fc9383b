// Command summary is the Lambda of the summary route (template.yaml: SummaryFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("SummaryFunction")
}
