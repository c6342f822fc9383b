package app

// The wiring of the code that template.yaml must match; the drift test
// (drift_test.go: Drift) holds the two together.

// Routes maps every WebSocket route key the code serves to the function
// logical id that must serve it.
var Routes = map[string]string{
	"$connect":       "ConnectFunction",
	"$disconnect":    "DisconnectFunction",
	"$default":       "DefaultFunction",
	"send":           "SendFunction",
	"ack":            "AckFunction",
	"sync":           "SyncFunction",
	"ping":           "PingFunction",
	"read":           "ReadFunction",
	"answer":         "ReadFunction",
	"history":        "HistoryFunction",
	"group":          "GroupFunction",
	"receipts":       "ReceiptsFunction",
	"presence":       "PresenceFunction",
	"presence.query": "PresenceFunction",
	"summary":        "SummaryFunction",
	"register":       "PresenceFunction",
}

// OneWay are the routes that answer through @connections, not a route
// response: ack and read answer nothing on success (no frame to pay
// for); send posts its "sent" as soon as the message is durable, before
// any push, so a slow recipient never delays the sender's ACK. All push
// their error frames.
var OneWay = map[string]bool{"ack": true, "read": true, "send": true}

// MockRoutes are the routes API Gateway answers itself (a MOCK integration,
// one-way: nothing is invoked and nothing is sent back): keepalive keeps an
// idle connection open for one billed message (issue 12).
var MockRoutes = map[string]bool{"keepalive": true}

// HTTPRoutes maps every HTTP API route the code serves to its function.
var HTTPRoutes = map[string]string{
	"POST /v1/messages":                            "AlertsFunction",
	"GET /v1/messages/{id}":                        "AlertsFunction",
	"GET /v1/messages/{id}/trace":                  "AlertsFunction",
	"POST /v1/apps":                                "AlertsFunction",
	"DELETE /v1/apps/{appId}":                      "AlertsFunction",
	"GET /v1/apps":                                 "AlertsFunction",
	"POST /v1/apps/{appId}/key":                    "AlertsFunction",
	"PUT /v1/apps/{appId}/webhook":                 "AlertsFunction",
	"DELETE /v1/apps/{appId}/webhook":              "AlertsFunction",
	"GET /v1/apps/{appId}/events":                  "AlertsFunction",
	"POST /v1/apps/{appId}/events/retry":           "AlertsFunction",
	"GET /v1/users/{userId}/devices":               "AlertsFunction",
	"DELETE /v1/users/{userId}/devices/{deviceId}": "AlertsFunction",
	"GET /v1/handshake":                            "HandshakeFunction",
}

// Queue triggers: function logical id → queue logical id it consumes.
var Triggers = map[string][]string{
	"RedeliverFunction": {"RedeliveryQueue"},
	"FanoutFunction":    {"FanoutQueue"},
	"HintsFunction":     {"PresenceQueue"},
}
