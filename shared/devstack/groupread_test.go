package devstack_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/testkit"
	"github.com/signet-im/signet/shared/wire"
)

// rawOf returns the next raw frame of type typ (frames of other types are
// passed over here; they stay in the decoded backlog).
func (c *wsClient) rawOf(typ string, timeout time.Duration) string {
	c.t.Helper()
	deadline := time.After(max(timeout, 30*time.Second))
	for {
		select {
		case r := <-c.raw:
			var env struct {
				Type string `json:"type"`
			}
			if json.Unmarshal([]byte(r), &env) == nil && env.Type == typ {
				return r
			}
		case <-deadline:
			c.t.Fatalf("no %q frame", typ)
		}
	}
}

// The group ack and sync frames of read diffusion
// (docs/proposal-group-read-diffusion.md) through the strict local stack:
// a member pulls the group's log and moves their device's cursor in it;
// positions beyond what is due, strangers and 1:1 ids are refused and
// change nothing.
func TestGroupSyncAndAckFramesMoveOnlyAMembersCursor(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	alice, bob, carol := dial(t, st, "alice", "phone"), dial(t, st, "bob", "phone"), dial(t, st, "carol", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:rd", "name": "RD", "users": []string{"bob"}}, nil)
	for _, id := range []string{"m1", "m2", "m3"} {
		alice.sendTo(id, "g:rd", map[string]any{"text": id})
	}

	bob.write(map[string]any{"action": "sync", "conversationId": "g:rd", "cursor": 1, "limit": 100})
	var page wire.GroupSyncPage
	if err := json.Unmarshal([]byte(bob.rawOf(wire.TypeGroupSync, 10*time.Second)), &page); err != nil {
		t.Fatal(err)
	}
	if page.ConversationID != "g:rd" || len(page.Messages) != 2 || page.Messages[0].ConvSeq != 2 || page.Messages[1].ConvSeq != 3 ||
		string(page.Messages[1].Body) != `{"text":"m3"}` || page.Head != 3 || page.HasMore || page.NextCursor != 3 {
		t.Fatalf("bob's group page after 1: %+v", page)
	}

	cursor := func(u im.UserID) int64 {
		t.Helper()
		cs, err := st.Store.GroupCursorsNow(context.Background(), "g:rd", []im.UserID{u})
		if err != nil {
			t.Fatal(err)
		}
		return cs[im.DeviceKey{User: u, Device: "phone"}].Acked
	}
	bob.write(map[string]any{"action": "ack", "conversationId": "g:rd", "upTo": 2})
	// An ack is not answered and frames run concurrently (as on API
	// Gateway): wait for it to be stored before the next one.
	waitFor(t, "bob's cursor in g:rd at 2", func() bool { return cursor("bob") == 2 })
	// An ack above the head is refused (bad_request, not resync: the
	// inbox is not in question) and moves nothing.
	bob.write(map[string]any{"action": "ack", "conversationId": "g:rd", "upTo": 9})
	if e := bob.next("error", 10*time.Second); e.Code != string(wire.CodeBadRequest) || e.Head != 0 {
		t.Fatalf("ack beyond the group's head: %+v", e)
	}
	if got := cursor("bob"); got != 2 {
		t.Fatalf("bob's cursor in g:rd = %d, want 2", got)
	}
	refused := func(c *wsClient, frame map[string]any, code wire.Code) {
		t.Helper()
		c.write(frame)
		if e := c.next("error", 10*time.Second); e.Code != string(code) {
			t.Fatalf("%v answered %+v, want %s", frame, e, code)
		}
	}
	refused(bob, map[string]any{"action": "sync", "conversationId": "g:rd", "cursor": 4}, wire.CodeBadRequest)        // beyond the head
	refused(bob, map[string]any{"action": "sync", "conversationId": "d:alice:bob", "cursor": 0}, wire.CodeBadRequest) // no group
	refused(carol, map[string]any{"action": "sync", "conversationId": "g:rd", "cursor": 0}, wire.CodeForbidden)       // a stranger
	refused(carol, map[string]any{"action": "ack", "conversationId": "g:rd", "upTo": 1}, wire.CodeForbidden)
	if got := cursor("carol"); got != 0 {
		t.Fatalf("carol's cursor in g:rd = %d", got)
	}
}

// groupCursor is u's phone's cursor in group c.
func groupCursor(t *testing.T, st *devstack.Stack, c im.ConversationID, u im.UserID) int64 {
	t.Helper()
	cs, err := st.Store.GroupCursorsNow(context.Background(), c, []im.UserID{u})
	if err != nil {
		t.Fatal(err)
	}
	return cs[im.DeviceKey{User: u, Device: "phone"}].Acked
}

// A stack whose groups are read-diffused (GroupDelivery read): a group
// message is pushed to the members online, once more while unacked, and
// copied into no inbox; a member offline when it was sent learns from the
// last page of their inbox sync where each group stands, pulls it and acks it.
func TestReadDiffusedGroupIsPushedToOnlineMembersAndPulledByTheOthers(t *testing.T) {
	t.Parallel()
	policy := im.Redelivery{PushTimeout: time.Second, Backoff: []time.Duration{time.Second}}
	st := startStack(t, devstack.Options{Redelivery: &policy, Parameters: map[string]string{"GroupDelivery": "read"}})
	alice, bob := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:rd", "name": "RD", "users": []string{"bob", "carol"}}, nil)
	alice.sendTo("m1", "g:rd", map[string]any{"text": "m1"})

	// Pushed to bob, and, unacked, pushed again by its redelivery check.
	var id string
	for i := range 2 {
		f := bob.next(wire.TypeGroupMessage, 10*time.Second)
		var m wire.Message
		if err := json.Unmarshal(f.Message, &m); err != nil || m.ConversationID != "g:rd" || m.ConvSeq != 1 || string(m.Body) != `{"text":"m1"}` {
			t.Fatalf("push %d to bob: %s (%v)", i+1, f.Message, err)
		}
		id = m.MessageID
	}
	bob.write(map[string]any{"action": "ack", "conversationId": "g:rd", "upTo": 1})
	waitFor(t, "bob's cursor in g:rd", func() bool { return groupCursor(t, st, "g:rd", "bob") == 1 })
	bob.quiet("message", 500*time.Millisecond) // no inbox entry was pushed
	for _, u := range []im.UserID{"alice", "bob", "carol"} {
		if got := groupEntries(t, st, u, "g:rd"); len(got) != 0 {
			t.Fatalf("%s's inbox holds g:rd's messages %v: a read-diffused group is copied into no inbox", u, got)
		}
	}

	// carol was offline: her first sync names the group, she pulls and acks it.
	carol := dial(t, st, "carol", "phone")
	inboxSync := func() wire.SyncPage {
		t.Helper()
		carol.write(map[string]any{"action": "sync", "cursor": 0})
		var p wire.SyncPage
		if err := json.Unmarshal([]byte(carol.rawOf(wire.TypeSync, 10*time.Second)), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := inboxSync(); len(p.Groups) != 1 || p.Groups[0] != (wire.GroupHead{ConversationID: "g:rd", Head: 1}) {
		t.Fatalf("carol's sync names the groups %+v, want g:rd at 1", p.Groups)
	}
	carol.write(map[string]any{"action": "sync", "conversationId": "g:rd", "cursor": 0})
	var page wire.GroupSyncPage
	if err := json.Unmarshal([]byte(carol.rawOf(wire.TypeGroupSync, 10*time.Second)), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 1 || page.Messages[0].ConvSeq != 1 || page.HasMore {
		t.Fatalf("carol's pull of g:rd: %+v", page)
	}
	carol.write(map[string]any{"action": "ack", "conversationId": "g:rd", "upTo": 1})
	waitFor(t, "carol's cursor in g:rd", func() bool { return groupCursor(t, st, "g:rd", "carol") == 1 })
	// Every read-diffused group is named with its due head (a device
	// learns where a group it never pulled starts); carol's is at it.
	if p := inboxSync(); len(p.Groups) != 1 || p.Groups[0].Head != groupCursor(t, st, "g:rd", "carol") {
		t.Fatalf("after her ack carol's sync names %+v, her cursor at %d", p.Groups, groupCursor(t, st, "g:rd", "carol"))
	}

	// Its trace (the admin's GET /v1/messages/{id}/trace): what was written
	// — bob's re-push by the check; created and stored by the send in the
	// sampled share only — and, derived, created and stored from the log,
	// the members it is due to and the devices that have it.
	var trace struct {
		Events []struct{ Type, Function, UserID, DeviceID string }
	}
	var got []string
	waitFor(t, "the re-push in the trace", func() bool {
		r := call(t, st, "GET", "/v1/messages/"+id+"/trace", devstack.DefaultAdminKey, nil, "")
		if err := json.Unmarshal([]byte(r.raw), &trace); r.status != 200 || err != nil {
			t.Fatalf("trace of %s: %d %s", id, r.status, r.raw)
		}
		got = got[:0]
		for _, e := range trace.Events {
			// A redelivery check is written per re-push, as many as ran
			// by now; alice's laptop, which sent it, is pushed it too and,
			// never acking, re-pushed on the same schedule, to the end of
			// it on a loaded machine (awaiting_pull).
			if e.Type == "created" {
				e.DeviceID = "" // named only in a written trace (the sampled share)
			}
			if e.Type != "redelivery_scheduled" && ((e.Type != "pushed" && e.Type != "awaiting_pull") || e.UserID != "alice") {
				got = append(got, fmt.Sprintf("%s %s %s/%s", e.Type, e.Function, e.UserID, e.DeviceID))
			}
		}
		return slices.Contains(got, "pushed redeliver bob/phone")
	})
	slices.Sort(got)
	want := []string{"acked ack bob/phone", "acked ack carol/phone", "created send alice/", "inboxed send alice/", "inboxed send bob/",
		"inboxed send carol/", "pushed redeliver bob/phone", "stored send /"}
	if !slices.Equal(got, want) {
		t.Fatalf("trace of %s:\n%s\nwant:\n%s", id, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A read-diffused group's message a device never acks is pushed on the
// redelivery schedule, then no more: the connection is told by a notify
// naming the group to pull it, and — should the notify be lost too — by
// its next pong (once: the pong after it names nothing). A pong named the
// inbox head only, so a device whose last pushes of a quiet group and the
// notify were lost stayed behind until it reconnected (chaos seed 112).
func TestUnackedReadDiffusedPushEndsInANotifyNamingTheGroup(t *testing.T) {
	t.Parallel()
	policy := im.Redelivery{PushTimeout: time.Second, Backoff: []time.Duration{time.Second}}
	st := startStack(t, devstack.Options{Redelivery: &policy, Parameters: map[string]string{"GroupDelivery": "read"}})
	alice, bob := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:quiet", "name": "Quiet", "users": []string{"bob"}}, nil)
	alice.sendTo("q1", "g:quiet", "are you there?")
	for range 1 + policy.MaxRetries() {
		bob.next(wire.TypeGroupMessage, 10*time.Second)
	}
	var n wire.Notify
	if err := json.Unmarshal([]byte(bob.rawOf(wire.TypeNotify, 10*time.Second)), &n); err != nil {
		t.Fatal(err)
	}
	if len(n.Groups) != 1 || n.Groups[0] != (wire.GroupHead{ConversationID: "g:quiet", Head: 1}) {
		t.Fatalf("notify names %+v, want g:quiet at 1", n.Groups)
	}
	bob.quiet(wire.TypeGroupMessage, 3*time.Second)
	for i, want := range [][]wire.GroupHead{{{ConversationID: "g:quiet", Head: 1}}, nil} {
		bob.write(`{"action":"ping"}`)
		var p wire.Pong
		if err := json.Unmarshal([]byte(bob.rawOf(wire.TypePong, 10*time.Second)), &p); err != nil || !slices.Equal(p.Groups, want) {
			t.Fatalf("pong %d names %+v (%v), want %+v", i+1, p.Groups, err, want)
		}
	}
}

// onlineIn lists group c's online index as user/device, sorted.
func onlineIn(t *testing.T, st *devstack.Stack, c im.ConversationID) []string {
	t.Helper()
	conns, err := st.Store.OnlineIn(context.Background(), c, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, conn := range conns {
		out = append(out, string(conn.User)+"/"+string(conn.Device))
	}
	slices.Sort(out)
	return out
}

// A read-diffused group's fan-out finds the connected members in the
// group's online index (one Query, not one per member): a connection is
// in it from its $connect, or from its user's join when already connected
// (whose membership notice then names the head to pull up to), and leaves
// it with $disconnect; a member who joined while connected is pushed the
// next message.
func TestReadDiffusedGroupsOnlineIndexFollowsConnectionsAndJoins(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}})
	alice, bob := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:idx", "name": "Idx", "users": []string{"bob", "carol"}}, nil)
	var notice wire.Membership
	if err := json.Unmarshal([]byte(bob.rawOf(wire.TypeMembership, 10*time.Second)), &notice); err != nil || notice.Head == nil || *notice.Head != 0 {
		t.Fatalf("bob's notice of the create: %+v, %v; want head 0 (read diffusion: pull from here)", notice, err)
	}
	if got := onlineIn(t, st, "g:idx"); !slices.Equal(got, []string{"alice/laptop", "bob/phone"}) {
		t.Fatalf("online in g:idx after the create = %v", got)
	}
	alice.sendTo("i1", "g:idx", "one")
	alice.sendTo("i2", "g:idx", "two")

	// carol, a member offline until now, is indexed by her $connect.
	carol := dial(t, st, "carol", "tablet")
	if got := onlineIn(t, st, "g:idx"); !slices.Equal(got, []string{"alice/laptop", "bob/phone", "carol/tablet"}) {
		t.Fatalf("online in g:idx after carol's connect = %v", got)
	}
	// dave, connected already, is indexed when he is added; his notice
	// names the head he is due up to, and the next message is pushed.
	dave := dial(t, st, "dave", "phone")
	alice.request(map[string]any{"action": "group", "op": "add", "conversationId": "g:idx", "users": []string{"dave"}}, nil)
	if err := json.Unmarshal([]byte(dave.rawOf(wire.TypeMembership, 10*time.Second)), &notice); err != nil || notice.Head == nil || *notice.Head != 2 {
		t.Fatalf("dave's notice of his add: %+v, %v; want head 2", notice, err)
	}
	alice.sendTo("i3", "g:idx", "three")
	var push wire.GroupPush
	if err := json.Unmarshal([]byte(dave.rawOf(wire.TypeGroupMessage, 10*time.Second)), &push); err != nil || push.Message.ConvSeq != 3 {
		t.Fatalf("dave's push after joining: %+v, %v", push, err)
	}
	for _, c := range []*wsClient{bob, carol} {
		if err := json.Unmarshal([]byte(c.rawOf(wire.TypeGroupMessage, 10*time.Second)), &push); err != nil {
			t.Fatal(err)
		}
	}
	// $disconnect takes a connection out.
	bob.conn.CloseNow()
	waitFor(t, "bob's connection out of g:idx's index", func() bool {
		return !slices.Contains(onlineIn(t, st, "g:idx"), "bob/phone")
	})
	if got := onlineIn(t, st, "g:idx"); !slices.Equal(got, []string{"alice/laptop", "carol/tablet", "dave/phone"}) {
		t.Fatalf("online in g:idx after bob's disconnect = %v", got)
	}
}

// A read-diffused group's pushes and pages carry a proof that the group's
// log reaches their convSeq; an ack that brings it back moves the cursor
// without a read of the log, and a proof of another position, or a made-up
// one, proves nothing: an ack beyond the head is refused as without one.
func TestGroupAckProofsProveOnlyTheirOwnPosition(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}})
	alice, bob := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:pf", "name": "Pf", "users": []string{"bob"}}, nil)
	alice.sendTo("p1", "g:pf", "one")
	var push wire.GroupPush
	if err := json.Unmarshal([]byte(bob.rawOf(wire.TypeGroupMessage, 10*time.Second)), &push); err != nil || push.Message.ConvSeq != 1 || push.Proof == "" {
		t.Fatalf("bob's push: %+v, %v; want convSeq 1 with a proof", push, err)
	}
	key, err := st.Store.GroupProofKey(context.Background())
	if err != nil || !im.ValidGroupProof(key, "g:pf", 1, push.Proof) {
		t.Fatalf("the push's proof %q does not verify under the deployment's key (%v)", push.Proof, err)
	}
	refused := func(upTo int64, proof string) {
		t.Helper()
		bob.write(map[string]any{"action": "ack", "conversationId": "g:pf", "upTo": upTo, "proof": proof})
		if e := bob.next("error", 10*time.Second); e.Code != string(wire.CodeBadRequest) {
			t.Fatalf("ack up to %d with proof %q answered %+v, want bad_request", upTo, proof, e)
		}
	}
	refused(9, push.Proof)                                                   // the proof of 1 says nothing of 9
	refused(9, im.GroupProof(make([]byte, im.GroupProofKeySize), "g:pf", 9)) // made up under another key
	if got := groupCursor(t, st, "g:pf", "bob"); got != 0 {
		t.Fatalf("bob's cursor after refused acks = %d", got)
	}
	bob.write(map[string]any{"action": "ack", "conversationId": "g:pf", "upTo": 1, "proof": push.Proof})
	waitFor(t, "bob's proven ack", func() bool { return groupCursor(t, st, "g:pf", "bob") == 1 })

	// A page's proof is of its last message.
	alice.sendTo("p2", "g:pf", "two")
	bob.write(map[string]any{"action": "sync", "conversationId": "g:pf", "cursor": 1})
	var page wire.GroupSyncPage
	if err := json.Unmarshal([]byte(bob.rawOf(wire.TypeGroupSync, 10*time.Second)), &page); err != nil || page.NextCursor != 2 || !im.ValidGroupProof(key, "g:pf", 2, page.Proof) {
		t.Fatalf("bob's page: %+v, %v; want up to 2 with its proof", page, err)
	}
}

// A read-diffused group online on more connections than one fan-out
// invocation pushes (4 × FanoutBatch: 4 here) is split into batch jobs
// that carry the connections: every member's device gets the message once.
func TestReadDiffusedPushToManyConnectionsIsSplitIntoBatchJobs(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{FanoutBatch: 1, Parameters: map[string]string{"GroupDelivery": "read"}})
	owner := dial(t, st, "u0", "phone")
	var users []string
	var members []*wsClient
	for i := 1; i <= 6; i++ {
		u := fmt.Sprintf("u%d", i)
		users = append(users, u)
		members = append(members, dial(t, st, u, "phone"))
	}
	owner.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:big", "name": "Big", "users": users}, nil)
	before := st.Metered().Invocations["FanoutFunction"].Requests
	owner.sendTo("m1", "g:big", map[string]any{"text": "m1"})
	for i, c := range append(members, owner) {
		f := c.next(wire.TypeGroupMessage, 10*time.Second)
		var m wire.Message
		if err := json.Unmarshal(f.Message, &m); err != nil || m.ConversationID != "g:big" || m.ConvSeq != 1 {
			t.Fatalf("push to connection %d: %s (%v)", i, f.Message, err)
		}
		c.write(map[string]any{"action": "ack", "conversationId": "g:big", "upTo": 1})
	}
	for _, c := range append(members, owner) {
		c.quiet(wire.TypeGroupMessage, 300*time.Millisecond)
	}
	// The job of the message, then at least one invocation of batch jobs.
	if n := st.Metered().Invocations["FanoutFunction"].Requests - before; n < 2 {
		t.Fatalf("%d fan-out invocations for 7 connections at 4 per job; want the job and its batch jobs", n)
	}
}

// A send to a read-diffused group that says ownFromSent gets its message
// and proof back in "sent", and the sending connection is not pushed it
// (the sender's other devices and the members are); a send without it is
// pushed back as before, and its "sent" carries neither.
func TestOwnFromSentCarriesTheGroupMessageAndSkipsItsPush(t *testing.T) {
	t.Parallel()
	policy := im.Redelivery{PushTimeout: time.Second, Backoff: []time.Duration{time.Second}}
	st := startStack(t, devstack.Options{Redelivery: &policy, Parameters: map[string]string{"GroupDelivery": "read"}})
	alice, tablet, bob := dial(t, st, "alice", "laptop"), dial(t, st, "alice", "tablet"), dial(t, st, "bob", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:own", "name": "Own", "users": []string{"bob"}}, nil)
	alice.write(map[string]any{"action": "send", "clientMsgId": "o1", "conversationId": "g:own", "body": "mine", "ownFromSent": true})
	var sent wire.Sent
	if err := json.Unmarshal([]byte(alice.rawOf(wire.TypeSent, 10*time.Second)), &sent); err != nil || sent.Message == nil || sent.Seq != 0 {
		t.Fatalf("sent: %+v, %v; want the message without a seq", sent, err)
	}
	key, err := st.Store.GroupProofKey(context.Background())
	if m := sent.Message; err != nil || m.ConvSeq != 1 || m.MessageID != sent.MessageID || string(m.Body) != `"mine"` || m.From != "alice" || !im.ValidGroupProof(key, "g:own", 1, sent.Proof) {
		t.Fatalf("sent carries %+v with proof %q (%v); want message 1 and its proof", sent.Message, sent.Proof, err)
	}
	for _, c := range []*wsClient{tablet, bob} {
		if f := c.next(wire.TypeGroupMessage, 10*time.Second); f.Message == nil {
			t.Fatalf("push %+v", f)
		}
	}
	// Nor by a redelivery check (none was scheduled for it; bob's and the
	// tablet's, unacked, re-push theirs after 1 s).
	alice.quiet(wire.TypeGroupMessage, 2500*time.Millisecond)

	// A retry (its first "sent" lost, say) is answered with the message
	// again, on a connection the fan-out did not push it to either.
	again := dial(t, st, "alice", "laptop")
	again.write(map[string]any{"action": "send", "clientMsgId": "o1", "conversationId": "g:own", "body": "mine", "ownFromSent": true})
	var replayed wire.Sent
	if err := json.Unmarshal([]byte(again.rawOf(wire.TypeSent, 10*time.Second)), &replayed); err != nil || replayed.Message == nil ||
		replayed.Message.ConvSeq != 1 || replayed.MessageID != sent.MessageID || !im.ValidGroupProof(key, "g:own", 1, replayed.Proof) {
		t.Fatalf("a retried send's sent: %+v, %v; want message 1 and its proof again", replayed, err)
	}

	// Without ownFromSent: "sent" as before, and the push comes.
	f := alice.sendTo("o2", "g:own", "again")
	if len(f.Message) != 0 {
		t.Fatalf("sent without ownFromSent carries %s", f.Message)
	}
	if p := alice.next(wire.TypeGroupMessage, 10*time.Second); p.Message == nil {
		t.Fatalf("push %+v", p)
	}

	// A burst: whichever fan-out job pushes the run (one job covers every
	// message stored before it ran) skips each of the sending connection's
	// own messages, not only its own job's.
	desk := dial(t, st, "alice", "desk")
	for i := 3; i <= 5; i++ {
		desk.write(map[string]any{"action": "send", "clientMsgId": fmt.Sprintf("o%d", i), "conversationId": "g:own", "body": "burst", "ownFromSent": true})
	}
	for range 3 {
		if err := json.Unmarshal([]byte(desk.rawOf(wire.TypeSent, 10*time.Second)), &sent); err != nil || sent.Message == nil {
			t.Fatalf("sent in the burst: %+v, %v", sent, err)
		}
	}
	for seq := int64(3); seq <= 5; {
		f := bob.next(wire.TypeGroupMessage, 10*time.Second)
		if f.Message == nil {
			t.Fatalf("bob's push %+v", f)
		}
		var m wire.Message
		if err := json.Unmarshal(f.Message, &m); err != nil {
			t.Fatal(err)
		}
		if m.ConvSeq >= seq { // re-pushes of earlier ones come too (bob acks nothing)
			seq = m.ConvSeq + 1
		}
	}
	// None of the desk's own messages is pushed to it. Another device's
	// message may be: a fan-out job that ran after the desk connected covers
	// message 2 too (seen under load in CI).
	desk.quietOf(wire.TypeGroupMessage, 2500*time.Millisecond, func(f frame) bool {
		var m wire.Message
		return json.Unmarshal(f.Message, &m) != nil || m.ConvSeq >= 3
	})
}

// goneSent answers every "sent" posted to a connection of device with
// im.ErrGone while lose is set, as for a client gone just after its send.
type goneSent struct {
	handler.Pusher
	stack  *atomic.Pointer[devstack.Stack]
	device string
	lose   *atomic.Bool
}

func (p *goneSent) Push(ctx context.Context, id im.ConnectionID, data []byte) error {
	if st := p.stack.Load(); st != nil && p.lose.Load() && bytes.HasPrefix(data, []byte(`{"type":"sent"`)) {
		if d, _ := st.Gateway.Context(string(id))[handler.ContextDevice].(string); d == p.device {
			return im.ErrGone
		}
	}
	return p.Pusher.Push(ctx, id, data)
}

// A read-diffused group's message whose "sent" could not be posted to the
// connection that asked for it (ownFromSent) has its send's whole trace
// written, with the failed answer; the fan-out still skips that
// connection, and the client's retry gets the message in its "sent".
func TestAGroupSendWhoseSentIsLostWritesItsTrace(t *testing.T) {
	t.Parallel()
	var stack atomic.Pointer[devstack.Stack]
	var lose atomic.Bool
	st := startStack(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}, Configure: func(_ string, h *handler.Deps) {
		if h.Pusher != nil {
			h.Pusher = &goneSent{Pusher: h.Pusher, stack: &stack, device: "laptop", lose: &lose}
		}
	}})
	stack.Store(st)
	alice := dial(t, st, "alice", "laptop")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:lost", "name": "Lost", "users": []string{"bob"}}, nil)
	lose.Store(true)
	alice.write(map[string]any{"action": "send", "clientMsgId": "l1", "conversationId": "g:lost", "body": "hi", "ownFromSent": true})
	var raw string
	waitFor(t, "the lost sent in the trace", func() bool {
		msgs, err := st.Store.Log(context.Background(), "g:lost", 0, 1)
		if err != nil || len(msgs) != 1 {
			return false
		}
		r := call(t, st, "GET", "/v1/messages/"+string(msgs[0].ID)+"/trace", devstack.DefaultAdminKey, nil, "")
		raw = r.raw
		return r.status == 200 && strings.Contains(raw, `"type":"push_failed"`)
	})
	if !strings.Contains(raw, `"detail":"sent not posted; the client's retry of clientMsgId l1 carries it"`) {
		t.Fatalf("trace lacks the failed answer:\n%s", raw)
	}
	// Written in full: the send's own created and stored, not derived ones,
	// and no derived answer in sent.
	if strings.Contains(raw, "derived from the group log") || strings.Contains(raw, "derived: in sent") {
		t.Fatalf("trace derives what the send wrote:\n%s", raw)
	}
	// Not pushed to the connection instead; its retry carries it.
	alice.quiet(wire.TypeGroupMessage, 1500*time.Millisecond)
	lose.Store(false)
	alice.write(map[string]any{"action": "send", "clientMsgId": "l1", "conversationId": "g:lost", "body": "hi", "ownFromSent": true})
	var sent wire.Sent
	if err := json.Unmarshal([]byte(alice.rawOf(wire.TypeSent, 10*time.Second)), &sent); err != nil || sent.Message == nil || sent.Message.ConvSeq != 1 {
		t.Fatalf("the retry's sent: %+v, %v; want message 1", sent, err)
	}
}

// Issue 12: the send of a read-diffused group's message writes no trace
// item unless its id is in the sampled share (TraceSample) — its created
// and stored events are derived from the log item, as a 1:1 send's are —
// and the trace reads the same either way.
func TestAReadDiffusedGroupSendWritesItsTraceOnlyWhenSampled(t *testing.T) {
	t.Parallel()
	for _, sample := range []string{"1", ""} {
		t.Run("TraceSample="+cmp.Or(sample, "default"), func(t *testing.T) {
			t.Parallel()
			params := map[string]string{"GroupDelivery": "read"}
			if sample != "" {
				params["TraceSample"] = sample
			}
			st := startStack(t, devstack.Options{Parameters: params})
			alice := dial(t, st, "alice", "laptop")
			alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:tr", "name": "Trace", "users": []string{"bob"}}, nil)
			var id im.MessageID
			for i := 0; ; i++ {
				// An id in the sampled share is written in full: send
				// again until one is not (one in 50 is).
				alice.write(map[string]any{"action": "send", "clientMsgId": fmt.Sprintf("t%d", i), "conversationId": "g:tr", "body": "hi", "ownFromSent": true})
				var sent wire.Sent
				if err := json.Unmarshal([]byte(alice.rawOf(wire.TypeSent, 10*time.Second)), &sent); err != nil {
					t.Fatal(err)
				}
				if id = im.MessageID(sent.MessageID); sample != "" || !id.Sampled(st.Config.TraceSample) {
					break
				}
			}
			var raw string
			waitFor(t, "created and stored in the trace", func() bool {
				r := call(t, st, "GET", "/v1/messages/"+string(id)+"/trace", devstack.DefaultAdminKey, nil, "")
				raw = r.raw
				return r.status == 200 && strings.Contains(raw, `"type":"created"`) && strings.Contains(raw, `"type":"stored"`) && strings.Contains(raw, `"type":"inboxed"`)
			})
			if !strings.Contains(raw, `"userId":"alice"`) || !strings.Contains(raw, `"userId":"bob"`) {
				t.Fatalf("trace of %s names neither sender nor member:\n%s", id, raw)
			}
			// The sending connection had it in "sent", written or derived
			// (its log item names the connection).
			var trace struct {
				Events []struct{ Type, UserID, ConnectionID, Detail string }
			}
			if err := json.Unmarshal([]byte(raw), &trace); err != nil {
				t.Fatal(err)
			}
			inSent := slices.IndexFunc(trace.Events, func(e struct{ Type, UserID, ConnectionID, Detail string }) bool {
				return e.Type == "pushed" && e.UserID == "alice" && e.ConnectionID != "" && strings.Contains(e.Detail, "in sent")
			})
			if inSent < 0 {
				t.Fatalf("trace of %s does not show alice's connection taking it from sent:\n%s", id, raw)
			}
			// What the trace table holds from the send function: its item
			// when sampled, nothing otherwise (bob has no connection: the
			// fan-out writes his wait for a pull either way).
			time.Sleep(300 * time.Millisecond)
			out, err := st.DynamoDB.Query(context.Background(), &dynamodb.QueryInput{
				TableName:                 aws.String(st.Resources.Tables["TraceTable"]),
				KeyConditionExpression:    aws.String("messageId = :m"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":m": &types.AttributeValueMemberS{Value: string(id)}},
				ConsistentRead:            aws.Bool(true),
			})
			if err != nil {
				t.Fatal(err)
			}
			written := false
			for _, it := range out.Items {
				list, ok := it["events"].(*types.AttributeValueMemberL)
				if !ok {
					continue
				}
				for _, v := range list.Value {
					if e, ok := v.(*types.AttributeValueMemberM); ok {
						if fn, ok := e.Value["fn"].(*types.AttributeValueMemberS); ok && fn.Value == "send" {
							written = true
						}
					}
				}
			}
			if written != (sample != "") {
				t.Fatalf("the send wrote its trace: %v, want %v (TraceSample %q); items %v; trace:\n%s", written, sample != "", sample, out.Items, raw)
			}
		})
	}
}

// A ping whose connection record is gone (a push met a stale 410, or the
// record expired) writes it again and puts the connection back in the
// online index of its user's read-diffused groups, so the group's next
// message is pushed to it; its pong names the groups the device is behind
// in (a message sent meanwhile was pushed nowhere). Doing so reads the group proof key, which the
// ping's function was not allowed to (chaos seed 103: IAM denied
// PingFunction dynamodb:GetItem on the connections table; the stack's
// fault check fails this test on such a denial).
func TestAPingWritesARemovedRecordBackIntoItsGroupsOnlineIndex(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}})
	ctx := context.Background()
	alice, bob := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:back", "name": "Back", "users": []string{"bob"}}, nil)
	var conns []im.Connection
	waitFor(t, "bob's record", func() bool { conns, _ = st.Store.Connections(ctx, "bob"); return len(conns) == 1 })
	if err := st.Store.RemoveConnection(ctx, "bob", conns[0].ID); err != nil {
		t.Fatal(err)
	}
	alice.sendTo("m0", "g:back", map[string]any{"text": "while you were gone"})
	bob.write(`{"action":"ping"}`)
	var p wire.Pong
	if err := json.Unmarshal([]byte(bob.rawOf(wire.TypePong, 30*time.Second)), &p); err != nil || !slices.Equal(p.Groups, []wire.GroupHead{{ConversationID: "g:back", Head: 1}}) {
		t.Fatalf("pong names %+v (%v), want g:back at 1", p.Groups, err)
	}
	if again, err := st.Store.Connections(ctx, "bob"); err != nil || len(again) != 1 || again[0].ID != conns[0].ID {
		t.Fatalf("bob's records after the ping: %+v, %v; want %s again", again, err, conns[0].ID)
	}
	alice.sendTo("m1", "g:back", map[string]any{"text": "back"})
	// m0's fan-out may have run after the ping (bob then has it pushed, and
	// re-pushed: he acks nothing here); m1 comes either way.
	for i := 0; ; i++ {
		f := bob.next(wire.TypeGroupMessage, 10*time.Second)
		var m wire.Message
		if err := json.Unmarshal(f.Message, &m); err != nil || m.ConversationID != "g:back" || m.ConvSeq > 2 || i > 10 {
			t.Fatalf("push to bob: %s (%v)", f.Message, err)
		}
		if m.ConvSeq == 2 {
			break
		}
	}
	if denied := st.Denials(); len(denied) > 0 {
		t.Fatalf("IAM denials: %v", denied)
	}
}

// lostGroupPushes loses every push of a read-diffused group's message.
type lostGroupPushes struct{ handler.Pusher }

func (p lostGroupPushes) Push(ctx context.Context, id im.ConnectionID, data []byte) error {
	if strings.Contains(string(data), `"type":"`+wire.TypeGroupMessage+`"`) {
		return nil
	}
	return p.Pusher.Push(ctx, id, data)
}

// failingScheduler cannot schedule redelivery checks.
type failingScheduler struct{}

func (failingScheduler) Schedule(context.Context, []im.Check, time.Duration) error {
	return errors.New("injected: the redelivery queue refuses the message")
}

// A read-diffused group's push that is lost while its redelivery check
// cannot be scheduled leaves the device behind with nothing to re-push or
// notify: the connection is marked, and its next pong names the group.
func TestAGroupPushWithoutItsRedeliveryCheckIsNamedByTheNextPong(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}, Configure: testkit.On("FanoutFunction", func(h *handler.Deps) {
		h.Pusher, h.Scheduler = lostGroupPushes{h.Pusher}, failingScheduler{}
	})})
	alice, bob := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone")
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:lost", "name": "Lost", "users": []string{"bob"}}, nil)
	alice.sendTo("l1", "g:lost", "anyone?")
	waitFor(t, "the fan-out", func() bool {
		bob.write(`{"action":"ping"}`)
		var p wire.Pong
		return json.Unmarshal([]byte(bob.rawOf(wire.TypePong, 10*time.Second)), &p) == nil && slices.Equal(p.Groups, []wire.GroupHead{{ConversationID: "g:lost", Head: 1}})
	})
	bob.quiet(wire.TypeGroupMessage, time.Second)
}

// crashAfterCreateOrAdd stores the first create or add and then fails it, as
// an invocation that crashed after its write: nothing after the store's
// call (the online index, the notices, the answer) happens.
type crashAfterCreateOrAdd struct {
	handler.Groups
	crashed *atomic.Int32 // the number of crashes so far: one of each
}

func (g crashAfterCreateOrAdd) CreateGroup(ctx context.Context, c im.ConversationID, name string, owner im.UserID, members []im.UserID, now time.Time) ([]im.Member, error) {
	changed, err := g.Groups.CreateGroup(ctx, c, name, owner, members, now)
	if err == nil && g.crashed.CompareAndSwap(0, 1) {
		return nil, errors.New("the invocation crashed after storing the create")
	}
	return changed, err
}

func (g crashAfterCreateOrAdd) ChangeMembers(ctx context.Context, ch im.MemberChange) ([]im.Member, error) {
	changed, err := g.Groups.ChangeMembers(ctx, ch)
	if err == nil && ch.Op == im.OpAdd && g.crashed.CompareAndSwap(1, 2) {
		return nil, errors.New("the invocation crashed after storing the add")
	}
	return changed, err
}

// A create or an add whose invocation failed after the change was stored
// (before the group's online index and the membership notices) and that
// is sent again — as a client does on the error — changes nothing more,
// but indexes the connections of the members it names and tells them:
// otherwise a connected member's device would get no push of the group's
// messages until it reconnected.
func TestACreateOrAddSentAgainAfterAFailedInvocationIndexesAndTellsItsMembers(t *testing.T) {
	t.Parallel()
	var crashed atomic.Int32
	st := startStack(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}, Configure: testkit.On("GroupFunction", func(h *handler.Deps) {
		h.Groups = crashAfterCreateOrAdd{h.Groups, &crashed}
	})})
	alice, bob, carol := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone"), dial(t, st, "carol", "phone")
	create := map[string]any{"action": "group", "op": "create", "conversationId": "g:again", "name": "Again", "users": []string{"bob"}}
	alice.request(create, nil, wire.CodeInternal)
	var g wire.GroupInfo
	alice.request(create, &g)
	add := map[string]any{"action": "group", "op": "add", "conversationId": "g:again", "users": []string{"carol"}}
	alice.request(add, nil, wire.CodeInternal)
	alice.request(add, &g)
	if crashed.Load() != 2 || g.Count != 3 {
		t.Fatalf("after %d crashes the group has %d members, want 2 crashes and 3 members", crashed.Load(), g.Count)
	}
	for _, c := range []*wsClient{bob, carol} {
		var notice wire.Membership
		if err := json.Unmarshal([]byte(c.rawOf(wire.TypeMembership, 10*time.Second)), &notice); err != nil || notice.Change != "added" || notice.ConversationID != "g:again" {
			t.Fatalf("notice: %+v, %v", notice, err)
		}
	}
	if got := onlineIn(t, st, "g:again"); !slices.Equal(got, []string{"alice/laptop", "bob/phone", "carol/phone"}) {
		t.Fatalf("online in g:again = %v, want every member's connection", got)
	}
	alice.sendTo("a1", "g:again", "one")
	pushedGroupMessage(t, 1, bob, carol)
}

// indexFailsOnce fails the group function's next IndexOnline once failed
// is false: the join was stored, the member's connections are not indexed.
type indexFailsOnce struct {
	handler.OnlineIndex
	failed *atomic.Bool
}

func (o indexFailsOnce) IndexOnline(ctx context.Context, conn im.Connection, groups []im.ConversationID) (bool, error) {
	if o.failed.CompareAndSwap(false, true) {
		return false, errors.New("injected: the index write failed")
	}
	return o.OnlineIndex.IndexOnline(ctx, conn, groups)
}

// An add whose online index write failed — the join is stored — answers
// internal instead of succeeding with the member's connected device left
// out of the group's pushes until it reconnected; sent again with its op
// id it indexes them and is answered as the first. An add naming a
// member already (another op id: the app's own retry) indexes them too,
// without telling them again.
func TestAnAddWhoseIndexWriteFailedAnswersInternalAndIndexesWhenSentAgain(t *testing.T) {
	t.Parallel()
	var failed atomic.Bool
	st := startStack(t, devstack.Options{Parameters: map[string]string{"GroupDelivery": "read"}, Configure: testkit.On("GroupFunction", func(h *handler.Deps) {
		h.Online = indexFailsOnce{h.Online, &failed}
	})})
	alice, bob, carol := dial(t, st, "alice", "laptop"), dial(t, st, "bob", "phone"), dial(t, st, "carol", "phone")
	failed.Store(true) // not the create's
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:idx", "name": "Idx"}, nil)
	failed.Store(false)
	add := map[string]any{"action": "group", "op": "add", "conversationId": "g:idx", "users": []string{"bob"}, "opId": "add-bob"}
	alice.request(add, nil, wire.CodeInternal)
	if got := onlineIn(t, st, "g:idx"); !slices.Equal(got, []string{"alice/laptop"}) {
		t.Fatalf("online in g:idx = %v after the failed index write, want alice's alone", got)
	}
	var g wire.GroupInfo
	alice.request(add, &g)
	if !slices.Equal(g.Changed, []string{"bob"}) || g.Count != 2 {
		t.Fatalf("the add sent again answered %+v, want bob changed", g)
	}
	// Carol's add fails the same way, and the app, not the SDK, adds her
	// again: another op id, a member already — indexed all the same.
	failed.Store(false)
	alice.request(map[string]any{"action": "group", "op": "add", "conversationId": "g:idx", "users": []string{"carol"}, "opId": "add-carol"}, nil, wire.CodeInternal)
	alice.request(map[string]any{"action": "group", "op": "add", "conversationId": "g:idx", "users": []string{"carol", "bob"}, "opId": "add-carol-2"}, &g)
	if len(g.Changed) != 0 || g.Count != 3 {
		t.Fatalf("the app's add of members already answered %+v, want nobody changed", g)
	}
	if got := onlineIn(t, st, "g:idx"); !slices.Equal(got, []string{"alice/laptop", "bob/phone", "carol/phone"}) {
		t.Fatalf("online in g:idx = %v, want every member's connection", got)
	}
	alice.sendTo("a1", "g:idx", "one")
	pushedGroupMessage(t, 1, bob, carol)
	// Bob was told once (by the add sent again), not by the add naming him
	// a member already. (Carol was told by neither: the add that joined
	// her failed before its notices, and the app's own retry did not join
	// her. A notice is not a delivery: her summary lists the group.)
	bob.request(map[string]any{"action": "group", "op": "members", "conversationId": "g:idx"}, nil)
	if f := bob.next(wire.TypeMembership, 10*time.Second); f.Change != "added" {
		t.Fatalf("bob's notice: %+v", f)
	}
	bob.quiet(wire.TypeMembership, time.Second)
}

// pushedGroupMessage waits for each of clients to be pushed the group
// message at convSeq.
func pushedGroupMessage(t *testing.T, convSeq int64, clients ...*wsClient) {
	t.Helper()
	for _, c := range clients {
		var push wire.GroupPush
		if err := json.Unmarshal([]byte(c.rawOf(wire.TypeGroupMessage, 10*time.Second)), &push); err != nil || push.Message.ConvSeq != convSeq {
			t.Fatalf("push: %+v, %v; want convSeq %d", push, err, convSeq)
		}
	}
}

// A sync's ref is echoed in its page and in the error frame refusing it,
// inbox sync or group pull alike: a client tells a refused group pull (a
// query: every other would be refused too) from its refused inbox sync
// (one new sync per SyncInterval) and from an ack's or a read's refusal
// (which carry no ref). A ref that is not 1–64 printable ASCII characters
// is refused and not echoed.
func TestASyncsRefIsEchoedInItsPageAndInItsRefusal(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	now := time.Now()
	clk.Advance(now.Truncate(time.Hour).Add(time.Second).Sub(now)) // the hour's limits outlast the test
	st := startStack(t, devstack.Options{RateLimits: "query=2/1h", SyncInterval: time.Hour,
		Parameters: map[string]string{"GroupDelivery": "read"}, Configure: func(_ string, h *handler.Deps) { h.Now = clk.Now }})
	alice, bob := dialAt(t, st, "alice", "phone", clk.Now()), dialAt(t, st, "bob", "phone", clk.Now())
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:refs", "name": "Refs", "users": []string{"bob"}}, nil)
	alice.sendTo("r1", "g:refs", map[string]any{"text": "r1"})

	// Each sync in turn, and the frame that answers it: a page, or an
	// error with its code.
	for _, step := range []struct {
		group, ref string
		answer     string // a page's type, or an error code
	}{
		{"", "is1", wire.TypeSync},
		{"g:refs", "gs1", wire.TypeGroupSync},
		{"", "is2", string(wire.CodeRateLimited)},       // a new inbox sync within SyncInterval
		{"g:refs", "gs2", wire.TypeGroupSync},           // the query budget's last
		{"g:refs", "gs3", string(wire.CodeRateLimited)}, // beyond it
	} {
		frame := map[string]any{"action": "sync", "cursor": 0, "ref": step.ref}
		if step.group != "" {
			frame["conversationId"] = step.group
		}
		bob.write(frame)
		got := bob.nextOf(10*time.Second, wire.TypeSync, wire.TypeGroupSync, wire.TypeError)
		answer := cmp.Or(got.Code, got.Type)
		if answer != step.answer || got.Ref != step.ref {
			t.Fatalf("%v answered %s with ref %q, want %s with ref %q", frame, answer, got.Ref, step.answer, step.ref)
		}
	}
	bob.write(map[string]any{"action": "sync", "cursor": 0, "ref": strings.Repeat("r", 65)})
	if e := bob.next("error", 10*time.Second); e.Code != string(wire.CodeBadRequest) || e.Ref != "" {
		t.Fatalf("a sync with a bad ref answered %+v, want bad_request echoing no ref", e)
	}
}
