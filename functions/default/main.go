// Command default is the Lambda of the $default route (template.yaml: DefaultFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("DefaultFunction")
}
