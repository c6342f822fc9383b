package client

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// readGroupStack starts a stack whose groups are read-diffused with
// alice's laptop and bob's phone connected (ctx: a minute).
func readGroupStack(t *testing.T) (*devstack.Stack, context.Context, *Client, *device, *Client) {
	t.Helper()
	st := startStackWith(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	bobDev := newDevice(t, st, "bob", "phone")
	return st, ctx, newDevice(t, st, "alice", "laptop").dial(t), bobDev, bobDev.dial(t)
}

// A read-diffused group through the SDK (GroupDelivery read): members
// online get every message once and in order from pushes and ack their
// group cursor; a member offline while messages were sent, and one who
// reconnects after missing some, pull exactly what they miss.
func TestReadDiffusedGroupReachesEveryDeviceOnceAndInOrder(t *testing.T) {
	t.Parallel()
	st, ctx, alice, bobDev, bob := readGroupStack(t)
	g, err := alice.CreateGroup(ctx, "Read", "bob", "carol")
	if err != nil {
		t.Fatal(err)
	}
	send := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			if _, err := alice.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: fmt.Appendf(nil, `"m%d"`, i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	inOrder := func(who string, got []Message, from, to int64) {
		t.Helper()
		if len(got) != int(to-from+1) {
			t.Fatalf("%s got %d messages, want %d–%d", who, len(got), from, to)
		}
		for i, m := range got {
			if want := from + int64(i); m.ConversationID != g.ConversationID || m.ConvSeq != want || m.Seq != 0 || string(m.Body) != fmt.Sprintf(`"m%d"`, want) {
				t.Fatalf("%s's message %d = %+v, want convSeq %d (no inbox seq)", who, i, m, want)
			}
		}
	}
	serverCursor := func(u im.UserID, d im.DeviceID) int64 {
		cs, err := st.Store.GroupCursorsNow(ctx, im.ConversationID(g.ConversationID), []im.UserID{u})
		if err != nil {
			t.Fatal(err)
		}
		return cs[im.DeviceKey{User: u, Device: d}].Acked
	}

	send(1, 20)
	inOrder("bob", collect(t, bob, 20, 20*time.Second), 1, 20)
	inOrder("alice, who sent them", collect(t, alice, 20, 20*time.Second), 1, 20)
	waitFor(t, "bob's acks", func() bool { return serverCursor("bob", "phone") == 20 })
	bob.Close()

	send(21, 25)
	carol := newDevice(t, st, "carol", "phone").dial(t)
	inOrder("carol", collect(t, carol, 25, 20*time.Second), 1, 25)
	bob = bobDev.dial(t)
	inOrder("bob, back", collect(t, bob, 5, 20*time.Second), 21, 25)
	waitFor(t, "carol's and bob's acks", func() bool { return serverCursor("carol", "phone") == 25 && serverCursor("bob", "phone") == 25 })
	if c, err := bob.GroupCursor(g.ConversationID); err != nil || c != 25 {
		t.Fatalf("bob's local cursor = %d, %v", c, err)
	}
	select {
	case m := <-bob.Messages():
		t.Fatalf("bob got %+v once more", m)
	case <-time.After(time.Second):
	}
	// Receipts and the summary read the group's head and the cursors.
	rc, err := alice.Receipts(ctx, g.ConversationID, 25)
	if err != nil || rc.Delivered != 2 || rc.Members != 2 {
		t.Fatalf("receipts of message 25 = %+v, %v", rc, err)
	}
	sum, err := carol.Summary(ctx)
	if err != nil || len(sum) != 1 || sum[0].Last != 25 || sum[0].Unread != 25 || sum[0].Delivered != 25 || sum[0].LastFrom != "alice" {
		t.Fatalf("carol's summary = %+v, %v", sum, err)
	}
}

// A member removed and added again while their device was away still gets
// what was sent to them before the removal (the device had not pulled it),
// never what was sent while they were out, and the rest in order after it.
func TestAMemberAddedAgainGetsWhatWasSentBeforeTheRemoval(t *testing.T) {
	t.Parallel()
	st, ctx, alice, bobDev, bob := readGroupStack(t)
	g, err := alice.CreateGroup(ctx, "Again", "bob")
	if err != nil {
		t.Fatal(err)
	}
	send := func(texts ...string) {
		t.Helper()
		for _, text := range texts {
			if _, err := alice.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: fmt.Appendf(nil, "%q", text)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("m1", "m2")
	if got := collect(t, bob, 2, 20*time.Second); got[1].ConvSeq != 2 {
		t.Fatalf("bob got %+v", got)
	}
	waitFor(t, "bob's ack", func() bool {
		cs, err := st.Store.GroupCursorsNow(ctx, im.ConversationID(g.ConversationID), []im.UserID{"bob"})
		return err == nil && cs[im.DeviceKey{User: "bob", Device: "phone"}].Acked == 2
	})
	bob.Close()
	send("m3", "m4") // due to bob, not yet on his phone
	if _, err := alice.RemoveMembers(ctx, g.ConversationID, "bob"); err != nil {
		t.Fatal(err)
	}
	send("while out") // 5: never bob's
	if _, err := alice.AddMembers(ctx, g.ConversationID, "member", "bob"); err != nil {
		t.Fatal(err)
	}
	send("m6")
	bob = bobDev.dial(t)
	got := collect(t, bob, 3, 20*time.Second)
	for i, want := range []struct {
		seq  int64
		body string
	}{{3, `"m3"`}, {4, `"m4"`}, {6, `"m6"`}} {
		if got[i].ConversationID != g.ConversationID || got[i].ConvSeq != want.seq || string(got[i].Body) != want.body {
			t.Fatalf("bob's message %d = %+v, want %d %s", i, got[i], want.seq, want.body)
		}
	}
	select {
	case m := <-bob.Messages():
		t.Fatalf("bob got %+v too", m)
	case <-time.After(time.Second):
	}
	// Unread counts what is due to him: 1–4 and 6, not 5.
	sum, err := bob.Summary(ctx)
	if err != nil || len(sum) != 1 || sum[0].Last != 6 || sum[0].Unread != 5 {
		t.Fatalf("bob's summary = %+v, %v", sum, err)
	}
	// His history pages back through both memberships, one at a time.
	var pages [][]int64
	for before := int64(0); ; {
		h, err := bob.ConversationHistory(ctx, g.ConversationID, before, 2)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, m := range h.Messages {
			seqs = append(seqs, m.ConvSeq)
		}
		pages = append(pages, seqs)
		if !h.HasMore || len(pages) > 5 {
			break
		}
		before = h.Before
	}
	if fmt.Sprint(pages) != "[[6] [3 4] [1 2]]" {
		t.Fatalf("bob's history pages = %v, want [6], [3 4], [1 2]", pages)
	}
}

// A device that receives none of a read-diffused group's pushes (they are
// dropped on the way) still gets the message: redelivery gives up with a
// notify naming the group, and the SDK pulls it.
func TestReadDiffusedGroupMessageArrivesWhenEveryPushIsLost(t *testing.T) {
	t.Parallel()
	st := startStackWith(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) { o.Dialer = dropFrames(WebSocket, wire.TypeGroupMessage) })
	g, err := alice.CreateGroup(ctx, "Lossy", "bob")
	if err != nil {
		t.Fatal(err)
	}
	sent, err := alice.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: []byte(`"lost on the way"`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(t, bob, 1, 30*time.Second); got[0].MessageID != sent.MessageID || got[0].ConvSeq != 1 {
		t.Fatalf("bob got %+v", got[0])
	}
}

// With Replay, a restarted client hands the application the stored
// messages of each read-diffused group after Options.ShownGroups (an
// application that records how far it showed each group gets each
// message once across restarts), and those of a group it names at its
// newest, none.
func TestReplayHandsBackReadDiffusedGroupMessagesAfterShownGroups(t *testing.T) {
	t.Parallel()
	_, ctx, alice, bobDev, bob := readGroupStack(t)
	g1, err := alice.CreateGroup(ctx, "One", "bob")
	if err != nil {
		t.Fatal(err)
	}
	g2, err := alice.CreateGroup(ctx, "Two", "bob")
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range []string{g1.ConversationID, g1.ConversationID, g1.ConversationID, g2.ConversationID} {
		if _, err := alice.SendDraft(ctx, Draft{ConversationID: g, Body: fmt.Appendf(nil, `"m%d"`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	collect(t, bob, 4, 20*time.Second)
	bob.Close()

	// The application showed g1 up to 1 and nothing of g2.
	bob = bobDev.dial(t, func(o *Options) { o.Replay, o.ShownGroups = true, map[string]int64{g1.ConversationID: 1} })
	var got []string
	for _, m := range collect(t, bob, 3, 20*time.Second) {
		got = append(got, fmt.Sprintf("%s#%d", m.ConversationID, m.ConvSeq))
	}
	want := []string{g1.ConversationID + "#2", g1.ConversationID + "#3", g2.ConversationID + "#1"}
	if fmt.Sprint(got) != fmt.Sprint(want) && fmt.Sprint(got) != fmt.Sprint([]string{want[2], want[0], want[1]}) {
		t.Fatalf("replayed %v, want %v (by group)", got, want)
	}
	bob.Close()
	bob = bobDev.dial(t, func(o *Options) {
		o.Replay, o.ShownGroups = true, map[string]int64{g1.ConversationID: 3, g2.ConversationID: 1}
	})
	select {
	case m := <-bob.Messages():
		t.Fatalf("replayed %+v though every group was shown to its newest", m)
	case <-time.After(time.Second):
	}
}

// The SDK sends to a read-diffused group with ownFromSent: its own message
// comes back in "sent" and is persisted and handed to the application from
// there, once; the sending connection is not pushed it (so without that,
// a sender alone in a quiet group would never see it).
func TestOwnGroupMessageIsTakenFromSent(t *testing.T) {
	t.Parallel()
	_, ctx, alice, _, bob := readGroupStack(t)
	g, err := alice.CreateGroup(ctx, "Own", "bob")
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 2; i++ {
		if _, err := alice.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: fmt.Appendf(nil, `"m%d"`, i)}); err != nil {
			t.Fatal(err)
		}
		for who, c := range map[string]*Client{"alice": alice, "bob": bob} {
			if m := collect(t, c, 1, 20*time.Second)[0]; m.ConversationID != g.ConversationID || m.ConvSeq != i || m.From != "alice" {
				t.Fatalf("%s got %+v, want message %d", who, m, i)
			}
		}
	}
	select {
	case m := <-alice.Messages():
		t.Fatalf("alice got %+v once more", m)
	case <-time.After(time.Second):
	}
	if c, err := alice.GroupCursor(g.ConversationID); err != nil || c != 2 {
		t.Fatalf("alice's local cursor = %d, %v", c, err)
	}
}

// API Gateway's "Internal server error" frame (a throttled or failed
// invocation) names no request: besides the sends, the ack and the inbox
// sync, the SDK asks again in a second for each group sync still
// unanswered — without it a throttled group sync waited out
// groupSyncRetry (10 s) — and leaves the groups that are not syncing.
func TestAGatewayErrorAsksAgainForUnansweredGroupSyncs(t *testing.T) {
	t.Parallel()
	asked, idle := time.Now(), time.Now().Add(-time.Hour)
	s := &session{c: &Client{log: slog.New(slog.DiscardHandler)}, sentAt: map[string]time.Time{}, groups: map[string]*groupState{
		"g:asked": {syncing: true, syncSent: asked},
		"g:idle":  {syncSent: idle},
	}}
	s.gatewayError(gatewayError{Message: "Internal server error"})
	if wait := groupSyncRetry - time.Since(s.groups["g:asked"].syncSent); wait > time.Second {
		t.Fatalf("the unanswered group sync is asked for again in %s, want within a second", wait)
	}
	if !s.groups["g:idle"].syncSent.Equal(idle) {
		t.Fatalf("a group not syncing was touched: %v", s.groups["g:idle"].syncSent)
	}
}
