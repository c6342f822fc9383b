package handler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/ratelimit"
	"github.com/signet-im/signet/shared/wire"
)

// Inbox is the storage the message routes use.
type Inbox interface {
	Send(ctx context.Context, d im.Draft, now time.Time) (im.Stored, error)
	Page(ctx context.Context, u im.UserID, cursor int64, limit int, size func(im.Entry) int) (im.Page, error)
	Head(ctx context.Context, u im.UserID) (int64, string, error)
	EnsureHead(ctx context.Context, u im.UserID, now time.Time) (int64, string, error)
	Entry(ctx context.Context, u im.UserID, seq int64) (im.Entry, error)
	Device(ctx context.Context, u im.UserID, d im.DeviceID) (im.DeviceCursor, error)
	AckedUpTo(ctx context.Context, u im.UserID, d im.DeviceID) (int64, error)
	Ack(ctx context.Context, a im.AckRange) (im.AckResult, error)
	// LastAck is the range of the ack that last moved device d's cursor
	// and what an ack written again has done at it.
	LastAck(ctx context.Context, u im.UserID, d im.DeviceID) (im.LastAck, error)
	// MarkRetold records that an ack written again at upTo, d's cursor,
	// has sent its receipts and events again.
	MarkRetold(ctx context.Context, u im.UserID, d im.DeviceID, upTo int64) error
	EntryRefs(ctx context.Context, u im.UserID, after, upTo int64, limit int) ([]im.EntryRef, error)
	// AlertsInSpan returns the ids of u's alerts (of app conversation c
	// only, when set) with inbox seq in (after, upTo] among at most limit
	// entries read, and the seq reached.
	AlertsInSpan(ctx context.Context, u im.UserID, c im.ConversationID, after, upTo int64, limit int) ([]im.MessageID, int64, error)
	Devices(ctx context.Context, u im.UserID) (map[im.DeviceID]im.DeviceCursor, error)
	EnsureDevice(ctx context.Context, u im.UserID, d im.DeviceID, limit int, now time.Time) error
	ForgetDevice(ctx context.Context, u im.UserID, d im.DeviceID) error
	SetSyncNext(ctx context.Context, u im.UserID, d im.DeviceID, next int64) error
	TakeSyncSlot(ctx context.Context, u im.UserID, now time.Time, interval time.Duration) (time.Duration, error)
}

// GroupLogs is the storage of groups under read diffusion
// (docs/proposal-group-read-diffusion.md): each device's cursor in a
// group's log and pulls of the log within a member's range.
type GroupLogs interface {
	AckGroup(ctx context.Context, c im.ConversationID, a im.AckRange) (im.AckResult, error)
	GroupPage(ctx context.Context, c im.ConversationID, u im.UserID, cursor int64, limit int, size func(im.Message) int) (im.GroupPage, error)
	GroupCursors(ctx context.Context, c im.ConversationID, users []im.UserID) (map[im.DeviceKey]im.DeviceCursor, error)
	ReadGroups(ctx context.Context, u im.UserID, d im.DeviceID) ([]im.GroupPosition, error)
	Log(ctx context.Context, c im.ConversationID, after, upTo int64) ([]im.Message, error)
	// GroupProofKey is the key of group position proofs (im.GroupProof;
	// nil while there is none).
	GroupProofKey(ctx context.Context) ([]byte, error)
}

// OnlineIndex is the online index of groups under read diffusion
// (dynamo/online.go): who of a group is connected, in one Query.
type OnlineIndex interface {
	// ReadGroupsOf lists the read-diffused groups u is a member of.
	ReadGroupsOf(ctx context.Context, u im.UserID) ([]im.ConversationID, error)
	// IndexOnline puts conn in the groups' indexes (false: its record is gone).
	IndexOnline(ctx context.Context, conn im.Connection, groups []im.ConversationID) (bool, error)
	// OnlineIn lists the connections indexed in group c.
	OnlineIn(ctx context.Context, c im.ConversationID, now time.Time) ([]im.Connection, error)
	GroupReadDiffused(ctx context.Context, c im.ConversationID) (bool, error)
	// EnsureGroupProofKey makes the key of group position proofs if there
	// is none ($connect: before any push of such a group).
	EnsureGroupProofKey(ctx context.Context) error
}

// Connections is the storage of connection records.
type Connections interface {
	SaveConnection(ctx context.Context, c im.Connection) error
	RemoveConnection(ctx context.Context, u im.UserID, id im.ConnectionID) error
	RemoveStaleConnection(ctx context.Context, u im.UserID, id im.ConnectionID, cutoff time.Time) (bool, error)
	TouchConnection(ctx context.Context, u im.UserID, id im.ConnectionID, now time.Time) (pull bool, err error)
	MarkPull(ctx context.Context, u im.UserID, id im.ConnectionID) error
	Connections(ctx context.Context, u im.UserID) ([]im.Connection, error)
}

// Pusher posts a frame to one connection; im.ErrGone means it no longer exists.
type Pusher interface {
	Push(ctx context.Context, id im.ConnectionID, data []byte) error
}

// Disconnector closes a connection from the server side (API Gateway's
// DeleteConnection); closing one already gone is not an error.
type Disconnector interface {
	Disconnect(ctx context.Context, id im.ConnectionID) error
}

// Scheduler enqueues redelivery checks (at most im.MaxChecksPerSchedule) to
// run together after delay.
type Scheduler interface {
	Schedule(ctx context.Context, cs []im.Check, delay time.Duration) error
}

// Tracer appends events to messages' traces.
type Tracer interface {
	AppendEvents(ctx context.Context, events []im.Event) error
}

// TraceReader reads a message's trace.
type TraceReader interface {
	Events(ctx context.Context, id im.MessageID) ([]im.Event, error)
}

// Retrier brings an SQS batch's failed messages back to their queue
// sooner than its visibility timeout (queue.Backoff).
type Retrier interface {
	RetrySoon(ctx context.Context, failed []events.SQSMessage, log *slog.Logger)
}

// Deps are what Signet's functions are built from: app.New fills them
// from configuration (fields left nil are not needed by every function:
// the authorizer needs only Secret), the local stack's Configure hooks may
// replace any, and then each route's use case takes the part it needs
// (routes.go: Deps.Messages, Deps.Sessions, ...).
type Deps struct {
	Inbox       Inbox
	Connections Connections
	Pusher      Pusher
	Scheduler   Scheduler
	// Tracer records each message's path (nil: no trace).
	Tracer Tracer
	// Traces reads them: an ack written again ("again") writes the
	// "acked" events of the alerts whose first invocation failed before
	// writing them (nil: it does not).
	Traces TraceReader
	// Reads stores read watermarks.
	Reads Reads
	// Histories reads conversation logs.
	Histories Histories
	// Groups stores groups and their logs; Fanouts fills member inboxes
	// and FanoutQueue carries fan-out jobs (group messages and alerts).
	Groups      Groups
	Fanouts     Fanouts
	FanoutQueue FanoutQueue
	// GroupLogs serves groups under read diffusion (nil: group acks and
	// syncs are refused).
	GroupLogs GroupLogs
	// Online is the online index of such groups, kept where groups are
	// created read-diffused (GroupDelivery read); nil: their fan-out looks
	// up each member's connections.
	Online OnlineIndex
	// PresenceQueue carries debounced presence pushes, apart from the
	// fan-out jobs so that they never delay a message.
	PresenceQueue FanoutQueue
	// Index is the per-user conversation index (summary, receipts).
	Index ConversationIndex
	// Presences stores display states.
	Presences PresenceStore
	// MemberLimit bounds group size (default im.DefaultMemberLimit).
	MemberLimit int
	// MaxConnections bounds one user's connections (default
	// im.DefaultMaxConnections): $connect beyond it closes the oldest.
	MaxConnections int
	// MaxDevices bounds one user's devices (default im.DefaultMaxDevices):
	// $connect with a device id the user has not used before is refused
	// beyond it.
	MaxDevices int
	// Disconnector closes connections (nil: only their records go).
	Disconnector Disconnector
	// Limits bounds each user's sends, group changes, queries and presence
	// changes per window (nil: no per-user limits).
	Limits *ratelimit.Limiter
	// FanoutBatch is how many members one fan-out invocation fills
	// (default im.DefaultFanoutBatch).
	FanoutBatch int
	// PresenceStale is how long a connection counts as live after its last
	// sign of life; PresenceDebounce delays presence pushes to peers.
	PresenceStale, PresenceDebounce time.Duration
	// AlertStore serves the HTTP alerts API (nil: not configured).
	AlertStore AlertStore
	// Validator checks HTTP request bodies against the OpenAPI schemas.
	Validator Validator
	// AdminKeyHash is the SHA-256 (hex) of the admin key ("" disables it).
	AdminKeyHash string
	// Secret verifies client tokens; TokenPolicy says what else they must
	// satisfy (issuer, audience, lifetime).
	Secret      []byte
	TokenPolicy auth.Policy
	// OIDC, when set, verifies RS256/ES256 tokens of an OpenID Connect
	// provider (HS256 tokens still go through Secret).
	OIDC *auth.OIDC
	// TraceSample: one in TraceSample 1:1 and read-diffused group messages
	// sent as expected has its send's trace written in full; the others' is derived from what
	// is stored (Store.Events). 0 or 1: every message's is written.
	TraceSample int
	// Redelivery is the push timeout and backoff policy.
	Redelivery im.Redelivery
	// PushDeadline bounds one PostToConnection, SDK retries included
	// (default DefaultPushDeadline): a recipient that stops reading costs
	// a push at most this long, and what was pushed is left to redelivery.
	PushDeadline time.Duration
	// SyncInterval admits one new sync per user per interval (default 2s).
	SyncInterval time.Duration
	// WakeQueue carries wake jobs of offline devices (nil: no offline
	// push). Waker hands the wake-ups to SNS mobile push and Wakes keeps
	// the devices' registrations for the platforms in PushPlatforms;
	// WakeWindow is the shortest time between two wake-ups of a device
	// (default im.DefaultWakeWindow).
	WakeQueue     FanoutQueue
	Waker         Waker
	Wakes         WakeStore
	PushPlatforms []string
	WakeWindow    time.Duration
	// CallbackBackoff is the wait before each retry of a failed status
	// callback (default im.DefaultCallbackBackoff); WebhookPrivate lets
	// webhooks be http:// and reach private addresses (local stack only).
	CallbackBackoff []time.Duration
	WebhookPrivate  bool
	// CallbackSweep is how long after a callback job of one user's change
	// every recipient's state is derived again (default callbackSweep; see
	// AlertsAPI.runCallbacks).
	CallbackSweep time.Duration
	// CallbackQueues sends status callbacks to apps' SQS queues.
	CallbackQueues CallbackSender
	// Retries brings a queue consumer's failed messages back after a short
	// wait (queue.Backoff) instead of the queue's visibility timeout (nil:
	// they wait the timeout).
	Retries Retrier
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Log receives structured logs (slog.Default when nil).
	Log *slog.Logger
}

// now is the handler's clock (Now, or the time).
func (h *core) now() time.Time { return h.Now().UTC() }

// receivedAt is when API Gateway received frame req (its requestTimeEpoch;
// now when it has none): the order of the frames that set a state. The
// frames of a connection run as concurrent invocations, and an SDK writes
// an unanswered frame again on a new connection, so the frame whose
// invocation runs last need not be the newest.
func (h *core) receivedAt(req events.APIGatewayWebsocketProxyRequest) time.Time {
	if ms := req.RequestContext.RequestTimeEpoch; ms > 0 {
		return time.UnixMilli(ms).UTC()
	}
	return h.now()
}

// Logger is the use case's logger (Log, or slog's default).
func (h *core) Logger() *slog.Logger { return h.log() }

// log is the use case's logger (Log, or slog's default).
func (h *core) log() *slog.Logger { return cmp.Or(h.Log, slog.Default()) }

// caller is who sent a frame, from the authorizer context of the connection.
type caller struct {
	User       im.UserID
	Device     im.DeviceID
	Connection im.ConnectionID
	RequestID  string
	// Ref is the request's ref, echoed in answers and errors: set from
	// the decoded frame (useRef); until then ref reads it from body, once,
	// for an error that comes before the decode.
	Ref     string
	refRead bool
	body    string
	// Expires is when the connection's token expires (zero: unknown).
	Expires time.Time
}

// useRef takes the ref of the decoded frame (valid, or "").
func (c *caller) useRef(ref string) { c.Ref, c.refRead = ref, true }

// admit is the prelude of a route answered with a frame: the caller
// (frameCaller), the frame decoded from the body (its ref taken for the
// answer, also when it is refused) and one frame of action let through the
// caller's rate limit. The route answers an error with fail.
func admit[F interface{ RequestRef() string }](ctx context.Context, h *core, req events.APIGatewayWebsocketProxyRequest, decode func(string) (F, error), action ratelimit.Action) (caller, F, error) {
	var f F
	c, err := h.frameCaller(ctx, req)
	if err != nil {
		return c, f, err
	}
	f, err = decode(req.Body)
	c.useRef(f.RequestRef())
	if err != nil {
		return c, f, err
	}
	return c, f, h.limit(ctx, c, action)
}

// ref is the request's ref: the decoded frame's, or (for an error before
// the decode) read from the body.
func (c *caller) ref() string {
	if !c.refRead {
		c.Ref, c.refRead = wire.RefOf(c.body), true
	}
	return c.Ref
}

// callerOf reads the authorizer context that API Gateway attaches to every
// route of a connection authorized at $connect.
func callerOf(req events.APIGatewayWebsocketProxyRequest) (caller, bool) {
	c := caller{Connection: im.ConnectionID(req.RequestContext.ConnectionID), RequestID: req.RequestContext.RequestID, body: req.Body}
	ctx, _ := req.RequestContext.Authorizer.(map[string]any)
	u, _ := ctx[ContextUser].(string)
	d, _ := ctx[ContextDevice].(string)
	c.User, c.Device = im.UserID(u), im.DeviceID(d)
	if exp, _ := ctx[ContextExpires].(string); exp != "" {
		if secs, err := strconv.ParseInt(exp, 10, 64); err == nil {
			c.Expires = time.Unix(secs, 0).UTC()
		}
	}
	return c, c.User.Valid() && c.Device.Valid() && c.Connection != ""
}

// limit admits one frame of action for c, or returns the rate_limited
// problem with when to retry.
func (h *core) limit(ctx context.Context, c caller, action ratelimit.Action) error {
	now := h.now()
	wait, ok := h.Limits.Allow(ctx, c.User, action, now)
	if ok {
		return nil
	}
	l := h.Limits.Limits[action]
	if h.Limits.Refused(c.User, string(c.Connection), action, now) {
		h.ejectIgnoring(ctx, c, action, now)
	}
	return wire.RateLimited(fmt.Sprintf("at most %d %s frames per user every %s", l.Per, action, l.Window), wait.Milliseconds()+1)
}

// ejectIgnoring closes a connection that keeps sending action after being
// refused it, and refuses the user's new connections for the rest of the
// connect window: refusals are cheap, but a flood of them still spends
// invocations, pushes and sockets that every user shares.
func (h *core) ejectIgnoring(ctx context.Context, c caller, action ratelimit.Action, now time.Time) {
	h.log().WarnContext(ctx, "closing a connection that ignores its rate limit", "userId", c.User, "deviceId", c.Device, "connectionId", c.Connection, "action", action)
	if err := h.Limits.Penalize(ctx, c.User, ratelimit.Connect, now); err != nil {
		h.log().WarnContext(ctx, "connect penalty not recorded", "err", err.Error(), "userId", c.User)
	}
	retry := time.Minute
	if l, ok := h.Limits.Limits[ratelimit.Connect]; ok {
		retry = now.Truncate(l.Window).Add(l.Window).Sub(now)
	}
	p := wire.Problemf(wire.CodeRateLimitIgnored, "this connection kept sending %s frames after being told to wait: it is closed, and new connections of %s are refused for a while", action, c.User)
	p.RetryAfterMs = retry.Milliseconds() + 1
	h.closeConnection(ctx, c.Connection, c.RequestID, p)
}

// errTokenExpired refuses a frame on a connection whose token has expired.
var errTokenExpired = wire.Problemf(wire.CodeUnauthorized, "your token has expired: this connection is closed; reconnect with a new token")

// frameCaller is callerOf for a frame: a connection whose token has expired
// is told so (error unauthorized) and closed, and the frame refused. API
// Gateway keeps a connection open up to 2 h whatever its token says; this
// check on every frame (pings included, every 5 min from an idle SDK
// client) ends it at the first frame after expiry.
func (h *core) frameCaller(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (caller, error) {
	c, ok := callerOf(req)
	if !ok {
		return c, errNoCaller
	}
	if c.Expires.IsZero() || h.now().Before(c.Expires) {
		return c, nil
	}
	h.log().InfoContext(ctx, "token expired: closing the connection", "userId", c.User, "deviceId", c.Device, "connectionId", c.Connection, "expired", c.Expires)
	h.closeConnection(ctx, c.Connection, c.RequestID, errTokenExpired)
	return c, errTokenExpired
}

// reply answers the caller through the route response.
func reply(v any) (events.APIGatewayProxyResponse, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return events.APIGatewayProxyResponse{StatusCode: 500}, err
	}
	return events.APIGatewayProxyResponse{StatusCode: 200, Body: string(b)}, nil
}

// fail answers the caller with the error frame for err, logging what the
// client does not see.
func (h *core) fail(ctx context.Context, c caller, route string, err error, clientMsgID string) (events.APIGatewayProxyResponse, error) {
	frame := wire.NewError(err, c.RequestID, clientMsgID)
	frame.Ref = c.ref()
	level := slog.LevelInfo
	if frame.Code == wire.CodeInternal {
		level = slog.LevelError
	}
	h.log().Log(ctx, level, "request rejected", "route", route, "code", frame.Code, "err", err.Error(),
		"userId", c.User, "deviceId", c.Device, "connectionId", c.Connection, "requestId", c.RequestID)
	return reply(frame)
}

// failOneWay answers a one-way route (ack, read, send: no route
// response) with its error frame pushed through @connections.
func (h *core) failOneWay(ctx context.Context, c caller, route string, err error) (events.APIGatewayProxyResponse, error) {
	return h.failPushed(ctx, c, route, err, "")
}

// failPushed pushes the error frame of a one-way route (naming the send's
// clientMsgId, if any). A caller without a connection id has nowhere to
// be answered.
func (h *core) failPushed(ctx context.Context, c caller, route string, err error, clientMsgID string) (events.APIGatewayProxyResponse, error) {
	resp, _ := h.fail(ctx, c, route, err, clientMsgID)
	if h.Pusher != nil && c.Connection != "" {
		if perr := h.push(ctx, c.Connection, []byte(resp.Body)); perr != nil && !errors.Is(perr, im.ErrGone) {
			h.log().WarnContext(ctx, "error frame not pushed", "route", route, "err", perr.Error(), "connectionId", c.Connection)
		}
	}
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// answer posts a one-way route's answer (a send's "sent") to the caller's
// connection, once more if the first post failed for a reason other than
// the connection being gone, and reports whether it was posted. If both
// fail the client re-sends after its resend timeout and gets the same
// answer (sends are idempotent).
func (h *core) answer(ctx context.Context, c caller, route string, v any) (posted bool) {
	b, err := json.Marshal(v)
	if err != nil {
		h.log().ErrorContext(ctx, "answer not encoded", "route", route, "err", err.Error())
		return false
	}
	for attempt := range 2 {
		err = h.pushWithin(ctx, AnswerDeadline, c.Connection, b)
		if err == nil {
			return true
		}
		if errors.Is(err, im.ErrGone) {
			return false
		}
		h.log().WarnContext(ctx, "answer not pushed", "route", route, "attempt", attempt, "err", err.Error(), "connectionId", c.Connection)
	}
	return false
}

// DefaultPushDeadline bounds one push when Deps.PushDeadline is unset.
const DefaultPushDeadline = 3 * time.Second

// AnswerDeadline bounds each of the two attempts to post a one-way route's
// answer to its own caller: longer than a push, because a lost "sent" costs
// the sender a resend timeout, and waiting holds up no one but the caller's
// own invocation (both attempts fit in the send function's 10 s).
const AnswerDeadline = 4 * time.Second

// push posts one frame to a connection within the push deadline.
func (h *core) push(ctx context.Context, id im.ConnectionID, frame []byte) error {
	d := h.PushDeadline
	if d <= 0 {
		d = DefaultPushDeadline
	}
	return h.pushWithin(ctx, d, id, frame)
}

// pushWithin posts frame to connection id, giving up after d.
func (h *core) pushWithin(ctx context.Context, d time.Duration, id im.ConnectionID, frame []byte) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return h.Pusher.Push(ctx, id, frame)
}

// errNoCaller refuses a frame without the authorizer's user and device.
var errNoCaller = wire.Problemf(wire.CodeForbidden, "connection is not authorized")

// trail collects the trace events of one invocation and writes them in one
// batch at the end. The trace is diagnostic: failing to write it is logged,
// never turned into a failed delivery.
// Its methods are safe for concurrent pushes.
type trail struct {
	h        *core
	function string
	request  string
	mu       sync.Mutex
	events   []im.Event
	omit     im.MessageID // see omitIfDerivable
	// firstPushesOmitted drops every message's first pushes and their
	// redelivery checks (a read-diffused group's fan-out: a member's
	// device cursor says it got the message; re-pushes, failures and
	// waits for a pull are written).
	firstPushesOmitted bool
}

// omitIfDerivable leaves id's events out of the flush when they are only
// what Store.Events derives for a located 1:1 message that was not
// sampled: created, stored, inboxed, first pushes and their redelivery
// checks (issue 12: the trace is written for failures, retries and a
// sampled share). One other event — a failed push, a user with no
// connection, a retry — and the whole trail is written.
func (t *trail) omitIfDerivable(id im.MessageID, sample int) {
	if _, _, ok := id.Locate(); ok && !id.Sampled(sample) {
		t.omit = id
	}
}

// derivable reports whether e is one that Store.Events derives for a
// located message sent as expected.
func derivable(e im.Event) bool {
	switch e.Type {
	case im.EventCreated:
		return e.Detail == ""
	case im.EventStored, im.EventInboxed:
		return true
	case im.EventPushed, im.EventRedeliveryScheduled:
		return e.Attempt == 0
	}
	return false
}

// trail starts the trace events of one invocation of function.
func (h *core) trail(function, requestID string) *trail {
	return &trail{h: h, function: function, request: requestID}
}

// add records e, stamped with the time, function and request.
func (t *trail) add(e im.Event) {
	e.At, e.Function, e.RequestID = t.h.now(), t.function, t.request
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, e)
}

// flush writes the events recorded so far in one batch; a failure is
// logged (the trace is diagnostic), never returned: flush says only
// whether the events are written (true when there were none).
func (t *trail) flush(ctx context.Context) bool {
	t.mu.Lock()
	events := t.events
	t.events = nil
	t.mu.Unlock()
	if t.omit != "" && !slices.ContainsFunc(events, func(e im.Event) bool { return e.Message == t.omit && !derivable(e) }) {
		events = slices.DeleteFunc(events, func(e im.Event) bool { return e.Message == t.omit })
	}
	if t.firstPushesOmitted {
		events = slices.DeleteFunc(events, func(e im.Event) bool {
			return (e.Type == im.EventPushed || e.Type == im.EventRedeliveryScheduled) && e.Attempt == 0
		})
	}
	if t.h.Tracer == nil || len(events) == 0 {
		return true
	}
	if err := t.h.Tracer.AppendEvents(ctx, events); err != nil {
		t.h.log().WarnContext(ctx, "trace not recorded", "err", err.Error(), "events", len(events), "requestId", t.request)
		return false
	}
	return true
}
