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
func Start(logicalID string, method func(*handler.Deps) any, configure ...func(*handler.Deps) error) {
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
func Redeliver(d *handler.Deps) any {
	r := d.Redeliverer()
	return queue.Consumer[[]im.Check]{Name: "redelivery check", Decode: queue.Decode, Handle: r.RunChecks, Log: r.Logger, Retry: d.Retries}.Lambda
}

// Fanout is the fan-out and presence queues' consumer: queue.Consumer
// decoding jobs for handler.RunFanout.
func Fanout(d *handler.Deps) any {
	w := d.FanoutWorker()
	return queue.Consumer[im.FanoutJob]{Name: "fan-out job", Decode: queue.DecodeJob, Handle: w.RunFanout,
		Reserve: handler.FanoutReserve, Log: w.Logger, Retry: d.Retries}.Lambda
}

// Hints is the presence queue's consumer: queue.Consumer decoding jobs
// for handler.RunHint — presence pushes and wake-ups (the function's main
// adds the SNS Waker: package wakeapp, so that no other function links
// the SNS client).
func Hints(d *handler.Deps) any {
	w := d.Hints()
	return queue.Consumer[im.FanoutJob]{Name: "hint job", Decode: queue.DecodeJob, Handle: w.RunHint, Log: w.Logger, Retry: d.Retries}.Lambda
}

// Functions maps each function logical id of template.yaml to the handler
// method it runs: the local stack's table (each Lambda main names its own
// method, the same as here: TestEveryMainRunsItsFunctionsMethod).
func Functions(d *handler.Deps) map[string]any {
	sessions, messages, summary := d.Sessions(), d.Messages(), d.SummaryRoutes()
	return map[string]any{
		"AuthorizerFunction": d.Authorizer().Authorize,
		"ConnectFunction":    sessions.Connect,
		"DisconnectFunction": sessions.Disconnect,
		"SendFunction":       messages.Send,
		"AckFunction":        messages.Ack,
		"SyncFunction":       messages.Sync,
		"PingFunction":       sessions.Ping,
		"ReadFunction":       d.ReadRoutes().Read,
		"HistoryFunction":    d.HistoryRoutes().History,
		"DefaultFunction":    sessions.Default,
		"RedeliverFunction":  Redeliver(d),
		"AlertsFunction":     d.AlertsAPI().Alerts,
		"GroupFunction":      d.GroupRoutes().Group,
		"ReceiptsFunction":   summary.Receipts,
		"PresenceFunction":   d.Presence().Presence,
		"SummaryFunction":    summary.Summary,
		"FanoutFunction":     Fanout(d),
		"HintsFunction":      Hints(d),
		"HandshakeFunction":  d.Handshakes().Handshake,
	}
}
