// Command connect is the Lambda of the $connect route (template.yaml: ConnectFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("ConnectFunction")
}
