package app

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/queue"
)

// Start is the whole main of a Signet Lambda: it builds the handler for the
// template function logicalID from the environment and starts the Lambda
// runtime with that function's method (see Functions). A configuration error exits the
// process before the runtime starts, so the init failure shows in the logs.
func Start(logicalID string) {
	h, err := FromEnv(context.Background(), os.Getenv, logicalID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", logicalID, err)
		os.Exit(1)
	}
	fn, ok := Functions(h)[logicalID]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: no such function\n", logicalID)
		os.Exit(1)
	}
	lambda.Start(fn)
}

// Functions maps each function logical id of template.yaml to the handler
// method it runs. Lambda mains and the local stack both use this table.
func Functions(h *handler.Handler) map[string]any {
	return map[string]any{
		"AuthorizerFunction": h.Authorize,
		"ConnectFunction":    h.Connect,
		"DisconnectFunction": h.Disconnect,
		"SendFunction":       h.Send,
		"AckFunction":        h.Ack,
		"SyncFunction":       h.Sync,
		"PingFunction":       h.Ping,
		"ReadFunction":       h.Read,
		"HistoryFunction":    h.History,
		"DefaultFunction":    h.Default,
		"RedeliverFunction": queue.Consumer[[]im.Check]{Name: "redelivery check", Decode: queue.Decode, Handle: h.RunChecks,
			Log: h.Logger}.Lambda,
		"AlertsFunction":   h.Alerts,
		"GroupFunction":    h.Group,
		"ReceiptsFunction": h.Receipts,
		"PresenceFunction": h.Presence,
		"SummaryFunction":  h.Summary,
		"FanoutFunction": queue.Consumer[im.FanoutJob]{Name: "fan-out job", Decode: queue.DecodeJob, Handle: h.RunFanout,
			Reserve: handler.FanoutReserve, Log: h.Logger}.Lambda,
	}
}
