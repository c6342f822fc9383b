// Command read is the Lambda of the read route (template.yaml: ReadFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("ReadFunction")
}
