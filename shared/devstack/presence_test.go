package devstack_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// nextPresence returns the next pushed presence frame (no ref).
func nextPresence(t *testing.T, c *wsClient, timeout time.Duration) []wire.UserPresence {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case r := <-c.raw:
			var p wire.PresenceAnswer
			if json.Unmarshal([]byte(r), &p) == nil && p.Type == wire.TypePresence && p.Ref == "" {
				return p.Users
			}
		case <-deadline:
			t.Fatalf("no presence push within %s", timeout)
		}
	}
}

// noPresence asserts no presence push arrives within d.
func noPresence(t *testing.T, c *wsClient, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case r := <-c.raw:
			var p wire.PresenceAnswer
			if json.Unmarshal([]byte(r), &p) == nil && p.Type == wire.TypePresence && p.Ref == "" {
				t.Fatalf("unexpected presence push %s", r)
			}
		case <-deadline:
			return
		}
	}
}

func queryPresence(t *testing.T, c *wsClient, users ...string) map[string]string {
	t.Helper()
	var p wire.PresenceAnswer
	c.request(map[string]any{"action": "presence.query", "users": users}, &p)
	out := map[string]string{}
	for _, u := range p.Users {
		out[u.UserID] = u.Status
	}
	return out
}

func TestPresenceInvisibleLooksOfflineYetReceivesAndPushesAreDebounced(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{PresenceDebounce: time.Second})
	bob := dial(t, st, "bob", "laptop")
	// A 1:1 conversation makes alice and bob peers.
	bob.sendTo("hello", string(im.Direct("alice", "bob")), "hi")
	if got := queryPresence(t, bob, "alice", "nobody"); got["alice"] != "offline" || got["nobody"] != "offline" {
		t.Fatalf("before alice connects: %v", got)
	}
	alice := dial(t, st, "alice", "laptop")
	if got := nextPresence(t, bob, 5*time.Second); !slices.Equal(got, []wire.UserPresence{{UserID: "alice", Status: "online"}}) {
		t.Fatalf("push on connect = %+v", got)
	}

	// Invisible: bob sees offline (pushed and queried), yet alice receives.
	var mine wire.PresenceAnswer
	alice.request(map[string]any{"action": "presence", "status": "invisible"}, &mine)
	if len(mine.Users) != 1 || mine.Users[0].Status != "offline" {
		t.Fatalf("own presence answer = %+v", mine)
	}
	if got := nextPresence(t, bob, 5*time.Second); got[0].Status != "offline" {
		t.Fatalf("push after invisible = %+v", got)
	}
	if got := queryPresence(t, bob, "alice"); got["alice"] != "offline" {
		t.Fatalf("query of invisible alice = %v", got)
	}
	sent := bob.sendTo("while-invisible", string(im.Direct("alice", "bob")), "are you there?")
	receiveAndAck(t, alice, sent.MessageID)

	// Three changes inside the debounce window: one push, the last state.
	for _, s := range []string{"away", "online", "dnd"} {
		alice.request(map[string]any{"action": "presence", "status": s}, nil)
	}
	if got := nextPresence(t, bob, 5*time.Second); got[0].Status != "dnd" {
		t.Fatalf("debounced push = %+v", got)
	}
	noPresence(t, bob, 2500*time.Millisecond)
	// A change that ends where it started pushes nothing.
	alice.request(map[string]any{"action": "presence", "status": "away"}, nil)
	alice.request(map[string]any{"action": "presence", "status": "dnd"}, nil)
	noPresence(t, bob, 2500*time.Millisecond)
	// DND still receives.
	sent = bob.sendTo("while-dnd", string(im.Direct("alice", "bob")), "urgent")
	receiveAndAck(t, alice, sent.MessageID)
	alice.request(map[string]any{"action": "presence", "status": "busy"}, nil, wire.CodeBadRequest)
	bob.request(map[string]any{"action": "presence.query", "users": []string{}}, nil, wire.CodeBadRequest)

	// Going away for real: the last connection closes.
	alice.conn.CloseNow()
	if got := nextPresence(t, bob, 5*time.Second); got[0].Status != "offline" {
		t.Fatalf("push after disconnect = %+v", got)
	}
}

// receiveAndAck waits for message id on c and acks it.
func receiveAndAck(t *testing.T, c *wsClient, id string) {
	t.Helper()
	for {
		f := c.next("message", 5*time.Second)
		if got, _, _ := f.pushed(t); got == id {
			c.write(map[string]any{"action": "ack", "upTo": f.Seq})
			return
		}
	}
}

// clock is a settable time source for simulated days.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

func TestSummaryAfter31DaysAwayReportsUnreadCounts(t *testing.T) {
	t.Parallel()
	clk := &clock{}
	st := startStack(t, devstack.Options{Parameters: writeGroups, Configure: func(_ string, h *handler.Deps) {
		h.Now = clk.Now
		if store, ok := h.Inbox.(*dynamo.Store); ok {
			store.Now = clk.Now // which entries may have been reaped: 31 days pass for it too
		}
	}})
	ctx := context.Background()
	alice, carol := dial(t, st, "alice", "laptop"), dial(t, st, "carol", "laptop")
	bob := dial(t, st, "bob", "phone")
	var g wire.GroupInfo
	alice.request(map[string]any{"action": "group", "op": "create", "name": "Release", "users": []string{"bob", "carol"}}, &g)
	direct := string(im.Direct("alice", "bob"))
	for i := 1; i <= 5; i++ {
		alice.sendTo("d"+string(rune('0'+i)), direct, i)
	}
	bob.write(map[string]any{"action": "read", "conversationId": direct, "upTo": 2})
	waitFor(t, "bob's read", func() bool {
		r, _ := st.Store.ReadWatermark(ctx, "bob", im.ConversationID(direct))
		return r.UpTo == 2
	})
	bob.conn.CloseNow()
	for i := 1; i <= 3; i++ {
		carol.sendTo("g"+string(rune('0'+i)), g.ConversationID, map[string]any{"text": "release note", "n": i})
	}
	waitFor(t, "fan-out to bob", func() bool {
		p, _ := st.Store.Positions(ctx, im.ConversationID(g.ConversationID), []im.UserID{"bob"})
		return p["bob"].Last == 3
	})

	// 31 days pass; DynamoDB's TTL removes bob's inbox entries (30 days).
	clk.Advance(31 * 24 * time.Hour)
	n, err := st.Store.ExpireDue(ctx, "bob", clk.Now())
	if err != nil || n != 8 {
		t.Fatalf("expired %d entries, %v; want 8", n, err)
	}
	bob = dialToken(t, st, "bob", "phone", tokenAt(t, "bob", "phone", clk.Now()))
	bob.t = t
	t.Cleanup(func() { bob.conn.CloseNow() })
	var sum wire.SummaryPage
	bob.request(map[string]any{"action": "summary"}, &sum)
	byConv := map[string]wire.ConversationSummary{}
	for _, c := range sum.Conversations {
		byConv[c.ConversationID] = c
	}
	if d := byConv[direct]; d.Unread != 3 || d.Read != 2 || d.Last != 5 || d.LastFrom != "alice" || d.Preview != "5" {
		t.Errorf("1:1 summary = %+v", d)
	}
	if gs := byConv[g.ConversationID]; gs.Unread != 3 || gs.Title != "Release" || gs.LastFrom != "carol" || gs.Preview != `{"n":3,"text":"release note"}` {
		t.Errorf("group summary = %+v", gs)
	}
	if len(sum.Conversations) != 2 || sum.Next != "" {
		t.Errorf("summary = %+v", sum)
	}
	// The inbox no longer has those entries: sync says so.
	bob.write(map[string]any{"action": "sync", "cursor": 0})
	bob.next("sync", 5*time.Second)
	raw := lastRaw(t, bob, `"type":"sync"`)
	var page wire.SyncPage
	if err := json.Unmarshal([]byte(raw), &page); err != nil || !page.Truncated || len(page.Messages) != 0 || page.Head != 8 {
		t.Fatalf("sync after expiry = %s", raw)
	}
	// Paging: one conversation a page.
	bob.request(map[string]any{"action": "summary", "limit": 1}, &sum)
	if len(sum.Conversations) != 1 || sum.Next == "" {
		t.Fatalf("first page = %+v", sum)
	}
	first, after := sum.Conversations[0].ConversationID, sum.Next
	sum = wire.SummaryPage{}
	bob.request(map[string]any{"action": "summary", "limit": 1, "after": after}, &sum)
	if len(sum.Conversations) != 1 || sum.Conversations[0].ConversationID == first {
		t.Fatalf("second page = %+v", sum)
	}
	if sum.Next != "" {
		// DynamoDB may hand out a key when a page ends exactly at the
		// last item: the page after it is empty and final.
		after := sum.Next
		sum = wire.SummaryPage{}
		bob.request(map[string]any{"action": "summary", "limit": 1, "after": after}, &sum)
		if len(sum.Conversations) != 0 || sum.Next != "" {
			t.Fatalf("third page = %+v", sum)
		}
	}
}
