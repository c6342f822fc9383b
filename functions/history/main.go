// Command history is the Lambda of the history route (template.yaml: HistoryFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("HistoryFunction")
}
