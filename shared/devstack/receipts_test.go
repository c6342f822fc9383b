package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/testkit"
	"github.com/signet-im/signet/shared/wire"
)

type receipt struct {
	Kind           string `json:"kind"`
	ConversationID string `json:"conversationId"`
	UserID         string `json:"userId"`
	UpTo           int64  `json:"upTo"`
}

// nextReceipt waits for a receipt frame and decodes it from the raw stream.
func nextReceipt(t *testing.T, c *wsClient, kind string) receipt {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case r := <-c.raw:
			if !strings.Contains(r, `"type":"receipt"`) {
				continue
			}
			var rc receipt
			if err := json.Unmarshal([]byte(r), &rc); err != nil {
				t.Fatal(err)
			}
			if rc.Kind == kind {
				return rc
			}
		case <-deadline:
			t.Fatalf("no %s receipt", kind)
		}
	}
}

// Receipts are watermarks: one per ack or read action and conversation,
// never one per message, and they only move forward.
func TestOneToOneReceiptsAreWatermarks(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	alice := dial(t, st, "alice", "laptop")
	bob := dial(t, st, "bob", "phone")
	for i := range 3 {
		alice.send(fmt.Sprintf("c-%d", i), "bob", i)
		alice.next("sent", 5*time.Second)
	}
	// Pushes may arrive in any order ("sent" is posted before each push):
	// ack the highest.
	var last frame
	for range 3 {
		if f := bob.next("message", 5*time.Second); f.Seq > last.Seq {
			last = f
		}
	}
	bob.write(map[string]any{"action": "ack", "upTo": last.Seq}) // one cumulative ack
	conv := string(im.Direct("alice", "bob"))
	if r := nextReceipt(t, alice, "delivered"); r.ConversationID != conv || r.UserID != "bob" || r.UpTo != 3 {
		t.Fatalf("delivered receipt = %+v", r)
	}
	bob.write(map[string]any{"action": "read", "conversationId": conv, "upTo": 2})
	if r := nextReceipt(t, alice, "read"); r.UpTo != 2 || r.UserID != "bob" {
		t.Fatalf("read receipt = %+v", r)
	}
	// Re-acking and reading lower send nothing more.
	bob.write(map[string]any{"action": "ack", "upTo": last.Seq})
	bob.write(map[string]any{"action": "read", "conversationId": conv, "upTo": 1})
	time.Sleep(500 * time.Millisecond)
	for len(alice.raw) > 0 {
		if r := <-alice.raw; strings.Contains(r, `"type":"receipt"`) {
			t.Fatalf("receipt for a no-op: %s", r)
		}
	}
	// bob's own messages acked by bob do not produce receipts to alice.
	bob.send("b-1", "alice", "ok")
	own := bob.next("sent", 5*time.Second) // carries bob's own entry
	bob.write(map[string]any{"action": "ack", "upTo": own.Seq})
	time.Sleep(300 * time.Millisecond)
	for len(alice.raw) > 0 {
		if r := <-alice.raw; strings.Contains(r, `"kind":"delivered"`) && strings.Contains(r, `"upTo":4`) {
			t.Fatalf("receipt for the reader's own message: %s", r)
		}
	}
}

// A 1:1 conversation's delivered watermark comes from the device cursors
// (issue 12: the ack writes none): the sender gets a receipt when one of the
// peer's devices acks beyond what the others had, none when a device acks
// what another one already did, and "receipts" answers from the cursors.
func TestDirectDeliveredComesFromTheDeviceCursors(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	alice := dial(t, st, "alice", "laptop")
	phone := dial(t, st, "bob", "phone")
	tablet := dial(t, st, "bob", "tablet")
	for i := range 2 {
		alice.send(fmt.Sprintf("c-%d", i), "bob", i)
		alice.next("sent", 5*time.Second)
	}
	conv := string(im.Direct("alice", "bob"))
	seqOf := map[int64]int64{} // convSeq → bob's inbox seq
	for range 2 {
		f := phone.next("message", 5*time.Second)
		var m struct {
			ConvSeq int64 `json:"convSeq"`
		}
		if err := json.Unmarshal(f.Message, &m); err != nil {
			t.Fatal(err)
		}
		seqOf[m.ConvSeq] = f.Seq
		tablet.next("message", 5*time.Second)
	}
	delivered := func(convSeq int64) []string {
		t.Helper()
		var rc wire.ReceiptsAnswer
		alice.request(map[string]any{"action": "receipts", "conversationId": conv, "convSeq": convSeq}, &rc)
		return rc.DeliveredBy
	}
	if got := delivered(1); len(got) != 0 {
		t.Fatalf("nothing acked: message 1 delivered to %v", got)
	}
	phone.write(map[string]any{"action": "ack", "upTo": seqOf[1]})
	if r := nextReceipt(t, alice, "delivered"); r.ConversationID != conv || r.UserID != "bob" || r.UpTo != 1 {
		t.Fatalf("delivered receipt = %+v", r)
	}
	if got1, got2 := delivered(1), delivered(2); len(got1) != 1 || got1[0] != "bob" || len(got2) != 0 {
		t.Fatalf("phone acked message 1: delivered to %v and %v", got1, got2)
	}
	tablet.write(map[string]any{"action": "ack", "upTo": seqOf[2]})
	if r := nextReceipt(t, alice, "delivered"); r.UpTo != 2 {
		t.Fatalf("tablet acked message 2: receipt %+v", r)
	}
	if got := delivered(2); len(got) != 1 || got[0] != "bob" {
		t.Fatalf("message 2 delivered to %v", got)
	}
	// The phone acking what the tablet already did tells alice nothing new.
	phone.write(map[string]any{"action": "ack", "upTo": seqOf[2]})
	time.Sleep(500 * time.Millisecond)
	for len(alice.raw) > 0 {
		if r := <-alice.raw; strings.Contains(r, `"kind":"delivered"`) {
			t.Fatalf("a second device's ack of what was delivered: %s", r)
		}
	}
	// bob's summary shows the conversation delivered up to message 2.
	var page wire.SummaryPage
	phone.request(map[string]any{"action": "summary"}, &page)
	if len(page.Conversations) != 1 || page.Conversations[0].Delivered != 2 {
		t.Fatalf("summary %+v", page.Conversations)
	}
	// Both devices acking a message at once: each sees the other's cursor,
	// and the receipt is still sent (by the one that acked first).
	for convSeq := int64(3); convSeq <= 6; convSeq++ {
		alice.send(fmt.Sprintf("c-%d", convSeq), "bob", convSeq)
		alice.next("sent", 5*time.Second)
		seq := phone.next("message", 5*time.Second).Seq
		tablet.next("message", 5*time.Second)
		phone.write(map[string]any{"action": "ack", "upTo": seq})
		tablet.write(map[string]any{"action": "ack", "upTo": seq})
		// A receipt may come twice (both devices sent it), and a repeat of
		// an earlier one may come late (its ack's handler was slow; CI saw
		// message 3's at message 6): one below convSeq is skipped, the new
		// one must come, and none may claim more than was sent.
		for r := nextReceipt(t, alice, "delivered"); r.UpTo != convSeq; r = nextReceipt(t, alice, "delivered") {
			if r.UpTo > convSeq || r.UpTo < 1 {
				t.Fatalf("both devices acked message %d: receipt %+v", convSeq, r)
			}
		}
	}
}

// historyPages pages back through conv from the newest message with the
// given limit and returns the convSeqs in order and the raw pages.
func historyPages(t *testing.T, c *wsClient, conv string, limit int) (seqs []int64, pages []string) {
	t.Helper()
	before := int64(0)
	for {
		c.write(map[string]any{"action": "history", "conversationId": conv, "before": before, "limit": limit})
		var raw string
		for raw == "" {
			select {
			case r := <-c.raw:
				if strings.Contains(r, `"type":"history"`) {
					raw = r
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no history page %d within 30s (an oversize page is not delivered)", len(pages))
			}
		}
		pages = append(pages, raw)
		var p struct {
			Messages []struct {
				ConvSeq int64 `json:"convSeq"`
			} `json:"messages"`
			HasMore bool  `json:"hasMore"`
			Before  int64 `json:"before"`
		}
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			t.Fatal(err)
		}
		var page []int64
		for _, m := range p.Messages {
			page = append(page, m.ConvSeq)
		}
		seqs = append(page, seqs...)
		if !p.HasMore {
			return seqs, pages
		}
		before = p.Before
	}
}

// A history page once carried 12 messages of 15 KB: 181,882 bytes, over
// API Gateway's 128 KB message limit. Pages of large messages must fit.
func TestHistoryPagesOfLargeMessagesFitTheGatewayLimit(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	alice := dial(t, st, "alice", "laptop")
	const n = 12
	big := strings.Repeat("x", im.MaxBodyBytes-100)
	for i := 1; i <= n; i++ {
		alice.send(fmt.Sprintf("big-%d", i), "bob", fmt.Sprintf("%02d %s", i, big))
		alice.next("sent", 30*time.Second)
	}
	got, pages := historyPages(t, alice, string(im.Direct("alice", "bob")), 100)
	for i, p := range pages {
		if len(p) > 128<<10 {
			t.Errorf("history page %d is %d bytes, over the 128 KB limit", i, len(p))
		}
	}
	if fmt.Sprint(got) != "[1 2 3 4 5 6 7 8 9 10 11 12]" || len(pages) < 2 {
		t.Fatalf("history = %v in %d pages", got, len(pages))
	}
}

func TestHistoryPagesBackThroughTheConversation(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	alice := dial(t, st, "alice", "laptop")
	for i := 1; i <= 7; i++ {
		alice.send(fmt.Sprintf("c-%d", i), "bob", i)
		alice.next("sent", 5*time.Second)
	}
	conv := string(im.Direct("alice", "bob"))
	got, _ := historyPages(t, alice, conv, 3)
	if fmt.Sprint(got) != "[1 2 3 4 5 6 7]" {
		t.Fatalf("history = %v", got)
	}
	for _, tc := range []struct {
		frame string
		code  wire.Code
	}{
		{`{"action":"history","conversationId":"d:bob:carol"}`, wire.CodeForbidden},
		{`{"action":"history","conversationId":"a:monitoring"}`, wire.CodeBadRequest},
		{`{"action":"history","conversationId":"` + conv + `","limit":101}`, wire.CodeBadRequest},
		{`{"action":"history"}`, wire.CodeBadRequest},
	} {
		alice.write(tc.frame)
		if e := alice.next("error", 5*time.Second); e.Code != string(tc.code) {
			t.Errorf("%s: %+v", tc.frame, e)
		}
	}
}

// A read whose first invocation failed after storing the watermark told
// no one; written again it moves nothing, and tells no one either (a read
// that moves nothing is ignored) unless it says "again" — as the SDKs'
// reads written again after an error do: then the peer gets the read
// receipt and the user's other devices their read frame. Not for a read
// below the watermark: a later read moved it, and told them.
func TestAReadWrittenAgainAfterAFailedInvocationSendsItsReceiptWhenItSaysAgain(t *testing.T) {
	t.Parallel()
	var crashed atomic.Bool
	st := startStack(t, devstack.Options{Configure: testkit.On("ReadFunction", func(h *handler.Deps) {
		h.Reads = testkit.ReadStoredThenFailed{Reads: h.Reads, Failed: &crashed}
	})})
	alice := dial(t, st, "alice", "laptop")
	bob, bobTablet := dial(t, st, "bob", "phone"), dial(t, st, "bob", "tablet")
	alice.send("r-1", "bob", "approve?")
	alice.next("sent", 10*time.Second)
	bob.next("message", 10*time.Second)
	conv := string(im.Direct("alice", "bob"))
	read := map[string]any{"action": "read", "conversationId": conv, "upTo": 1}
	bob.write(read)
	bob.next("error", 10*time.Second) // the failed invocation's answer
	if !crashed.Load() {
		t.Fatal("the read's invocation did not fail")
	}
	if mark, err := st.Store.ReadWatermark(context.Background(), "bob", im.ConversationID(conv)); err != nil || mark.UpTo != 1 {
		t.Fatalf("bob's watermark after the failed invocation: %+v, %v; want 1 (stored before the crash)", mark, err)
	}
	bob.write(read) // written again by a client that does not say so
	alice.quiet("receipt", time.Second)
	bobTablet.quiet("read", 300*time.Millisecond)
	read["again"] = true
	bob.write(read)
	if rc := alice.next("receipt", 10*time.Second); rc.Kind != wire.ReceiptRead || rc.UpTo != 1 || rc.UserID != "bob" || rc.Conversation != conv {
		t.Fatalf("alice's receipt: %+v; want bob's read up to 1", rc)
	}
	if sync := bobTablet.next("read", 10*time.Second); sync.Conversation != conv || sync.UpTo != 1 {
		t.Fatalf("bob's tablet: %+v; want the read up to 1", sync)
	}
	// Below the watermark, "again" tells no one.
	alice.send("r-2", "bob", "and this?")
	alice.next("sent", 10*time.Second)
	bob.write(map[string]any{"action": "read", "conversationId": conv, "upTo": 2})
	if rc := alice.next("receipt", 10*time.Second); rc.UpTo != 2 {
		t.Fatalf("alice's receipt: %+v; want bob's read up to 2", rc)
	}
	bobTablet.next("read", 10*time.Second)
	bob.write(read) // upTo 1, again
	alice.quiet("receipt", time.Second)
	bobTablet.quiet("read", 300*time.Millisecond)
}

// The same for an ack: one whose first invocation failed after moving the
// cursor sent no delivered receipt; written again it moves nothing and
// tells no one unless it says "again" — then the sender gets the receipt,
// once: written again after that, it tells no one again. Not for an ack
// below the cursor: a later ack moved it, and told them.
func TestAnAckWrittenAgainAfterAFailedInvocationSendsItsReceiptWhenItSaysAgain(t *testing.T) {
	t.Parallel()
	var failed atomic.Bool
	st := startStack(t, devstack.Options{Configure: testkit.On("AckFunction", func(h *handler.Deps) {
		h.Inbox = testkit.AckStoredThenFailed{Inbox: h.Inbox, Failed: &failed}
	})})
	alice := dial(t, st, "alice", "laptop")
	bob := dial(t, st, "bob", "phone")
	alice.send("a-1", "bob", "approve?")
	alice.next("sent", 10*time.Second)
	m := bob.next("message", 10*time.Second)
	ack := ackThatFails(t, bob, m.Seq, &failed)
	if dev, err := st.Store.Device(context.Background(), "bob", "phone"); err != nil || dev.Acked != m.Seq {
		t.Fatalf("bob's cursor after the failed invocation: %d, %v; want %d (moved before the failure)", dev.Acked, err, m.Seq)
	}
	bob.write(ack) // written again by a client that does not say so
	alice.quiet("receipt", time.Second)
	ack["again"] = true
	bob.write(ack)
	conv := string(im.Direct("alice", "bob"))
	if rc := alice.next("receipt", 10*time.Second); rc.Kind != wire.ReceiptDelivered || rc.UpTo != 1 || rc.UserID != "bob" || rc.Conversation != conv {
		t.Fatalf("alice's receipt: %+v; want bob's delivered up to 1", rc)
	}
	waitFor(t, "bob's ack marked retold", func() bool {
		last, err := st.Store.LastAck(context.Background(), "bob", "phone")
		return err == nil && last.Retold
	})
	bob.write(ack)
	alice.quiet("receipt", time.Second)
	// Below the cursor, "again" tells no one, even inside the range of
	// the ack that moved it there.
	alice.send("a-2", "bob", "and this?")
	alice.next("sent", 10*time.Second)
	m2 := bob.next("message", 10*time.Second)
	alice.send("a-3", "bob", "and that?")
	alice.next("sent", 10*time.Second)
	m3 := bob.next("message", 10*time.Second)
	bob.write(map[string]any{"action": "ack", "upTo": m3.Seq})
	if rc := alice.next("receipt", 10*time.Second); rc.UpTo != 3 {
		t.Fatalf("alice's receipt: %+v; want bob's delivered up to 3", rc)
	}
	bob.write(map[string]any{"action": "ack", "upTo": m2.Seq, "again": true})
	alice.quiet("receipt", time.Second)
}

// The same for an alert: the ack whose first invocation failed after
// moving the cursor wrote no "acked" event to the alert's trace; written
// again with "again" it writes it, once. Written again after its trace
// write failed, it writes it then. Should the cursor item not say it was
// told again (that write failed), the ack written again next reads the
// trace, finds the event and writes none; once the cursor item says so,
// an ack written again reads no trace at all.
func TestAnAckWrittenAgainWritesTheAlertsAckedEventOnce(t *testing.T) {
	t.Parallel()
	var failed, traceFailed, markFailed atomic.Bool
	var traceReads atomic.Int32
	st := startStack(t, devstack.Options{Configure: testkit.On("AckFunction", func(h *handler.Deps) {
		h.Inbox = retoldNotMarked{Inbox: testkit.AckStoredThenFailed{Inbox: h.Inbox, Failed: &failed}, failed: &markFailed}
		h.Traces = countedTraces{TraceReader: h.Traces, reads: &traceReads}
		h.Tracer = traceFailsOnce{Tracer: h.Tracer, failed: &traceFailed}
	})})
	key := createApp(t, st, "monitoring", []string{"ann"}, 100)
	ann := dial(t, st, "ann", "phone")
	r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "disk-1"}, `{"to":["ann"],"title":"disk full","body":"clean up"}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("post: %d %s", r.status, r.raw)
	}
	id := im.MessageID(r.body["messageId"].(string))
	push := ann.next("message", 10*time.Second)
	ack := ackThatFails(t, ann, push.Seq, &failed)
	acked := func() int {
		evs, err := st.Store.Events(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Type == im.EventAcked && e.User == "ann" && e.Device == "phone" {
				n++
			}
		}
		return n
	}
	if n := acked(); n != 0 {
		t.Fatalf("%d acked events after the failed invocation, want none", n)
	}
	ack["again"] = true
	ann.write(ack)
	waitFor(t, "the acked event's failed write", traceFailed.Load)
	ann.write(ack)
	waitFor(t, "ann's acked event", func() bool { return acked() == 1 })
	waitFor(t, "the retold mark's failed write", markFailed.Load)
	ann.write(ack)
	waitFor(t, "the trace read again", func() bool { return traceReads.Load() == 3 })
	ann.quiet("error", time.Second)
	if n := acked(); n != 1 {
		t.Fatalf("%d acked events after the ack was written again three times, want 1", n)
	}
	ann.write(ack)
	ann.quiet("error", time.Second)
	if n, reads := acked(), traceReads.Load(); n != 1 || reads != 3 {
		t.Fatalf("written again a fourth time: %d acked events, %d trace reads; want 1 and 3 (the third marked it retold)", n, reads)
	}
}

// traceFailsOnce is a tracer whose first write fails (setting failed).
type traceFailsOnce struct {
	handler.Tracer
	failed *atomic.Bool
}

// AppendEvents is the store's, failing the first.
func (f traceFailsOnce) AppendEvents(ctx context.Context, events []im.Event) error {
	if f.failed.CompareAndSwap(false, true) {
		return errors.New("the trace table refused the write")
	}
	return f.Tracer.AppendEvents(ctx, events)
}

// retoldNotMarked is an inbox whose first MarkRetold fails (setting
// failed), as an invocation that stopped after telling again.
type retoldNotMarked struct {
	handler.Inbox
	failed *atomic.Bool
}

// MarkRetold is the store's, failing the first.
func (r retoldNotMarked) MarkRetold(ctx context.Context, u im.UserID, d im.DeviceID, upTo int64) error {
	if r.failed.CompareAndSwap(false, true) {
		return errors.New("the invocation failed before marking the ack retold")
	}
	return r.Inbox.MarkRetold(ctx, u, d, upTo)
}

// countedTraces counts the traces read.
type countedTraces struct {
	handler.TraceReader
	reads *atomic.Int32
}

// Events is the store's, counted.
func (c countedTraces) Events(ctx context.Context, id im.MessageID) ([]im.Event, error) {
	c.reads.Add(1)
	return c.TraceReader.Events(ctx, id)
}

// ackThatFails acks c's inbox up to seq in an invocation that fails after
// moving the cursor (testkit.AckStoredThenFailed, which sets failed), and
// returns the ack to write again.
func ackThatFails(t *testing.T, c *wsClient, seq int64, failed *atomic.Bool) map[string]any {
	t.Helper()
	ack := map[string]any{"action": "ack", "upTo": seq}
	c.write(ack)
	c.next("error", 10*time.Second) // the failed invocation's answer
	if !failed.Load() {
		t.Fatal("the ack's invocation did not fail")
	}
	return ack
}
