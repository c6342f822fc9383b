package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/testkit"
	"github.com/signet-im/signet/shared/wire"
)

func TestGroupsReadMarksPresenceAndSummaryThroughTheSDK(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		mu        sync.Mutex
		reads     []int64
		presences []string
	)
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	bobPhone := newDevice(t, st, "bob", "phone").dial(t)
	bobTablet := newDevice(t, st, "bob", "tablet").dial(t, func(o *Options) {
		o.OnRead = func(_ string, upTo int64) { mu.Lock(); reads = append(reads, upTo); mu.Unlock() }
		o.OnPresence = func(u, s string) { mu.Lock(); presences = append(presences, u+"="+s); mu.Unlock() }
	})

	g, err := alice.CreateGroup(ctx, "Incident 42", "bob")
	if err != nil || g.Count != 2 || g.Name != "Incident 42" {
		t.Fatalf("create = %+v, %v", g, err)
	}
	sent, err := alice.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: []byte(`"db failover in 5"`)})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, bobPhone, 1, 10*time.Second)
	if got[0].ConversationID != g.ConversationID || got[0].MessageID != sent.MessageID {
		t.Fatalf("bob's phone got %+v", got[0])
	}
	if err := bobPhone.MarkRead(ctx, g.ConversationID, got[0].ConvSeq); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "read mark on bob's tablet", func() bool { mu.Lock(); defer mu.Unlock(); return len(reads) == 1 && reads[0] == 1 })
	var rc ReceiptsInfo
	waitFor(t, "read receipt", func() bool {
		rc, err = alice.Receipts(ctx, g.ConversationID, sent.ConvSeq)
		return err == nil && rc.Read == 1
	})
	if rc.Members != 1 || rc.ReadBy[0] != "bob" {
		t.Fatalf("receipts = %+v", rc)
	}
	sum, err := bobTablet.Summary(ctx)
	if err != nil || len(sum) != 1 || sum[0].ConversationID != g.ConversationID || sum[0].Unread != 0 || sum[0].Title != "Incident 42" {
		t.Fatalf("summary = %+v, %v", sum, err)
	}
	h, err := bobTablet.ConversationHistory(ctx, g.ConversationID, 0, 10)
	if err != nil || len(h.Messages) != 1 || h.Messages[0].MessageID != sent.MessageID {
		t.Fatalf("history = %+v, %v", h, err)
	}
	members, err := bobTablet.Members(ctx, g.ConversationID)
	if err != nil || len(members.Members) != 2 {
		t.Fatalf("members = %+v, %v", members, err)
	}
	// Refusals come back as ServerErrors matched to the request.
	_, err = bobTablet.AddMembers(ctx, g.ConversationID, "", "carol")
	var se *ServerError
	if !errors.As(err, &se) || se.Code != wire.CodeForbidden {
		t.Fatalf("member adding: %v", err)
	}

	// Presence: 1:1 peers hear of changes; invisible reads as offline.
	if _, err := alice.Send(ctx, "bob", "ping"); err != nil {
		t.Fatal(err)
	}
	if shown, err := alice.SetPresence(ctx, "invisible"); err != nil || shown != "offline" {
		t.Fatalf("set invisible: %q, %v", shown, err)
	}
	if p, err := bobPhone.QueryPresence(ctx, "alice"); err != nil || p["alice"] != "offline" {
		t.Fatalf("query = %v, %v", p, err)
	}
	waitFor(t, "presence push", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(presences) > 0 && presences[len(presences)-1] == "alice=offline"
	})
	if _, err := alice.SetPresence(ctx, "sleeping"); !errors.As(err, &se) || se.Code != wire.CodeBadRequest {
		t.Fatalf("bad status: %v", err)
	}
}

func TestQueryWaitsForAConnectionAndHonoursItsContext(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	c := newDevice(t, st, "alice", "laptop").dial(t)
	c.Close()
	if _, err := c.Summary(context.Background()); !errors.Is(err, errClosed) {
		t.Fatalf("summary on a closed client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d := newDevice(t, st, "bob", "laptop").dial(t, func(o *Options) { o.Dialer = dropFrames(WebSocket, wire.TypeSummary) })
	if _, err := d.Summary(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("summary without an answer: %v", err)
	}
}

// queryLosingConn loses the first frame written with action, or its
// answer: mode "close" closes the connection once it is written (its
// answer is lost), "drop" closes it instead of writing the frame (the
// frame is lost), "fail" answers it with API Gateway's own error frame in
// its place.
type queryLosingConn struct {
	Conn
	action string
	// inGroup limits it to frames naming a conversation (a group's ack).
	inGroup bool
	mode    string
	once    *sync.Once
	failed  chan []byte // the gateway error frame to read, once
	asked   *atomic.Int64
	// until (Unix ns) ends mode "throttle": every frame with action
	// written before it is answered with the error frame in its place.
	until *atomic.Int64
	// frames are the connection's own, read in the background so that
	// Read also returns the error frame while nothing else comes.
	frames   chan readResult
	startRun sync.Once
	// lost is set once the connection is lost (modes drop and close):
	// what it reads after that is not passed on. Its close handshake
	// could otherwise bring the answer to the frame it lost, as a
	// clean-clone CI run saw.
	lost atomic.Bool
}

type readResult struct {
	b   []byte
	err error
}

func (q *queryLosingConn) Write(ctx context.Context, b []byte) error {
	var env struct {
		Action         string `json:"action"`
		ConversationID string `json:"conversationId"`
	}
	if json.Unmarshal(b, &env) != nil || env.Action != q.action || q.inGroup && env.ConversationID == "" {
		return q.Conn.Write(ctx, b)
	}
	q.asked.Add(1)
	if q.mode == "throttle" {
		if time.Now().UnixNano() > q.until.Load() {
			return q.Conn.Write(ctx, b)
		}
		select {
		case q.failed <- []byte(`{"message": "Internal server error", "connectionId": "c", "requestId": "r"}`):
		default: // a storm of them: one is enough to read
		}
		return nil
	}
	lose := false
	q.once.Do(func() { lose = true })
	if !lose {
		return q.Conn.Write(ctx, b)
	}
	switch q.mode {
	case "fail":
		// Not passed on: API Gateway answers for the invocation that failed.
		q.failed <- []byte(`{"message": "Internal server error", "connectionId": "c", "requestId": "r"}`)
		return nil
	case "drop":
		q.lost.Store(true)
		q.Conn.Close()
		return nil
	}
	q.lost.Store(true)
	err := q.Conn.Write(ctx, b)
	q.Conn.Close()
	return err
}

func (q *queryLosingConn) Read(ctx context.Context) ([]byte, error) {
	q.startRun.Do(func() {
		go func() {
			for {
				b, err := q.Conn.Read(context.Background())
				if err == nil && q.lost.Load() {
					b, err = nil, errors.New("connection lost")
				}
				q.frames <- readResult{b, err}
				if err != nil {
					return
				}
			}
		}()
	})
	select {
	case b := <-q.failed:
		return b, nil
	case r := <-q.frames:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// losing dials connections of which the first loses the first frame
// written with action, or its answer (queryLosingConn's mode); asked
// counts those frames.
func losing(action, mode string, asked *atomic.Int64) Dialer {
	var once sync.Once
	return wrapDialer(WebSocket, func(conn Conn) Conn {
		return &queryLosingConn{Conn: conn, action: action, mode: mode, once: &once, failed: make(chan []byte, 1), asked: asked, frames: make(chan readResult, 64)}
	})
}

// A read frame lost with its connection (written, never received) is
// written again on the next connection; one API Gateway answers with its
// error frame (the read's invocation failed) is written again at once.
// MarkRead returned once it was written, and the sender would never see
// it read.
func TestAReadLostWithItsConnectionIsWrittenAgain(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	for _, mode := range []string{"drop", "fail"} {
		alice := newDevice(t, st, "alice"+mode, "laptop").dial(t)
		var asked atomic.Int64
		bob := newDevice(t, st, "bob"+mode, "phone").dial(t, func(o *Options) { o.Dialer = losing("read", mode, &asked) })
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		sent, err := alice.Send(ctx, "bob"+mode, []byte(`"approve?"`))
		if err != nil {
			t.Fatal(err)
		}
		collect(t, bob, 1, 30*time.Second)
		if err := bob.MarkRead(ctx, sent.ConversationID, sent.ConvSeq); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "bob's read watermark (lost by "+mode+")", func() bool {
			s, err := st.Store.ConversationState(ctx, im.UserID("bob"+mode), im.ConversationID(sent.ConversationID))
			return err == nil && s.Read == sent.ConvSeq
		})
		cancel()
		if asked.Load() < 2 {
			t.Fatalf("lost by %s: the read was written %d times", mode, asked.Load())
		}
	}
	// Confirmed by a pong to a later ping, a read is not written again on
	// a new connection, but is after a gateway error within
	// errorWindow (its invocation may have failed).
	c := &Client{reads: map[string]sentRead{}}
	one := int64(1)
	at := time.Now()
	c.wroteRead(wire.Read{ConversationID: "d:a:b", UpTo: &one}, at)
	c.confirmReads(at.Add(-time.Second))
	if len(c.unconfirmedReads()) != 1 {
		t.Fatal("a read written after the ping was confirmed by its pong")
	}
	c.confirmReads(at.Add(time.Second))
	if len(c.unconfirmedReads()) != 0 {
		t.Fatal("a read written before the ping is still unconfirmed after its pong")
	}
	if len(c.recentReads(at.Add(time.Second))) != 1 {
		t.Fatal("a confirmed read is not written again after a gateway error that came a second later")
	}
	if len(c.recentReads(at.Add(errorWindow+time.Second))) != 0 {
		t.Fatal("a read is written again after a gateway error long after it")
	}
	c.confirmReads(at.Add(errorWindow + time.Second))
	if len(c.reads) != 0 {
		t.Fatal("a read confirmed long ago is still kept")
	}
}

// Under a throttle (API Gateway answering every read with its error
// frame for 3 s) the SDK writes the read again about once a second, not at
// each error frame: k frames written again at each would come back as k
// error frames and k² frames. Once the throttle ends, the read is stored.
func TestAThrottledReadIsWrittenAgainAboutOnceASecond(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	var asked, until atomic.Int64
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.Dialer = wrapDialer(WebSocket, func(conn Conn) Conn {
			return &queryLosingConn{Conn: conn, action: "read", mode: "throttle", until: &until, failed: make(chan []byte, 1), asked: &asked, frames: make(chan readResult, 64)}
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sent, err := alice.Send(ctx, "bob", []byte(`"approve?"`))
	if err != nil {
		t.Fatal(err)
	}
	collect(t, bob, 1, 30*time.Second)
	const throttle = 3 * time.Second
	start := time.Now()
	until.Store(start.Add(throttle).UnixNano())
	if err := bob.MarkRead(ctx, sent.ConversationID, sent.ConvSeq); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob's read watermark after the throttle", func() bool {
		s, err := st.Store.ConversationState(ctx, "bob", im.ConversationID(sent.ConversationID))
		return err == nil && s.Read == sent.ConvSeq
	})
	// Written once, then about once a second while refused (the test's
	// own scheduling may add one), then once more that is stored.
	if n, most := asked.Load(), int64(time.Since(start)/time.Second)+3; n < 2 || n > most {
		t.Fatalf("the read was written %d times in %s of which %s throttled; want 2 to %d", n, time.Since(start).Round(time.Millisecond), throttle, most)
	}
}

// A read answered with an "internal" error is written again a second
// later, saying "again": its failed invocation may have stored the
// watermark before telling anyone (as here), and the read written again,
// which moves nothing, then sends the peer the read receipt. Until the
// thirty-third session the SDK wrote a failed read again only on a new
// connection (and only if no pong had come), and the server ignored a read
// at the watermark: alice never heard that bob read her message.
func TestAReadThatFailedAfterItsWriteIsWrittenAgainAndItsReceiptArrives(t *testing.T) {
	t.Parallel()
	receiptAfterAFailure(t, wire.ReceiptRead, func(fn string, h *handler.Deps, failed *atomic.Bool) {
		if fn == "ReadFunction" {
			h.Reads = testkit.ReadStoredThenFailed{Reads: h.Reads, Failed: failed}
		}
	}, func(ctx context.Context, bob *Client, sent Sent) error {
		return bob.MarkRead(ctx, sent.ConversationID, sent.ConvSeq)
	})
}

// An ack answered with an "internal" error is written again a second
// later, saying "again": its failed invocation may have moved the cursor
// before the delivered receipt (as here), and the ack written again, which
// moves nothing, then sends it.
func TestAnAckThatFailedAfterItsWriteIsWrittenAgainAndItsReceiptArrives(t *testing.T) {
	t.Parallel()
	receiptAfterAFailure(t, wire.ReceiptDelivered, func(fn string, h *handler.Deps, failed *atomic.Bool) {
		if fn == "AckFunction" {
			h.Inbox = testkit.AckStoredThenFailed{Inbox: h.Inbox, Failed: failed}
		}
	}, nil)
}

// receiptAfterAFailure has alice send bob a message on a stack whose
// functions configure sets up to fail once (setting failed), bob receive
// it and then act on it (nil: only his SDK's own ack), and waits for
// alice's receipt of kind up to it; it fails unless an invocation failed
// first. Pushed again only after 30 s: no redelivery brings a second ack.
func receiptAfterAFailure(t *testing.T, kind string, configure func(fn string, h *handler.Deps, failed *atomic.Bool), act func(ctx context.Context, bob *Client, sent Sent) error) {
	t.Helper()
	var failed atomic.Bool
	st := startStackWith(t, devstack.Options{Redelivery: &slowRedelivery, Configure: func(fn string, h *handler.Deps) { configure(fn, h, &failed) }})
	receipts := make(chan Receipt, 16)
	alice := newDevice(t, st, "alice", "laptop").dial(t, func(o *Options) {
		o.OnReceipt = func(r Receipt) { receipts <- r }
	})
	bob := newDevice(t, st, "bob", "phone").dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sent, err := alice.Send(ctx, "bob", []byte(`"approve?"`))
	if err != nil {
		t.Fatal(err)
	}
	collect(t, bob, 1, 30*time.Second)
	if act != nil {
		if err := act(ctx, bob, sent); err != nil {
			t.Fatal(err)
		}
	}
	for {
		select {
		case r := <-receipts:
			if r.Kind == kind && r.UserID == "bob" && r.UpTo == sent.ConvSeq {
				if !failed.Load() {
					t.Fatalf("no invocation failed before alice's %s receipt", kind)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("alice got no %s receipt (the first invocation failed: %v)", kind, failed.Load())
		}
	}
}

// slowRedelivery pushes again only after 30 s: a test that a lost ack is
// written again sees no redelivered push bring it.
var slowRedelivery = im.Redelivery{PushTimeout: 30 * time.Second, Backoff: []time.Duration{30 * time.Second}}

// An ack answered with API Gateway's error frame (its invocation was
// throttled) is written again about once a second while the throttle
// lasts, not at every housekeeping tick (ten a second: each failing
// again, each answered with another error frame), and is stored once the
// throttle ends.
func TestAThrottledAckIsWrittenAgainAboutOnceASecond(t *testing.T) {
	t.Parallel()
	st := startStackWith(t, devstack.Options{Redelivery: &slowRedelivery})
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	var acks, until atomic.Int64
	until.Store(time.Now().Add(time.Hour).UnixNano())
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.Dialer = wrapDialer(WebSocket, func(conn Conn) Conn {
			return &queryLosingConn{Conn: conn, action: "ack", mode: "throttle", until: &until, failed: make(chan []byte, 1), asked: &acks, frames: make(chan readResult, 64)}
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := alice.Send(ctx, "bob", []byte(`"approve?"`)); err != nil {
		t.Fatal(err)
	}
	got := collect(t, bob, 1, 30*time.Second)
	waitFor(t, "bob's first ack", func() bool { return acks.Load() > 0 })
	const throttle = 4 * time.Second
	start := time.Now()
	until.Store(start.Add(throttle).UnixNano())
	waitFor(t, "bob's ack stored after the throttle", func() bool {
		acked, err := st.Store.AckedUpTo(ctx, "bob", "phone")
		return err == nil && acked == got[0].Seq
	})
	if n, most := acks.Load(), int64(time.Since(start)/time.Second)+3; n < 2 || n > most {
		t.Fatalf("the ack was written %d times in %s, %s of them throttled; want 2 to %d", n, time.Since(start).Round(time.Millisecond), throttle, most)
	}
}

// A group's ack answered with API Gateway's error frame is written again
// (a second later, with the inbox's): the member's cursor in the group
// moves on without waiting for the message's redelivery.
func TestAGroupAckThatFailedIsWrittenAgain(t *testing.T) {
	t.Parallel()
	// Read diffusion (a group's messages acked per group), whatever mode
	// the suite runs the others in.
	st := startStackWith(t, devstack.Options{Redelivery: &slowRedelivery, Parameters: map[string]string{"GroupDelivery": "read"}})
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	var acks atomic.Int64
	var once sync.Once
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.Dialer = wrapDialer(WebSocket, func(conn Conn) Conn {
			return &queryLosingConn{Conn: conn, action: "ack", inGroup: true, mode: "fail", once: &once, failed: make(chan []byte, 1), asked: &acks, frames: make(chan readResult, 64)}
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := alice.CreateGroup(ctx, "Ops", "bob")
	if err != nil {
		t.Fatal(err)
	}
	sent, err := alice.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: []byte(`"deploy?"`)})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, bob, 1, 30*time.Second)
	start := time.Now()
	waitFor(t, "bob's cursor in the group", func() bool {
		rc, err := alice.Receipts(ctx, g.ConversationID, sent.ConvSeq)
		return err == nil && rc.Delivered == 1
	})
	if time.Since(start) >= slowRedelivery.PushTimeout {
		t.Fatalf("bob's cursor moved %s after the message came: not before its redelivery", time.Since(start).Round(time.Millisecond))
	}
	if n := acks.Load(); n < 2 {
		t.Fatalf("bob's group ack was written %d times; want it written again after the error frame", n)
	}
}

// A query whose answer is lost — its connection drops once the frame is
// out, or API Gateway answers it with its own error frame (a throttled
// invocation) — is asked again by the SDK (on the next connection, or at
// once) instead of waiting out the caller's deadline. Group creates are
// among them: the SDK names the new group's id, and a create asked again
// is answered as the first (no second group).
func TestAQueryWhoseAnswerIsLostIsAskedAgain(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	for _, mode := range []string{"close", "fail"} {
		var asked atomic.Int64
		user := "u" + mode
		c := newDevice(t, st, user, "laptop").dial(t, func(o *Options) { o.Dialer = losing("group", mode, &asked) })
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		start := time.Now()
		g, err := c.CreateGroup(ctx, "Ops", "bob")
		cancel()
		if err != nil || g.Op != "create" || g.Name != "Ops" || g.Count != 2 || len(g.Changed) != 2 {
			t.Fatalf("lost by %s: create = %+v, %v (after %s)", mode, g, err, time.Since(start))
		}
		if asked.Load() < 2 {
			t.Fatalf("lost by %s: the create was written %d times", mode, asked.Load())
		}
		sum, err := c.Summary(context.Background())
		if err != nil || len(sum) != 1 || sum[0].ConversationID != g.ConversationID {
			t.Fatalf("lost by %s: %s's conversations = %+v, %v; want the one group", mode, user, sum, err)
		}
	}
}

// A group change whose answer is lost with its connection — the change
// was stored — is asked again on the next connection and answered as the
// first (the SDK gives each change an op id): Changed names the users it
// changed, and a leave is no error (its user is no member any more).
func TestAGroupChangeWhoseAnswerIsLostIsAnsweredAsTheFirst(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := newDevice(t, st, "alice", "laptop").dial(t).CreateGroup(ctx, "Ops", "bob", "carol")
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int64
	phone := newDevice(t, st, "alice", "phone").dial(t, func(o *Options) { o.Dialer = losing("group", "close", &asked) })
	got, err := phone.RemoveMembers(ctx, g.ConversationID, "bob")
	if err != nil || !slices.Equal(got.Changed, []string{"bob"}) || got.Count != 2 || asked.Load() < 2 {
		t.Fatalf("a remove asked %d times answered %+v, %v; want it asked again and bob changed", asked.Load(), got, err)
	}
	asked.Store(0)
	carol := newDevice(t, st, "carol", "phone").dial(t, func(o *Options) { o.Dialer = losing("group", "close", &asked) })
	got, err = carol.LeaveGroup(ctx, g.ConversationID)
	if err != nil || !slices.Equal(got.Changed, []string{"carol"}) || got.Count != 1 || asked.Load() < 2 {
		t.Fatalf("a leave asked %d times answered %+v, %v; want it asked again and carol changed", asked.Load(), got, err)
	}
}

// A group change the server answers internal — its invocation failed
// after storing it — is asked again by the SDK a second later, with its
// op id, and answered as the first: the caller gets whom it changed, not
// the error (and not "changed nobody" from a retry of its own).
func TestAGroupChangeAnsweredInternalIsAskedAgainAndAnsweredAsTheFirst(t *testing.T) {
	t.Parallel()
	var failed sync.Map
	st := startStackWith(t, devstack.Options{Configure: testkit.On("GroupFunction", func(h *handler.Deps) {
		h.Groups = testkit.GroupChangeStoredThenFailed{Groups: h.Groups, Failed: &failed}
	})})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	g, err := alice.CreateGroup(ctx, "Ops", "bob", "carol")
	if err != nil {
		t.Fatal(err)
	}
	got, err := alice.AddMembers(ctx, g.ConversationID, "", "dave", "bob")
	if err != nil || !slices.Equal(got.Changed, []string{"dave"}) || got.Count != 4 {
		t.Fatalf("an add that failed after storing answered %+v, %v; want dave changed", got, err)
	}
	got, err = alice.RemoveMembers(ctx, g.ConversationID, "carol")
	if err != nil || !slices.Equal(got.Changed, []string{"carol"}) || got.Count != 3 {
		t.Fatalf("a remove that failed after storing answered %+v, %v; want carol changed", got, err)
	}
	n := 0
	failed.Range(func(any, any) bool { n++; return true })
	if n != 2 {
		t.Fatalf("%d changes failed after storing, want both", n)
	}
}

// In an app's alert conversation the SDK marks alerts read by inbox seq
// (an alert can reach the inbox after a later one, below the convSeq
// watermark): MarkAlertsRead reads exactly the alerts up to the inbox seq
// it names, the summary says it (ReadSeq, the unread count), and the
// user's other device hears it through OnAlertsRead.
func TestAlertsAreMarkedReadByInboxSeqThroughTheSDK(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	posts := 0
	post := func(path, key string, body any) map[string]any {
		posts++
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, "POST", st.HTTPURL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", fmt.Sprint("k", posts))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %v %v", path, resp.StatusCode, out, err)
		}
		return out
	}
	var (
		mu    sync.Mutex
		reads []string
	)
	phone := newDevice(t, st, "ann", "phone").dial(t)
	newDevice(t, st, "ann", "tablet").dial(t, func(o *Options) {
		o.OnAlertsRead = func(conv string, upTo, inboxSeq int64) {
			mu.Lock()
			reads = append(reads, fmt.Sprintf("%s %d %d", conv, upTo, inboxSeq))
			mu.Unlock()
		}
	})
	key := post("/v1/apps", devstack.DefaultAdminKey, map[string]any{"name": "ops", "allowUsers": []string{"ann"}})["key"].(string)
	post("/v1/messages", key, map[string]any{"to": []string{"ann"}, "title": "one", "body": ""})
	post("/v1/messages", key, map[string]any{"to": []string{"ann"}, "title": "two", "body": ""})
	got := collect(t, phone, 2, 10*time.Second)
	first, second := got[0], got[1]
	summary := func() ConversationSummary {
		sum, err := phone.Summary(ctx)
		if err != nil || len(sum) != 1 {
			t.Fatalf("summary %+v, %v", sum, err)
		}
		return sum[0]
	}
	if err := phone.MarkAlertsRead(ctx, "a:ops", first.ConvSeq, first.Seq); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("a:ops %d %d", first.ConvSeq, first.Seq)
	waitFor(t, "the tablet told", func() bool { mu.Lock(); defer mu.Unlock(); return len(reads) == 1 })
	if s := summary(); reads[0] != want || s.ReadSeq != first.Seq || s.Unread != 1 {
		t.Fatalf("after reading the first alert: tablet told %q (want %q), summary %+v", reads[0], want, s)
	}
	if err := phone.MarkAlertsRead(ctx, "a:ops", second.ConvSeq, second.Seq); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second read", func() bool { s := summary(); return s.ReadSeq == second.Seq && s.Unread == 0 })
}

// A sync whose invocation fails (the server's internal error frame, with
// the sync's ref) is asked again a second later: an inbox sync not only
// once it counts as unanswered (ResendAfter), a group's not only after
// groupSyncRetry. Until the thirty-seventh session a sync's error frame
// named no frame: the SDK wrote its acks and reads again instead, and
// the sync waited.
func TestASyncThatFailedIsAskedAgainInASecond(t *testing.T) {
	t.Parallel()
	const resendAfter = 30 * time.Second
	var inboxFailed, groupFailed atomic.Bool
	st := startStackWith(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}, Configure: func(fn string, h *handler.Deps) {
		if fn == "SyncFunction" {
			h.Inbox = pageFailsOnce{Inbox: h.Inbox, user: "bob", failed: &inboxFailed}
			h.GroupLogs = groupPageFailsOnce{GroupLogs: h.GroupLogs, user: "bob", failed: &groupFailed}
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	groupsWithAMessage(ctx, t, alice, 1, "bob")
	if _, err := alice.Send(ctx, "bob", json.RawMessage(`"direct"`)); err != nil {
		t.Fatal(err)
	}
	// Each sync's failure and the next sync of its kind written after it.
	var mu sync.Mutex
	failedAt := map[string]time.Time{} // "is" or "gs" → when its error came
	again := map[string]time.Duration{}
	kind := func(ref string) string { return ref[:min(2, len(ref))] }
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.ResendAfter = resendAfter
		o.Dialer = func(ctx context.Context, url string, h http.Header) (Conn, error) {
			c, err := WebSocket(ctx, url, h)
			if err != nil {
				return nil, err
			}
			return watchedConn{Conn: c, seen: func(b []byte) {
				var e wire.Error
				if frameType(b) == wire.TypeError && json.Unmarshal(b, &e) == nil && e.Code == wire.CodeInternal && isSyncRef(e.Ref) {
					mu.Lock()
					failedAt[kind(e.Ref)] = time.Now()
					mu.Unlock()
				}
			}, wrote: func(b []byte) {
				var f wire.Sync
				if json.Unmarshal(b, &f) != nil || f.Action != wire.ActionSync {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if at, ok := failedAt[kind(f.Ref)]; ok && again[kind(f.Ref)] == 0 {
					again[kind(f.Ref)] = time.Since(at)
				}
			}}, nil
		}
	})
	collect(t, bob, 2, time.Minute)
	if !inboxFailed.Load() || !groupFailed.Load() {
		t.Fatalf("the test did not run as planned: an inbox page failed %v, a group page failed %v", inboxFailed.Load(), groupFailed.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	// Half of what the sync would otherwise have waited: a second late
	// is a loaded machine, ten or thirty is the old way.
	for k, most := range map[string]time.Duration{inboxSyncRef: resendAfter / 2, groupSyncRef: groupSyncRetry / 2} {
		if d, ok := again[k]; !ok || d > most {
			t.Errorf("the %s sync that failed was asked again %s after its error (asked: %v), want within %s", k, d.Round(time.Millisecond), ok, most)
		}
	}
}

// pageFailsOnce fails user's first inbox page (the sync's invocation
// fails: the server answers internal, with the sync's ref).
type pageFailsOnce struct {
	handler.Inbox
	user   im.UserID
	failed *atomic.Bool
}

func (p pageFailsOnce) Page(ctx context.Context, u im.UserID, cursor int64, limit int, size func(im.Entry) int) (im.Page, error) {
	if u == p.user && p.failed.CompareAndSwap(false, true) {
		return im.Page{}, errors.New("injected: the inbox page read failed")
	}
	return p.Inbox.Page(ctx, u, cursor, limit, size)
}

// groupPageFailsOnce fails user's first group page likewise.
type groupPageFailsOnce struct {
	handler.GroupLogs
	user   im.UserID
	failed *atomic.Bool
}

func (p groupPageFailsOnce) GroupPage(ctx context.Context, c im.ConversationID, u im.UserID, cursor int64, limit int, size func(im.Message) int) (im.GroupPage, error) {
	if u == p.user && p.failed.CompareAndSwap(false, true) {
		return im.GroupPage{}, errors.New("injected: the group page read failed")
	}
	return p.GroupLogs.GroupPage(ctx, c, u, cursor, limit, size)
}

// An app that asks for a create again itself (its call gave up before the
// answer) names the group once: CreateGroupWithID with the same id is
// answered as the first, and the group has its members once.
func TestACreateTheAppAsksAgainWithItsIDMakesOneGroup(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	id := NewGroupID()
	first, err := alice.CreateGroupWithID(ctx, id, "Ops", "bob", "carol")
	if err != nil || first.ConversationID != id || first.Count != 3 {
		t.Fatalf("create %s: %+v, %v", id, first, err)
	}
	again, err := alice.CreateGroupWithID(ctx, id, "Ops", "bob", "carol")
	if err != nil || again.ConversationID != id || again.Count != 3 {
		t.Fatalf("the same create asked again: %+v, %v; want it answered as the first", again, err)
	}
	if other := NewGroupID(); other == id || !strings.HasPrefix(other, "g:") {
		t.Fatalf("NewGroupID made %q after %q", other, id)
	}
}
