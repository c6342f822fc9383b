// Command ack is the Lambda of the ack route (template.yaml: AckFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("AckFunction")
}
