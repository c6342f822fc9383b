// Command authorizer is the Lambda of the $connect REQUEST authorizer (template.yaml: AuthorizerFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("AuthorizerFunction")
}
