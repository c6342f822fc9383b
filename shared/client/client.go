package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// DefaultPingInterval is how often a connection sends a keep-alive frame
// when nothing else sets it: within API Gateway's 10-minute idle timeout
// with two minutes to spare. Every DefaultHeadEvery-th is a ping — two API
// Gateway messages, an invocation, a write and a head read, answered by a
// pong that carries the inbox head (so it bounds how long a device whose
// pushes were all lost stays behind: Liveness in docs/protocol.md) and
// keeps the device's presence live — and the others are keepalive frames
// API Gateway answers itself: one message, nothing invoked (issue 12: 180
// pings a device-day at 8 minutes; now 60 pings and 120 keepalives).
const DefaultPingInterval = 8 * time.Minute

// DefaultHeadEvery is how many keep-alive ticks make one ping (the rest are
// keepalive frames): a ping every 24 minutes at DefaultPingInterval.
const DefaultHeadEvery = 3

// Options configure a Client. URL, Token and Path are required.
type Options struct {
	// URL is the WebSocket endpoint, e.g. ws://127.0.0.1:3001/ or
	// wss://{api}.execute-api.{region}.amazonaws.com/{stage}.
	URL string
	// Token returns the JWT for each (re)connect.
	Token func(ctx context.Context) (string, error)
	// Device is sent as the deviceId query parameter (a token's "did" wins).
	Device string
	// Path is the local store file (created if missing).
	Path string
	// AckInterval and AckBatch batch acks of pushed entries: a pushed
	// entry is acked at most AckInterval after it arrived, or at once when
	// AckBatch entries are waiting (2 s, 50). The interval is capped at 2/5
	// of the push timeout the server announces on sync pages (5 s → 2 s),
	// so the ack lands before the server's re-push. Synced entries are
	// acked when the sync ends, or every SyncAckBatch entries of a long one
	// (500). One ack covers every entry up to the cursor: messages that
	// arrive within 2 s of each other (a burst, a busy group) take one ack
	// frame, one invocation and one receipt instead of one each (issue 12);
	// at chat pace, messages further apart, each is acked alone.
	AckInterval  time.Duration
	AckBatch     int
	SyncAckBatch int
	// MinBackoff and MaxBackoff bound reconnect delays (200 ms, 30 s; full jitter).
	MinBackoff, MaxBackoff time.Duration
	// EvictedWait is how long the client waits before reconnecting after
	// the server closed its connection for the user's connection limit
	// (error connection_limit; default 5 min).
	EvictedWait time.Duration
	// ResendAfter is how long a send waits for its ACK before it is sent
	// again on the same connection (10 s).
	ResendAfter time.Duration
	// PingInterval keeps an idle connection open (DefaultPingInterval; API Gateway closes
	// connections idle for 10 min).
	PingInterval time.Duration
	// HeadEvery makes every HeadEvery-th keep-alive tick a ping (its pong
	// carries the inbox head; it keeps the device's presence live) and the
	// others keepalive frames API Gateway answers without an invocation
	// (DefaultHeadEvery; 1: every tick a ping).
	HeadEvery int
	// PongTimeout is how long a ping may go unanswered (no frame at all
	// arrives) before the connection counts as dead and is replaced (15 s).
	// A connection that has sends or a sync waiting for ResendAfter with
	// nothing received is probed with a ping at once: a half-open
	// connection (no FIN, no RST) is found within ResendAfter+PongTimeout.
	PongTimeout time.Duration
	// Dialer opens connections (default WebSocket).
	Dialer Dialer
	// Replay makes Messages() start with the stored messages after
	// ShownUpTo, before any new one: an application that records how far it
	// has shown messages gets each message exactly once across crashes
	// (a crash can fall between persisting a message and showing it).
	Replay    bool
	ShownUpTo int64
	// ShownGroups is, with Replay, how far the application has shown each
	// group under read diffusion (the highest convSeq; a group not named:
	// nothing): the stored messages of each group after it are replayed
	// too. Such a message has no inbox seq, so ShownUpTo cannot say it.
	ShownGroups map[string]int64
	// OnReceipt is called (from the client's goroutine; keep it short) for
	// each delivered/read receipt about this user's 1:1 messages, and
	// OnRead when another device of this user read a conversation.
	// Receipts are watermarks that can arrive out of order (acks handled
	// at once): keep the highest UpTo per conversation and kind.
	OnReceipt func(Receipt)
	OnRead    func(conversationID string, upTo int64)
	// OnAlertsRead is called, besides OnRead, when another device of this
	// user read an app's alert conversation: its alerts at inbox seqs up
	// to inboxSeq are read (MarkAlertsRead).
	OnAlertsRead func(conversationID string, upTo, inboxSeq int64)
	// OnPresence is called when a peer of one of this user's 1:1
	// conversations changes what they show (online, away, dnd, offline).
	OnPresence func(userID, status string)
	// OnAnswer is called when another device of this user answered an
	// alert (the answer that stands).
	OnAnswer func(AnswerResult)
	// OnRenotify is called (from the client's goroutine) when an
	// escalation pushes again an alert this device already has: show it to
	// the user again (it is not emitted twice by Messages).
	OnRenotify func(Message)
	// OnMembership is called when someone else added this user to a group
	// (or created one with them) or removed them from one, while this
	// device is connected (a notice: offline, the summary has the group).
	OnMembership func(Membership)
	// Log receives the client's structured logs (discarded when nil).
	Log *slog.Logger
	// CrashAt, for fault-injection tests of an application (a chaos run),
	// is asked at each crash point of an entry's path; when it answers true
	// the client stops there as a killed process would: nothing more is
	// written, the connection drops, Messages is closed. Open the same
	// Path again to restart. Nil in production.
	CrashAt func(point CrashPoint, seq int64) bool
	// hooks inject faults in tests.
	hooks hooks
}

// CrashPoint names a step of an entry's path on the device.
type CrashPoint string

// Crash points, in path order.
const (
	// BeforePersist: the entry arrived, nothing is stored.
	BeforePersist CrashPoint = "before-persist"
	// AfterPersist: the entry is stored, not yet shown nor acked.
	AfterPersist CrashPoint = "after-persist"
	// BeforeAck: entries are stored and shown, the ack is not sent.
	BeforeAck CrashPoint = "before-ack"
)

// hooks let tests crash the client between two steps of a path.
type hooks struct {
	beforePersist, afterPersist, beforeAck func(seq int64) error
	afterEnqueue                           func(clientMsgID string) error
}

// errCrash, returned by a hook, stops the client as a killed process would:
// nothing more is written, the connection is dropped.
var errCrash = errors.New("simulated crash")

// Message is a message persisted on this device.
type Message struct {
	// Seq is the message's seq in this user's inbox.
	Seq            int64
	MessageID      string
	ConversationID string
	ConvSeq        int64
	From           string
	Body           json.RawMessage
	SentAt         time.Time
}

// Draft is a message to send. Exactly one of To and ConversationID is set.
type Draft struct {
	// ClientMsgID makes the send idempotent; generated when empty.
	ClientMsgID string
	// DeviceOnly says that ClientMsgID is only ever sent from this device
	// (always so for a generated one): a 1:1 send then says what the
	// device has seen of the conversation, which spares the server an
	// idempotency record (protocol.md, "seen"). Leave it false for an id
	// the app may retry from another device of the user.
	DeviceOnly     bool
	To             string
	ConversationID string
	// Body is any JSON value (at most 16 KiB encoded).
	Body json.RawMessage
}

// Sent is the server's ACK of a send: the message is durable in every
// recipient inbox.
type Sent = wire.Sent

// Receipt says how far the peer of a 1:1 conversation has it: every message
// up to UpTo (a convSeq) is delivered to one of the peer's devices, or read.
type Receipt = wire.Receipt

// Membership is a notice that someone else added this user to a group or
// removed them from one.
type Membership = wire.Membership

// ServerError is an error frame that answered a request.
type ServerError struct {
	Code      wire.Code
	Message   string
	RequestID string
}

func (e *ServerError) Error() string {
	if e.RequestID == "" {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s (request %s)", e.Code, e.Message, e.RequestID)
}

// Client is one device's connection to Signet.
type Client struct {
	opts  Options
	store *store
	log   *slog.Logger

	msgs chan Message
	kick chan struct{}
	// flushAcks asks the session to ack what is persisted now; it closes
	// the channel it is given when the ack is written (Close).
	flushAcks chan chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	connected atomic.Bool
	synced    atomic.Bool
	crashed   atomic.Bool
	cancel    context.CancelFunc

	mu      sync.Mutex
	waiters map[string][]chan sendResult
	answers map[string]*pendingQuery // query refs → waiting request
	holds   map[string]time.Time     // limit kind → when its frames may go again (holdUntil)
	latest  map[string]int64         // state → the number of the last query setting it (stateOf)
	reads   map[string]sentRead      // conversation → its read not yet confirmed
	refs    atomic.Int64
	out     chan outgoing // frames of queries for the session to write
	first   chan error    // the first connection's outcome, for Dial
}

type sendResult struct {
	sent Sent
	err  error
}

// DefaultAckInterval is Options.AckInterval when it is not set.
const DefaultAckInterval = 2 * time.Second

func (o *Options) defaults() {
	if o.AckInterval <= 0 {
		o.AckInterval = DefaultAckInterval
	}
	if o.AckBatch <= 0 {
		o.AckBatch = 50
	}
	if o.SyncAckBatch <= 0 {
		o.SyncAckBatch = 500
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 200 * time.Millisecond
	}
	if o.EvictedWait <= 0 {
		o.EvictedWait = 5 * time.Minute
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.ResendAfter <= 0 {
		o.ResendAfter = 10 * time.Second
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.HeadEvery <= 0 {
		o.HeadEvery = DefaultHeadEvery
	}
	if o.PongTimeout <= 0 {
		o.PongTimeout = 15 * time.Second
	}
	if o.Dialer == nil {
		o.Dialer = WebSocket
	}
	if at := o.CrashAt; at != nil {
		crash := func(p CrashPoint, old func(int64) error) func(int64) error {
			return func(seq int64) error {
				if old != nil && old(seq) == errCrash || at(p, seq) {
					return errCrash
				}
				return nil
			}
		}
		o.hooks.beforePersist = crash(BeforePersist, o.hooks.beforePersist)
		o.hooks.afterPersist = crash(AfterPersist, o.hooks.afterPersist)
		o.hooks.beforeAck = crash(BeforeAck, o.hooks.beforeAck)
	}
}

// Dial opens the local store and connects. It returns once the first
// connection is up (then the client reconnects on its own), or with the
// error that refused it: an *AuthError, a *DeviceLimitError, or ctx's
// error.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if opts.URL == "" || opts.Token == nil || opts.Path == "" {
		return nil, errors.New("client: URL, Token and Path are required")
	}
	opts.defaults()
	st, err := openStore(opts.Path)
	if err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c := &Client{
		opts: opts, store: st, log: log, cancel: cancel,
		msgs: make(chan Message, 1024), kick: make(chan struct{}, 1), flushAcks: make(chan chan struct{}), done: make(chan struct{}),
		waiters: map[string][]chan sendResult{}, first: make(chan error, 1),
		answers: map[string]*pendingQuery{}, latest: map[string]int64{}, reads: map[string]sentRead{}, out: make(chan outgoing),
	}
	c.wg.Go(func() { c.run(runCtx) })
	select {
	case err := <-c.first:
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

// Messages delivers each message after it is persisted, in seq order, once
// per Client (see Options.Replay for exactly once across restarts). It is
// closed by Close.
func (c *Client) Messages() <-chan Message { return c.msgs }

// Connected reports whether a connection is up now.
func (c *Client) Connected() bool { return c.connected.Load() }

// Synced reports whether the device has caught up with its inbox since it
// last connected: a sync of this connection reached the inbox head (pushes
// keep it current from then on). False while disconnected.
func (c *Client) Synced() bool { return c.synced.Load() }

// Cursor returns the highest seq persisted on this device.
func (c *Client) Cursor() (int64, error) {
	cur, _, err := c.store.position()
	return cur, err
}

// History returns persisted messages with seq > after, ascending (limit 0: all).
func (c *Client) History(after int64, limit int) ([]Message, error) {
	es, err := c.store.entries(after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Message, len(es))
	for i, e := range es {
		out[i] = toMessage(e)
	}
	return out, nil
}

// Skipped returns the last range of inbox seqs ("from-to") that expired on
// the server before this device synced them, or "" if none did. An
// application shows a summary for such a gap.
func (c *Client) Skipped() (string, error) { return c.store.skipped() }

// Pending returns the clientMsgIds of sends still waiting for their ACK.
func (c *Client) Pending() ([]string, error) {
	items, err := c.store.outbox()
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids, err
}

// Send sends body to user `to` and waits for the server's ACK.
func (c *Client) Send(ctx context.Context, to string, body any) (Sent, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return Sent{}, fmt.Errorf("encode body: %w", err)
	}
	return c.SendDraft(ctx, Draft{To: to, Body: b})
}

// SendDraft writes the draft to the outbox, sends it, and waits for the
// server's ACK or a refusal (*ServerError). If ctx ends first the send stays
// in the outbox and is retried, after restarts too, until acknowledged.
func (c *Client) SendDraft(ctx context.Context, d Draft) (Sent, error) {
	if d.ClientMsgID == "" {
		d.ClientMsgID, d.DeviceOnly = newID(), true
	}
	ch := make(chan sendResult, 1)
	c.mu.Lock()
	c.waiters[d.ClientMsgID] = append(c.waiters[d.ClientMsgID], ch)
	c.mu.Unlock()
	prev, err := enqueueDraft(c.store, d)
	if err != nil || prev != nil {
		c.dropWaiter(d.ClientMsgID, ch)
		if err != nil {
			return Sent{}, err
		}
		return prev.Sent, nil
	}
	// New, or the same send still in the outbox: wait for its ACK.
	if h := c.opts.hooks.afterEnqueue; h != nil && h(d.ClientMsgID) == errCrash {
		c.crash()
		return Sent{}, errCrash
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	select {
	case r := <-ch:
		return r.sent, r.err
	case <-ctx.Done():
		return Sent{}, ctx.Err()
	case <-c.done:
		return Sent{}, errors.New("client closed; the send stays in the outbox")
	}
}

// enqueueDraft writes d (its ClientMsgID set) to the outbox of st. A
// clientMsgId ACKed before returns its record (the same message gets its
// ACK again); one ACKed or queued for other content is refused here, in the
// words the server would use.
func enqueueDraft(st *store, d Draft) (*sentRecord, error) {
	f := wire.Send{Action: wire.ActionSend, ClientMsgID: d.ClientMsgID, To: d.To, ConversationID: d.ConversationID, Body: d.Body}
	// A group message under read diffusion comes back in "sent", not as a
	// push to this connection (groupOwn); a written group's ignores it.
	f.OwnFromSent = strings.HasPrefix(d.ConversationID, "g:")
	// A 1:1 send whose id only this device sends says the newest convSeq
	// of its conversation the device holds, and every retry of it (the
	// frame is stored) the same: the server finds an earlier try above it
	// (protocol.md, "seen"). A try from another device would say what
	// that device had seen, which may be past the first try: such ids go
	// without, and the server keeps an idempotency record.
	if d.DeviceOnly {
		seen, direct, err := st.seen(d.To, d.ConversationID)
		if err != nil {
			return nil, err
		}
		if direct {
			f.Seen = &seen
		}
	}
	frame, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	fp := draftFingerprint(d)
	prev, pending, err := st.enqueue(outboxItem{ID: d.ClientMsgID, Frame: string(frame), At: time.Now(), Fp: fp})
	switch {
	case err != nil:
		return nil, err
	case prev != nil && prev.Fp != "" && prev.Fp != fp, pending != nil && pending.Fp != "" && pending.Fp != fp:
		return nil, errClientMsgIDReused()
	}
	return prev, nil
}

// Queue writes a send to the outbox of the device store at path without
// connecting (the store must not be open in a client: ErrStoreInUse): the
// next client on that store sends it, with the same clientMsgId, as it
// sends whatever its outbox holds. It returns d with its ClientMsgID (made
// up when empty). A clientMsgId already ACKed or queued for the same
// content is left as it is; for other content it is refused.
func Queue(path string, d Draft) (Draft, error) {
	if d.ClientMsgID == "" {
		d.ClientMsgID, d.DeviceOnly = newID(), true
	}
	st, err := openStore(path)
	if err != nil {
		return d, err
	}
	_, err = enqueueDraft(st, d)
	return d, errors.Join(err, st.close())
}

// dropWaiter forgets a waiter that will not wait.
func (c *Client) dropWaiter(id string, ch chan sendResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.waiters[id]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(c.waiters, id)
	} else {
		c.waiters[id] = ws
	}
}

// draftFingerprint identifies a draft's content (where it goes and its body,
// compacted as JSON): a clientMsgId names one message.
func draftFingerprint(d Draft) string {
	var body bytes.Buffer
	if json.Compact(&body, d.Body) != nil {
		body.Reset()
		body.Write(d.Body)
	}
	h := sha256.New()
	h.Write([]byte(d.To))
	h.Write([]byte{0})
	h.Write([]byte(d.ConversationID))
	h.Write([]byte{0})
	h.Write(body.Bytes())
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// errClientMsgIDReused refuses, on the device, a send that reuses a
// clientMsgId for other content, with the server's code and words (the
// server would refuse it the same way; the device knows first).
func errClientMsgIDReused() error {
	p := wire.ProblemOf(im.ErrClientMsgIDReused)
	return &ServerError{Code: p.Code, Message: p.Msg}
}

// resolve hands a send's outcome to whoever waits for it.
func (c *Client) resolve(id string, r sendResult) {
	c.mu.Lock()
	ws := c.waiters[id]
	delete(c.waiters, id)
	c.mu.Unlock()
	for _, ch := range ws {
		ch <- r
	}
}

// Close stops the client and closes the store. Pending sends stay in the
// outbox for the next Dial.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.flushAcksBeforeClose()
		close(c.done)
		c.cancel()
		c.wg.Wait()
		close(c.msgs)
		err = c.store.close()
	})
	return err
}

// closeAckWait bounds how long Close waits for the session to write its
// last ack.
const closeAckWait = 2 * time.Second

// flushAcksBeforeClose has the session ack what the device persisted
// before the connection goes (a pushed entry's ack otherwise waits for its
// window, and the server would re-push the entry to a device that has it).
// Cancelling the session first would close the connection before the ack
// is written. Bounded: a session that is not serving is not waited for.
func (c *Client) flushAcksBeforeClose() {
	if c.crashed.Load() || !c.connected.Load() {
		return
	}
	written := make(chan struct{})
	timeout := time.NewTimer(closeAckWait)
	defer timeout.Stop()
	select {
	case c.flushAcks <- written:
	case <-timeout.C:
		return
	}
	select {
	case <-written:
	case <-timeout.C:
	}
}

// crash stops everything at once, as a killed process would.
func (c *Client) crash() {
	c.crashed.Store(true)
	go c.Close()
}

func (c *Client) connectURL(ctx context.Context) (string, http.Header, error) {
	tok, err := c.opts.Token(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("token: %w", err)
	}
	u, err := url.Parse(c.opts.URL)
	if err != nil {
		return "", nil, fmt.Errorf("url %q: %w", c.opts.URL, err)
	}
	q := u.Query()
	q.Set("token", tok)
	if c.opts.Device != "" {
		q.Set("deviceId", c.opts.Device)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil, nil
}

func toMessage(e wire.Entry) Message {
	at, _ := time.Parse(time.RFC3339Nano, e.Message.SentAt)
	return Message{
		Seq: e.Seq, MessageID: e.Message.MessageID, ConversationID: e.Message.ConversationID,
		ConvSeq: e.Message.ConvSeq, From: e.Message.From, Body: e.Message.Body, SentAt: at,
	}
}

// newID returns a fresh random id: a clientMsgId, a group change's op
// id, a group's.
func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
