// Command fanout is the Lambda of the fan-out queue consumer (template.yaml: FanoutFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("FanoutFunction", app.Fanout)
}
