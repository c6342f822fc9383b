// Command ping is the Lambda of the ping route (template.yaml: PingFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("PingFunction")
}
