package app

import (
	"os"

	signetcfg "github.com/signet-im/signet/shared/config"
)

// Needs lists, per function logical id of template.yaml, the environment
// variables the function cannot run without (every function serving
// frames needs the @connections endpoint: it closes a connection whose
// token has expired). The drift test checks that the
// template sets each of them on that function.
var Needs = map[string][]string{
	"AuthorizerFunction": {signetcfg.EnvJWTSecret},
	"ConnectFunction":    {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvPresenceQueue, signetcfg.EnvWebSocketAPI},
	"DisconnectFunction": {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvPresenceQueue},
	"SendFunction": {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvMessagesTable, signetcfg.EnvTraceTable,
		signetcfg.EnvRedeliveryQueue, signetcfg.EnvWebSocketAPI, signetcfg.EnvPushTimeout, signetcfg.EnvBackoff, signetcfg.EnvInboxRetention,
		signetcfg.EnvFanoutQueue, signetcfg.EnvHistoryRetention},
	"AckFunction":      {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvTraceTable, signetcfg.EnvWebSocketAPI},
	"HistoryFunction":  {signetcfg.EnvMessagesTable, signetcfg.EnvInboxTable, signetcfg.EnvWebSocketAPI},
	"SyncFunction":     {signetcfg.EnvInboxTable, signetcfg.EnvWebSocketAPI},
	"PingFunction":     {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvPresenceQueue, signetcfg.EnvWebSocketAPI},
	"GroupFunction":    {signetcfg.EnvMessagesTable, signetcfg.EnvInboxTable, signetcfg.EnvMemberLimit, signetcfg.EnvWebSocketAPI},
	"ReceiptsFunction": {signetcfg.EnvMessagesTable, signetcfg.EnvInboxTable, signetcfg.EnvWebSocketAPI},
	"PresenceFunction": {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvPresenceQueue, signetcfg.EnvPresenceStale,
		signetcfg.EnvPresenceDebounce, signetcfg.EnvWebSocketAPI},
	"SummaryFunction": {signetcfg.EnvInboxTable, signetcfg.EnvWebSocketAPI},
	"FanoutFunction": {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvMessagesTable, signetcfg.EnvTraceTable,
		signetcfg.EnvRedeliveryQueue, signetcfg.EnvFanoutQueue, signetcfg.EnvWebSocketAPI, signetcfg.EnvPushTimeout, signetcfg.EnvBackoff,
		signetcfg.EnvInboxRetention, signetcfg.EnvFanoutBatch, signetcfg.EnvPresenceStale, signetcfg.EnvAlertsTable},
	"ReadFunction":    {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvMessagesTable, signetcfg.EnvTraceTable, signetcfg.EnvWebSocketAPI},
	"DefaultFunction": {},
	"AlertsFunction": {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvMessagesTable, signetcfg.EnvTraceTable,
		signetcfg.EnvAlertsTable, signetcfg.EnvAdminKey, signetcfg.EnvRedeliveryQueue, signetcfg.EnvWebSocketAPI, signetcfg.EnvFanoutQueue,
		signetcfg.EnvPushTimeout, signetcfg.EnvBackoff, signetcfg.EnvInboxRetention},
	"RedeliverFunction": {signetcfg.EnvConnectionsTable, signetcfg.EnvInboxTable, signetcfg.EnvTraceTable, signetcfg.EnvRedeliveryQueue,
		signetcfg.EnvWebSocketAPI, signetcfg.EnvPushTimeout, signetcfg.EnvBackoff},
}

// lambdaStdout is where Lambda functions log: stdout, which CloudWatch collects.
type lambdaStdout struct{}

func (lambdaStdout) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
