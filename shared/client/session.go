package client

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
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
			if !firstDone && errors.As(err, &auth) {
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

// replay emits stored messages after Options.ShownUpTo, before any new one.
func (c *Client) replay() bool {
	entries, err := c.store.entries(c.opts.ShownUpTo, 0)
	if err != nil {
		c.log.Error("replay stored messages", "err", err.Error())
		return true
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
	c        *Client
	conn     Conn
	cursor   int64
	epoch    string
	lastAck  int64
	forceAck bool
	unacked  int
	syncing  bool
	syncAt   time.Time // when a rate-limited sync may be retried; zero: none waiting
	sentAt   map[string]time.Time
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
	s := &session{c: c, conn: conn, cursor: cursor, epoch: epoch, sentAt: map[string]time.Time{}}
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
	c.log.Info("connected", "cursor", cursor)

	// Connect path: pull everything since the stored cursor, then live pushes.
	if err := s.requestSync(sctx, s.cursor); err != nil {
		return 0
	}
	if err := s.flushOutbox(sctx); err != nil {
		return 0
	}
	ackTick := time.NewTicker(c.opts.AckInterval)
	defer ackTick.Stop()
	resendTick := time.NewTicker(time.Second)
	defer resendTick.Stop()
	pingTick := time.NewTicker(c.opts.PingInterval)
	defer pingTick.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			if !c.crashed.Load() {
				// A graceful Close acks what is persisted, so the server
				// does not re-push it.
				actx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = s.ack(actx)
				cancel()
			}
			return 0
		case f := <-frames:
			if f.err != nil {
				if !c.crashed.Load() {
					c.log.Info("connection lost", "err", f.err.Error())
				}
				return 0
			}
			err = s.handle(sctx, f.data)
		case <-ackTick.C:
			err = s.ack(sctx)
			if err == nil && !s.syncAt.IsZero() && time.Now().After(s.syncAt) {
				s.syncAt = time.Time{}
				err = s.requestSync(sctx, s.cursor)
			}
		case <-c.kick:
			err = s.flushOutbox(sctx)
		case <-resendTick.C:
			err = s.flushOutbox(sctx)
		case <-pingTick.C:
			err = s.write(sctx, wire.Envelope{Action: wire.ActionPing})
		case o := <-c.out:
			err = s.conn.Write(sctx, o.frame)
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

func (s *session) write(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.conn.Write(ctx, b)
}

func (s *session) requestSync(ctx context.Context, cursor int64) error {
	s.syncing = true
	return s.write(ctx, map[string]any{"action": wire.ActionSync, "cursor": cursor, "limit": 100})
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
		return s.receive(ctx, p.Entry)
	case wire.TypeSync:
		var p wire.SyncPage
		if err := json.Unmarshal(data, &p); err != nil {
			return nil
		}
		return s.page(ctx, p)
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
		// The next send of that conversation may go now.
		return s.flushOutbox(ctx)
	case wire.TypeReceipt:
		var r wire.Receipt
		if err := json.Unmarshal(data, &r); err == nil && s.c.opts.OnReceipt != nil {
			s.c.opts.OnReceipt(r)
		}
	case wire.TypeRead:
		var r wire.ReadSync
		if err := json.Unmarshal(data, &r); err == nil && s.c.opts.OnRead != nil {
			s.c.opts.OnRead(r.ConversationID, r.UpTo)
		}
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
// (after a second, with the same clientMsgId: idempotent), the ack
// (cumulative) and an unanswered sync.
func (s *session) gatewayError(g gatewayError) {
	s.c.log.Warn("gateway error; retrying what is in flight", "message", g.Message, "requestId", g.RequestID)
	retry := time.Now().Add(time.Second - s.c.opts.ResendAfter)
	for id, at := range s.sentAt {
		if at.After(retry) {
			s.sentAt[id] = retry
		}
	}
	s.forceAck = true
	if s.syncing && s.syncAt.IsZero() {
		s.syncAt = time.Now().Add(time.Second)
	}
}

// receive applies one entry, pushed or synced.
func (s *session) receive(ctx context.Context, e wire.Entry) error {
	switch {
	case e.Seq <= s.cursor:
		s.forceAck = true // a duplicate: the server may have missed our ack
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
	applied, err := s.c.store.apply(e)
	if err != nil {
		return err
	}
	if !applied {
		return nil
	}
	s.cursor = e.Seq
	if h.afterPersist != nil && h.afterPersist(e.Seq) == errCrash {
		return errCrash
	}
	select {
	case s.c.msgs <- toMessage(e):
	case <-s.c.done:
		return errors.New("closed")
	}
	s.unacked++
	if s.unacked >= s.c.opts.AckBatch {
		return s.ack(ctx)
	}
	return nil
}

func (s *session) page(ctx context.Context, p wire.SyncPage) error {
	if p.Epoch != "" && s.epoch != p.Epoch {
		if s.epoch != "" {
			// The server's sequence restarted: everything local is stale.
			s.c.log.Warn("inbox epoch changed; resyncing from scratch", "old", s.epoch, "new", p.Epoch)
			if err := s.c.store.reset(p.Epoch); err != nil {
				return err
			}
			s.epoch, s.cursor, s.lastAck = p.Epoch, 0, 0
			return s.requestSync(ctx, 0)
		}
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
		if err := s.receive(ctx, e); err != nil {
			return err
		}
	}
	if p.HasMore {
		return s.requestSync(ctx, p.NextCursor)
	}
	s.syncing = false
	if s.cursor < p.Head {
		// Entries were skipped (e.g. applied out of order): pull again.
		return s.requestSync(ctx, s.cursor)
	}
	return s.ack(ctx)
}

func (s *session) ack(ctx context.Context) error {
	if s.cursor <= s.lastAck && !s.forceAck {
		return nil
	}
	if h := s.c.opts.hooks.beforeAck; h != nil && h(s.cursor) == errCrash {
		return errCrash
	}
	if err := s.write(ctx, map[string]any{"action": wire.ActionAck, "upTo": s.cursor}); err != nil {
		return err
	}
	s.lastAck, s.forceAck, s.unacked = s.cursor, false, 0
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
			return nil
		}
		delete(s.sentAt, e.ClientMsgID)
		if err := s.c.store.settle(e.ClientMsgID, nil); err != nil {
			return err
		}
		s.c.resolve(e.ClientMsgID, sendResult{err: &ServerError{Code: e.Code, Message: e.Message, RequestID: e.RequestID}})
		return s.flushOutbox(ctx)
	}
	if e.Code == wire.CodeRateLimited && s.syncing {
		s.syncAt = time.Now().Add(time.Duration(max(e.RetryAfterMs, 100)) * time.Millisecond)
		return nil
	}
	if e.Code == wire.CodeInternal || e.Code == wire.CodeRateLimited {
		// Acks are answered only when they fail, without an id: whatever
		// failed, acking again is harmless (cumulative, forward-only) and
		// keeps the server's cursor from lagging behind what is persisted.
		s.forceAck = true
	}
	s.c.log.Warn("server error", "code", e.Code, "message", e.Message, "requestId", e.RequestID)
	return nil
}
