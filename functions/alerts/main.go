// Command alerts is the Lambda of the HTTP alerts API (template.yaml: AlertsFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("AlertsFunction")
}
