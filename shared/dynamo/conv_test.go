package dynamo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

func TestConversationsPagesThroughTheIndex(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	var want []im.ConversationID
	for i := range 5 {
		peer := im.UserID(fmt.Sprintf("p%d", i))
		if _, err := st.Send(ctx, im.Draft{From: peer, ClientMsgID: "x", Conversation: im.Direct("bob", peer), Body: []byte(`"hi"`)}, now); err != nil {
			t.Fatal(err)
		}
		want = append(want, im.Direct("bob", peer))
	}
	for _, limit := range []int{1, 2, 5, 7} {
		var got []im.ConversationID
		after := im.ConversationID("")
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("limit %d: no end", limit)
			}
			states, next, err := st.Conversations(ctx, "bob", after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(states) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(states))
			}
			for _, s := range states {
				got = append(got, s.Conversation)
			}
			if next == "" {
				break
			}
			after = next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("limit %d: %v, want %v", limit, got, want)
		}
	}
}

func TestAckCursorsReadManyDevicesAtOnce(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	var users []im.UserID
	for i := range 120 {
		u := im.UserID(fmt.Sprintf("u%03d", i))
		users = append(users, u)
		if i%2 == 0 {
			continue
		}
		if _, err := st.Send(ctx, im.Draft{From: "boss", ClientMsgID: string(u), Conversation: im.Direct("boss", u), Body: []byte(`"hi"`)}, now); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Ack(ctx, im.AckRange{User: u, Device: "phone", UpTo: 1, At: now}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.AckCursors(ctx, "phone", users)
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range users {
		if want := int64(i % 2); got[u] != want {
			t.Fatalf("%s acked %d, want %d", u, got[u], want)
		}
	}
}

// A 1:1 conversation's delivered watermark is derived from the device
// cursors when it is read (issue 12: the ack route no longer writes it):
// the highest convSeq of the conversation at or below the highest cursor of
// any of the user's devices, read back past other conversations' entries
// when the conversation's newest entry is not acked yet.
func TestDirectDeliveredIsDerivedFromTheDeviceCursors(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	ab, cb := im.Direct("alice", "bob"), im.Direct("carol", "bob")
	// bob's inbox: 1 alice#1, 2 alice#2, 3 carol#1, 4 bob's own reply in
	// alice's conversation (#3), 5 alice#4.
	for i, d := range []im.Draft{
		draft("alice", "a1", "bob", "1"), draft("alice", "a2", "bob", "2"), draft("carol", "c1", "bob", "3"),
		draft("bob", "b1", "alice", "4"), draft("alice", "a3", "bob", "5"),
	} {
		stored, err := st.Send(ctx, d, now)
		if err != nil || stored.Inboxed["bob"] != int64(i+1) {
			t.Fatalf("send %d: %+v, %v", i, stored, err)
		}
	}
	delivered := func() map[im.ConversationID]int64 {
		t.Helper()
		states, _, err := st.Conversations(ctx, "bob", "", 10)
		if err != nil {
			t.Fatal(err)
		}
		out := map[im.ConversationID]int64{}
		for _, s := range states {
			out[s.Conversation] = s.Delivered
		}
		one, err := st.ConversationStates(ctx, ab, []im.UserID{"bob"})
		if err != nil || one["bob"].Delivered != out[ab] {
			t.Fatalf("receipts' read of %s: %+v, %v; the summary's %d", ab, one["bob"], err, out[ab])
		}
		return out
	}
	if got := delivered(); got[ab] != 0 || got[cb] != 0 {
		t.Fatalf("nothing acked: delivered %v", got)
	}
	steps := []struct {
		device   im.DeviceID
		upTo     int64
		ab, cb   int64
		reaching string
	}{
		{"phone", 1, 1, 0, "the first entry"},
		{"phone", 3, 2, 1, "carol's entry: alice's conversation read back past it"},
		{"laptop", 2, 2, 1, "a lower cursor of another device changes nothing"},
		{"laptop", 4, 3, 1, "bob's own message counts: his devices have it"},
		{"phone", 5, 4, 1, "every entry"},
	}
	for _, s := range steps {
		if _, err := st.Ack(ctx, im.AckRange{User: "bob", Device: s.device, UpTo: s.upTo, At: now}); err != nil {
			t.Fatal(err)
		}
		if got := delivered(); got[ab] != s.ab || got[cb] != s.cb {
			t.Fatalf("%s acked up to %d (%s): delivered %v, want %s %d, %s %d", s.device, s.upTo, s.reaching, got, ab, s.ab, cb, s.cb)
		}
	}
}

// A group's delivered watermark comes from the member's device cursors too
// (issue 12: a group ack writes none — it was a write per member and
// message): the newest group message at or below the highest cursor, read
// back past other conversations' entries where the newest is not acked.
func TestGroupDeliveredIsDerivedFromTheDeviceCursors(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	st.GroupReads = false // inbox entries' cursors, whatever the suite's mode
	g := im.Group("ops")
	if _, err := st.CreateGroup(ctx, g, "Ops", "alice", nil, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"bob", "dave"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	// bob's inbox: 1 g#1, 2 g#2, 3 carol's 1:1 message, 4 g#3.
	groupMessage := func(k int64) {
		t.Helper()
		if _, err := st.SendGroup(ctx, im.Draft{From: "alice", ClientMsgID: fmt.Sprint(k), Conversation: g, Body: []byte(fmt.Sprint(k))}, now); err != nil {
			t.Fatal(err)
		}
		log, err := st.Log(ctx, g, k-1, k)
		if err != nil || len(log) != 1 {
			t.Fatalf("log %d: %v, %v", k, log, err)
		}
		for _, u := range []im.UserID{"bob", "dave"} {
			if _, err := st.AppendGroup(ctx, g, u, im.InboxPosition{}, log, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	groupMessage(1)
	groupMessage(2)
	if _, err := st.Send(ctx, draft("carol", "c1", "bob", "x"), now); err != nil {
		t.Fatal(err)
	}
	groupMessage(3)
	delivered := func() (bob, dave int64) {
		t.Helper()
		states, err := st.ConversationStates(ctx, g, []im.UserID{"bob", "dave"})
		if err != nil {
			t.Fatal(err)
		}
		summary, _, err := st.Conversations(ctx, "bob", "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range summary {
			if s.Conversation == g && s.Delivered != states["bob"].Delivered {
				t.Fatalf("bob's summary says %d delivered, receipts %d", s.Delivered, states["bob"].Delivered)
			}
		}
		return states["bob"].Delivered, states["dave"].Delivered
	}
	if b, d := delivered(); b != 0 || d != 0 {
		t.Fatalf("nothing acked: delivered bob %d, dave %d", b, d)
	}
	for _, s := range []struct {
		upTo, want int64
		reaching   string
	}{
		{1, 1, "the first entry"},
		{3, 2, "carol's entry: the group read back past it"},
		{4, 3, "the newest entry"},
	} {
		if _, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", UpTo: s.upTo, At: now}); err != nil {
			t.Fatal(err)
		}
		if b, d := delivered(); b != s.want || d != 0 {
			t.Fatalf("bob acked up to %d (%s): delivered bob %d, dave %d; want %d and 0", s.upTo, s.reaching, b, d, s.want)
		}
	}
}
