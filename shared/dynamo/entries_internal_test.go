package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/memdyn"
)

// Issue 12: a 1 KB body was copied into the conversation log and into every
// inbox (two write units per inbox, doubled by the transaction, and a month
// of storage each). Entries now reference the log; pages and redelivery
// still hand out whole messages.
func TestInboxEntriesReferenceTheLogAndReadBackWhole(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	// Three messages from alice, one from carol, then six more from alice:
	// the page reads alice's (dense) with a range Query, carol's with a
	// batch read.
	for i := range 10 {
		from := im.UserID("alice")
		if i == 3 {
			from = "carol"
		}
		if _, err := st.Send(ctx, im.Draft{From: from, ClientMsgID: fmt.Sprint(i), Conversation: im.Direct(from, "bob"), Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, entrySK(2)), ConsistentRead: aws.Bool(true)})
		if err != nil || out.Item == nil {
			t.Fatalf("entry %s#2: %v", u, err)
		}
		if _, ok := out.Item["body"]; ok {
			t.Errorf("%s's entry #2 carries the body; it should reference the log (conversation %s #%d)", u, getS(out.Item, attrConv), getN(out.Item, "cseq"))
		}
	}
	p, err := st.Page(ctx, "bob", 0, 100, func(e im.Entry) int { return len(e.Message.Body) })
	if err != nil || len(p.Entries) != 10 {
		t.Fatalf("page = %+v, %v", p, err)
	}
	for i, e := range p.Entries {
		if want := fmt.Sprintf(`{"n":%d}`, i); string(e.Message.Body) != want || e.Seq != int64(i+1) {
			t.Errorf("entry %d = seq %d cseq %d body %s, want body %s", i, e.Seq, e.Message.ConvSeq, e.Message.Body, want)
		}
	}
	e, err := st.Entry(ctx, "alice", 3)
	if err != nil || string(e.Message.Body) != `{"n":2}` || e.Message.From != "alice" || e.Message.ConvSeq != 3 {
		t.Fatalf("entry alice#3 = %+v, %v", e, err)
	}
}

// A stack upgraded in place keeps the entries written before the change
// (they carry their body) and reads them as they are, beside new ones.
func TestEntriesThatCarryTheirBodyStillRead(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	old := entryItem("bob", im.Entry{Seq: 1, Message: im.Message{ID: "m-old", Conversation: im.Direct("carol", "bob"), ConvSeq: 7, From: "carol", SentAt: now}}, n(now.Add(time.Hour).Unix()))
	old["body"] = s(`"from before"`)
	head := map[string]types.AttributeValue{attrUser: s("bob"), attrSK: s(skHead), attrSeq: n(1), attrEpoch: s("e1")}
	for _, item := range []map[string]types.AttributeValue{old, head} {
		if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Inbox), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: "new", Conversation: im.Direct("alice", "bob"), Body: []byte(`"after"`)}, now); err != nil {
		t.Fatal(err)
	}
	p, err := st.Page(ctx, "bob", 0, 100, func(e im.Entry) int { return len(e.Message.Body) })
	if err != nil || len(p.Entries) != 2 || string(p.Entries[0].Message.Body) != `"from before"` || string(p.Entries[1].Message.Body) != `"after"` {
		t.Fatalf("page = %+v, %v", p, err)
	}
	if e, err := st.Entry(ctx, "bob", 1); err != nil || string(e.Message.Body) != `"from before"` {
		t.Fatalf("entry bob#1 = %+v, %v", e, err)
	}
}

// An entry whose log item is gone reads as expired when the entry itself
// is past retention (both expired, the log reaped first): a page skips it —
// a whole page of them included — and says it is truncated; redelivery
// finds it not found. A live entry whose log item is missing is an error,
// never a silently skipped message.
func TestEntriesWhoseLogItemIsGoneReadAsExpiredOnlyPastRetention(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	c := im.Direct("alice", "bob")
	for i := range 6 {
		at := now
		if i < 4 {
			at = now.Add(-st.Retention - time.Hour) // expired an hour ago
		}
		if _, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: fmt.Sprint(i), Conversation: c, Body: []byte(`"x"`)}, at); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(cseq int64) {
		t.Helper()
		if _, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(c, convSK(cseq))}); err != nil {
			t.Fatal(err)
		}
	}
	for cseq := int64(1); cseq <= 4; cseq++ {
		gone(cseq)
	}
	p, err := st.Page(ctx, "bob", 0, 2, func(e im.Entry) int { return len(e.Message.Body) })
	if err != nil || !p.Truncated || p.FirstSeq != 5 || len(p.Entries) != 2 || p.Entries[0].Seq != 5 || p.Next != 6 || p.More {
		t.Fatalf("page = truncated %v first %d entries %d next %d more %v, %v", p.Truncated, p.FirstSeq, len(p.Entries), p.Next, p.More, err)
	}
	if _, err := st.Entry(ctx, "bob", 2); !errors.Is(err, im.ErrNotFound) {
		t.Fatalf("entry bob#2 = %v, want not found", err)
	}
	gone(6)
	if p, err := st.Page(ctx, "bob", 4, 10, func(e im.Entry) int { return len(e.Message.Body) }); err == nil {
		t.Fatalf("page over a live entry without its log item = %+v, want an error", p)
	}
	if _, err := st.Entry(ctx, "bob", 6); err == nil || errors.Is(err, im.ErrNotFound) {
		t.Fatalf("entry bob#6 = %v, want an error other than not found", err)
	}
}

// Issue 12: a 1:1 send no longer writes a conversation head item (two write
// units): the sender's conversation index is the head.
func TestDirectSendsWriteNoConversationHeadItem(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	c := im.Direct("alice", "bob")
	for i, from := range []im.UserID{"alice", "bob", "alice"} {
		to := im.UserID("bob")
		if from == "bob" {
			to = "alice"
		}
		m, err := st.Send(ctx, im.Draft{From: from, ClientMsgID: fmt.Sprint(i), Conversation: im.Direct(from, to), Body: []byte(`"x"`)}, now)
		if err != nil || m.Message.ConvSeq != int64(i+1) {
			t.Fatalf("send %d = %+v, %v", i, m, err)
		}
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(c, skHead), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item != nil {
		t.Fatalf("conversation head item = %v, %v; want none", out.Item, err)
	}
	// A stack upgraded in place: a 1:1 conversation started before has a
	// head item (left as it is) and index items at the same convSeq.
	if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Messages), Item: map[string]types.AttributeValue{
		attrConv: s(string(c)), attrSK: s(skHead), attrSeq: n(3), attrEpoch: s("e1"),
	}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Send(ctx, im.Draft{From: "bob", ClientMsgID: "after", Conversation: c, Body: []byte(`"y"`)}, now); err != nil || m.Message.ConvSeq != 4 {
		t.Fatalf("send after the upgrade = %+v, %v; want convSeq 4", m, err)
	}
}

// headItemSeq reads the seq on u's head item (-1: no item).
func headItemSeq(t *testing.T, st *Store, u im.UserID) int64 {
	t.Helper()
	out, err := st.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: inboxKey(u, skHead), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return -1
	}
	return getN(out.Item, attrSeq)
}

// Issue 12: an append no longer updates the inbox head item (two write
// units per inbox): the newest entry is the head. The head item is written
// once, by the first append to an inbox never read, for its epoch.
func TestAppendsLeaveTheHeadItemAlone(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	for i := range 5 {
		if _, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: fmt.Sprint(i), Conversation: im.Direct("alice", "bob"), Body: []byte(`"x"`)}, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		if got := headItemSeq(t, st, u); got != 0 {
			t.Errorf("%s's head item seq = %d, want 0 (created once, never advanced)", u, got)
		}
		if head, epoch, err := st.Head(ctx, u); err != nil || head != 5 || epoch == "" {
			t.Errorf("%s's head = %d %q, %v; want 5 and an epoch", u, head, epoch, err)
		}
	}
}

// When the newest entries expired (reaped, or near their expiry), the head
// is read from the conversation index and the next append continues after
// it: no seq is ever allocated twice, whatever expired.
func TestTheHeadOutlivesExpiredEntries(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	send := func(from, to im.UserID, id string, at time.Time) im.Stored {
		t.Helper()
		m, err := st.Send(ctx, im.Draft{From: from, ClientMsgID: id, Conversation: im.Direct(from, to), Body: []byte(`"x"`)}, at)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	old := now.Add(-st.Retention - time.Hour)
	send("alice", "bob", "a1", old)
	send("carol", "bob", "c1", old)
	send("alice", "bob", "a2", old) // bob #3, alice #2
	// Past retention, not yet reaped: the newest entry is cold.
	if head, _, err := st.Head(ctx, "bob"); err != nil || head != 3 {
		t.Fatalf("bob's head with expired entries = %d, %v; want 3", head, err)
	}
	if n, err := st.ExpireDue(ctx, "bob", now); err != nil || n != 3 {
		t.Fatalf("expired %d, %v", n, err)
	}
	if head, _, err := st.Head(ctx, "bob"); err != nil || head != 3 {
		t.Fatalf("bob's head with every entry reaped = %d, %v; want 3", head, err)
	}
	if m := send("carol", "bob", "c2", now); m.Inboxed["bob"] != 4 {
		t.Fatalf("bob's next entry = #%d, want #4", m.Inboxed["bob"])
	}
	// Near its expiry (inside the margin) counts as expired too.
	near := now.Add(-st.Retention + st.warmMargin()/2)
	send("dave", "erin", "d1", near)
	send("dave", "erin", "d2", near)
	if m := send("dave", "erin", "d3", now); m.Inboxed["erin"] != 3 {
		t.Fatalf("erin's entry after two near expiry = #%d, want #3", m.Inboxed["erin"])
	}
}

// An alert entry may expire before older entries (ttlSeconds): its append
// raises the head item's floor, so its seq is not handed out again once it
// is reaped while the older entries live on.
func TestAShortLivedTopEntryIsNotReallocated(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	if _, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: "1", Conversation: im.Direct("alice", "bob"), Body: []byte(`"x"`)}, now); err != nil {
		t.Fatal(err)
	}
	alert := im.Message{ID: "alert-1", Conversation: "a:pager", ConvSeq: 1, From: "app:pager", Body: []byte(`"disk full"`), SentAt: now}
	seq, err := st.AppendInbox(ctx, "bob", alert, time.Hour, now)
	if err != nil || seq != 2 {
		t.Fatalf("alert appended at #%d, %v; want #2", seq, err)
	}
	if got := headItemSeq(t, st, "bob"); got != 2 {
		t.Fatalf("head item seq after a short-lived entry = %d, want 2", got)
	}
	if err := st.ExpireEntry(ctx, "bob", 2); err != nil { // TTL reaps it; #1 lives
		t.Fatal(err)
	}
	m, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: "2", Conversation: im.Direct("alice", "bob"), Body: []byte(`"y"`)}, now)
	if err != nil || m.Inboxed["bob"] != 3 {
		t.Fatalf("next entry = %+v, %v; want bob #3", m.Inboxed, err)
	}
}

// A stack upgraded in place: inboxes written before entries were their own
// heads have a head item at their newest seq and index items without an
// inbox seq. Their head is the head item's, whatever expired since.
func TestHeadsWrittenBeforeTheChangeStillHold(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	for _, item := range []map[string]types.AttributeValue{
		{attrUser: s("bob"), attrSK: s(skHead), attrSeq: n(7), attrEpoch: s("e1")},
		{attrUser: s("bob"), attrSK: s(convIndexSK(im.Direct("alice", "bob"))), attrLast: n(7)},
	} {
		if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Inbox), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	if head, epoch, err := st.Head(ctx, "bob"); err != nil || head != 7 || epoch != "e1" {
		t.Fatalf("head = %d %q, %v; want 7 e1", head, epoch, err)
	}
	m, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: "1", Conversation: im.Direct("alice", "bob"), Body: []byte(`"x"`)}, now)
	// (Its convSeq is 1 in transaction mode, which reads the sender's
	// index, and 8 in claim mode, which reads both participants'.)
	if err != nil || m.Inboxed["bob"] != 8 {
		t.Fatalf("send = %+v, %v; want bob #8", m, err)
	}
}

// A claim not yet placed (AppendGroup: claim, then put) does not count in
// a head read from the conversation index (an inbox without entries): an
// append above it would leave a gap readers could pass before the claim's
// entry arrived. The next append takes that seq; the claim moves above it.
func TestAnUnplacedClaimIsNoHeadForAnEmptyInbox(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	claim := map[string]types.AttributeValue{attrUser: s("bob"), attrSK: s(convIndexSK(im.Group("g1"))), attrLast: n(1), attrInboxSeq: n(1), "lastAt": n(now.UnixMilli())}
	if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Inbox), Item: claim}); err != nil {
		t.Fatal(err)
	}
	if head, _, err := st.Head(ctx, "bob"); err != nil || head != 0 {
		t.Fatalf("head = %d, %v; want 0 (the claim's entry is not there)", head, err)
	}
	m, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: "1", Conversation: im.Direct("alice", "bob"), Body: []byte(`"x"`)}, now)
	if err != nil || m.Inboxed["bob"] != 1 {
		t.Fatalf("send = %+v, %v; want bob #1, not above the unplaced claim", m.Inboxed, err)
	}
	// An old claim's entry may have been reaped: it counts.
	old := map[string]types.AttributeValue{attrUser: s("carol"), attrSK: s(convIndexSK(im.Group("g1"))), attrLast: n(5), attrInboxSeq: n(5), "lastAt": n(now.Add(-st.Retention).UnixMilli())}
	if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Inbox), Item: old}); err != nil {
		t.Fatal(err)
	}
	if head, _, err := st.Head(ctx, "carol"); err != nil || head != 5 {
		t.Fatalf("carol's head = %d, %v; want 5 (an entry that old may have expired)", head, err)
	}
}

// Entries stored before they referenced the log carry their body, so a
// span of them can pass DynamoDB's 1 MB a Query page holds before the
// page's Limit: the span reads follow LastEvaluatedKey and never take a
// page cut at 1 MB for the end of the span (alert callbacks beyond the
// cut would be lost so: an ack's newest entries, a catch-up job's rest);
// nor does a read by convSeq alone in an app log of large alerts. memdyn
// cuts pages at 1 MB as DynamoDB does; minidyn does not.
func TestSpanReadsFollowPagesCutAtOneMegabyte(t *testing.T) {
	t.Parallel()
	st := testStoreOn(t, memdyn.New())
	ctx, now := context.Background(), time.Now()
	body := s(`"` + strings.Repeat("x", 8000) + `"`)
	const last = 300
	var alerts []im.MessageID
	for seq := int64(1); seq <= last; seq++ {
		m := im.Message{ID: im.MessageID(fmt.Sprint("m", seq)), Conversation: im.Direct("ann", "bob"), ConvSeq: seq, From: "bob", SentAt: now}
		if seq == 1 || seq == 150 || seq == last {
			m.ID, m.Conversation, m.From = im.MessageID(fmt.Sprint("alert", seq)), "a:ops", "app.ops"
			alerts = append(alerts, m.ID)
		}
		item := entryItem("ann", im.Entry{Seq: seq, Message: m}, n(now.Add(time.Hour).Unix()))
		item["body"] = body
		if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Inbox), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	var got []im.MessageID
	pages := 0
	for after := int64(0); after < last; pages++ {
		ids, reached, err := st.AlertsInSpan(ctx, "ann", "", after, last, 1000)
		if err != nil || reached <= after {
			t.Fatalf("a page from %d: reached %d, %v", after, reached, err)
		}
		got, after = append(got, ids...), reached
	}
	if !slices.Equal(got, alerts) || pages < 2 {
		t.Fatalf("alerts in (0, %d]: %v in %d pages; want %v in pages of at most 1 MB", last, got, pages, alerts)
	}
	refs, err := st.EntryRefs(ctx, "ann", 0, last, 200)
	if err != nil || len(refs) != 200 || refs[199].Seq != 200 {
		t.Fatalf("EntryRefs of (0, %d], 200 at most: %d refs, %v; want seqs 1 to 200", last, len(refs), err)
	}
	if in, err := st.alertsIn(ctx, "ann", "a:ops", 0, last, 5000); err != nil || len(in) != 3 || !in[alerts[1]] || !in[alerts[2]] {
		t.Fatalf("alerts read in (0, %d]: %v, %v; want all three", last, in, err)
	}
	// The log of an app whose alerts have large bodies: a read by convSeq
	// alone names them from the newest 200 convSeqs (ConversationIDs).
	for seq := int64(1); seq <= last; seq++ {
		item := map[string]types.AttributeValue{attrConv: s("a:crm"), attrSK: s(convSK(seq)), attrCSeq: n(seq), attrMID: s(fmt.Sprint("crm", seq)), "body": body}
		if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Messages), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := st.ConversationIDs(ctx, "a:crm", last-200, last, 200); err != nil || len(ids) != 200 || string(ids[last]) != fmt.Sprint("crm", last) {
		t.Fatalf("ConversationIDs of (%d, %d]: %d ids, %v; want 200, the newest crm%d", last-200, last, len(ids), err, last)
	}
}
