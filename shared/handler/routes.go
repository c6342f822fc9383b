package handler

import (
	"context"
	"log/slog"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/webhook"
)

// The use cases: each route's handler methods live on a small struct that
// holds only what they use, built from Deps after configuration. Every use
// case has the core (clock, logs, rate limits, pushes, traces); those that
// put messages in inboxes or push to a user's connections have delivery.

// core is what every use case has.
type core struct {
	Now          func() time.Time
	Log          *slog.Logger
	Limits       *ratelimit.Limiter
	Pusher       Pusher
	Disconnector Disconnector
	Tracer       Tracer
	PushDeadline time.Duration
}

// delivery is what inbox appends, pushes to a user's connections and
// redelivery checks need.
type delivery struct {
	*core
	Inbox       Inbox
	Connections Connections
	Scheduler   Scheduler
	Redelivery  im.Redelivery
	// WakeQueue carries wake jobs for devices that are offline (the
	// presence queue; nil: no offline push).
	WakeQueue FanoutQueue
	// GroupLogs serves groups under read diffusion (nil: none).
	GroupLogs GroupLogs
	// Online is their online index (Deps.Online; nil: none).
	Online OnlineIndex
}

// Sessions serves $connect, $disconnect, ping and $default.
type Sessions struct {
	*delivery
	MaxConnections int
	MaxDevices     int
	presence       *PresenceRoutes
}

// Messages serves send, ack and sync.
type Messages struct {
	*delivery
	Groups       Groups
	FanoutQueue  FanoutQueue
	SyncInterval time.Duration
	// TraceSample is Deps.TraceSample.
	TraceSample int
	Traces      TraceReader
}

// GroupRoutes serves group (create, add, remove, role, leave, members).
type GroupRoutes struct {
	*delivery
	Groups      Groups
	MemberLimit int
}

// ReadRoutes serves read.
type ReadRoutes struct {
	*delivery
	Reads Reads
	// FanoutQueue carries the status callback jobs of alerts read or
	// answered (nil: none).
	FanoutQueue FanoutQueue
	// Answers records answers to alerts (the answer route); nil where
	// there is no alerts table.
	Answers Answers
}

// HistoryRoutes serves history.
type HistoryRoutes struct {
	*core
	Groups    Groups
	Histories Histories
}

// PresenceRoutes serves presence and register, and pushes presence
// changes.
type PresenceRoutes struct {
	*delivery
	// Wakes stores devices' wake-up registrations for the platforms in
	// PushPlatforms (nil or none: register is refused).
	Wakes                           WakeStore
	PushPlatforms                   []string
	Presences                       PresenceStore
	PresenceQueue                   FanoutQueue
	PresenceStale, PresenceDebounce time.Duration
}

// SummaryRoutes serves summary and receipts.
type SummaryRoutes struct {
	*core
	Groups Groups
	Index  ConversationIndex
	Reads  Reads
}

// AlertsAPI serves the HTTP alerts API (alerts, apps, traces).
type AlertsAPI struct {
	*delivery
	AlertStore   AlertStore
	Validator    Validator
	AdminKeyHash string
	Groups       Groups
	Reads        Reads
	FanoutQueue  FanoutQueue
	FanoutBatch  int
	// Escalations drives alert escalation (nil: the alert's store when it
	// implements it).
	Escalations Escalations
	// Callbacks stores webhooks and callback events (nil: the alert's
	// store when it implements it); Webhooks posts them, retried after
	// CallbackBackoff; WebhookPrivate admits http:// and private
	// addresses (the local stack).
	Callbacks       Callbacks
	Webhooks        *webhook.Client
	CallbackQueues  CallbackSender
	CallbackBackoff []time.Duration
	WebhookPrivate  bool
	CallbackSweep   time.Duration
	// MaxDevices is the device limit (Deps.MaxDevices), shown with a
	// user's devices.
	MaxDevices int
}

// FanoutWorker runs the fan-out and presence queues' jobs.
type FanoutWorker struct {
	*delivery
	Fanouts     Fanouts
	FanoutQueue FanoutQueue
	FanoutBatch int
	alerts      *AlertsAPI
	presence    *PresenceRoutes
}

// Hints runs the presence queue's jobs: presence pushes to peers and SNS
// wake-ups of offline devices.
type Hints struct {
	*core
	Waker       Waker
	Wakes       WakeStore
	WakeWindow  time.Duration
	Connections Connections
	presence    *PresenceRoutes
}

// Hints is the presence queue's use case.
func (d *Deps) Hints() *Hints {
	return &Hints{core: d.core(), Waker: d.Waker, Wakes: d.Wakes, WakeWindow: d.WakeWindow, Connections: d.Connections, presence: d.Presence()}
}

// Redeliverer runs the redelivery queue's checks.
type Redeliverer struct {
	*delivery
}

// Authorizer is the $connect authorizer.
type Authorizer struct {
	*core
	Secret      []byte
	TokenPolicy auth.Policy
	OIDC        *auth.OIDC
}

// core is the part of d every use case has; an optional dependency left
// nil gets its no-op default (the time, no rate limits, a disconnect that
// leaves only the record's removal).
func (d *Deps) core() *core {
	c := &core{Now: d.Now, Log: d.Log, Limits: d.Limits, Pusher: d.Pusher, Disconnector: d.Disconnector, Tracer: d.Tracer, PushDeadline: d.PushDeadline}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Limits == nil {
		c.Limits = &ratelimit.Limiter{}
	}
	if c.Disconnector == nil {
		c.Disconnector = noDisconnect{}
	}
	return c
}

// noDisconnect is the Disconnector of a function without @connections:
// closing a connection removes only its record.
type noDisconnect struct{}

// Disconnect does nothing.
func (noDisconnect) Disconnect(context.Context, im.ConnectionID) error { return nil }

// delivery is the part of d the use cases that append or push have.
func (d *Deps) delivery() *delivery {
	return &delivery{core: d.core(), Inbox: d.Inbox, Connections: d.Connections, Scheduler: d.Scheduler, Redelivery: d.Redelivery,
		WakeQueue: d.WakeQueue, GroupLogs: d.GroupLogs, Online: d.Online}
}

// Sessions is the connection routes' use case.
func (d *Deps) Sessions() *Sessions {
	return &Sessions{delivery: d.delivery(), MaxConnections: d.MaxConnections, MaxDevices: deviceLimit(d.MaxDevices), presence: d.Presence()}
}

// Messages is the send, ack and sync routes' use case.
func (d *Deps) Messages() *Messages {
	return &Messages{delivery: d.delivery(), Groups: d.Groups, FanoutQueue: d.FanoutQueue, SyncInterval: d.SyncInterval, TraceSample: d.TraceSample, Traces: d.Traces}
}

// GroupRoutes is the group route's use case.
func (d *Deps) GroupRoutes() *GroupRoutes {
	return &GroupRoutes{delivery: d.delivery(), Groups: d.Groups, MemberLimit: d.MemberLimit}
}

// ReadRoutes is the read route's use case.
func (d *Deps) ReadRoutes() *ReadRoutes {
	rr := &ReadRoutes{delivery: d.delivery(), Reads: d.Reads, FanoutQueue: d.FanoutQueue}
	if d.AlertStore != nil {
		rr.Answers = d.AlertStore
	}
	return rr
}

// HistoryRoutes is the history route's use case.
func (d *Deps) HistoryRoutes() *HistoryRoutes {
	return &HistoryRoutes{core: d.core(), Groups: d.Groups, Histories: d.Histories}
}

// Presence is the presence route's use case.
func (d *Deps) Presence() *PresenceRoutes {
	return &PresenceRoutes{delivery: d.delivery(), Presences: d.Presences, PresenceQueue: d.PresenceQueue,
		PresenceStale: d.PresenceStale, PresenceDebounce: d.PresenceDebounce, Wakes: d.Wakes, PushPlatforms: d.PushPlatforms}
}

// SummaryRoutes is the summary and receipts routes' use case.
func (d *Deps) SummaryRoutes() *SummaryRoutes {
	return &SummaryRoutes{core: d.core(), Groups: d.Groups, Index: d.Index, Reads: d.Reads}
}

// AlertsAPI is the HTTP alerts API's use case.
func (d *Deps) AlertsAPI() *AlertsAPI {
	a := &AlertsAPI{delivery: d.delivery(), AlertStore: d.AlertStore, Validator: d.Validator, AdminKeyHash: d.AdminKeyHash,
		Groups: d.Groups, Reads: d.Reads, FanoutQueue: d.FanoutQueue, FanoutBatch: d.FanoutBatch,
		Webhooks: newWebhookClient(d.WebhookPrivate), CallbackQueues: d.CallbackQueues, CallbackBackoff: d.CallbackBackoff, WebhookPrivate: d.WebhookPrivate,
		CallbackSweep: d.CallbackSweep, MaxDevices: deviceLimit(d.MaxDevices)}
	if e, ok := d.AlertStore.(Escalations); ok {
		a.Escalations = e
	}
	if c, ok := d.AlertStore.(Callbacks); ok {
		a.Callbacks = c
	}
	return a
}

// FanoutWorker is the fan-out queues' use case.
func (d *Deps) FanoutWorker() *FanoutWorker {
	return &FanoutWorker{delivery: d.delivery(), Fanouts: d.Fanouts, FanoutQueue: d.FanoutQueue, FanoutBatch: d.FanoutBatch,
		alerts: d.AlertsAPI(), presence: d.Presence()}
}

// Redeliverer is the redelivery queue's use case.
func (d *Deps) Redeliverer() *Redeliverer { return &Redeliverer{delivery: d.delivery()} }

// Authorizer is the $connect authorizer's use case.
func (d *Deps) Authorizer() *Authorizer {
	return &Authorizer{core: d.core(), Secret: d.Secret, TokenPolicy: d.TokenPolicy, OIDC: d.OIDC}
}

// deviceLimit is the configured device limit, or im.DefaultMaxDevices when
// unset: resolved once, where the routes are built, for $connect and the
// devices API alike.
func deviceLimit(n int) int {
	if n > 0 {
		return n
	}
	return im.DefaultMaxDevices
}
