package client

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/signet-im/signet/shared/wire"
)

// run connects, runs sessions and reconnects with backoff until ctx ends.
func (c *Client) run(ctx context.Context) {
	attempt := 0
	firstDone := false
	for ctx.Err() == nil {
		conn, err := c.connect(ctx)
		if err != nil {
			var auth *AuthError
			var devices *DeviceLimitError
			if !firstDone && (errors.As(err, &auth) || errors.As(err, &devices)) {
				c.first <- err
				return
			}
			c.log.Warn("connect failed", "err", err.Error(), "attempt", attempt)
			if !sleepCtx(ctx, c.backoff(attempt)) {
				return
			}
			attempt++
			continue
		}
		if !firstDone {
			firstDone = true
			c.first <- nil
			if c.opts.Replay && !c.replay() {
				conn.Close()
				return
			}
		}
		started := time.Now()
		wait := c.session(ctx, conn)
		if c.crashed.Load() {
			return
		}
		if time.Since(started) > 10*time.Second {
			attempt = 0
		}
		delay := max(c.backoff(attempt), wait)
		attempt++
		if !sleepCtx(ctx, delay) {
			return
		}
	}
}

func (c *Client) connect(ctx context.Context) (Conn, error) {
	u, h, err := c.connectURL(ctx)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return c.opts.Dialer(dctx, u, h)
}

// backoff is capped exponential backoff with full jitter.
func (c *Client) backoff(attempt int) time.Duration {
	ceiling := c.opts.MinBackoff << min(attempt, 20)
	if ceiling <= 0 || ceiling > c.opts.MaxBackoff {
		ceiling = c.opts.MaxBackoff
	}
	return time.Duration(rand.Int64N(int64(ceiling)) + 1)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// replay emits stored messages after Options.ShownUpTo (and of each group
// under read diffusion after Options.ShownGroups), before any new one.
func (c *Client) replay() bool {
	entries, err := c.store.entries(c.opts.ShownUpTo, 0)
	if err != nil {
		c.log.Error("replay stored messages", "err", err.Error())
		return true
	}
	groups, err := c.store.groupMessagesAfter(c.opts.ShownGroups)
	if err != nil {
		c.log.Error("replay stored group messages", "err", err.Error())
	}
	for _, m := range groups {
		entries = append(entries, wire.Entry{Message: m})
	}
	for _, e := range entries {
		select {
		case c.msgs <- toMessage(e):
		case <-c.done:
			return false
		}
	}
	return true
}

// session is the state of one connection.
type session struct {
	c       *Client
	conn    Conn
	cursor  int64
	epoch   string
	lastAck int64
	// needAck is the highest seq applied that the server waits for an ack
	// of (pushed or synced; not this device's own 1:1 entries, which
	// "sent" carried and nothing re-pushes).
	needAck  int64
	forceAck bool
	// againAt is when, after an error frame that may be any of them, what
	// went out and may have failed is written again (zero: not due): the
	// acks (the inbox's, and every group's acked within errorWindow), the
	// recent reads and the unanswered queries (writeAgain).
	againAt time.Time
	// own holds this device's own 1:1 entries from "sent" that are ahead of
	// the cursor, by seq, until the entries before them arrive.
	own map[int64]wire.Entry
	// unacked counts pushed entries waiting for an ack (AckBatch),
	// syncedUnacked the synced ones (SyncAckBatch); pushWaiting is set
	// while a pushed one waits: its redelivery check is counting. During a
	// sync only pushed entries make the ack ticker fire; the synced ones
	// are acked when the sync ends (issue 12: a login's backlog is one
	// ack, not one per 50 entries and per tick, each an invocation and
	// three writes).
	unacked, syncedUnacked int
	pushWaiting            bool
	// pushedAt is when the oldest unacked push arrived (with pushWaiting);
	// pushTimeout the server's, from its sync pages (0: not yet known).
	pushedAt    time.Time
	pushTimeout time.Duration
	syncing     bool
	syncAt      time.Time // when a rate-limited sync may be retried; zero: none waiting
	syncSent    time.Time // when the sync in flight was asked for
	syncRef     string    // and its ref
	// lastRecv is when the last frame arrived; pingSent when a ping went
	// out that no frame has followed yet (zero: none outstanding).
	lastRecv, pingSent time.Time
	// ticks counts keep-alive ticks (keepAlive).
	ticks int
	// pings are when the unanswered pings were written, oldest first.
	pings []time.Time
	// resyncAgain asks for one more sync when the current one ends (a
	// push arrived before this device knew its inbox's epoch).
	resyncAgain bool
	// behindAt is when a pong showed the head beyond the cursor; if the
	// cursor is still behind CatchUpGrace later, the device syncs.
	behindAt   time.Time
	behindHead int64
	sentAt     map[string]time.Time
	// reconnectAfter is how long to wait before reconnecting once this
	// connection ends (set when the server closes it for the user's
	// connection limit).
	reconnectAfter time.Duration
	// groups are the read-diffused groups this session has touched
	// (groupread.go).
	groups map[string]*groupState
}

// incoming is one frame read from the connection.
type incoming struct {
	data []byte
	err  error
}

// session serves one connection until it breaks; it returns how long to
// wait before reconnecting (a server-requested delay), or zero.
func (c *Client) session(ctx context.Context, conn Conn) time.Duration {
	defer conn.Close()
	cursor, epoch, err := c.store.position()
	if err != nil {
		c.log.Error("read local position", "err", err.Error())
		return time.Second
	}
	// The stored cursor is acked once per connection: a device may have
	// stopped between persisting entries and acking them.
	s := &session{c: c, conn: conn, cursor: cursor, needAck: cursor, epoch: epoch, sentAt: map[string]time.Time{}, lastRecv: time.Now()}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	frames := make(chan incoming, 64)
	go func() {
		for {
			b, err := conn.Read(sctx)
			select {
			case frames <- incoming{b, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	c.connected.Store(true)
	defer c.connected.Store(false)
	defer c.synced.Store(false)
	c.log.Info("connected", "cursor", cursor)

	// Connect path: pull everything since the stored cursor, then live pushes.
	if err := s.requestSync(sctx, s.cursor); err != nil {
		return 0
	}
	if err := s.flushOutbox(sctx); err != nil {
		return 0
	}
	// Queries whose connection was lost before their answer came, and
	// reads it may have lost.
	if err := s.askAgain(sctx); err != nil {
		return 0
	}
	if err := s.readAgain(sctx, s.c.unconfirmedReads()); err != nil {
		return 0
	}
	ackTick := time.NewTicker(housekeeping)
	defer ackTick.Stop()
	resendTick := time.NewTicker(time.Second)
	defer resendTick.Stop()
	pingTick := time.NewTicker(c.opts.PingInterval)
	defer pingTick.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return 0
		case written := <-c.flushAcks:
			// A graceful Close acks what is persisted, so the server does
			// not re-push it (flushAcksBeforeClose).
			err = s.ack(sctx)
			close(written)
		case f := <-frames:
			if f.err != nil {
				if !c.crashed.Load() {
					c.log.Info("connection lost", "err", f.err.Error())
				}
				return s.reconnectAfter
			}
			s.lastRecv, s.pingSent = time.Now(), time.Time{}
			err = s.handle(sctx, f.data)
		case <-ackTick.C:
			again := !s.againAt.IsZero() && time.Now().After(s.againAt)
			if again {
				s.againAt = time.Time{}
				s.forceAcks(time.Now())
			}
			if s.ackDue(time.Now()) {
				err = s.ack(sctx)
			}
			if err == nil {
				err = s.retryGroupSyncs(sctx)
			}
			if err == nil && !s.syncAt.IsZero() && time.Now().After(s.syncAt) {
				s.syncAt = time.Time{}
				err = s.requestSync(sctx, s.cursor)
			}
			if err == nil && again {
				if err = s.readAgain(sctx, s.c.recentReads(time.Now())); err == nil {
					err = s.askAgain(sctx)
				}
			}
			if err == nil && !s.behindAt.IsZero() && time.Since(s.behindAt) >= catchUpGrace {
				s.behindAt = time.Time{}
				if s.cursor < s.behindHead && !s.syncing {
					s.c.log.Info("behind the inbox head with no push on the way; syncing", "cursor", s.cursor, "head", s.behindHead)
					err = s.requestSync(sctx, s.cursor)
				}
			}
		case <-c.kick:
			err = s.flushOutbox(sctx)
		case <-resendTick.C:
			if err = s.checkAlive(sctx); err == nil {
				err = s.flushOutbox(sctx)
			}
		case <-pingTick.C:
			err = s.keepAlive(sctx)
		case o := <-c.out:
			if o.ref != "" && !c.claimWrite(o.ref) {
				o.done <- ErrSuperseded // written now, it would undo the later one
				break
			}
			err = s.conn.Write(sctx, o.frame)
			if err == nil && o.read != nil {
				c.wroteRead(*o.read, time.Now())
			}
			o.done <- err
		}
		if errors.Is(err, errCrash) {
			c.crash()
			return 0
		}
		if err != nil {
			c.log.Info("session ended", "err", err.Error())
			return 0
		}
	}
}

// errTokenExpired ends a session the server closes for its expired token.
var errTokenExpired = errors.New("the server closed the connection: its token expired")

// errDead ends a session whose connection answers nothing.
var errDead = errors.New("connection answers nothing (half-open?)")

// keepAlive sends the frame of one keep-alive tick: a ping every
// HeadEvery-th, else a keepalive frame (no answer, no invocation).
func (s *session) keepAlive(ctx context.Context) error {
	s.ticks++
	if s.ticks%s.c.opts.HeadEvery == 0 {
		return s.ping(ctx)
	}
	return s.write(ctx, wire.Envelope{Action: wire.ActionKeepalive})
}

func (s *session) ping(ctx context.Context) error {
	now := time.Now()
	if s.pingSent.IsZero() {
		s.pingSent = now
	}
	if err := s.write(ctx, wire.Envelope{Action: wire.ActionPing}); err != nil {
		return err
	}
	s.pings = append(s.pings, now)
	return nil
}

// checkAlive finds connections that stopped delivering frames: an
// unanswered ping past PongTimeout ends the session (the client
// reconnects); sends or a sync waiting ResendAfter with nothing received
// are probed with a ping; a sync unanswered for ResendAfter (its frame or
// its answer was lost) is asked for again.
func (s *session) checkAlive(ctx context.Context) error {
	o := s.c.opts
	if !s.pingSent.IsZero() && time.Since(s.pingSent) > o.PongTimeout {
		return errDead
	}
	waiting := s.syncing
	for _, at := range s.sentAt {
		waiting = waiting || time.Since(at) > o.ResendAfter
	}
	if waiting && s.pingSent.IsZero() && time.Since(s.lastRecv) > o.ResendAfter {
		if err := s.ping(ctx); err != nil {
			return err
		}
	}
	if s.syncing && s.syncAt.IsZero() && time.Since(s.syncSent) > o.ResendAfter {
		s.c.log.Info("sync unanswered; asking again", "cursor", s.cursor)
		return s.requestSync(ctx, s.cursor)
	}
	return nil
}

func (s *session) write(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.conn.Write(ctx, b)
}

func (s *session) requestSync(ctx context.Context, cursor int64) error {
	ref := s.c.syncRef(inboxSyncRef)
	s.syncing, s.syncSent, s.syncRef = true, time.Now(), ref.Ref
	return s.write(ctx, wire.Sync{Action: wire.ActionSync, Cursor: &cursor, Limit: 100, Query: ref})
}

func (s *session) handle(ctx context.Context, data []byte) error {
	var typ struct {
		Type string `json:"type"`
		Ref  string `json:"ref"`
	}
	if err := json.Unmarshal(data, &typ); err != nil {
		s.c.log.Warn("unreadable frame", "err", err.Error())
		return nil
	}
	if typ.Ref != "" && s.c.answer(typ.Ref, data) {
		return nil
	}
	switch typ.Type {
	case wire.TypeMembership:
		var m wire.Membership
		if err := json.Unmarshal(data, &m); err != nil {
			return nil
		}
		if s.c.opts.OnMembership != nil {
			s.c.opts.OnMembership(m)
		}
		if m.Change == "added" && m.Head != nil {
			// Added to a group under read diffusion: pull it up to the head
			// its notice names (a message stored just before may not have
			// been pushed here).
			return s.pullGroups(ctx, []wire.GroupHead{{ConversationID: m.ConversationID, Head: *m.Head}})
		}
	case wire.TypePresence:
		var p wire.PresenceAnswer
		if err := json.Unmarshal(data, &p); err == nil && s.c.opts.OnPresence != nil {
			for _, u := range p.Users {
				s.c.opts.OnPresence(u.UserID, u.Status)
			}
		}
	case wire.TypeMessage:
		var p wire.Push
		if err := json.Unmarshal(data, &p); err != nil {
			return nil
		}
		if p.Renotify > 0 && p.Seq <= s.cursor && s.c.opts.OnRenotify != nil {
			if es, err := s.c.store.entries(p.Seq-1, 1); err == nil && len(es) == 1 && es[0].Seq == p.Seq {
				s.c.opts.OnRenotify(toMessage(es[0]))
			}
		}
		return s.receive(ctx, p.Entry)
	case wire.TypeSync:
		var p wire.SyncPage
		if err := json.Unmarshal(data, &p); err != nil {
			return nil
		}
		// The groups first: the client counts as synced once they are too.
		if err := s.pullGroups(ctx, p.Groups); err != nil {
			return err
		}
		return s.page(ctx, p)
	case wire.TypeGroupMessage:
		var p wire.GroupPush
		if err := json.Unmarshal(data, &p); err != nil {
			return nil
		}
		return s.groupPush(ctx, p.Message, p.Proof)
	case wire.TypeGroupSync:
		var p wire.GroupSyncPage
		if err := json.Unmarshal(data, &p); err != nil {
			return nil
		}
		return s.groupPage(ctx, p)
	case wire.TypeSent:
		var a wire.Sent
		if err := json.Unmarshal(data, &a); err != nil {
			return nil
		}
		delete(s.sentAt, a.ClientMsgID)
		if err := s.c.store.settle(a.ClientMsgID, &a); err != nil {
			return err
		}
		s.c.resolve(a.ClientMsgID, sendResult{sent: a})
		if a.Seq == 0 && a.Message != nil {
			if err := s.groupOwn(ctx, *a.Message, a.Proof); err != nil {
				return err
			}
		}
		if e, ok := a.Entry(); ok && e.Seq > s.cursor {
			if s.own == nil {
				s.own = map[int64]wire.Entry{}
			}
			s.own[e.Seq] = e
			if err := s.applyOwn(ctx); err != nil {
				return err
			}
		}
		// The next send of that conversation may go now.
		return s.flushOutbox(ctx)
	case wire.TypeReceipt:
		var r wire.Receipt
		if err := json.Unmarshal(data, &r); err == nil && s.c.opts.OnReceipt != nil {
			s.c.opts.OnReceipt(r)
		}
	case wire.TypeRead:
		var r wire.ReadSync
		if err := json.Unmarshal(data, &r); err != nil {
			break
		}
		if s.c.opts.OnRead != nil {
			s.c.opts.OnRead(r.ConversationID, r.UpTo)
		}
		if r.InboxSeq > 0 && s.c.opts.OnAlertsRead != nil {
			s.c.opts.OnAlertsRead(r.ConversationID, r.UpTo, r.InboxSeq)
		}
	case wire.TypeAnswer:
		var a wire.AnswerResult
		if err := json.Unmarshal(data, &a); err == nil && s.c.opts.OnAnswer != nil {
			s.c.opts.OnAnswer(a)
		}
	case wire.TypePong, wire.TypeNotify:
		var h wire.Notify
		if err := json.Unmarshal(data, &h); err != nil {
			return nil
		}
		if typ.Type == wire.TypePong && len(s.pings) > 0 {
			// The server had what was written before the oldest ping
			// unanswered (pongs may come out of order: the oldest is
			// the safe one to count).
			s.c.confirmReads(s.pings[0])
			s.pings = s.pings[1:]
		}
		if err := s.pullGroups(ctx, h.Groups); err != nil {
			return err
		}
		return s.headSeen(ctx, typ.Type, h.Head, h.Epoch)
	case wire.TypeError:
		var e wire.Error
		if err := json.Unmarshal(data, &e); err != nil {
			return nil
		}
		return s.serverError(ctx, e)
	case "":
		var g gatewayError
		if json.Unmarshal(data, &g) == nil && g.Message != "" {
			s.gatewayError(g)
		}
	}
	return nil
}

// gatewayError is API Gateway's own answer to a frame whose invocation
// failed (Lambda throttled, timed out or crashed): {"message": "Internal
// server error", "connectionId": …, "requestId": …}. It names no request.
type gatewayError struct {
	Message   string `json:"message"`
	RequestID string `json:"requestId"`
}

// gatewayError retries whatever may have been lost: every send in flight
// (after a second, with the same clientMsgId: idempotent), an unanswered
// sync and the unanswered group syncs (a throttled one would otherwise
// wait out groupSyncRetry), and, a second later, the acks (cumulative),
// the unanswered queries (askAgain) and the recent reads (readAgain): one
// round (writeAgain). The second gathers every error frame in it into it:
// written again at each, k frames failing under a throttle would come back
// as k error frames and k² frames (and an ack written again at each would
// be ten a second for as long as the throttle lasts).
func (s *session) gatewayError(g gatewayError) {
	s.c.log.Warn("gateway error; retrying what is in flight", "message", g.Message, "requestId", g.RequestID)
	retry := time.Now().Add(time.Second - s.c.opts.ResendAfter)
	for id, at := range s.sentAt {
		if at.After(retry) {
			s.sentAt[id] = retry
		}
	}
	if s.syncing && s.syncAt.IsZero() {
		s.syncAt = time.Now().Add(time.Second)
	}
	soon := time.Now().Add(time.Second - groupSyncRetry) // retryGroupSyncs asks in a second
	for _, g := range s.groups {
		if g.syncing && g.syncSent.After(soon) {
			g.syncSent = soon
		}
	}
	s.writeAgain(time.Second)
}

// syncFailed asks the sync whose invocation failed (an internal error
// frame with its ref) again in a second, if it is still in flight.
func (s *session) syncFailed(ref string) {
	s.c.log.Warn("sync failed; asking again", "ref", ref)
	if s.syncing && s.syncRef == ref && s.syncAt.IsZero() {
		s.syncAt = time.Now().Add(time.Second)
	}
	soon := time.Now().Add(time.Second - groupSyncRetry) // retryGroupSyncs asks in a second
	for _, g := range s.groups {
		if g.syncing && g.syncRef == ref && g.syncSent.After(soon) {
			g.syncSent = soon
		}
	}
}

// writeAgain has written again after wait what went out and may be the
// frame that failed: the acks (forceAcks: the inbox's and the groups'
// acked within errorWindow), the recent reads (readAgain) and the
// unanswered queries (askAgain). A round already due stays as it is
// unless wait is later (a rate limit's): error frames arriving every
// second must not keep putting it off.
func (s *session) writeAgain(wait time.Duration) {
	at := time.Now().Add(wait)
	if s.againAt.IsZero() || wait > time.Second && at.After(s.againAt) {
		s.againAt = at
	}
}

// forceAcks makes the next housekeeping tick ack the inbox and every group
// acked within errorWindow before now, whether or not anything new waits.
func (s *session) forceAcks(now time.Time) {
	s.forceAck = true
	for _, g := range s.groups {
		if !g.ackedAt.IsZero() && now.Sub(g.ackedAt) < errorWindow {
			g.forceAck = true
		}
	}
}

// readAgain writes reads again: at connect those no pong confirmed on the
// connection before (its last frames may not have reached the server),
// after a gateway error the recent ones (their invocation may have failed).
// Each says "again": a read whose first invocation failed after storing
// the watermark is then told again to the peer and the other devices
// (a read that moves nothing otherwise tells no one).
func (s *session) readAgain(ctx context.Context, reads []wire.Read) error {
	for _, r := range reads {
		again := r
		again.Again = true
		b, err := json.Marshal(again)
		if err != nil {
			return err
		}
		if err := s.conn.Write(ctx, b); err != nil {
			return err
		}
		s.c.wroteRead(r, time.Now())
	}
	return nil
}

// askAgain writes again the queries that went out and are unanswered
// (their answer comes once: a second one for the same ref is dropped).
func (s *session) askAgain(ctx context.Context) error {
	frames := s.c.unanswered()
	if len(frames) > 0 {
		s.c.log.Info("asking unanswered queries again", "queries", len(frames))
	}
	for _, b := range frames {
		if err := s.conn.Write(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// catchUpGrace is how long a device that a pong showed behind its inbox
// head waits for the push that may be on its way before it syncs.
const catchUpGrace = 2 * time.Second

// headSeen acts on the head and epoch a pong or notify carried: a
// different epoch or a cursor beyond the head means the server's sequence
// restarted (sync answers it with a resync); a head beyond the cursor means
// pushes were missed: a notify (pushing gave up) syncs now, a pong after
// catchUpGrace unless the entries arrive meanwhile.
func (s *session) headSeen(ctx context.Context, typ string, head int64, epoch string) error {
	restarted := epoch != "" && s.epoch != "" && epoch != s.epoch
	if restarted || s.cursor > head {
		s.c.log.Warn("the inbox sequence restarted on the server; resyncing", "cursor", s.cursor, "head", head, "epoch", epoch, "localEpoch", s.epoch)
		return s.resync(ctx, epoch)
	}
	if head <= s.cursor || s.syncing {
		return nil
	}
	if typ == wire.TypeNotify {
		s.c.log.Info("server gave up pushing; syncing", "cursor", s.cursor, "head", head)
		return s.requestSync(ctx, s.cursor)
	}
	if s.behindAt.IsZero() || head > s.behindHead {
		s.behindAt, s.behindHead = time.Now(), head
	}
	return nil
}

// resync forgets the local position (not the messages: those are kept by id
// and not shown again) and pulls the inbox from 0 under epoch.
func (s *session) resync(ctx context.Context, epoch string) error {
	if err := s.c.store.reset(epoch); err != nil {
		return err
	}
	s.epoch, s.cursor, s.lastAck, s.needAck, s.own, s.behindAt = epoch, 0, 0, 0, nil, time.Time{}
	return s.requestSync(ctx, 0)
}

// receive applies one entry, pushed or synced.
func (s *session) receive(ctx context.Context, e wire.Entry) error {
	return s.apply(ctx, e, false)
}

// source is where an applied entry came from.
type source int

const (
	pushed source = iota
	synced
	ownSent // this device's own 1:1 message, carried by "sent"
)

// apply applies one entry (synced: of a sync page), and then any of this
// device's own entries it made next in line.
func (s *session) apply(ctx context.Context, e wire.Entry, fromSync bool) error {
	if err := s.applyOwn(ctx); err != nil {
		return err
	}
	src := pushed
	if fromSync {
		src = synced
	}
	if err := s.applyOne(ctx, e, src); err != nil {
		return err
	}
	return s.applyOwn(ctx)
}

// applyOwn applies the held own entries that are next in line. They need
// no ack of their own: the next cumulative ack covers them.
func (s *session) applyOwn(ctx context.Context) error {
	for {
		if s.epoch == "" && s.syncing {
			return nil // the sync in flight tells the epoch first
		}
		e, ok := s.own[s.cursor+1]
		if !ok {
			return nil
		}
		delete(s.own, e.Seq)
		if err := s.applyOne(ctx, e, ownSent); err != nil {
			return err
		}
	}
}

// applyOne applies one entry at the cursor.
func (s *session) applyOne(ctx context.Context, e wire.Entry, src source) error {
	if src == pushed && s.epoch == "" && s.syncing {
		// This device does not know its inbox's epoch yet: taking a push
		// now could stack a new sequence on a stale cursor. The sync in
		// flight tells the epoch; one more sync then fetches this entry.
		s.resyncAgain = true
		return nil
	}
	switch {
	case e.Seq <= s.cursor:
		if src != ownSent {
			s.forceAck = true // a duplicate: the server may have missed our ack
		}
		return nil
	case e.Seq > s.cursor+1:
		// A gap: apply nothing past it until a sync from the cursor fills it.
		if !s.syncing {
			return s.requestSync(ctx, s.cursor)
		}
		return nil
	}
	h := s.c.opts.hooks
	if h.beforePersist != nil && h.beforePersist(e.Seq) == errCrash {
		return errCrash
	}
	applied, known, err := s.c.store.apply(e)
	if err != nil {
		return err
	}
	if !applied {
		return nil
	}
	s.cursor = e.Seq
	if src != ownSent {
		s.needAck = e.Seq
	}
	if h.afterPersist != nil && h.afterPersist(e.Seq) == errCrash {
		return errCrash
	}
	if !known {
		select {
		case s.c.msgs <- toMessage(e):
		case <-s.c.done:
			return errors.New("closed")
		}
	} // else: held before a resync and shown then: persisted, not shown again
	if src == ownSent {
		return nil
	}
	if src == synced {
		if s.syncedUnacked++; s.syncedUnacked >= s.c.opts.SyncAckBatch {
			return s.ack(ctx)
		}
		return nil
	}
	if !s.pushWaiting {
		s.pushWaiting, s.pushedAt = true, time.Now()
	}
	if s.unacked++; s.unacked >= s.c.opts.AckBatch {
		return s.ack(ctx)
	}
	return nil
}

func (s *session) page(ctx context.Context, p wire.SyncPage) error {
	if p.PushTimeoutMs > 0 {
		s.pushTimeout = time.Duration(p.PushTimeoutMs) * time.Millisecond
	}
	switch {
	case p.Epoch != "" && s.epoch != p.Epoch && (s.epoch != "" || s.cursor > 0):
		// The server's sequence restarted (or this device's position was
		// taken without knowing its epoch): the local cursor means nothing.
		s.c.log.Warn("inbox epoch changed; resyncing from scratch", "old", s.epoch, "new", p.Epoch, "cursor", s.cursor)
		return s.resync(ctx, p.Epoch)
	case p.Head < s.cursor:
		s.c.log.Warn("local cursor is beyond the inbox head; resyncing from scratch", "cursor", s.cursor, "head", p.Head)
		return s.resync(ctx, p.Epoch)
	case p.Epoch != s.epoch:
		if err := s.c.store.setEpoch(p.Epoch); err != nil {
			return err
		}
		s.epoch = p.Epoch
	}
	if p.Truncated && p.FirstSeq > s.cursor+1 {
		// Entries after our cursor expired on the server (retention): they
		// can never arrive. Record the skip and continue from the oldest
		// retained entry; the application can show what it missed.
		s.c.log.Warn("inbox entries expired before this device synced them", "from", s.cursor+1, "to", p.FirstSeq-1)
		if err := s.c.store.skip(s.cursor, p.FirstSeq-1); err != nil {
			return err
		}
		s.cursor = p.FirstSeq - 1
	}
	for _, e := range p.Messages {
		if err := s.apply(ctx, e, true); err != nil {
			return err
		}
	}
	if p.HasMore {
		return s.requestSync(ctx, p.NextCursor)
	}
	s.syncing = false
	// This device's own entries that came in "sent" while the inbox's
	// epoch was unknown waited for this page (a page answered before the
	// send was stored can come after its "sent"): next in line now.
	if err := s.applyOwn(ctx); err != nil {
		return err
	}
	if s.cursor < p.Head || s.resyncAgain {
		// Entries were skipped (applied out of order, or pushed before
		// the epoch was known): pull again.
		s.resyncAgain = false
		return s.requestSync(ctx, s.cursor)
	}
	s.c.synced.Store(!s.groupsSyncing())
	return s.ack(ctx)
}

// housekeeping is the period of the session's timer for acks, rate-limited
// syncs and catch-up checks.
const housekeeping = 100 * time.Millisecond

// ackWindow is how long a pushed entry may wait for its ack: AckInterval,
// capped at 2/5 of the server's push timeout (5 s until a sync page says).
func (s *session) ackWindow() time.Duration {
	timeout := s.pushTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return min(s.c.opts.AckInterval, timeout*2/5)
}

// ackDue reports whether the housekeeping tick at now should ack: a pushed
// entry has waited its window, or (outside a sync, which acks when it ends)
// an applied entry waits or a duplicate push or an error asked for one.
func (s *session) ackDue(now time.Time) bool {
	switch {
	case s.forceAck && !s.syncing:
		return true
	case s.pushWaiting:
		return now.Sub(s.pushedAt) >= s.ackWindow()
	default:
		return !s.syncing
	}
}

// ack acknowledges everything up to the cursor, when something the server
// waits for (a pushed or synced entry) or a duplicate push asks for it.
func (s *session) ack(ctx context.Context) error {
	if err := s.ackGroups(ctx); err != nil {
		return err
	}
	if s.needAck <= s.lastAck && !s.forceAck {
		// Nothing of the inbox waits: what did (group pushes) is acked.
		s.unacked, s.syncedUnacked, s.pushWaiting = 0, 0, false
		return nil
	}
	if h := s.c.opts.hooks.beforeAck; h != nil && h(s.cursor) == errCrash {
		return errCrash
	}
	upTo := s.cursor
	// A forced ack is one written again (after an error, or a duplicate
	// push): it says so, and if the server's cursor is already there (the
	// first one's invocation failed after its write) the delivered
	// receipts go to the senders then.
	if err := s.write(ctx, wire.Ack{Action: wire.ActionAck, UpTo: &upTo, Again: s.forceAck}); err != nil {
		return err
	}
	s.lastAck, s.forceAck, s.unacked, s.syncedUnacked, s.pushWaiting = s.cursor, false, 0, 0, false
	return nil
}

// flushOutbox sends, per conversation, the oldest pending send unless it
// was sent recently on this connection. One send per conversation is in
// flight at a time: API Gateway invokes each frame on its own, so two
// frames sent back to back can be stored in either order; waiting for the
// server's ACK (or refusal) before the next keeps the sender's order.
func (s *session) flushOutbox(ctx context.Context) error {
	items, err := s.c.store.outbox()
	if err != nil {
		return err
	}
	now := time.Now()
	if now.Before(s.c.holdUntil(kindSend)) {
		return nil
	}
	busy := map[string]bool{}
	for _, it := range items {
		conv := it.conversation()
		if busy[conv] {
			continue
		}
		busy[conv] = true
		if at, ok := s.sentAt[it.ID]; ok && now.Sub(at) < s.c.opts.ResendAfter {
			continue
		}
		if err := s.conn.Write(ctx, []byte(it.Frame)); err != nil {
			return err
		}
		s.sentAt[it.ID] = now
	}
	return nil
}

func (s *session) serverError(ctx context.Context, e wire.Error) error {
	if e.ClientMsgID != "" {
		switch e.Code {
		case wire.CodeRateLimited, wire.CodeInternal:
			// Retry with the same id once the server asks (or after a second).
			wait := time.Duration(max(e.RetryAfterMs, 1000)) * time.Millisecond
			s.sentAt[e.ClientMsgID] = time.Now().Add(wait - s.c.opts.ResendAfter)
			if e.Code == wire.CodeRateLimited {
				// The limit is the user's: every other send would be
				// refused too. The hold is the client's, so a new
				// connection during it does not send them at once either.
				s.c.hold(kindSend, time.Now().Add(wait))
			}
			return nil
		}
		delete(s.sentAt, e.ClientMsgID)
		if err := s.c.store.settle(e.ClientMsgID, nil); err != nil {
			return err
		}
		s.c.resolve(e.ClientMsgID, sendResult{err: &ServerError{Code: e.Code, Message: e.Message, RequestID: e.RequestID}})
		return s.flushOutbox(ctx)
	}
	if e.Code == wire.CodeUnauthorized {
		// The connection's token expired and the server closes it: end
		// the session now; the reconnect asks Options.Token for a new one.
		return errTokenExpired
	}
	if e.Code == wire.CodeConnectionLimit {
		// The user opened more connections than the server allows and this
		// one, the oldest, is being closed. Reconnecting at once would close
		// another of the user's devices, which would do the same.
		s.c.log.Warn("closed by the server: too many connections for this user; waiting before reconnecting", "message", e.Message, "wait", s.c.opts.EvictedWait)
		s.reconnectAfter = s.c.opts.EvictedWait
		return nil
	}
	if e.Code == wire.CodeRateLimitIgnored {
		// Frames kept coming after a rate_limited (this app's own calls:
		// the SDK's sends wait as told) and the server closes this
		// connection; new connections are refused until retryAfterMs.
		wait := time.Duration(e.RetryAfterMs) * time.Millisecond
		s.c.log.Error("closed by the server: frames kept coming after rate_limited; waiting before reconnecting", "message", e.Message, "wait", wait)
		s.reconnectAfter = wait
		return nil
	}
	if e.Code == wire.CodeResync {
		// Our cursor or ack is beyond the inbox head: the server's data
		// was reset, restored or re-created.
		s.c.log.Warn("server asks for a resync", "message", e.Message, "cursor", s.cursor, "epoch", e.Epoch)
		return s.resync(ctx, e.Epoch)
	}
	if e.Code == wire.CodeRateLimited && isSyncRef(e.Ref) {
		// Refused: the inbox's sync (its own slot per SyncInterval), asked
		// again after the wait, or a group's (a query), which holds every
		// group sync and query (their ref says which).
		wait := time.Duration(max(e.RetryAfterMs, 100)) * time.Millisecond
		if strings.HasPrefix(e.Ref, inboxSyncRef) {
			if s.syncing && s.syncRef == e.Ref {
				s.syncAt = time.Now().Add(wait)
			}
		} else {
			s.holdGroupSyncs(wait)
		}
		return nil
	}
	if e.Code == wire.CodeInternal && isSyncRef(e.Ref) {
		// That sync's invocation failed (not an ack's or a read's): ask it
		// again in a second, not once it counts as unanswered.
		s.syncFailed(e.Ref)
		return nil
	}
	if e.Code == wire.CodeInternal || e.Code == wire.CodeRateLimited {
		// Acks and reads are answered only when they fail, without an id:
		// whatever failed, acking and reading again is harmless
		// (cumulative, forward-only) and keeps the server's cursor and
		// watermarks from lagging behind what the device did — after a
		// second, or the wait a rate limit names. (Until the thirty-third
		// session only the acks: a read whose invocation failed was
		// written again only after a reconnect, if no pong had come.)
		wait := max(time.Second, time.Duration(e.RetryAfterMs)*time.Millisecond)
		s.writeAgain(wait)
	}
	s.c.log.Warn("server error", "code", e.Code, "message", e.Message, "requestId", e.RequestID)
	return nil
}
