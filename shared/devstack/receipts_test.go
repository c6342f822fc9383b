package devstack_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
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
	var last frame
	for range 3 {
		last = bob.next("message", 5*time.Second)
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
	bob.next("sent", 5*time.Second)
	own := bob.next("message", 5*time.Second)
	bob.write(map[string]any{"action": "ack", "upTo": own.Seq})
	time.Sleep(300 * time.Millisecond)
	for len(alice.raw) > 0 {
		if r := <-alice.raw; strings.Contains(r, `"kind":"delivered"`) && strings.Contains(r, `"upTo":4`) {
			t.Fatalf("receipt for the reader's own message: %s", r)
		}
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
	type page struct {
		Messages []struct {
			ConvSeq int64           `json:"convSeq"`
			Body    json.RawMessage `json:"body"`
		} `json:"messages"`
		HasMore bool  `json:"hasMore"`
		Before  int64 `json:"before"`
	}
	get := func(before int64) page {
		alice.write(map[string]any{"action": "history", "conversationId": conv, "before": before, "limit": 3})
		for {
			r := <-alice.raw
			if strings.Contains(r, `"type":"history"`) {
				var p page
				if err := json.Unmarshal([]byte(r), &p); err != nil {
					t.Fatal(err)
				}
				return p
			}
		}
	}
	var got []int64
	before := int64(0)
	for {
		p := get(before)
		var seqs []int64
		for _, m := range p.Messages {
			seqs = append(seqs, m.ConvSeq)
		}
		got = append(seqs, got...)
		if !p.HasMore {
			break
		}
		before = p.Before
	}
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
