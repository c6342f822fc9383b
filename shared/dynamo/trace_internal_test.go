package dynamo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/go-cmp/cmp"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/provision"
)

// Issue 12: a trace event was an item of its own (a write unit each, seven
// per 1:1 send). One invocation's events of a message are now one item; the
// items written before that must still read back (a stack upgraded in place).
func TestTraceEventsOfOneCallAreOneItemAndOldItemsStillRead(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	st.tables.Trace = provision.Name("rt", "TraceTable")
	ctx, at := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	id := im.MessageID("m1")
	// An event as the code before packing wrote it: one item, its fields
	// beside the key.
	old := eventFields(im.Event{Type: im.EventCreated, At: at, Function: "send", User: "alice"})
	old["messageId"], old[attrSK], old[attrTTL] = s(string(id)), s("1800000000000#0000#00000000"), n(at.Add(TraceRetention).Unix())
	if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Trace), Item: old}); err != nil {
		t.Fatal(err)
	}
	later := at.Add(time.Millisecond)
	evs := []im.Event{
		{Message: id, Type: im.EventStored, At: later, Function: "send", Detail: "d:alice:bob #1"},
		{Message: id, Type: im.EventInboxed, At: later, Function: "send", User: "bob", Seq: 4},
		{Message: "m2", Type: im.EventCreated, At: later, Function: "send"},
		{Message: id, Type: im.EventPushed, At: later, Function: "send", User: "bob", Device: "phone", Connection: "c1", Seq: 4},
		{Message: id, Type: im.EventRedeliveryScheduled, At: later, Function: "send", User: "bob", Seq: 4, Delay: 5 * time.Second},
	}
	var puts []int
	calls := 0
	st.db = dynamodb.New(st.db.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, countPuts(func(n int) { calls++; puts = append(puts, n) }))
	})
	if err := st.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || len(puts) != 1 || puts[0] != 2 {
		t.Fatalf("%d calls putting %v items; want one call of 2 items (one per message)", calls, puts)
	}
	got, err := st.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]im.Event{{Message: id, Type: im.EventCreated, At: at, Function: "send", User: "alice"}}, evs[0], evs[1], evs[3], evs[4])
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("trace (-want +got):\n%s", diff)
	}
}

// countPuts reports the number of items each BatchWriteItem puts.
func countPuts(f func(n int)) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("countPuts", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if b, ok := in.Parameters.(*dynamodb.BatchWriteItemInput); ok {
				n := 0
				for _, reqs := range b.RequestItems {
					n += len(reqs)
				}
				f(n)
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
	}
}

// Issue 12: an ack wrote an "acked" event per message it covered (a login's
// 200 waiting messages: 200 writes). It now writes one range, and a 1:1
// message's trace derives each device's "acked" event from the first range
// of that device covering the message's seq.
func TestAckedEventsOfDirectMessagesAreDerivedFromAckRanges(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	st.tables.Trace = provision.Name("rt", "TraceTable")
	ctx, t0 := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	id := im.MessageID("m7")
	err := st.AppendEvents(ctx, []im.Event{
		{Message: id, Type: im.EventInboxed, At: t0, Function: "send", User: "alice", Seq: 3},
		{Message: id, Type: im.EventInboxed, At: t0, Function: "send", User: "bob", Seq: 7},
	})
	if err != nil {
		t.Fatal(err)
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, a := range []im.AckRange{
		{User: "bob", Device: "phone", From: 0, UpTo: 6, At: at(1)},    // before the message
		{User: "bob", Device: "phone", From: 6, UpTo: 9, At: at(2)},    // covers seq 7
		{User: "bob", Device: "phone", From: 9, UpTo: 12, At: at(3)},   // after it
		{User: "bob", Device: "laptop", From: 0, UpTo: 40, At: at(4)},  // covers it too
		{User: "alice", Device: "laptop", From: 2, UpTo: 3, At: at(5)}, // the sender's own copy
		{User: "carol", Device: "x", From: 0, UpTo: 100, At: at(6)},    // someone else
	} {
		if err := st.moveAcks(ctx, a.User, a.Device, []im.AckRange{a}); err != nil { // each in a trace item of its own
			t.Fatal(err)
		}
	}
	got, err := st.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var acked []string
	for _, e := range got {
		if e.Type == im.EventAcked {
			acked = append(acked, fmt.Sprintf("%s/%s #%d at +%dms", e.User, e.Device, e.Seq, e.At.Sub(t0).Milliseconds()))
		}
	}
	want := []string{"bob/phone #7 at +2ms", "bob/laptop #7 at +4ms", "alice/laptop #3 at +5ms"}
	if diff := cmp.Diff(want, acked); diff != "" {
		t.Fatalf("acked events (-want +got):\n%s", diff)
	}
}

// Issue 12: a 1:1 send that went as expected and was not sampled writes no
// trace item; its trace is derived from the log, the inboxes and the ack
// ranges, and says what the written one said (who has it where, and when).
func TestTheTraceOfAnUnwrittenDirectSendIsDerivedFromWhatIsStored(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{SendClaim, SendTransaction} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			st := testStore(t)
			st.SendMode = mode
			st.tables.Trace = provision.Name("rt", "TraceTable")
			ctx, t0 := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
			conv := im.Direct("alice", "bob")
			send := func(from im.UserID, cmid string, at time.Time) im.Stored {
				t.Helper()
				s, err := st.Send(ctx, im.Draft{From: from, ClientMsgID: cmid, Conversation: conv, Body: []byte(`{"text":"hi"}`)}, at)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			first := send("alice", "c1", t0)
			send("bob", "c2", t0.Add(time.Second)) // the first is no longer the index's last
			if err := st.moveAcks(ctx, "bob", "phone", []im.AckRange{{User: "bob", Device: "phone", From: 0, UpTo: first.Inboxed["bob"], At: t0.Add(2 * time.Second)}}); err != nil {
				t.Fatal(err)
			}
			got, err := st.Events(ctx, first.Message.ID)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, e := range got {
				lines = append(lines, fmt.Sprintf("%s %s/%s #%d +%dms by %s", e.Type, e.User, e.Device, e.Seq, e.At.Sub(t0).Milliseconds(), e.Function))
			}
			a, b := first.Inboxed["alice"], first.Inboxed["bob"]
			want := []string{
				"created alice/ #0 +0ms by send", "stored / #0 +0ms by send",
				fmt.Sprintf("inboxed alice/ #%d +0ms by send", a), fmt.Sprintf("pushed alice/ #%d +0ms by send", a),
				fmt.Sprintf("inboxed bob/ #%d +0ms by send", b), fmt.Sprintf("pushed bob/ #%d +0ms by send", b),
				fmt.Sprintf("acked bob/phone #%d +2000ms by ack", b),
			}
			if diff := cmp.Diff(want, lines); diff != "" {
				t.Fatalf("derived trace (-want +got):\n%s", diff)
			}

			// A written trace is returned as written, nothing derived twice.
			written := send("alice", "c3", t0.Add(3*time.Second))
			if err := st.AppendEvents(ctx, []im.Event{
				{Message: written.Message.ID, Type: im.EventCreated, At: t0, Function: "send", User: "alice"},
				{Message: written.Message.ID, Type: im.EventStored, At: t0, Function: "send"},
			}); err != nil {
				t.Fatal(err)
			}
			if got, err := st.Events(ctx, written.Message.ID); err != nil || len(got) != 2 {
				t.Fatalf("written trace: %d events (%v), want the 2 written", len(got), err)
			}
			// A located id whose log item holds another message derives nothing.
			c, seq, _ := first.Message.ID.Locate()
			if got, err := st.Events(ctx, im.NewLocatedMessageID(t0, c, seq)); err != nil || len(got) != 0 {
				t.Fatalf("an id not in the log: %d events (%v)", len(got), err)
			}
		})
	}
}

// A device whose cursor moved before ack ranges were kept on its cursor
// item: the first range kept starts at that cursor, not at 0, and every
// range starts where the one before it ended — on the cursor item and in
// the trace item the first nine move to (the newest stays on the cursor
// item: a list there is never emptied).
func TestAckRangesOfAnUpgradedCursorItemStartAtItsCursor(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	st.tables.Trace = provision.Name("rt", "TraceTable")
	ctx, t0 := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	var seqs []int64
	for i := range 12 {
		s, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: fmt.Sprint(i), Conversation: im.Direct("alice", "bob"), Body: []byte(`"hi"`)}, t0)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s.Inboxed["bob"])
	}
	key := inboxKey("bob", deviceSK("phone"))
	if _, _, err := st.advance(ctx, key, "acked", "ackedAt", seqs[2], t0); err != nil { // as the code before wrote it
		t.Fatal(err)
	}
	for i := 3; i < 12; i++ {
		if r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", UpTo: seqs[i], At: t0}); err != nil || r.TraceErr != nil || r.Old != seqs[i-1] {
			t.Fatalf("ack %d: %+v, %v", seqs[i], r, err)
		}
	}
	render := func(rs []im.AckRange) string {
		var b strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&b, "(%d,%d]", r.From, r.UpTo)
		}
		return b.String()
	}
	want := func(from, to int) string { // the ranges of acks seqs[from+1..to]
		var rs []im.AckRange
		for i := from + 1; i <= to; i++ {
			rs = append(rs, im.AckRange{From: seqs[i-1], UpTo: seqs[i]})
		}
		return render(rs)
	}
	dev, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Inbox), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if got := render(ackRanges("bob", "phone", getN(dev.Item, attrAckBase), dev.Item[attrAcks])); got != want(10, 11) {
		t.Fatalf("pending on the cursor item: %s, want %s", got, want(10, 11))
	}
	moved, err := st.db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(st.tables.Trace), KeyConditionExpression: aws.String("messageId = :m"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": s(ackPartition("bob"))}, ConsistentRead: aws.Bool(true),
	})
	if err != nil || len(moved.Items) != 1 {
		t.Fatalf("moved: %d items, %v; want 1", len(moved.Items), err)
	}
	it := moved.Items[0]
	if got := render(ackRanges("bob", "phone", getN(it, attrAckBase), it[attrAcks])); got != want(2, 11) {
		t.Fatalf("moved to the trace: %s, want %s", got, want(2, 11))
	}
}
