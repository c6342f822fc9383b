// Command disconnect is the Lambda of the $disconnect route (template.yaml: DisconnectFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("DisconnectFunction")
}
