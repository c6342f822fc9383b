// Command alerts is the Lambda of the HTTP alerts API (template.yaml: AlertsFunction).
package main

import (
	"github.com/signet-im/signet/shared/app"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/openapi"
)

func main() {
	app.Start("AlertsFunction", func(h *handler.Handler) any { return h.Alerts }, func(h *handler.Handler) error {
		v, err := openapi.Alerts()
		h.Validator = v
		return err
	})
}
