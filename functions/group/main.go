// Command group is the Lambda of the group route (template.yaml: GroupFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("GroupFunction")
}
