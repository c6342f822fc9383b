// Command alerts is the Lambda of the HTTP alerts API (template.yaml: AlertsFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/openapi"
)

func main() {
	app.Start("AlertsFunction", func(d *handler.Deps) any { return d.AlertsAPI().Alerts }, func(d *handler.Deps) error {
		v, err := openapi.Alerts()
		d.Validator = v
		return err
	})
}
