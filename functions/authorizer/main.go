// Command authorizer is the Lambda of the $connect REQUEST authorizer (template.yaml: AuthorizerFunction).
package main

import (
	"github.com/signet-im/signet/shared/app/sdkfree"
	"github.com/signet-im/signet/shared/handler"
)

func main() {
	sdkfree.Start("AuthorizerFunction", func(d *handler.Deps) any { return d.Authorizer().Authorize })
}
