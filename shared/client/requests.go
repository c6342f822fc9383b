package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/wire"
)

// The query API: requests answered with one frame, matched by a ref the
// server echoes. Queries go out on the current connection and wait for it
// when there is none; ctx bounds the wait. They are not persisted, but a
// query still unanswered when its connection is lost is asked again on
// the next one, and every unanswered query again when API Gateway answers
// a frame with its own error (which names no request), and one the server
// answers internal or rate_limited again after a second (or the wait it
// names; a rate_limited one holds every query of its kind, group syncs
// among them, until then: limitKind), up to queryRetries times: every
// query is safe to repeat (a
// group create names its id and a group change carries an op id: either
// sent again is answered as the first, though the failed invocation had
// stored it).

// Presence and register frames set a state (the user's display state, this
// device's registration for wake-ups), and the server keeps the one API
// Gateway received last: a frame that ran late changes nothing. A query of
// such a frame asked while an earlier one of its kind is unanswered
// supersedes it: the earlier frame is not written after that (neither
// asked again nor retried), since written later it would be received
// later and undo the newer state, and its call returns ErrSuperseded
// unless its answer came first. The later frame waits for the earlier
// one's answer (or for stateGap after its last write): API Gateway's
// receive time counts milliseconds, and two frames received in the same
// one could not be told apart.

// stateGap bounds how long a state frame waits for the answer of the one
// before it (stateTurn).
const stateGap = time.Second

// ErrSuperseded is returned by SetPresence and Register when a later call
// of the same kind on this client superseded this one before it was
// answered: the later one sets the state.
var ErrSuperseded = errors.New("superseded by a later request setting the same state")

// Kinds of state a query frame sets (stateOf).
const (
	statePresence = "presence"
	stateRegister = "register"
)

// stateOf is the state query frame sets ("": none).
func stateOf(frame []byte) string {
	switch actionOf(frame) {
	case wire.ActionPresence:
		return statePresence
	case wire.ActionRegister:
		return stateRegister
	}
	return ""
}

// actionOf is the action a client frame names.
func actionOf(frame []byte) string {
	var env wire.Envelope
	_ = json.Unmarshal(frame, &env)
	return env.Action
}

// queryRetries is how many times a query answered internal or
// rate_limited is asked again before its error is returned.
const queryRetries = 3

// GroupInfo answers group operations (see wire.GroupInfo).
type GroupInfo = wire.GroupInfo

// ReceiptsInfo says who has a message delivered and read (see wire.ReceiptsAnswer).
type ReceiptsInfo = wire.ReceiptsAnswer

// ConversationSummary is one conversation of Summary (see wire.ConversationSummary).
type ConversationSummary = wire.ConversationSummary

// HistoryPage is one page of a conversation log (see wire.HistoryPage).
type HistoryPage = wire.HistoryPage

// outgoing is a frame a caller hands to the session to write.
type outgoing struct {
	frame []byte
	done  chan error
	// ref is a query's: the session marks it written (pendingQuery).
	ref string
	// read is a read frame's: the session records it (wroteRead).
	read *wire.Read
}

// pendingQuery is a query waiting for its answer.
type pendingQuery struct {
	n      int64 // the query's number (its ref): the order it was asked in
	answer chan json.RawMessage
	frame  []byte
	// written is set by the session as the frame goes out on a
	// connection: from then on it is the session's to ask again.
	written bool
	// state is the state the frame sets (stateOf); gone is closed when
	// a later query of that state superseded this unanswered one and it
	// will not be asked again.
	state    string
	gone     chan struct{}
	goneOnce sync.Once
	// writtenAt is when the frame last went out; finished is closed when
	// its request returns (answered, refused, superseded or given up).
	writtenAt time.Time
	finished  chan struct{}
}

// request sends frame with a fresh ref and decodes the answering frame into out.
func (c *Client) request(ctx context.Context, frame wire.Request, out any) error {
	n := c.refs.Add(1)
	ref := "q" + strconv.FormatInt(n, 10)
	frame.SetRef(ref)
	b, err := json.Marshal(frame)
	if err != nil {
		return err
	}
	q := &pendingQuery{n: n, answer: make(chan json.RawMessage, 1), frame: b, state: stateOf(b), gone: make(chan struct{}), finished: make(chan struct{})}
	c.mu.Lock()
	c.answers[ref] = q
	if q.state != "" {
		c.latest[q.state] = n
	}
	c.mu.Unlock()
	defer func() {
		close(q.finished)
		c.mu.Lock()
		delete(c.answers, ref)
		c.mu.Unlock()
	}()
	kind := limitKind(b)
	if err := c.stateTurn(ctx, q); err != nil {
		return err
	}
	for retries := 0; ; retries++ {
		if err := c.waitHold(ctx, kind); err != nil {
			return err
		}
		if err := c.writeRaw(ctx, outgoing{frame: b, done: make(chan error, 1), ref: ref}); err != nil {
			return err
		}
		var raw json.RawMessage
		select {
		case raw = <-q.answer:
		case <-q.gone:
			select {
			case raw = <-q.answer:
			default:
				return ErrSuperseded
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return errClosed
		}
		var e wire.Error
		if json.Unmarshal(raw, &e) != nil || e.Type != wire.TypeError {
			if err := json.Unmarshal(raw, out); err != nil {
				return fmt.Errorf("answer to %T: %w", frame, err)
			}
			return nil
		}
		if (e.Code != wire.CodeInternal && e.Code != wire.CodeRateLimited) || retries == queryRetries {
			return &ServerError{Code: e.Code, Message: e.Message, RequestID: e.RequestID}
		}
		wait := max(time.Second, time.Duration(e.RetryAfterMs)*time.Millisecond)
		c.log.Info("query failed; asking again", "code", e.Code, "wait", wait, "requestId", e.RequestID)
		if e.Code == wire.CodeRateLimited {
			c.hold(kind, time.Now().Add(wait))
		}
		// This loop asks it again after wait; a new connection meanwhile
		// must not (askAgain).
		c.mu.Lock()
		q.written = false
		c.mu.Unlock()
		select {
		case <-time.After(wait):
		case <-q.gone:
			return ErrSuperseded
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return errClosed
		}
	}
}

// Syncs carry a ref of their own kind (the server echoes it in their pages
// and errors): a refusal then says whether it was the inbox sync's, a
// group sync's or (no ref) an ack's or a read's.
const (
	inboxSyncRef = "is"
	groupSyncRef = "gs"
)

// syncRef is a fresh ref of a sync of kind (inboxSyncRef, groupSyncRef).
func (c *Client) syncRef(kind string) wire.Query {
	return wire.Query{Ref: kind + strconv.FormatInt(c.refs.Add(1), 10)}
}

// isSyncRef reports whether ref is a sync's.
func isSyncRef(ref string) bool {
	return strings.HasPrefix(ref, inboxSyncRef) || strings.HasPrefix(ref, groupSyncRef)
}

// The limits a frame counts against (docs/protocol.md, "Per-user
// limits"): each refused frame holds every frame of its kind until its
// retryAfterMs, since the limit is the user's — every other would be
// refused too, and a connection that keeps sending is closed.
const (
	kindSend     = "send"     // sends (the outbox)
	kindQuery    = "query"    // history, receipts, summary, presence.query, answer, a group's sync
	kindGroup    = "group"    // group changes and members
	kindPresence = "presence" // presence status, register
)

// limitKind is the limit a query frame counts against.
func limitKind(frame []byte) string {
	switch actionOf(frame) {
	case wire.ActionGroup:
		return kindGroup
	case wire.ActionPresence, wire.ActionRegister:
		return kindPresence
	}
	return kindQuery
}

// hold holds the frames of kind until until (a later hold stands).
func (c *Client) hold(kind string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds == nil {
		c.holds = map[string]time.Time{}
	}
	if until.After(c.holds[kind]) {
		c.holds[kind] = until
	}
}

// holdUntil is when frames of kind may go again (zero: now).
func (c *Client) holdUntil(kind string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[kind]
}

// waitHold returns once frames of kind may go.
func (c *Client) waitHold(ctx context.Context, kind string) error {
	wait := time.Until(c.holdUntil(kind))
	if wait <= 0 {
		return nil
	}
	select {
	case <-time.After(wait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return errClosed
	}
}

var errClosed = errors.New("client closed")

// writeRaw hands o to the session, waiting for a connection, and then
// until it is written.
func (c *Client) writeRaw(ctx context.Context, o outgoing) error {
	select {
	case c.out <- o:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return errClosed
	}
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return errClosed
	}
}

// answer routes a frame carrying a ref to the request waiting for it. It
// never blocks the session: the request takes one answer, and a second
// one for the same ref (the network duplicated the frame, or the request
// gave up before reading the first) is dropped. Blocking on it wedged a
// chaos run's device for good — the session goroutine that sends, acks
// and reads every frame waited on a full channel nobody would read.
func (c *Client) answer(ref string, raw []byte) bool {
	c.mu.Lock()
	q, ok := c.answers[ref]
	c.mu.Unlock()
	if ok {
		select {
		case q.answer <- json.RawMessage(append([]byte(nil), raw...)):
		default:
		}
	}
	return ok
}

// stateTurn waits until the queries before q that set its state and went
// out have finished, or stateGap has passed since the last of them was
// written: q is then received after them (see stateGap). Queries that set
// no state do not wait.
func (c *Client) stateTurn(ctx context.Context, q *pendingQuery) error {
	if q.state == "" {
		return nil
	}
	c.mu.Lock()
	var before []chan struct{}
	var last time.Time
	for _, p := range c.answers {
		if p.state == q.state && p.n < q.n && p.written {
			before = append(before, p.finished)
			if p.writtenAt.After(last) {
				last = p.writtenAt
			}
		}
	}
	c.mu.Unlock()
	if len(before) == 0 {
		return nil
	}
	gap := time.NewTimer(time.Until(last.Add(stateGap)))
	defer gap.Stop()
	for _, f := range before {
		select {
		case <-f:
		case <-gap.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return errClosed
		}
	}
	return nil
}

// claimWrite marks query ref as going out on a connection now, unless a
// later query sets the state it sets (it is then not to be written: see
// ErrSuperseded; its request is told). Marked before the write, so that a
// later query of its state waits for it (stateTurn).
func (c *Client) claimWrite(ref string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	q, ok := c.answers[ref]
	if !ok {
		return true
	}
	if c.supersededLocked(q) {
		q.goneOnce.Do(func() { close(q.gone) })
		return false
	}
	q.written, q.writtenAt = true, time.Now()
	return true
}

// supersededLocked reports whether a later query sets the state q sets;
// c.mu is held.
func (c *Client) supersededLocked(q *pendingQuery) bool {
	return q.state != "" && c.latest[q.state] > q.n
}

// unanswered returns the frames of the queries that went out and wait for
// their answer, oldest first, but for those a later query superseded.
func (c *Client) unanswered() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var qs []*pendingQuery
	for _, q := range c.answers {
		if q.written && c.supersededLocked(q) {
			q.goneOnce.Do(func() { close(q.gone) })
		} else if q.written {
			q.writtenAt = time.Now()
			qs = append(qs, q)
		}
	}
	slices.SortFunc(qs, func(a, b *pendingQuery) int { return cmp.Compare(a.n, b.n) })
	out := make([][]byte, len(qs))
	for i, q := range qs {
		out[i] = q.frame
	}
	return out
}

func (c *Client) group(ctx context.Context, frame wire.Group) (GroupInfo, error) {
	frame.Action = wire.ActionGroup
	var g GroupInfo
	err := c.request(ctx, &frame, &g)
	return g, err
}

// CreateGroup creates a group named name with this user as owner and
// members as members. It returns the group (its conversationId is new:
// made here, so that a create the SDK asks again is answered as the
// first). An app that asks again itself — its ctx expired before the
// answer — makes one conversationId and calls CreateGroupWithID with it.
func (c *Client) CreateGroup(ctx context.Context, name string, members ...string) (GroupInfo, error) {
	return c.CreateGroupWithID(ctx, NewGroupID(), name, members...)
}

// CreateGroupWithID is CreateGroup for a group the caller names
// (conversationID "g:<id>", id 1-64 of [A-Za-z0-9._@-]; NewGroupID makes
// one): the same create asked again by its creator is answered as the
// first, so a create whose call gave up before its answer can be asked
// again without making a second group.
func (c *Client) CreateGroupWithID(ctx context.Context, conversationID, name string, members ...string) (GroupInfo, error) {
	return c.group(ctx, wire.Group{Op: wire.GroupCreate, ConversationID: conversationID, Name: name, Users: members})
}

// NewGroupID returns a new group conversation id ("g:" and 18 random
// characters) for CreateGroupWithID.
func NewGroupID() string { return "g:" + newID()[:18] }

// The group changes below carry an op id made here: the SDK asks a query
// again (its connection was lost, API Gateway answered a frame with its
// error, or the server answered it internal or rate_limited), and a
// change asked again is answered as the first time — Changed lists the
// users it changed, and they are told again — though its first
// invocation stored it and failed after.

// AddMembers adds users to a group with role (owner, admin or member; "" is member).
func (c *Client) AddMembers(ctx context.Context, conversationID, role string, users ...string) (GroupInfo, error) {
	return c.group(ctx, wire.Group{Op: wire.GroupAdd, ConversationID: conversationID, Users: users, Role: role, OpID: newID()})
}

// RemoveMembers removes users from a group; they receive nothing sent after.
func (c *Client) RemoveMembers(ctx context.Context, conversationID string, users ...string) (GroupInfo, error) {
	return c.group(ctx, wire.Group{Op: wire.GroupRemove, ConversationID: conversationID, Users: users, OpID: newID()})
}

// LeaveGroup removes this user from a group.
func (c *Client) LeaveGroup(ctx context.Context, conversationID string) (GroupInfo, error) {
	return c.group(ctx, wire.Group{Op: wire.GroupLeave, ConversationID: conversationID, OpID: newID()})
}

// SetRole gives users role in a group (owners only).
func (c *Client) SetRole(ctx context.Context, conversationID, role string, users ...string) (GroupInfo, error) {
	return c.group(ctx, wire.Group{Op: wire.GroupRole, ConversationID: conversationID, Users: users, Role: role, OpID: newID()})
}

// Members lists a group's members (removed ones with Left set).
func (c *Client) Members(ctx context.Context, conversationID string) (GroupInfo, error) {
	return c.group(ctx, wire.Group{Op: wire.GroupMembers, ConversationID: conversationID})
}

// MarkRead moves this user's read watermark of a conversation to upTo (a
// convSeq). Lower or equal values are ignored by the server. The server
// answers only errors; MarkRead returns once the frame is written, and
// the SDK writes it again on the next connection should this one be lost
// before a pong showed the server had it (unconfirmedReads), and at once
// when API Gateway answers a frame with its error (recentReads: the
// read's invocation may be the one that failed). A read written again
// says so ("again"): should the failed invocation have stored it before
// telling anyone, the server sends the peer's receipt and the other
// devices' read frame then.
func (c *Client) MarkRead(ctx context.Context, conversationID string, upTo int64) error {
	return c.markRead(ctx, wire.Read{Action: wire.ActionRead, ConversationID: conversationID, UpTo: &upTo})
}

// markRead writes read frame f and keeps it until a pong confirms it.
func (c *Client) markRead(ctx context.Context, f wire.Read) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return c.writeRaw(ctx, outgoing{frame: b, done: make(chan error, 1), read: &f})
}

// sentRead is a read frame written at; confirmed once a pong showed the
// server received it.
type sentRead struct {
	read      wire.Read
	at        time.Time
	confirmed bool
}

// errorWindow is how long a frame may still turn out to have failed: a
// pong shows the server received it, but its invocation may still fail,
// and API Gateway's error frame for it (which names no frame) comes
// within its 29 s integration timeout. Reads are kept that long after a
// pong confirmed them, and the groups acked within it are acked again
// after an error frame.
const errorWindow = time.Minute

// wroteRead records read frame f, written now: per conversation the
// highest one is kept until confirmed.
func (c *Client) wroteRead(f wire.Read, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.reads[f.ConversationID]; ok && *old.read.UpTo > *f.UpTo {
		return
	}
	c.reads[f.ConversationID] = sentRead{read: f, at: now}
}

// confirmReads marks confirmed the reads written before t (a pong to a
// ping written at t shows the server received everything written before
// it), and forgets those confirmed and written more than errorWindow
// before t.
func (c *Client) confirmReads(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conv, r := range c.reads {
		switch {
		case r.at.Before(t.Add(-errorWindow)):
			delete(c.reads, conv)
		case r.at.Before(t):
			r.confirmed = true
			c.reads[conv] = r
		}
	}
}

// unconfirmedReads returns the frames of the reads not known to have
// reached the server (a new connection writes them again: a read is
// forward-only, so once more changes nothing).
func (c *Client) unconfirmedReads() []wire.Read {
	return c.readsWhere(func(r sentRead) bool { return !r.confirmed })
}

// recentReads returns the frames of the reads written within
// errorWindow before now, confirmed or not: after API Gateway's
// error frame (which names no request) any of them may be the one whose
// invocation failed.
func (c *Client) recentReads(now time.Time) []wire.Read {
	return c.readsWhere(func(r sentRead) bool { return !r.at.Before(now.Add(-errorWindow)) })
}

func (c *Client) readsWhere(keep func(sentRead) bool) []wire.Read {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]wire.Read, 0, len(c.reads))
	for _, r := range c.reads {
		if keep(r) {
			out = append(out, r.read)
		}
	}
	slices.SortFunc(out, func(a, b wire.Read) int { return cmp.Compare(a.ConversationID, b.ConversationID) })
	return out
}

// MarkAlertsRead marks this user's alerts of an app's alert conversation
// (a:<app>) read up to convSeq upTo and exactly those at inbox seqs up to
// inboxSeq (Message.Seq of the newest alert of the conversation shown): an
// alert can reach the inbox after a later one of its app (a retried post,
// an escalation), with a convSeq below the read watermark, and only its
// inbox seq marks it read. The server answers only errors.
func (c *Client) MarkAlertsRead(ctx context.Context, conversationID string, upTo, inboxSeq int64) error {
	return c.markRead(ctx, wire.Read{Action: wire.ActionRead, ConversationID: conversationID, UpTo: &upTo, InboxSeq: inboxSeq})
}

// Receipts asks who has message convSeq of a conversation delivered and read.
func (c *Client) Receipts(ctx context.Context, conversationID string, convSeq int64) (ReceiptsInfo, error) {
	var r ReceiptsInfo
	err := c.request(ctx, &wire.Receipts{Action: wire.ActionReceipts, ConversationID: conversationID, ConvSeq: &convSeq}, &r)
	return r, err
}

// SetPresence chooses this user's display state: online, away, dnd or
// invisible (others then see offline). It returns what others now see
// (the state the server received last, from any of the user's devices,
// stands), or ErrSuperseded when a later SetPresence was called before
// this one was answered.
func (c *Client) SetPresence(ctx context.Context, status string) (string, error) {
	var p wire.PresenceAnswer
	if err := c.request(ctx, &wire.Presence{Action: wire.ActionPresence, Status: status}, &p); err != nil {
		return "", err
	}
	if len(p.Users) != 1 {
		return "", fmt.Errorf("presence answer with %d users", len(p.Users))
	}
	return p.Users[0].Status, nil
}

// QueryPresence returns what users show to others (online, away, dnd or offline).
func (c *Client) QueryPresence(ctx context.Context, users ...string) (map[string]string, error) {
	var p wire.PresenceAnswer
	if err := c.request(ctx, &wire.PresenceQuery{Action: wire.ActionPresenceQuery, Users: users}, &p); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(p.Users))
	for _, u := range p.Users {
		out[u.UserID] = u.Status
	}
	return out, nil
}

// Summary returns every conversation of this user with unread counts,
// previews and watermarks, reading page after page.
func (c *Client) Summary(ctx context.Context) ([]ConversationSummary, error) {
	var out []ConversationSummary
	after := ""
	for {
		var p wire.SummaryPage
		if err := c.request(ctx, &wire.Summary{Action: wire.ActionSummary, Limit: wire.MaxSummaryPage, After: after}, &p); err != nil {
			return out, err
		}
		out = append(out, p.Conversations...)
		if p.Next == "" {
			return out, nil
		}
		after = p.Next
	}
}

// ConversationHistory pages back through a conversation's log on the
// server (before 0: the newest), which is kept longer than inboxes.
func (c *Client) ConversationHistory(ctx context.Context, conversationID string, before int64, limit int) (HistoryPage, error) {
	var h HistoryPage
	err := c.request(ctx, &wire.History{Action: wire.ActionHistory, ConversationID: conversationID, Limit: limit, Before: max(before, 0)}, &h)
	return h, err
}

// AnswerResult is the answer that stands for this user (see wire.AnswerResult).
type AnswerResult = wire.AnswerResult

// Answer gives this user's answer to an alert that asks for one (its body
// has "ack" with the options): once, forward-only. The same answer again
// returns the first; another option, or another recipient's first answer
// on an alert where the first answer wins, is a *ServerError conflict.
func (c *Client) Answer(ctx context.Context, messageID, option string) (AnswerResult, error) {
	var a AnswerResult
	err := c.request(ctx, &wire.Answer{Action: wire.ActionAnswer, MessageID: messageID, Option: option}, &a)
	return a, err
}

// Register registers this device for wake-ups while it has no connection
// (issue 16): platform is "apns", "apns_sandbox" or "fcm" and token the
// device's token there, which the server hands to Amazon SNS. A wake-up
// carries ids only; the app connects and syncs. An empty token removes the
// registration (sign-out). The registration the server received last
// stands; a later Register before this one is answered supersedes it
// (ErrSuperseded). A deployment without that platform answers a
// *ServerError bad_request.
func (c *Client) Register(ctx context.Context, platform, token string) error {
	var r wire.Registered
	return c.request(ctx, &wire.Register{Action: wire.ActionRegister, Platform: platform, Token: &token}, &r)
}
