// Command redeliver is the Lambda of the SQS redelivery consumer (template.yaml: RedeliverFunction).
package main

import "github.com/signet-im/signet/shared/app"

func main() {
	app.Start("RedeliverFunction", app.Redeliver)
}
