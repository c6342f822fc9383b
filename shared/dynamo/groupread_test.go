package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
)

// The store's part of group read diffusion (groupread.go): cursors per
// device and group, pulls of the group log within a member's range, and
// the groups a device is behind in.

// groupWith creates group c owned by alice with members and sends it n
// messages from alice.
func groupWith(t *testing.T, st *dynamo.Store, c im.ConversationID, members []im.UserID, n int, now time.Time) {
	t.Helper()
	if _, err := st.CreateGroup(context.Background(), c, "G", "alice", members, now); err != nil {
		t.Fatal(err)
	}
	sendToGroup(t, st, c, n, now)
}

func sendToGroup(t *testing.T, st *dynamo.Store, c im.ConversationID, n int, now time.Time) {
	t.Helper()
	for range n {
		if _, err := st.SendGroup(context.Background(), im.Draft{From: "alice", ClientMsgID: fmt.Sprintf("%d", time.Now().UnixNano()), Conversation: c, Body: []byte(`"m"`)}, now); err != nil {
			t.Fatal(err)
		}
	}
}

func removeMember(t *testing.T, st *dynamo.Store, c im.ConversationID, u im.UserID, now time.Time) {
	t.Helper()
	if _, err := st.ChangeMembers(context.Background(), im.MemberChange{Group: c, Actor: "alice", Op: im.OpRemove, Targets: []im.UserID{u}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
}

func TestGroupCursorsMoveForwardOnlyWithinTheMembersRange(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now().Truncate(time.Millisecond)
	g := im.Group("ops")
	groupWith(t, st, g, []im.UserID{"bob", "carol"}, 3, now)
	removeMember(t, st, g, "carol", now)
	sendToGroup(t, st, g, 2, now) // head 5; carol's range ends at 3

	steps := []struct {
		u     im.UserID
		d     im.DeviceID
		upTo  int64
		moved bool
		old   int64
		err   error
		head  int64 // of a HeadError
	}{
		{"bob", "phone", 2, true, 0, nil, 0},
		{"bob", "phone", 1, false, 2, nil, 0},
		{"bob", "phone", 2, false, 2, nil, 0},
		{"bob", "phone", 6, false, 0, im.ErrAckBeyondHead, 5},
		{"bob", "laptop", 5, true, 0, nil, 0},
		{"carol", "phone", 3, true, 0, nil, 0},
		{"carol", "phone", 4, false, 0, im.ErrAckBeyondHead, 3},
		{"dave", "phone", 1, false, 0, im.ErrNotMember, 0},
		{"dave", "phone", 9, false, 0, im.ErrNotMember, 0}, // not told the head
	}
	for _, s := range steps {
		r, err := st.AckGroup(ctx, g, im.AckRange{User: s.u, Device: s.d, UpTo: s.upTo, At: now})
		if r.Moved != s.moved || r.Old != s.old || !errors.Is(err, s.err) {
			t.Fatalf("%s/%s acks %d: moved %v old %d err %v; want %v %d %v", s.u, s.d, s.upTo, r.Moved, r.Old, err, s.moved, s.old, s.err)
		}
		if he, ok := errors.AsType[*im.HeadError](err); s.head != 0 && (!ok || he.Head != s.head) {
			t.Fatalf("%s/%s acks %d: %v, want a head error at %d", s.u, s.d, s.upTo, err, s.head)
		}
	}
	got, err := st.GroupCursorsNow(ctx, g, []im.UserID{"bob", "carol", "dave"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[im.DeviceKey]int64{{User: "bob", Device: "phone"}: 2, {User: "bob", Device: "laptop"}: 5, {User: "carol", Device: "phone"}: 3}
	if len(got) != len(want) {
		t.Fatalf("cursors = %+v, want %v", got, want)
	}
	for k, acked := range want {
		if c := got[k]; c.Acked != acked || !c.AckedAt.Equal(now) {
			t.Fatalf("cursor of %v = %+v, want %d at %v", k, c, acked, now)
		}
	}
	// The cursors sit on the index items: the conversation list reads them unharmed.
	state, err := st.ConversationState(ctx, "bob", g)
	if err != nil || state.Conversation != g || state.Title != "G" || state.Removed {
		t.Fatalf("bob's state of %s = %+v, %v", g, state, err)
	}
	// A 1:1 conversation is no group.
	if _, err := st.AckGroup(ctx, im.Direct("alice", "bob"), im.AckRange{User: "bob", Device: "phone", UpTo: 1, At: now}); !errors.Is(err, im.ErrMalformedConversation) {
		t.Fatalf("group ack in a 1:1 conversation: %v", err)
	}
}

func TestGroupPagesServeTheMembersRangeInOrder(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	g := im.Group("eng")
	groupWith(t, st, g, nil, 5, now)
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"bob"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	sendToGroup(t, st, g, 115, now) // bob gets 6–120
	removeMember(t, st, g, "bob", now)
	sendToGroup(t, st, g, 10, now) // head 130

	one := func(im.Message) int { return 1 }
	pull := func(u im.UserID, limit int, size func(im.Message) int) (seqs []int64, pages int) {
		t.Helper()
		cursor := int64(0)
		for {
			p, err := st.GroupPage(ctx, g, u, cursor, limit, size)
			if err != nil {
				t.Fatalf("%s pulls after %d: %v", u, cursor, err)
			}
			pages++
			for _, m := range p.Messages {
				if m.Conversation != g || string(m.Body) != `"m"` || m.From != "alice" {
					t.Fatalf("%s's page holds %+v", u, m)
				}
				seqs = append(seqs, m.ConvSeq)
			}
			if p.Truncated {
				t.Fatalf("%s's page after %d is truncated: %+v", u, cursor, p)
			}
			if !p.More {
				if p.Next != p.Head {
					t.Fatalf("%s's last page: next %d, head %d", u, p.Next, p.Head)
				}
				return seqs, pages
			}
			cursor = p.Next
		}
	}
	span := func(lo, hi int64) []int64 {
		var out []int64
		for i := lo; i <= hi; i++ {
			out = append(out, i)
		}
		return out
	}
	if seqs, pages := pull("bob", 50, one); !slices.Equal(seqs, span(6, 120)) || pages != 3 {
		t.Fatalf("bob pulled %v in %d pages, want 6–120 in 3", seqs, pages)
	}
	if seqs, pages := pull("alice", 200, one); !slices.Equal(seqs, span(1, 130)) || pages != 2 {
		t.Fatalf("alice pulled %v in %d pages, want 1–130 in 2 (100 a page at most)", seqs, pages)
	}
	// The byte budget cuts a page too (at least one message each).
	third := func(im.Message) int { return im.MaxPageBytes/3 + 1 }
	if p, err := st.GroupPage(ctx, g, "bob", 10, 100, third); err != nil || len(p.Messages) != 2 || p.Next != 12 || !p.More {
		t.Fatalf("page of large messages: %d messages, next %d, more %v, %v", len(p.Messages), p.Next, p.More, err)
	}
	if _, err := st.GroupPage(ctx, g, "bob", 121, 100, one); !errors.Is(err, im.ErrCursorBeyondHead) {
		t.Fatalf("bob's cursor past where he left: %v", err)
	}
	if _, err := st.GroupPage(ctx, g, "carol", 0, 100, one); !errors.Is(err, im.ErrNotMember) {
		t.Fatalf("a stranger's pull: %v", err)
	}
}

// A member removed and added again keeps the earlier membership on both
// their member item and their index item: pulls serve it, then the
// current one, never what was sent in between; a device stands before the
// first message due to it.
func TestARejoinedMembersPullsSkipOnlyWhatWasSentWhileOut(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	st.GroupReads = true
	g := im.Group("again")
	groupWith(t, st, g, []im.UserID{"bob"}, 3, now)
	if _, err := st.AckGroup(ctx, g, im.AckRange{User: "bob", Device: "phone", UpTo: 1, At: now}); err != nil {
		t.Fatal(err)
	}
	removeMember(t, st, g, "bob", now)
	sendToGroup(t, st, g, 2, now) // 4, 5: sent while bob is out
	for range 2 {                 // added twice: the second changes nothing
		if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"bob"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
			t.Fatal(err)
		}
	}
	sendToGroup(t, st, g, 2, now) // 6, 7
	m, err := st.Member(ctx, g, "bob")
	if err != nil || !m.Active() || m.Joined != 5 || !slices.Equal(m.Past, []im.Span{{Joined: 0, Left: 3}}) {
		t.Fatalf("bob = %+v, %v", m, err)
	}
	one := func(im.Message) int { return 1 }
	pull := func(cursor int64) (seqs []int64) {
		t.Helper()
		for {
			p, err := st.GroupPage(ctx, g, "bob", cursor, 100, one)
			if err != nil {
				t.Fatalf("pull after %d: %v", cursor, err)
			}
			for _, m := range p.Messages {
				seqs = append(seqs, m.ConvSeq)
			}
			if p.Head != 7 || p.Truncated {
				t.Fatalf("page after %d = %+v", cursor, p)
			}
			if !p.More {
				return seqs
			}
			cursor = p.Next
		}
	}
	for cursor, want := range map[int64][]int64{0: {1, 2, 3, 6, 7}, 1: {2, 3, 6, 7}, 3: {6, 7}, 4: {6, 7}, 6: {7}, 7: nil} {
		if got := pull(cursor); !slices.Equal(got, want) {
			t.Errorf("pull after %d = %v, want %v", cursor, got, want)
		}
	}
	check := func(d im.DeviceID, acked int64) {
		t.Helper()
		got, err := st.ReadGroups(ctx, "bob", d)
		if want := (im.GroupPosition{Conversation: g, Head: 7, Acked: acked}); err != nil || len(got) != 1 || got[0] != want {
			t.Fatalf("bob/%s stands at %+v, %v; want %+v", d, got, err, want)
		}
	}
	check("phone", 1)  // before 2, of the earlier membership
	check("laptop", 0) // never pulled: from the start
	if _, err := st.AckGroup(ctx, g, im.AckRange{User: "bob", Device: "phone", UpTo: 3, At: now}); err != nil {
		t.Fatal(err)
	}
	check("phone", 5) // past the gap
	// The conversation list: the last message due and the unread count
	// over both memberships (1–3, 6, 7).
	states, _, err := st.Conversations(ctx, "bob", "", 10)
	if err != nil || len(states) != 1 || states[0].Last != 7 || states[0].Unread() != 5 || !slices.Equal(states[0].Past, []im.Span{{Joined: 0, Left: 3}}) {
		t.Fatalf("bob's conversations = %+v, %v", states, err)
	}
}

func TestReadGroupsSayWhereADeviceStandsInEachGroup(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	g1, g2, g3, written := im.Group("one"), im.Group("two"), im.Group("three"), im.Group("written")
	st.GroupReads = false                                 // whatever the suite's mode (make test-group-write)
	groupWith(t, st, written, []im.UserID{"bob"}, 2, now) // copied into inboxes: acked there, never listed
	st.GroupReads = true
	groupWith(t, st, g1, []im.UserID{"bob"}, 2, now)
	groupWith(t, st, g2, []im.UserID{"bob"}, 3, now)
	groupWith(t, st, g3, []im.UserID{"bob"}, 0, now)
	if _, err := st.Send(ctx, draft("carol", "x", "bob", "1"), now); err != nil { // a 1:1 conversation is not listed
		t.Fatal(err)
	}
	if _, err := st.AckGroup(ctx, g1, im.AckRange{User: "bob", Device: "phone", UpTo: 2, At: now}); err != nil {
		t.Fatal(err)
	}
	check := func(d im.DeviceID, want ...im.GroupPosition) {
		t.Helper()
		got, err := st.ReadGroups(ctx, "bob", d)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("bob/%s stands at %+v, %v; want %+v", d, got, err, want)
		}
	}
	// Sorted by id: g:one, g:three (no message yet), g:two.
	check("phone", im.GroupPosition{Conversation: g1, Head: 2, Acked: 2}, im.GroupPosition{Conversation: g3}, im.GroupPosition{Conversation: g2, Head: 3})
	check("laptop", im.GroupPosition{Conversation: g1, Head: 2}, im.GroupPosition{Conversation: g3}, im.GroupPosition{Conversation: g2, Head: 3})
	// Removed from g2 at 3: what is sent after is not due to bob.
	removeMember(t, st, g2, "bob", now)
	sendToGroup(t, st, g2, 2, now)
	if _, err := st.AckGroup(ctx, g2, im.AckRange{User: "bob", Device: "phone", UpTo: 3, At: now}); err != nil {
		t.Fatal(err)
	}
	sendToGroup(t, st, g1, 1, now)
	check("phone", im.GroupPosition{Conversation: g1, Head: 3, Acked: 2}, im.GroupPosition{Conversation: g3}, im.GroupPosition{Conversation: g2, Head: 3, Acked: 3})
	if p := (im.GroupPosition{Conversation: g1, Head: 3, Acked: 2}); !p.Behind() || (im.GroupPosition{Head: 3, Acked: 3}).Behind() {
		t.Fatal("Behind")
	}
	// A member added later starts where they joined: not behind, and a
	// pull from 0 finds nothing and continues from there.
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g1, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"dave"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ReadGroups(ctx, "dave", "phone"); err != nil || len(got) != 1 || got[0] != (im.GroupPosition{Conversation: g1, Head: 3, Acked: 3}) {
		t.Fatalf("dave, just added, stands at %+v, %v", got, err)
	}
	if p, err := st.GroupPage(ctx, g1, "dave", 0, 100, func(im.Message) int { return 1 }); err != nil || len(p.Messages) != 0 || p.Next != 3 || p.More {
		t.Fatalf("dave's first pull: %+v, %v", p, err)
	}
}

// A read-diffused group moves no index item per message: the states the
// summary and receipts read take the last message from the group's head
// and delivered from the device cursors.
func TestReadDiffusedGroupStatesComeFromTheHeadAndTheCursors(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	written := im.Group("written")
	st.GroupReads = false // whatever the suite's mode (make test-group-write)
	groupWith(t, st, written, []im.UserID{"bob"}, 2, now)
	st.GroupReads = true
	g := im.Group("read")
	groupWith(t, st, g, []im.UserID{"bob", "carol"}, 3, now)
	for d, upTo := range map[im.DeviceID]int64{"phone": 2, "laptop": 3} {
		if _, err := st.AckGroup(ctx, g, im.AckRange{User: "bob", Device: d, UpTo: upTo, At: now}); err != nil {
			t.Fatal(err)
		}
	}
	states, err := st.ConversationStates(ctx, g, []im.UserID{"bob", "carol"})
	if err != nil || states["bob"].Delivered != 3 || states["carol"].Delivered != 0 || !states["bob"].ReadDiffused {
		t.Fatalf("states = %+v, %v", states, err)
	}
	if _, _, err := st.MarkRead(ctx, "bob", g, 2, now); err != nil {
		t.Fatal(err)
	}
	removeMember(t, st, g, "carol", now)
	sendToGroup(t, st, g, 2, now) // head 5; carol's view ends at 3
	summary := func(u im.UserID) map[im.ConversationID]im.ConversationState {
		t.Helper()
		list, _, err := st.Conversations(ctx, u, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		out := map[im.ConversationID]im.ConversationState{}
		for _, s := range list {
			out[s.Conversation] = s
		}
		return out
	}
	bob := summary("bob")
	if s := bob[g]; s.Last != 5 || s.Unread() != 3 || s.LastFrom != "alice" || s.Preview != im.Preview([]byte(`"m"`)) || s.Delivered != 3 {
		t.Fatalf("bob's summary of the read-diffused group: %+v (unread %d)", s, s.Unread())
	}
	// The written group's last is its index item's (no fan-out ran here:
	// 0), not its head's.
	if s := bob[written]; s.Last != 0 || s.ReadDiffused {
		t.Fatalf("bob's summary of the written group: %+v", s)
	}
	if s := summary("carol")[g]; s.Last != 3 || !s.Removed {
		t.Fatalf("carol's summary after her removal: %+v", s)
	}
}

// The trace of a read-diffused group's message is derived from what is
// stored: the members it is due to, the devices whose cursor in the group
// is at or past it (at the time the cursor last moved) and the members who
// read it. A member added after it, and a write-diffused group's message,
// get nothing derived.
func TestTheTraceOfAReadDiffusedGroupMessageIsDerived(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	t0 := time.UnixMilli(1_800_000_000_000).UTC()
	written := im.Group("written")
	st.GroupReads = false // whatever the suite's mode (make test-group-write)
	groupWith(t, st, written, []im.UserID{"bob"}, 1, t0)
	st.GroupReads = true
	g := im.Group("ops")
	if _, err := st.CreateGroup(ctx, g, "G", "alice", []im.UserID{"bob", "carol"}, t0); err != nil {
		t.Fatal(err)
	}
	first, err := st.SendGroup(ctx, im.Draft{From: "alice", ClientMsgID: "c1", Conversation: g, Body: []byte(`"m"`)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if c, seq, ok := first.Message.ID.Locate(); !ok || c != g || seq != 1 {
		t.Fatalf("a group message's id %s locates %s #%d (%v), want %s #1", first.Message.ID, c, seq, ok, g)
	}
	sendToGroup(t, st, g, 1, t0)
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"dave"}, Role: im.RoleMember, Limit: 500, At: t0}); err != nil {
		t.Fatal(err)
	}
	acks := []struct {
		u    im.UserID
		d    im.DeviceID
		upTo int64
		at   time.Duration
	}{{"bob", "phone", 1, time.Second}, {"bob", "laptop", 2, 3 * time.Second}, {"alice", "laptop", 2, 4 * time.Second}}
	for _, a := range acks {
		if _, err := st.AckGroup(ctx, g, im.AckRange{User: a.u, Device: a.d, UpTo: a.upTo, At: t0.Add(a.at)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.MarkRead(ctx, "bob", g, 1, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := st.Events(ctx, first.Message.ID)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, fmt.Sprintf("%s %s/%s +%dms by %s", e.Type, e.User, e.Device, e.At.Sub(t0).Milliseconds(), e.Function))
	}
	// The send's created and stored events were not written (SendGroup
	// writes no trace; the send function writes it for a retry and the
	// sampled share): derived from the log item.
	want := []string{
		"created alice/ +0ms by send", "stored / +0ms by send",
		"inboxed alice/ +0ms by send", "inboxed bob/ +0ms by send", "inboxed carol/ +0ms by send",
		"acked bob/phone +1000ms by ack", "read bob/ +2000ms by read", "acked bob/laptop +3000ms by ack",
		"acked alice/laptop +4000ms by ack",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("derived trace:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// The message of a write-diffused group: its trace is what was written.
	msgs, err := st.Log(ctx, written, 0, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("written group's log: %v, %v", msgs, err)
	}
	if got, err := st.Events(ctx, msgs[0].ID); err != nil || len(got) != 0 {
		t.Fatalf("a write-diffused group's message derived %d events (%v)", len(got), err)
	}
}

// A forgotten device's cursors in read-diffused groups are retired: a new
// device that connects later with the same id stands at the member's
// start, as a new device does (it had stood where the forgotten one had
// acked, and was not told of what it had never pulled until the group's
// next message), while the user's delivered watermark and the derived
// trace keep what the forgotten device acked.
func TestAForgottenDevicesGroupCursorsAreRetired(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	t0 := time.UnixMilli(1_800_000_000_000).UTC()
	st.GroupReads = true
	g := im.Group("retire")
	groupWith(t, st, g, []im.UserID{"bob"}, 3, t0)
	for _, d := range []im.DeviceID{"phone", "laptop"} {
		if err := st.EnsureDevice(ctx, "bob", d, 20, t0); err != nil {
			t.Fatal(err)
		}
	}
	for d, upTo := range map[im.DeviceID]int64{"phone": 3, "laptop": 1} {
		if _, err := st.AckGroup(ctx, g, im.AckRange{User: "bob", Device: d, UpTo: upTo, At: t0.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.ForgetDevice(ctx, "bob", "phone"); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ReadGroups(ctx, "bob", "phone"); err != nil || len(got) != 1 || got[0] != (im.GroupPosition{Conversation: g, Head: 3}) {
		t.Fatalf("a new device with the forgotten one's id stands at %+v, %v; want the member's start", got, err)
	}
	if states, err := st.ConversationStates(ctx, g, []im.UserID{"bob"}); err != nil || states["bob"].Delivered != 3 {
		t.Fatalf("bob's delivered watermark after the forget: %+v, %v; want 3", states, err)
	}
	log, err := st.Log(ctx, g, 2, 3)
	if err != nil || len(log) != 1 {
		t.Fatalf("message 3: %v, %v", log, err)
	}
	evs, err := st.Events(ctx, log[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e im.Event) bool {
		return e.Type == im.EventAcked && e.User == "bob" && e.Device == "phone" && strings.Contains(e.Detail, "forgotten")
	}) {
		t.Fatalf("message 3's trace lost the forgotten phone's ack: %+v", evs)
	}
	// The id connects again: a new device, whose acks move its own cursor from nothing.
	if err := st.EnsureDevice(ctx, "bob", "phone", 20, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r, err := st.AckGroup(ctx, g, im.AckRange{User: "bob", Device: "phone", UpTo: 2, At: t0.Add(time.Minute)}); err != nil || !r.Moved || r.Old != 0 {
		t.Fatalf("the new phone's first ack: %+v, %v", r, err)
	}
	cursors, err := st.GroupCursorsNow(ctx, g, []im.UserID{"bob"})
	if err != nil || cursors[im.DeviceKey{User: "bob", Device: "phone"}].Acked != 2 || cursors[im.DeviceKey{User: "bob", Device: "laptop"}].Acked != 1 || len(cursors) != 3 {
		t.Fatalf("bob's cursors in the group: %+v, %v; want the new phone at 2, the laptop at 1 and the retired one", cursors, err)
	}
}
