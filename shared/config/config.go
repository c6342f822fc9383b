// Package config reads Signet's settings once at start-up from the
// environment. Every variable, its default and its meaning is in Vars.
package config

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
)

// Config is the typed configuration of every Signet function.
type Config struct {
	// ConnectionsTable, InboxTable, MessagesTable name the DynamoDB tables.
	ConnectionsTable string
	InboxTable       string
	MessagesTable    string
	// TraceTable holds per-message trace events ("" disables tracing).
	TraceTable string
	// AlertsTable holds apps, Idempotency-Keys and alert records.
	AlertsTable string
	// AdminKey authorizes app management and reading any trace over HTTP.
	AdminKey string
	// RedeliveryQueueURL is the SQS queue of redelivery checks.
	RedeliveryQueueURL string
	// WebSocketEndpoint is the @connections management endpoint:
	// https://{api}.execute-api.{region}.amazonaws.com/{stage}.
	WebSocketEndpoint string
	// JWTSecret verifies client tokens (HS256).
	JWTSecret string
	// JWTIssuer and JWTAudience, when set, must match a token's "iss" and
	// "aud"; MaxTokenLifetime bounds a token's exp − iat (default 24h).
	JWTIssuer, JWTAudience string
	MaxTokenLifetime       time.Duration
	// OIDCIssuer, when set, admits RS256/ES256 tokens of that OpenID
	// Connect provider with audience OIDCAudience (required then), the user
	// in claim OIDCUserClaim (default sub); OIDCJWKSURL skips discovery.
	OIDCIssuer, OIDCAudience, OIDCUserClaim, OIDCJWKSURL string
	// Redelivery is the push timeout and backoff schedule.
	Redelivery im.Redelivery
	// InboxRetention is how long inbox entries live (DynamoDB TTL).
	InboxRetention time.Duration
	// SyncInterval admits one new sync per user per interval.
	SyncInterval time.Duration
	// FanoutQueueURL is the SQS queue of fan-out jobs (group messages,
	// group alerts); PresenceQueueURL the queue of presence pushes.
	FanoutQueueURL, PresenceQueueURL string
	// HistoryRetention is how long conversation logs live (0: forever).
	HistoryRetention time.Duration
	// MemberLimit bounds group size; FanoutBatch is the members per fan-out job.
	MemberLimit, FanoutBatch int
	// MaxConnections bounds one user's connections (the oldest are closed).
	MaxConnections int
	// MaxDevices bounds one user's devices (a new device id beyond it is
	// refused at $connect).
	MaxDevices int
	// RateLimits are the per-user limits per action (nil: none).
	RateLimits map[ratelimit.Action]ratelimit.Limit
	// PresenceStale is how long a connection counts as live after its last
	// sign of life; PresenceDebounce delays presence pushes.
	PresenceStale, PresenceDebounce time.Duration
	// CompressBodies stores message bodies deflated where that pays
	// (dynamo.Store.CompressBodies).
	CompressBodies bool
	// SendMode is how a 1:1 message is stored (dynamo.Store.SendMode).
	SendMode string
	// GroupReads: groups created are read-diffused (dynamo.Store.GroupReads).
	GroupReads bool
	// TraceSample: one in TraceSample 1:1 and read-diffused group messages
	// sent as expected has its send's trace written in full
	// (handler.Deps.TraceSample).
	TraceSample int
	// OfflinePush turns wake jobs on (on the presence queue; off: no
	// function enqueues one). PushApps are the SNS platform
	// application ARNs by platform (apns, apns_sandbox, fcm; "" none);
	// WakeWindow the shortest time between two wake-ups of a device.
	OfflinePush bool
	PushApps    map[string]string
	WakeWindow  time.Duration
	// CallbackBackoff is the wait before each retry of a status callback
	// that failed (its length + 1 tries, then the event is dead).
	CallbackBackoff []time.Duration
	// WebhookAllowPrivate admits http:// webhook URLs and lets callbacks
	// reach loopback and private addresses (the local stack only).
	WebhookAllowPrivate bool
	// LogLevel is the lowest level logged: info keeps one line per stored
	// message and every failure; debug adds a line per push, redelivery
	// check and ack (the trace table records those either way).
	LogLevel slog.Level
}

// Var documents one environment variable.
type Var struct {
	Name    string
	Default string // "" means required where used
	Doc     string
}

// Environment variable names.
const (
	EnvConnectionsTable = "SIGNET_CONNECTIONS_TABLE"
	EnvInboxTable       = "SIGNET_INBOX_TABLE"
	EnvMessagesTable    = "SIGNET_MESSAGES_TABLE"
	EnvTraceTable       = "SIGNET_TRACE_TABLE"
	EnvAlertsTable      = "SIGNET_ALERTS_TABLE"
	EnvAdminKey         = "SIGNET_ADMIN_KEY"
	EnvRedeliveryQueue  = "SIGNET_REDELIVERY_QUEUE_URL"
	EnvWebSocketAPI     = "SIGNET_WS_ENDPOINT"
	EnvJWTSecret        = "SIGNET_JWT_SECRET"
	EnvJWTIssuer        = "SIGNET_JWT_ISSUER"
	EnvJWTAudience      = "SIGNET_JWT_AUDIENCE"
	EnvMaxTokenLifetime = "SIGNET_MAX_TOKEN_LIFETIME"
	EnvOIDCIssuer       = "SIGNET_OIDC_ISSUER"
	EnvOIDCAudience     = "SIGNET_OIDC_AUDIENCE"
	EnvOIDCUserClaim    = "SIGNET_OIDC_USER_CLAIM"
	EnvOIDCJWKSURL      = "SIGNET_OIDC_JWKS_URL"
	EnvPushTimeout      = "SIGNET_PUSH_TIMEOUT"
	EnvBackoff          = "SIGNET_REDELIVERY_BACKOFF"
	EnvInboxRetention   = "SIGNET_INBOX_RETENTION"
	EnvSyncInterval     = "SIGNET_SYNC_INTERVAL"
	EnvFanoutQueue      = "SIGNET_FANOUT_QUEUE_URL"
	EnvPresenceQueue    = "SIGNET_PRESENCE_QUEUE_URL"
	EnvHistoryRetention = "SIGNET_HISTORY_RETENTION"
	EnvMemberLimit      = "SIGNET_GROUP_MEMBER_LIMIT"
	EnvMaxConnections   = "SIGNET_MAX_CONNECTIONS"
	EnvMaxDevices       = "SIGNET_MAX_DEVICES"
	EnvRateLimits       = "SIGNET_RATE_LIMITS"
	EnvFanoutBatch      = "SIGNET_FANOUT_BATCH"
	EnvPresenceStale    = "SIGNET_PRESENCE_STALE"
	EnvPresenceDebounce = "SIGNET_PRESENCE_DEBOUNCE"
	EnvLogLevel         = "SIGNET_LOG_LEVEL"
	EnvBodyCompression  = "SIGNET_BODY_COMPRESSION"
	EnvSendMode         = "SIGNET_SEND_MODE"
	EnvGroupDelivery    = "SIGNET_GROUP_DELIVERY"
	EnvTraceSample      = "SIGNET_TRACE_SAMPLE"
	EnvCallbackBackoff  = "SIGNET_CALLBACK_BACKOFF"
	EnvOfflinePush      = "SIGNET_OFFLINE_PUSH"
	EnvPushAPNS         = "SIGNET_PUSH_APNS_APP_ARN"
	EnvPushAPNSSandbox  = "SIGNET_PUSH_APNS_SANDBOX_APP_ARN"
	EnvPushFCM          = "SIGNET_PUSH_FCM_APP_ARN"
	EnvWakeWindow       = "SIGNET_WAKE_WINDOW"
	EnvWebhookPrivate   = "SIGNET_WEBHOOK_ALLOW_PRIVATE"
)

// Vars lists every variable Signet reads, with its default.
var Vars = []Var{
	{EnvConnectionsTable, "", "DynamoDB table of connections"},
	{EnvInboxTable, "", "DynamoDB table of per-user inboxes"},
	{EnvMessagesTable, "", "DynamoDB table of conversation logs"},
	{EnvTraceTable, "", "DynamoDB table of per-message trace events (empty: no trace)"},
	{EnvAlertsTable, "", "DynamoDB table of apps, Idempotency-Keys and alerts"},
	{EnvAdminKey, "", "admin key of the HTTP API (app management, any trace)"},
	{EnvRedeliveryQueue, "", "SQS queue URL of redelivery checks"},
	{EnvWebSocketAPI, "", "@connections endpoint: https://{api}.execute-api.{region}.amazonaws.com/{stage}"},
	{EnvJWTSecret, "", "HS256 secret that verifies client tokens"},
	{EnvJWTIssuer, "", "when set, a client token's iss must equal it"},
	{EnvJWTAudience, "", "when set, a client token's aud must contain it"},
	{EnvMaxTokenLifetime, "24h", "longest a client token may be valid (exp - iat); longer ones are refused"},
	{EnvOIDCIssuer, "", "OpenID Connect issuer whose RS256/ES256 tokens are accepted (e.g. https://cognito-idp.<region>.amazonaws.com/<pool id>); empty: none"},
	{EnvOIDCAudience, "", "required with SIGNET_OIDC_ISSUER: the token's aud must contain it (Cognito: the app client id)"},
	{EnvOIDCUserClaim, "sub", "claim of an OpenID Connect token that names the Signet user"},
	{EnvOIDCJWKSURL, "", "JWKS URL of the issuer (default: from its /.well-known/openid-configuration)"},
	{EnvPushTimeout, "5s", "how long a pushed message may stay unacked before its first re-push"},
	{EnvBackoff, "2s,4s,8s,16s", "delays between further re-pushes (at most 4; whole window ≤ 60s)"},
	{EnvInboxRetention, "720h", "how long inbox entries are kept (30 days)"},
	{EnvSyncInterval, "2s", "one new sync per user per interval"},
	{EnvFanoutQueue, "", "SQS queue URL of fan-out jobs (group messages, group alerts)"},
	{EnvPresenceQueue, "", "SQS queue URL of debounced presence pushes and wake jobs (the hints function's)"},
	{EnvHistoryRetention, "8760h", "how long conversation logs (history) are kept; 0 keeps them forever; at least the inbox retention"},
	{EnvMemberLimit, "500", "most members of a group"},
	{EnvMaxConnections, "10", "most connections one user may hold; a new one closes the oldest beyond it"},
	{EnvMaxDevices, "20", "most devices one user may have; $connect with a new device id beyond it is refused (HTTP 409) until an operator forgets one"},
	{EnvRateLimits, "send=120/1m,group=60/1m,query=300/1m,presence=60/1m,connect=60/1m", "per-user limits per action (query: history, receipts, summary, presence.query; connect: new connections); off disables them"},
	{EnvFanoutBatch, "50", "members one fan-out invocation fills"},
	{EnvPresenceStale, "27m", "a connection counts as live this long after its last connect/ping (the SDK pings every 24 minutes)"},
	{EnvPresenceDebounce, "2s", "presence changes wait this long before they are pushed to peers"},
	{EnvBodyCompression, "on", "on: message bodies of 256 bytes or more are stored deflated when that saves an eighth (every reader understands both forms); off: stored as sent — deploy with off once when upgrading from a version that cannot read them"},
	{EnvSendMode, "claim", "how a 1:1 message is stored: claim (log and idempotency items in one transaction, then each inbox by claim-then-put; about a third fewer write units) or transaction (one transaction of six items)"},
	{EnvGroupDelivery, "read", "how groups created from now on deliver: read (the group's log is every member's copy) or write (copied into every member's inbox)"},
	{EnvTraceSample, "50", "one in N 1:1 and read-diffused group messages sent as expected has its send's trace (connections, request ids) written in full; the others' trace is derived from what is stored; failures and retries are always written; 1: every message's"},
	{EnvCallbackBackoff, "10s,1m,5m,15m,1h,2h,4h,8h", "waits before each retry of a status callback the app's webhook did not take (2xx); after the last the event is dead until the app replays it"},
	{EnvWebhookPrivate, "off", "on: webhook URLs may be http:// and reach loopback and private addresses (signet local); off: https only, public addresses only"},
	{EnvOfflinePush, "off", "on: a message to a user with no connection (or one redelivery gave up on) wakes their registered devices through SNS mobile push; off: no wake jobs"},
	{EnvPushAPNS, "", "SNS platform application ARN for APNs (production); empty: devices cannot register apns"},
	{EnvPushAPNSSandbox, "", "SNS platform application ARN for the APNs sandbox; empty: devices cannot register apns_sandbox"},
	{EnvPushFCM, "", "SNS platform application ARN for Firebase Cloud Messaging; empty: devices cannot register fcm"},
	{EnvWakeWindow, "1m", "at most one wake-up per device per window, however many messages arrive"},
	{EnvLogLevel, "info", "lowest level logged: debug (adds a line per push, redelivery check and ack), info (a line per stored message, every failure), warn or error"},
}

// Load reads the configuration through getenv (os.Getenv in production).
// Missing table or queue names are not errors here: each function checks
// what it uses with Require.
func Load(getenv func(string) string) (Config, error) {
	get := func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		for _, v := range Vars {
			if v.Name == name {
				return v.Default
			}
		}
		return ""
	}
	c := Config{
		ConnectionsTable:   get(EnvConnectionsTable),
		InboxTable:         get(EnvInboxTable),
		MessagesTable:      get(EnvMessagesTable),
		TraceTable:         get(EnvTraceTable),
		AlertsTable:        get(EnvAlertsTable),
		AdminKey:           get(EnvAdminKey),
		RedeliveryQueueURL: get(EnvRedeliveryQueue),
		WebSocketEndpoint:  get(EnvWebSocketAPI),
		JWTSecret:          get(EnvJWTSecret),
		JWTIssuer:          get(EnvJWTIssuer),
		JWTAudience:        get(EnvJWTAudience),
		OIDCIssuer:         get(EnvOIDCIssuer),
		OIDCAudience:       get(EnvOIDCAudience),
		OIDCUserClaim:      get(EnvOIDCUserClaim),
		OIDCJWKSURL:        get(EnvOIDCJWKSURL),
	}
	if c.OIDCIssuer != "" && c.OIDCAudience == "" {
		return Config{}, fmt.Errorf("%s is set but %s is not: without an audience any token the provider issues, for any application, would be accepted", EnvOIDCIssuer, EnvOIDCAudience)
	}
	var err error
	if c.MaxTokenLifetime, err = duration(EnvMaxTokenLifetime, get(EnvMaxTokenLifetime)); err != nil {
		return Config{}, err
	}
	if c.Redelivery.PushTimeout, err = duration(EnvPushTimeout, get(EnvPushTimeout)); err != nil {
		return Config{}, err
	}
	for _, part := range strings.Split(get(EnvBackoff), ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		d, err := duration(EnvBackoff, part)
		if err != nil {
			return Config{}, err
		}
		c.Redelivery.Backoff = append(c.Redelivery.Backoff, d)
	}
	if err := c.Redelivery.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s/%s: %w", EnvPushTimeout, EnvBackoff, err)
	}
	if c.InboxRetention, err = duration(EnvInboxRetention, get(EnvInboxRetention)); err != nil {
		return Config{}, err
	}
	if c.SyncInterval, err = duration(EnvSyncInterval, get(EnvSyncInterval)); err != nil {
		return Config{}, err
	}
	c.FanoutQueueURL = get(EnvFanoutQueue)
	c.PresenceQueueURL = get(EnvPresenceQueue)
	if c.HistoryRetention, err = duration(EnvHistoryRetention, get(EnvHistoryRetention)); err != nil {
		return Config{}, err
	}
	if c.HistoryRetention > 0 && c.HistoryRetention < c.InboxRetention {
		return Config{}, fmt.Errorf("%s=%s is shorter than %s=%s: history must outlive the inbox", EnvHistoryRetention, c.HistoryRetention, EnvInboxRetention, c.InboxRetention)
	}
	if c.MemberLimit, err = positive(EnvMemberLimit, get(EnvMemberLimit)); err != nil {
		return Config{}, err
	}
	if c.FanoutBatch, err = positive(EnvFanoutBatch, get(EnvFanoutBatch)); err != nil {
		return Config{}, err
	}
	if c.MaxConnections, err = positive(EnvMaxConnections, get(EnvMaxConnections)); err != nil {
		return Config{}, err
	}
	if c.MaxDevices, err = positive(EnvMaxDevices, get(EnvMaxDevices)); err != nil {
		return Config{}, err
	}
	if c.RateLimits, err = ratelimit.Parse(get(EnvRateLimits)); err != nil {
		return Config{}, fmt.Errorf("%s: %w", EnvRateLimits, err)
	}
	if c.PresenceStale, err = duration(EnvPresenceStale, get(EnvPresenceStale)); err != nil {
		return Config{}, err
	}
	if c.PresenceDebounce, err = duration(EnvPresenceDebounce, get(EnvPresenceDebounce)); err != nil {
		return Config{}, err
	}
	switch v := get(EnvBodyCompression); v {
	case "on", "off":
		c.CompressBodies = v == "on"
	default:
		return Config{}, fmt.Errorf("%s: %q is not on or off", EnvBodyCompression, v)
	}
	switch c.SendMode = get(EnvSendMode); c.SendMode {
	case "transaction", "claim":
	default:
		return Config{}, fmt.Errorf("%s: %q is not transaction or claim", EnvSendMode, c.SendMode)
	}
	switch v := get(EnvGroupDelivery); v {
	case "write", "read":
		c.GroupReads = v == "read"
	default:
		return Config{}, fmt.Errorf("%s: %q is not write or read", EnvGroupDelivery, v)
	}
	if c.TraceSample, err = strconv.Atoi(get(EnvTraceSample)); err != nil || c.TraceSample < 1 {
		return Config{}, fmt.Errorf("%s=%q: want a whole number ≥ 1 (one in N messages; 1: every message)", EnvTraceSample, get(EnvTraceSample))
	}
	for _, part := range strings.Split(get(EnvCallbackBackoff), ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		d, err := duration(EnvCallbackBackoff, part)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("%s=%q: want positive durations like 10s,1m,5m", EnvCallbackBackoff, get(EnvCallbackBackoff))
		}
		c.CallbackBackoff = append(c.CallbackBackoff, d)
	}
	switch v := get(EnvOfflinePush); v {
	case "on", "off":
		c.OfflinePush = v == "on"
	default:
		return Config{}, fmt.Errorf("%s: %q is not on or off", EnvOfflinePush, v)
	}
	c.PushApps = map[string]string{im.PlatformAPNS: get(EnvPushAPNS), im.PlatformAPNSSandbox: get(EnvPushAPNSSandbox), im.PlatformFCM: get(EnvPushFCM)}
	if c.WakeWindow, err = duration(EnvWakeWindow, get(EnvWakeWindow)); err != nil {
		return Config{}, err
	}
	switch v := get(EnvWebhookPrivate); v {
	case "on", "off":
		c.WebhookAllowPrivate = v == "on"
	default:
		return Config{}, fmt.Errorf("%s: %q is not on or off", EnvWebhookPrivate, v)
	}
	if err := c.LogLevel.UnmarshalText([]byte(get(EnvLogLevel))); err != nil {
		return Config{}, fmt.Errorf("%s: %q is not debug, info, warn or error", EnvLogLevel, get(EnvLogLevel))
	}
	return c, nil
}

// Require fails unless every named variable without a default resolved to a
// non-empty value.
func (c Config) Require(names ...string) error {
	values := map[string]string{
		EnvConnectionsTable: c.ConnectionsTable,
		EnvInboxTable:       c.InboxTable,
		EnvMessagesTable:    c.MessagesTable,
		EnvTraceTable:       c.TraceTable,
		EnvAlertsTable:      c.AlertsTable,
		EnvAdminKey:         c.AdminKey,
		EnvRedeliveryQueue:  c.RedeliveryQueueURL,
		EnvWebSocketAPI:     c.WebSocketEndpoint,
		EnvJWTSecret:        c.JWTSecret,
		EnvFanoutQueue:      c.FanoutQueueURL,
		EnvPresenceQueue:    c.PresenceQueueURL,
	}
	var missing []string
	for _, name := range names {
		if v, known := values[name]; known && v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing environment: %s", strings.Join(missing, ", "))
	}
	return nil
}

func positive(name, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive whole number", name, v)
	}
	return n, nil
}

func duration(name, v string) (time.Duration, error) {
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration like 5s, 720h or 30d, or a number of seconds", name, v)
	}
	return d, nil
}

// Needs lists, per function logical id of template.yaml, the environment
// variables the function cannot run without (every function serving
// frames needs the @connections endpoint: it closes a connection whose
// token has expired). The drift test checks that the
// template sets each of them on that function.
var Needs = map[string][]string{
	"AuthorizerFunction": {EnvJWTSecret},
	"ConnectFunction":    {EnvConnectionsTable, EnvInboxTable, EnvPresenceQueue, EnvWebSocketAPI},
	"DisconnectFunction": {EnvConnectionsTable, EnvInboxTable, EnvPresenceQueue},
	"SendFunction": {EnvConnectionsTable, EnvInboxTable, EnvMessagesTable, EnvTraceTable,
		EnvRedeliveryQueue, EnvWebSocketAPI, EnvPushTimeout, EnvBackoff, EnvInboxRetention,
		EnvFanoutQueue, EnvHistoryRetention},
	"AckFunction":      {EnvConnectionsTable, EnvInboxTable, EnvTraceTable, EnvWebSocketAPI, EnvFanoutQueue},
	"HistoryFunction":  {EnvMessagesTable, EnvInboxTable, EnvWebSocketAPI},
	"SyncFunction":     {EnvInboxTable, EnvWebSocketAPI},
	"PingFunction":     {EnvConnectionsTable, EnvInboxTable, EnvPresenceQueue, EnvWebSocketAPI},
	"GroupFunction":    {EnvMessagesTable, EnvInboxTable, EnvMemberLimit, EnvWebSocketAPI},
	"ReceiptsFunction": {EnvMessagesTable, EnvInboxTable, EnvWebSocketAPI},
	"PresenceFunction": {EnvConnectionsTable, EnvInboxTable, EnvPresenceQueue, EnvPresenceStale,
		EnvPresenceDebounce, EnvWebSocketAPI},
	"SummaryFunction": {EnvInboxTable, EnvWebSocketAPI},
	"FanoutFunction": {EnvConnectionsTable, EnvInboxTable, EnvMessagesTable, EnvTraceTable,
		EnvRedeliveryQueue, EnvFanoutQueue, EnvWebSocketAPI, EnvPushTimeout, EnvBackoff,
		EnvInboxRetention, EnvFanoutBatch, EnvPresenceStale, EnvAlertsTable},
	"ReadFunction":    {EnvConnectionsTable, EnvInboxTable, EnvMessagesTable, EnvTraceTable, EnvAlertsTable, EnvWebSocketAPI, EnvFanoutQueue},
	"DefaultFunction": {},
	"AlertsFunction": {EnvConnectionsTable, EnvInboxTable, EnvMessagesTable, EnvTraceTable,
		EnvAlertsTable, EnvAdminKey, EnvRedeliveryQueue, EnvWebSocketAPI, EnvFanoutQueue,
		EnvPushTimeout, EnvBackoff, EnvInboxRetention},
	"RedeliverFunction": {EnvConnectionsTable, EnvInboxTable, EnvTraceTable, EnvRedeliveryQueue,
		EnvWebSocketAPI, EnvPushTimeout, EnvBackoff},
	"HintsFunction":     {EnvConnectionsTable, EnvInboxTable, EnvTraceTable, EnvPresenceQueue, EnvWebSocketAPI, EnvPresenceStale},
	"HandshakeFunction": {EnvJWTSecret, EnvInboxTable},
}

// ForFunction reads the configuration of the template function logicalID
// through getenv and checks that every variable it needs is set: the init
// step of every Signet Lambda, which the local stack runs for each function
// with the environment the template gives it.
func ForFunction(getenv func(string) string, logicalID string) (Config, error) {
	needs, ok := Needs[logicalID]
	if !ok {
		return Config{}, fmt.Errorf("no function %s", logicalID)
	}
	cfg, err := Load(getenv)
	if err != nil {
		return Config{}, err
	}
	if err := cfg.Require(needs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
