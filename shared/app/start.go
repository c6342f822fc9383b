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
// runtime with the handler method method picks (each main names its own,
// so its binary links only the code that method reaches: issue 13). A
// configuration error exits the process before the runtime starts, so the
// init failure shows in the logs.
//
// configure completes the handler with what only this function needs (the
// alerts function's request validator); an error exits as a configuration
// error does.
func Start(logicalID string, method func(*handler.Handler) any, configure ...func(*handler.Handler) error) {
	h, err := FromEnv(context.Background(), os.Getenv, logicalID)
	for _, f := range configure {
		if err == nil {
			err = f(h)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", logicalID, err)
		os.Exit(1)
	}
	lambda.Start(method(h))
}

// Redeliver is the redelivery queue's consumer: queue.Consumer decoding
// checks for handler.RunChecks.
func Redeliver(h *handler.Handler) any {
	return queue.Consumer[[]im.Check]{Name: "redelivery check", Decode: queue.Decode, Handle: h.RunChecks, Log: h.Logger}.Lambda
}

// Fanout is the fan-out and presence queues' consumer: queue.Consumer
// decoding jobs for handler.RunFanout.
func Fanout(h *handler.Handler) any {
	return queue.Consumer[im.FanoutJob]{Name: "fan-out job", Decode: queue.DecodeJob, Handle: h.RunFanout,
		Reserve: handler.FanoutReserve, Log: h.Logger}.Lambda
}

// Functions maps each function logical id of template.yaml to the handler
// method it runs: the local stack's table (each Lambda main names its own
// method, the same as here: TestEveryMainRunsItsFunctionsMethod).
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
		"RedeliverFunction":  Redeliver(h),
		"AlertsFunction":     h.Alerts,
		"GroupFunction":      h.Group,
		"ReceiptsFunction":   h.Receipts,
		"PresenceFunction":   h.Presence,
		"SummaryFunction":    h.Summary,
		"FanoutFunction":     Fanout(h),
	}
}
