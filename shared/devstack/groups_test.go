package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/testkit"
	"github.com/signet-im/signet/shared/wire"
)

// writeGroups pins a stack's groups to write diffusion (GroupDelivery
// write, not the default) for the tests of what it stores and pushes
// (inbox entries, "message" frames with an inbox seq); groupread_test.go
// has read diffusion's.
var writeGroups = map[string]string{"GroupDelivery": "write"}

// answer waits for the frame answering ref (of type typ, or an error),
// calling again on API Gateway's own error frame (which names no request:
// this one's invocation may have failed, timed out on a loaded machine),
// as a client asks a query again.
func (c *wsClient) answer(ref string, timeout time.Duration, again func()) (string, map[string]any) {
	c.t.Helper()
	// At least 30 s, as next: a query that takes milliseconds alone can
	// take over 10 s on a loaded 2-core machine (a 200-member group's
	// receipts did, in CI beside three other suites).
	timeout = max(timeout, 30*time.Second)
	deadline := time.After(timeout)
	for {
		select {
		case r := <-c.raw:
			var m map[string]any
			if json.Unmarshal([]byte(r), &m) != nil {
				continue
			}
			if m["ref"] == ref {
				return r, m
			}
			if _, typed := m["type"]; !typed && m["message"] == "Internal server error" {
				again()
			}
		case <-deadline:
			c.t.Fatalf("no answer to %s within %s", ref, timeout)
		}
	}
}

// request writes a frame with a fresh ref and decodes its answer into out;
// it fails the test on an error frame unless wantCode is given.
var refs atomic.Int64

func (c *wsClient) request(frame map[string]any, out any, wantCode ...wire.Code) {
	c.t.Helper()
	ref := fmt.Sprintf("r%d", refs.Add(1))
	frame["ref"] = ref
	c.write(frame)
	raw, m := c.answer(ref, 10*time.Second, func() { c.write(frame) })
	if m["type"] == "error" {
		if len(wantCode) == 0 || m["code"] != string(wantCode[0]) {
			c.t.Fatalf("%v answered %s", frame, raw)
		}
		return
	}
	if len(wantCode) > 0 {
		c.t.Fatalf("%v answered %s, want error %s", frame, raw, wantCode[0])
	}
	if out != nil {
		reflect.ValueOf(out).Elem().SetZero() // absent omitempty fields must not keep old values
		if err := json.Unmarshal([]byte(raw), out); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *wsClient) sendTo(clientMsgID, conv string, body any) frame {
	c.t.Helper()
	c.write(map[string]any{"action": "send", "clientMsgId": clientMsgID, "conversationId": conv, "body": body})
	for {
		f := c.next("sent", 10*time.Second)
		if f.ClientMsgID == clientMsgID {
			return f
		}
	}
}

// groupEntries returns the convSeqs of conv's messages in u's inbox, in inbox order.
func groupEntries(t *testing.T, st *devstack.Stack, u im.UserID, conv string) []int64 {
	t.Helper()
	var out []int64
	cursor := int64(0)
	for {
		page, err := st.Store.Page(context.Background(), u, cursor, 100, wire.EntrySize)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			if string(e.Message.Conversation) == conv {
				out = append(out, e.Message.ConvSeq)
			}
		}
		if !page.More {
			return out
		}
		cursor = page.Next
	}
}

func TestGroupMembershipRolesAndDelivery(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{Parameters: writeGroups})
	alice := dial(t, st, "alice", "laptop")
	alicePhone := dial(t, st, "alice", "phone")
	bob := dial(t, st, "bob", "laptop")
	carol := dial(t, st, "carol", "laptop")

	var g wire.GroupInfo
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:oncall", "name": "On-call", "users": []string{"bob", "carol"}}, &g)
	if g.ConversationID != "g:oncall" || g.Count != 3 || len(g.Changed) != 3 {
		t.Fatalf("create = %+v", g)
	}
	conv := g.ConversationID
	// Roles: a member may not add, an admin may, nobody may send into a
	// group they are not in, and the last owner may not leave.
	bob.request(map[string]any{"action": "group", "op": "add", "conversationId": conv, "users": []string{"dave"}}, nil, wire.CodeForbidden)
	dave := dial(t, st, "dave", "laptop")
	dave.write(map[string]any{"action": "send", "clientMsgId": "x1", "conversationId": conv, "body": "let me in"})
	if e := dave.next("error", 5*time.Second); e.Code != string(wire.CodeForbidden) {
		t.Fatalf("outsider send: %+v", e)
	}
	alice.request(map[string]any{"action": "group", "op": "leave", "conversationId": conv}, nil, wire.CodeBadRequest)
	alice.request(map[string]any{"action": "group", "op": "role", "conversationId": conv, "users": []string{"bob"}, "role": "admin"}, nil)

	first := alice.sendTo("m1", conv, "page 1: db down")
	if first.ConvSeq != 1 {
		t.Fatalf("sent = %+v", first)
	}
	for _, c := range []*wsClient{bob, carol, alicePhone} {
		f := c.next("message", 10*time.Second)
		if id, from, _ := f.pushed(t); id != first.MessageID || from != "alice" {
			t.Fatalf("push = %s from %s", id, from)
		}
	}
	dave.quiet("message", 300*time.Millisecond)

	// Bob (admin now) removes carol and adds dave; what follows reaches
	// dave and not carol.
	bob.request(map[string]any{"action": "group", "op": "remove", "conversationId": conv, "users": []string{"carol"}}, nil)
	bob.request(map[string]any{"action": "group", "op": "add", "conversationId": conv, "users": []string{"dave"}}, nil)
	carol.write(map[string]any{"action": "send", "clientMsgId": "c1", "conversationId": conv, "body": "still here?"})
	if e := carol.next("error", 5*time.Second); e.Code != string(wire.CodeForbidden) {
		t.Fatalf("removed member send: %+v", e)
	}
	second := bob.sendTo("b1", conv, "page 2: fixed")
	if f := dave.next("message", 10*time.Second); f.Seq != 1 || f.Message == nil {
		t.Fatalf("dave's first entry = %+v", f)
	} else if id, _, _ := f.pushed(t); id != second.MessageID {
		t.Fatalf("dave got %s, want %s", id, second.MessageID)
	}
	waitFor(t, "fan-out of message 2", func() bool { return len(groupEntries(t, st, "alice", conv)) == 2 })
	carol.quiet("message", 500*time.Millisecond)
	for u, want := range map[im.UserID][]int64{"alice": {1, 2}, "bob": {1, 2}, "carol": {1}, "dave": {2}} {
		if got := groupEntries(t, st, u, conv); !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", u, got, want)
		}
	}
	// History: dave sees from his join, carol up to her removal.
	var h wire.HistoryPage
	dave.request(map[string]any{"action": "history", "conversationId": conv}, &h)
	if len(h.Messages) != 1 || h.Messages[0].ConvSeq != 2 || h.HasMore {
		t.Fatalf("dave's history = %+v", h)
	}
	carol.request(map[string]any{"action": "history", "conversationId": conv}, &h)
	if len(h.Messages) != 1 || h.Messages[0].ConvSeq != 1 {
		t.Fatalf("carol's history = %+v", h)
	}
	var members wire.GroupInfo
	dave.request(map[string]any{"action": "group", "op": "members", "conversationId": conv}, &members)
	roles := map[string]string{}
	for _, m := range members.Members {
		if !m.Removed {
			roles[m.UserID] = m.Role
		}
	}
	if members.Count != 3 || roles["alice"] != "owner" || roles["bob"] != "admin" || roles["dave"] != "member" || roles["carol"] != "" {
		t.Fatalf("members = %+v", members)
	}
}

func TestGroupReceiptsAreWatermarksQueriedNotPushed(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{Parameters: writeGroups})
	alice := dial(t, st, "alice", "laptop")
	bob := dial(t, st, "bob", "laptop")
	carolPhone := dial(t, st, "carol", "phone")
	carolTablet := dial(t, st, "carol", "tablet")
	var g wire.GroupInfo
	alice.request(map[string]any{"action": "group", "op": "create", "name": "Team", "users": []string{"bob", "carol"}}, &g)
	for i := 1; i <= 3; i++ {
		alice.sendTo(fmt.Sprintf("m%d", i), g.ConversationID, i)
	}
	// Bob's device persists all three; carol reads two on her phone.
	for range 3 {
		bob.next("message", 10*time.Second)
	}
	bob.write(map[string]any{"action": "ack", "upTo": 3})
	carolPhone.write(map[string]any{"action": "read", "conversationId": g.ConversationID, "upTo": 2})
	if r := carolTablet.next("read", 5*time.Second); r.Type != "read" {
		t.Fatal(r)
	}
	var rc wire.ReceiptsAnswer
	waitFor(t, "bob's delivered watermark", func() bool {
		alice.request(map[string]any{"action": "receipts", "conversationId": g.ConversationID, "convSeq": 3}, &rc)
		return rc.Delivered == 1
	})
	if rc.Members != 2 || rc.Read != 0 || !slices.Equal(rc.DeliveredBy, []string{"bob"}) {
		t.Fatalf("receipts of 3 = %+v", rc)
	}
	alice.request(map[string]any{"action": "receipts", "conversationId": g.ConversationID, "convSeq": 2}, &rc)
	if rc.Members != 2 || rc.Delivered != 2 || rc.Read != 1 || !slices.Equal(rc.ReadBy, []string{"carol"}) {
		t.Fatalf("receipts of 2 = %+v", rc)
	}
	alice.quiet("receipt", 300*time.Millisecond) // groups never push receipts
	// Outsiders may not ask; a message that does not exist is a clear error.
	dave := dial(t, st, "dave", "laptop")
	dave.request(map[string]any{"action": "receipts", "conversationId": g.ConversationID, "convSeq": 1}, nil, wire.CodeForbidden)
	alice.request(map[string]any{"action": "receipts", "conversationId": g.ConversationID, "convSeq": 99}, nil, wire.CodeBadRequest)
}

// failingFanout fails one AppendGroup call (the failAt-th) as a fan-out
// Lambda dying half-way would; every other call goes to the real store.
type failingFanout struct {
	handler.Fanouts
	calls, failAt, failed atomic.Int64
}

func (f *failingFanout) AppendGroup(ctx context.Context, c im.ConversationID, u im.UserID, pos im.InboxPosition, msgs []im.Message, now time.Time) ([]im.Entry, error) {
	if f.calls.Add(1) == f.failAt.Load() {
		f.failed.Add(1)
		return nil, errors.New("injected: fan-out Lambda died")
	}
	return f.Fanouts.AppendGroup(ctx, c, u, pos, msgs, now)
}

func TestGroupOf200FanOutIsExactlyOnceWhenRetriedAfterFailingHalfway(t *testing.T) {
	t.Parallel()
	fail := &failingFanout{}
	fail.failAt.Store(100)
	// On testkit.LargeTableEmulator (on minidyn 35 s instead of 8).
	st := startStack(t, devstack.Options{Emulator: testkit.LargeTableEmulator(), Parameters: writeGroups, Configure: func(fn string, h *handler.Deps) {
		if fn == "FanoutFunction" {
			fail.Fanouts = h.Fanouts
			h.Fanouts = fail
		}
	}})
	owner := dial(t, st, "owner", "laptop")
	var users []string
	for i := range 199 {
		users = append(users, fmt.Sprintf("m%03d", i))
	}
	var g wire.GroupInfo
	owner.request(map[string]any{"action": "group", "op": "create", "name": "All hands", "users": users}, &g)
	if g.Count != 200 {
		t.Fatalf("group = %+v", g)
	}
	sent := owner.sendTo("announce", g.ConversationID, "all hands at 10")
	all := append([]string{"owner"}, users...)
	waitFor(t, "every inbox", func() bool {
		for _, u := range all {
			if len(groupEntries(t, st, im.UserID(u), g.ConversationID)) == 0 {
				return false
			}
		}
		return true
	})
	if fail.failed.Load() != 1 {
		t.Fatalf("the injected failure ran %d times", fail.failed.Load())
	}
	// Let any retry still in flight finish, then check every inbox holds
	// the message exactly once.
	time.Sleep(1500 * time.Millisecond)
	for _, u := range all {
		if got := groupEntries(t, st, im.UserID(u), g.ConversationID); !slices.Equal(got, []int64{sent.ConvSeq}) {
			t.Fatalf("%s holds %v", u, got)
		}
	}
	t.Logf("AppendGroup calls: %d for 200 members (one failed, its job retried)", fail.calls.Load())
}

// gatedFanout holds every fan-out job until open is closed.
type gatedFanout struct {
	handler.Fanouts
	open chan struct{}
}

func (g gatedFanout) Members(ctx context.Context, c im.ConversationID) ([]im.Member, error) {
	select {
	case <-g.open:
		return g.Fanouts.Members(ctx, c)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A member removed and added again before the fan-out of what was sent to
// them in between ran (a queue behind, a fan-out Lambda throttled) still
// gets those messages in their inbox, and never what was sent while they
// were out.
func TestAMemberAddedAgainBeforeTheFanOutRanGetsWhatWasSentToThem(t *testing.T) {
	t.Parallel()
	gate := gatedFanout{open: make(chan struct{})}
	st := startStack(t, devstack.Options{Parameters: writeGroups, Configure: func(fn string, h *handler.Deps) {
		if fn == "FanoutFunction" {
			gate.Fanouts = h.Fanouts
			h.Fanouts = gate
		}
	}})
	alice := dial(t, st, "alice", "laptop")
	var g wire.GroupInfo
	alice.request(map[string]any{"action": "group", "op": "create", "name": "Held", "users": []string{"bob", "carol"}}, &g)
	alice.sendTo("m1", g.ConversationID, "m1")
	alice.sendTo("m2", g.ConversationID, "m2")
	alice.request(map[string]any{"action": "group", "op": "remove", "conversationId": g.ConversationID, "users": []string{"bob"}}, nil)
	alice.sendTo("m3", g.ConversationID, "while bob is out")
	alice.request(map[string]any{"action": "group", "op": "add", "conversationId": g.ConversationID, "users": []string{"bob"}}, nil)
	alice.sendTo("m4", g.ConversationID, "m4")
	if got := groupEntries(t, st, "bob", g.ConversationID); len(got) != 0 {
		t.Fatalf("bob's inbox holds %v before any fan-out ran", got)
	}
	close(gate.open)
	waitFor(t, "the fan-out to carol", func() bool { return len(groupEntries(t, st, "carol", g.ConversationID)) == 4 })
	waitFor(t, "the fan-out to bob", func() bool { return len(groupEntries(t, st, "bob", g.ConversationID)) >= 3 })
	time.Sleep(time.Second) // a job still running would add its copy now
	if got := groupEntries(t, st, "bob", g.ConversationID); !slices.Equal(got, []int64{1, 2, 4}) {
		t.Fatalf("bob's inbox holds %v, want 1, 2 and 4", got)
	}
}

// heldFanout holds every fan-out job until the test ends (then fails it):
// this test measures reads, which depend on the group log and membership
// only, and 20,000 inbox entries would only slow the emulator down.
type heldFanout struct {
	handler.Fanouts
	released <-chan struct{}
}

func (h heldFanout) Members(ctx context.Context, c im.ConversationID) ([]im.Member, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-h.released:
		return nil, errors.New("held until the test ended")
	}
}

// quiesced waits as quiesce does and returns the counts then and what
// changed since before.
func quiesced(c *callcount.Counter, before callcount.Snapshot) (now, since callcount.Snapshot) {
	now = quiesce(c)
	return now, now.Sub(before)
}

// quiesce waits until the stack makes no AWS call but the queue pollers'
// for 3 s — longer than the 2 s presence debounce, so the presence jobs
// that $connect queued have run — and returns the counts then.
func quiesce(c *callcount.Counter) callcount.Snapshot {
	busy := func(s callcount.Snapshot) int {
		return s.Service("DynamoDB") + s.Service("SQS") - s.Calls["SQS.ReceiveMessage"]
	}
	last := c.Snapshot()
	for {
		time.Sleep(3 * time.Second)
		now := c.Snapshot()
		if busy(now) == busy(last) {
			return now
		}
		last = now
	}
}

func TestGroupReadsCostOneWatermarkWritePerMemberPerReadAction(t *testing.T) {
	t.Parallel()
	counter := callcount.New()
	// 200 members reading at once: a cost measurement at AWS's standard
	// account quota (a new account's 10 would throttle most of them).
	// Read diffusion whatever mode the suite runs in: a read is the same
	// in both, and the written group's receipts of 200 members (held
	// elsewhere: TestGroupAcksWriteOnlyTheCursorAndReceiptsDeriveFromIt)
	// went unanswered for 30 s in two CI runs beside three other suites
	// (the function's timeout is 10 s).
	// On testkit.LargeTableEmulator (memdyn unless the environment names
	// one): on minidyn 200 members' $connect and reads took 90 s.
	released := make(chan struct{})
	st := startStack(t, devstack.Options{Emulator: testkit.LargeTableEmulator(), Parameters: map[string]string{"GroupDelivery": "read"}, Concurrency: 1000, APIOptions: counter.APIOptions(), Configure: testkit.On("FanoutFunction", func(h *handler.Deps) {
		h.Fanouts = heldFanout{h.Fanouts, released}
	})})
	// Before the stack closes, which waits for its invocations (a held
	// job until the function's timeout).
	t.Cleanup(func() { close(released) })
	owner := dial(t, st, "owner", "laptop")
	var users []string
	for i := range 199 {
		users = append(users, fmt.Sprintf("r%03d", i))
	}
	var g wire.GroupInfo
	owner.request(map[string]any{"action": "group", "op": "create", "name": "Readers", "users": users}, &g)
	for i := 1; i <= 100; i++ {
		owner.sendTo(fmt.Sprintf("m%d", i), g.ConversationID, i)
	}
	members := append([]string{"owner"}, users...)
	memberIDs := make([]im.UserID, len(members))
	for i, u := range members {
		memberIDs[i] = im.UserID(u)
	}
	conns := make([]*wsClient, len(members))
	for i, u := range members {
		conns[i] = dial(t, st, u, "d")
	}
	before := quiesce(counter) // connect-time writes (presence) settle
	// Twenty at a time, each wave stored before the next (a read answers
	// nothing on success: its watermark says it): two hundred at once
	// queue on the emulator's one lock (minidyn under -race on a loaded
	// machine), and those queued past the read function's timeout fail as
	// Lambda would fail them.
	for wave := 0; wave < len(conns); wave += 20 {
		ids := memberIDs[wave:min(wave+20, len(conns))]
		for _, c := range conns[wave:min(wave+20, len(conns))] {
			c.write(map[string]any{"action": "read", "conversationId": g.ConversationID, "upTo": 100})
		}
		waitFor(t, fmt.Sprintf("read watermarks %d–%d", wave, wave+19), func() bool {
			states, err := st.Store.ConversationStates(context.Background(), im.ConversationID(g.ConversationID), ids)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range states {
				if s.Read != 100 {
					return false
				}
			}
			return len(states) == len(ids)
		})
	}
	cost := quiesce(counter).Sub(before) // the last read syncs finish
	t.Logf("200 read actions over 100 messages:\n%s", cost.Table(200, "read action"))
	if got := cost.Calls["DynamoDB.UpdateItem"]; got != 200 {
		t.Fatalf("UpdateItem calls = %d, want one watermark write per member (200)", got)
	}
	for _, op := range []string{"DynamoDB.PutItem", "DynamoDB.TransactWriteItems", "DynamoDB.BatchWriteItem"} {
		if cost.Calls[op] != 0 {
			t.Errorf("%s calls = %d, want 0", op, cost.Calls[op])
		}
	}
	if cost.WCU != 200 {
		t.Errorf("write units = %d, want 200", cost.WCU)
	}
	var rc wire.ReceiptsAnswer
	owner.request(map[string]any{"action": "receipts", "conversationId": g.ConversationID, "convSeq": 100}, &rc)
	if rc.Members != 199 || rc.Read != 199 {
		t.Fatalf("receipts = %+v", rc)
	}
}

// A group ack writes the device's cursor and nothing else (issue 12: the
// member's delivered watermark was a second write per member and message),
// and "receipts" derives every member's watermark from their cursors.
func TestGroupAcksWriteOnlyTheCursorAndReceiptsDeriveFromIt(t *testing.T) {
	t.Parallel()
	counter := callcount.New()
	// On testkit.LargeTableEmulator; pushed again only after 30 s, so that the unacked pushes' redelivery does
	// not keep the stack busy while it quiesces before the acks.
	redelivery := im.Redelivery{PushTimeout: 30 * time.Second, Backoff: []time.Duration{30 * time.Second}}
	st := startStack(t, devstack.Options{Emulator: testkit.LargeTableEmulator(), Redelivery: &redelivery, Parameters: writeGroups, Concurrency: 1000, APIOptions: counter.APIOptions()})
	owner := dial(t, st, "owner", "laptop")
	const members = 100 // more than one BatchGetItem's keys, and than deriveWorkers
	var users []string
	for i := range members {
		users = append(users, fmt.Sprintf("m%03d", i))
	}
	var g wire.GroupInfo
	owner.request(map[string]any{"action": "group", "op": "create", "name": "Acks", "users": users}, &g)
	conns := make([]*wsClient, members)
	for i, u := range users {
		conns[i] = dial(t, st, u, "d")
	}
	owner.sendTo("m1", g.ConversationID, 1)
	pushed := make([]frame, members)
	for i, c := range conns {
		pushed[i] = c.next("message", time.Minute)
	}
	inboxUpdates := func(s callcount.Snapshot) (n int) {
		for call, wcu := range s.WCUByCall {
			if strings.HasPrefix(call, "UpdateItem ") && strings.Contains(call, "Inbox") {
				n += wcu
			}
		}
		return n
	}
	before := quiesce(counter)
	// Ten at a time, each wave stored before the next: a hundred at once
	// queue on the emulator's one lock (minidyn under -race on a loaded
	// machine), and those queued past the ack function's 10 s timeout
	// fail as Lambda would fail them.
	for wave := 0; wave < members; wave += 10 {
		for i := wave; i < min(wave+10, members); i++ {
			conns[i].write(map[string]any{"action": "ack", "upTo": pushed[i].Seq})
		}
		waitFor(t, fmt.Sprintf("acks %d–%d stored", wave, wave+9), func() bool {
			for i := wave; i < min(wave+10, members); i++ {
				if acked, err := st.Store.AckedUpTo(context.Background(), im.UserID(users[i]), "d"); err != nil || acked < pushed[i].Seq {
					return false
				}
			}
			return true
		})
	}
	before, acks := quiesced(counter, before)
	if got := inboxUpdates(acks); got != members {
		t.Errorf("%d acks wrote %d units of inbox updates, want one cursor each (%d); writes %v", members, got, members, acks.WCUByCall)
	}
	var rc wire.ReceiptsAnswer
	owner.request(map[string]any{"action": "receipts", "conversationId": g.ConversationID, "convSeq": 1}, &rc)
	query := quiesce(counter).Sub(before)
	if rc.Members != members || rc.Delivered != members || rc.Read != 0 {
		t.Fatalf("receipts = %+v, want all %d delivered", rc, members)
	}
	t.Logf("receipts of a %d-member group's message: %.1f read units (%v)", members, query.RRU, query.RRUByCall)
	if query.RRU > 5*members {
		t.Errorf("receipts read %.1f units for %d members: more than 5 each", query.RRU, members)
	}
}

// A group change with an op id whose invocation failed after storing it,
// sent again as a client does on the error, is answered as the first:
// changed names the users it changed, a removed member is told, an added
// one too — and a member the add named who was one already is not told
// again; a leave sent again is no error. (Without an op id the retry
// answers that it changed nobody and tells every user an add names.)
func TestAGroupChangeSentAgainWithItsOpIDAnswersAndTellsAsTheFirst(t *testing.T) {
	t.Parallel()
	var crashed sync.Map
	st := startStack(t, devstack.Options{Configure: testkit.On("GroupFunction", func(h *handler.Deps) {
		h.Groups = testkit.GroupChangeStoredThenFailed{Groups: h.Groups, Failed: &crashed}
	})})
	alice, bob, carol, dave, erin := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone"), dial(t, st, "carol", "phone"), dial(t, st, "dave", "phone"), dial(t, st, "erin", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:ops", "name": "Ops", "users": []string{"bob", "carol", "erin"}}, nil)
	for _, c := range []*wsClient{bob, carol, erin} {
		if f := c.next(wire.TypeMembership, 10*time.Second); f.Change != "added" {
			t.Fatalf("create notice: %+v", f)
		}
	}
	again := func(who *wsClient, frame map[string]any, want ...string) wire.GroupInfo {
		t.Helper()
		who.request(frame, nil, wire.CodeInternal)
		var g wire.GroupInfo
		who.request(frame, &g)
		if !slices.Equal(g.Changed, want) {
			t.Fatalf("%v sent again answered changed %v, want %v as the first time", frame, g.Changed, want)
		}
		return g
	}
	again(alice, map[string]any{"action": "group", "op": "add", "conversationId": "g:ops", "users": []string{"dave", "erin"}, "opId": "add-1"}, "dave")
	if f := dave.next(wire.TypeMembership, 10*time.Second); f.Change != "added" || f.Conversation != "g:ops" {
		t.Fatalf("dave's notice: %+v", f)
	}
	again(alice, map[string]any{"action": "group", "op": "remove", "conversationId": "g:ops", "users": []string{"carol"}, "opId": "rm-1"}, "carol")
	if f := carol.next(wire.TypeMembership, 10*time.Second); f.Change != "removed" || f.Conversation != "g:ops" {
		t.Fatalf("carol's notice: %+v", f)
	}
	if g := again(bob, map[string]any{"action": "group", "op": "leave", "conversationId": "g:ops", "opId": "leave-1"}, "bob"); g.Count != 3 {
		t.Fatalf("after the leave %d members, want alice, dave and erin", g.Count)
	}
	// Erin, named by the add as a member already, was told nothing: a
	// notice to her would have been written to her connection before the
	// add was answered, and so before this answer.
	erin.request(map[string]any{"action": "group", "op": "members", "conversationId": "g:ops"}, nil)
	erin.quiet(wire.TypeMembership, time.Second)

	// A copy of the removal that comes after carol was added back (the
	// client asked again while the first copy still ran) is answered as
	// the first and undoes nothing: carol stays a member and is not told
	// she was removed.
	var back wire.GroupInfo
	alice.request(map[string]any{"action": "group", "op": "add", "conversationId": "g:ops", "users": []string{"carol"}, "opId": "add-2"}, nil, wire.CodeInternal)
	alice.request(map[string]any{"action": "group", "op": "add", "conversationId": "g:ops", "users": []string{"carol"}, "opId": "add-2"}, &back)
	if f := carol.next(wire.TypeMembership, 10*time.Second); f.Change != "added" {
		t.Fatalf("carol's notice of the add: %+v", f)
	}
	var late wire.GroupInfo
	alice.request(map[string]any{"action": "group", "op": "remove", "conversationId": "g:ops", "users": []string{"carol"}, "opId": "rm-1"}, &late)
	if !slices.Equal(late.Changed, []string{"carol"}) || late.Count != back.Count || back.Count != 4 {
		t.Fatalf("the removal's late copy answered changed %v with %d members (after the add: %d), want [carol] and 4 members", late.Changed, late.Count, back.Count)
	}
	carol.quiet(wire.TypeMembership, time.Second)
}
