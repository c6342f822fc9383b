package dynamo_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
)

// Issue 12: an ack's range for the trace was an item of its own, a second
// write unit per ack. It now goes in the ack's own write of the device's
// cursor item, and every 8 new ranges move to the trace as one item; each 1:1
// message's trace still says when, on which connection and request, each
// device acked it — from the moved items and from the cursor items alike.
func TestAckRangesRideOnTheCursorItemAndMoveToTheTraceEightAtATime(t *testing.T) {
	t.Parallel()
	var tracePuts, inboxUpdates atomic.Int32
	_, st := newStores(t, func(_ context.Context, in any) error {
		switch in := in.(type) {
		case *dynamodb.BatchWriteItemInput:
			for table, reqs := range in.RequestItems {
				if strings.Contains(table, "Trace") {
					tracePuts.Add(int32(len(reqs)))
				}
			}
		case *dynamodb.UpdateItemInput:
			if strings.Contains(*in.TableName, "Inbox") {
				inboxUpdates.Add(1)
			}
		}
		return nil
	})
	ctx, t0 := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	const n = 20
	sent := aliceToBob(t, st, n, t0)
	tracePuts.Store(0)
	inboxUpdates.Store(0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i+1) * time.Second) }
	prev := int64(0)
	for i, s := range sent {
		seq := s.Inboxed["bob"]
		r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", Connection: "conn-1", RequestID: fmt.Sprintf("req-%d", i), UpTo: seq, At: at(i)})
		if err != nil || r.TraceErr != nil || !r.Moved || r.Old != prev {
			t.Fatalf("ack %d of message %d: %+v, %v (want moved from %d)", seq, i, r, err, prev)
		}
		prev = seq
	}
	// 20 acks: 20 cursor writes with their ranges; 2 moves (at the 9th
	// ack and, 8 later, at the 17th), each a trace item and a trim; the
	// 17th and 4 more ranges still on the cursor item.
	if p, u := tracePuts.Load(), inboxUpdates.Load(); p != 2 || u != n+2 {
		t.Fatalf("20 acks wrote %d trace items and %d inbox updates; want 2 and 22", p, u)
	}
	// A second device acks everything at once: one range, pending.
	all := sent[n-1].Inboxed["bob"]
	if r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "laptop", Connection: "conn-2", RequestID: "req-laptop", UpTo: all, At: at(n)}); err != nil || !r.Moved || r.Old != 0 {
		t.Fatalf("laptop's ack: %+v, %v", r, err)
	}
	// A repeated ack moves nothing and records nothing.
	if r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", UpTo: all, At: at(n + 1)}); err != nil || r.Moved {
		t.Fatalf("a repeated ack: %+v, %v", r, err)
	}
	for _, i := range []int{0, 7, 8, 15, 16, 19} { // each side of each move, and pending
		seq := sent[i].Inboxed["bob"]
		want := fmt.Sprintf("[bob/phone #%d +%ds conn-1 req-%d bob/laptop #%d +%ds conn-2 req-laptop]", seq, i+1, i, seq, n+1)
		if got := ackedEvents(t, st, sent[i].Message.ID, t0); got != want {
			t.Fatalf("message %d's acked events: %s\nwant %s", i, got, want)
		}
	}
}

// LastAck is the range of the ack that moved a device's cursor where it
// is — also just after the ranges before it moved to the trace (the 9th
// and 17th acks) — and says so only while that range ends at the cursor:
// an ack written again after a failed invocation sends its delivered
// receipts from it. It is retold once marked so at the cursor, until an
// ack moves the cursor on.
func TestLastAckIsTheRangeThatMovedTheCursorThere(t *testing.T) {
	t.Parallel()
	st, _ := newStores(t, nil)
	ctx, t0 := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	if last, err := st.LastAck(ctx, "bob", "phone"); err != nil || last.Current {
		t.Fatalf("a device that never acked: %+v, %v", last, err)
	}
	sent := aliceToBob(t, st, 18, t0)
	prev := int64(0)
	for i, s := range sent {
		seq := s.Inboxed["bob"]
		if _, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", RequestID: fmt.Sprintf("req-%d", i), UpTo: seq, At: t0.Add(time.Duration(i+1) * time.Second)}); err != nil {
			t.Fatal(err)
		}
		last, err := st.LastAck(ctx, "bob", "phone")
		if err != nil || !last.Current || last.Retold || last.From != prev || last.UpTo != seq || last.RequestID != fmt.Sprintf("req-%d", i) {
			t.Fatalf("after ack %d (#%d): %+v, %v; want req-%d from %d to %d, not retold", i, seq, last, err, i, prev, seq)
		}
		if i%5 == 0 {
			if err := st.MarkRetold(ctx, "bob", "phone", seq); err != nil {
				t.Fatal(err)
			}
			if last, err := st.LastAck(ctx, "bob", "phone"); err != nil || !last.Retold || last.UpTo != seq {
				t.Fatalf("marked retold at #%d: %+v, %v", seq, last, err)
			}
		}
		prev = seq
	}
	// A repeated ack moves nothing: the last range stays the one that did.
	if _, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", RequestID: "again", UpTo: prev, At: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if last, err := st.LastAck(ctx, "bob", "phone"); err != nil || !last.Current || last.Retold || last.RequestID != "req-17" {
		t.Fatalf("after a repeated ack: %+v, %v; want req-17's, not retold", last, err)
	}
}

// While the trace table refuses writes, acks still move the cursor and
// keep their ranges pending on the cursor item; past 64 pending ranges the
// ack that would add more drops them from the trace (and says so) rather
// than grow the cursor item until acks fail; once the trace takes writes
// again, ranges move as before.
func TestAcksGoOnWhileTheTraceRefusesWrites(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	refuse.Store(true)
	_, st := newStores(t, func(_ context.Context, in any) error {
		if b, ok := in.(*dynamodb.BatchWriteItemInput); ok && refuse.Load() {
			for table := range b.RequestItems {
				if strings.Contains(table, "Trace") {
					return fmt.Errorf("trace table throttled (test)")
				}
			}
		}
		return nil
	})
	ctx, t0 := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	var seqs []int64
	var sent []im.Stored
	for i := range 72 {
		s, err := st.Send(ctx, draft("alice", fmt.Sprintf("c%d", i), "bob", `"hi"`), t0)
		if err != nil {
			t.Fatal(err)
		}
		seqs, sent = append(seqs, s.Inboxed["bob"]), append(sent, s)
	}
	var traceErrs, dropped int
	for i, seq := range seqs[:70] {
		r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", Connection: "conn-1", RequestID: fmt.Sprintf("req-%d", i), UpTo: seq, At: t0})
		if err != nil || !r.Moved {
			t.Fatalf("ack %d while the trace refuses writes: %+v, %v", i, r, err)
		}
		if r.TraceErr != nil {
			traceErrs++
			if strings.Contains(r.TraceErr.Error(), "63 dropped") {
				dropped++
			}
		}
	}
	// Ranges are due from the 9th ack on: acks 9..63 fail to move them
	// (55), the 64th drops all but its own; acks 65..70 add to that.
	if traceErrs != 56 || dropped != 1 {
		t.Fatalf("%d acks reported the trace error, %d dropped ranges; want 56 and 1", traceErrs, dropped)
	}
	if d, err := st.Device(ctx, "bob", "phone"); err != nil || d.Acked != seqs[69] {
		t.Fatalf("cursor after the acks: %+v, %v", d, err)
	}
	refuse.Store(false)
	for i := 70; i < 72; i++ {
		if r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", Connection: "conn-1", RequestID: fmt.Sprintf("req-%d", i), UpTo: seqs[i], At: t0}); err != nil || r.TraceErr != nil {
			t.Fatalf("ack %d after the trace recovered: %+v, %v", i, r, err)
		}
	}
	// The ranges of acks 65..72 moved once the trace recovered; those of
	// the dropped acks are gone from the trace, and said so above.
	want69 := fmt.Sprintf("[bob/phone #%d +0s conn-1 req-69]", seqs[69])
	for i, want := range map[int]string{69: want69, 10: "[]"} {
		if got := ackedEvents(t, st, sent[i].Message.ID, t0); got != want {
			t.Fatalf("message %d's acked events: %s, want %s", i, got, want)
		}
	}
}

// Two acks of one device moving the same ranges at once: one trims, the
// other's trim finds the list changed and leaves it; both trace items
// stand (the readers take each range once), and acks and moves go on.
func TestTwoAcksMovingTheSameRangesAtOnce(t *testing.T) {
	t.Parallel()
	var plain *dynamo.Store
	var raced atomic.Bool
	ctx, t0 := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	var seqs []int64
	var sent []im.Stored
	plain, st := newStores(t, func(_ context.Context, in any) error {
		u, ok := in.(*dynamodb.UpdateItemInput)
		if !ok || u.UpdateExpression == nil || !strings.HasPrefix(*u.UpdateExpression, "REMOVE") || raced.Swap(true) {
			return nil
		}
		// The hooked ack (the 9th) put its trace item and is about to
		// trim: the 10th ack, on another connection, moves first.
		r, err := plain.Ack(context.Background(), im.AckRange{User: "bob", Device: "phone", RequestID: "req-9", UpTo: seqs[9], At: t0.Add(10 * time.Second)})
		if err != nil || r.TraceErr != nil || !r.Moved {
			return fmt.Errorf("the racing ack: %+v, %v", r, err)
		}
		return nil
	})
	for i := range 20 {
		s, err := st.Send(ctx, draft("alice", fmt.Sprintf("c%d", i), "bob", `"hi"`), t0)
		if err != nil {
			t.Fatal(err)
		}
		seqs, sent = append(seqs, s.Inboxed["bob"]), append(sent, s)
	}
	for i := range 20 {
		if i == 9 {
			continue // the racing ack's
		}
		r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", RequestID: fmt.Sprintf("req-%d", i), UpTo: seqs[i], At: t0.Add(time.Duration(i+1) * time.Second)})
		if err != nil || r.TraceErr != nil || !r.Moved {
			t.Fatalf("ack %d: %+v, %v", i, r, err)
		}
	}
	if !raced.Load() {
		t.Fatal("no move raced")
	}
	for i := range 20 {
		want := fmt.Sprintf("[bob/phone #%d +%ds  req-%d]", seqs[i], i+1, i)
		if got := ackedEvents(t, st, sent[i].Message.ID, t0); got != want {
			t.Fatalf("message %d's acked events: %s, want %s", i, got, want)
		}
	}
}

// ackedEvents renders the "acked" events of a message's trace: user/device,
// inbox seq, seconds after t0, connection and request.
func ackedEvents(t *testing.T, st *dynamo.Store, id im.MessageID, t0 time.Time) string {
	t.Helper()
	return fmt.Sprint(ackedEventList(t, st, id, t0))
}

// ackedEventList is ackedEvents' list.
func ackedEventList(t *testing.T, st *dynamo.Store, id im.MessageID, t0 time.Time) []string {
	t.Helper()
	evs, err := st.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var acked []string
	for _, e := range evs {
		if e.Type == im.EventAcked {
			acked = append(acked, fmt.Sprintf("%s/%s #%d +%ds %s %s", e.User, e.Device, e.Seq, int(e.At.Sub(t0).Seconds()), e.Connection, e.RequestID))
		}
	}
	return acked
}

// A device's range that covers a message is found however many ranges of
// the user's other devices were moved to the trace after it: here, with
// a first page of 3 items (25 in a deployment: SetAckPage), the laptop
// acked seq 2 in one range (1, 40] that moved to the trace only with its
// 9th ack, at seq 48, after the phone's 40 one-message acks had moved in
// 5 items ending below 48 — more than one page of the ack partition read
// from seq 2 up. (The page alone missed the laptop: the trace said only
// the phone had the message.)
func TestACoveringRangeIsFoundPastAnotherDevicesPageOfRanges(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	dynamo.SetAckPage(st, 3)
	ctx, t0 := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	const phoneAcks, n = 40, 48
	sent := aliceToBob(t, st, n, t0)
	seq := func(i int) int64 { return sent[i].Inboxed["bob"] }
	ack := func(d im.DeviceID, upTo int64, at int) {
		t.Helper()
		if r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: d, Connection: im.ConnectionID("conn-" + d), RequestID: fmt.Sprintf("req-%s-%d", d, upTo), UpTo: upTo, At: t0.Add(time.Duration(at) * time.Second)}); err != nil || !r.Moved {
			t.Fatalf("%s's ack of %d: %+v, %v", d, upTo, r, err)
		}
	}
	ack("laptop", seq(0), 1)
	ack("laptop", seq(phoneAcks-1), 2)
	for i := range phoneAcks {
		ack("phone", seq(i), 10+i)
	}
	for i := phoneAcks; i < n; i++ {
		ack("laptop", seq(i), 300+i)
	}
	want := fmt.Sprintf("[bob/laptop #%d +2s conn-laptop req-laptop-%d bob/phone #%d +11s conn-phone req-phone-%d]", seq(1), seq(phoneAcks-1), seq(1), seq(1))
	if got := ackedEvents(t, st, sent[1].Message.ID, t0); got != want {
		t.Fatalf("message 1's acked events: %s\nwant %s", got, want)
	}
}

// aliceToBob sends n 1:1 messages from alice to bob, at t0.
func aliceToBob(t *testing.T, st *dynamo.Store, n int, t0 time.Time) []im.Stored {
	t.Helper()
	var sent []im.Stored
	for i := range n {
		s, err := st.Send(context.Background(), draft("alice", fmt.Sprintf("c%d", i), "bob", `"hi"`), t0)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, s)
	}
	return sent
}
