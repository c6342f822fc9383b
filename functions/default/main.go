// Command default is the Lambda of the $default route (template.yaml: DefaultFunction).
package main

import (
	"github.com/signet-im/signet/shared/app/sdkfree"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	sdkfree.Start("DefaultFunction", func(d *handler.Deps) any { return d.Sessions().Default })
}
