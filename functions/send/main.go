// Command send is the Lambda of the send route (template.yaml: SendFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("SendFunction")
}
