package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// seenDraft is draft with the convSeq its device had seen.
func seenDraft(from im.UserID, cmid string, to im.UserID, body string, seen int64) im.Draft {
	d := draft(from, cmid, to, body)
	d.Seen = &seen
	return d
}

// Issue 12, invariant 1 without an idempotency item: a 1:1 send that says
// what its device had seen stores the message with one conditional put of
// the log item (no transaction, no other item), and every retry — right
// away, after the peer wrote more, after its own later sends — gets the
// same message id and seqs back; other content under the same clientMsgId
// is refused and changes nothing.
func TestASendWithSeenIsIdempotentWithoutAnIdempotencyItem(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	var transactions, puts atomic.Int32
	plain, counting := newStores(t, func(ctx context.Context, in any) error {
		switch in.(type) {
		case *dynamodb.TransactWriteItemsInput:
			transactions.Add(1)
		case *dynamodb.PutItemInput:
			puts.Add(1)
		}
		return nil
	})
	plain.SendMode, counting.SendMode = dynamo.SendClaim, dynamo.SendClaim
	first, err := counting.Send(ctx, seenDraft("alice", "a1", "bob", `"one"`, 0), now)
	if err != nil || first.Replayed || first.Message.ConvSeq != 1 || first.Inboxed["alice"] != 1 || first.Inboxed["bob"] != 1 {
		t.Fatalf("first send: %+v, %v", first, err)
	}
	// One put for the log item and one per inbox entry; no transaction.
	if transactions.Load() != 0 || puts.Load() != 3 {
		t.Fatalf("the send made %d transactions and %d puts, want 0 and 3 (log item, two entries)", transactions.Load(), puts.Load())
	}
	retry := func(label string, d im.Draft, want im.Stored) {
		t.Helper()
		got, err := plain.Send(ctx, d, now.Add(time.Minute))
		if err != nil || !got.Replayed || got.Message.ID != want.Message.ID || got.Message.ConvSeq != want.Message.ConvSeq ||
			got.Inboxed["alice"] != want.Inboxed["alice"] || got.Inboxed["bob"] != want.Inboxed["bob"] {
			t.Fatalf("%s: %+v, %v; want a replay of %+v", label, got, err, want)
		}
	}
	retry("retry at once", seenDraft("alice", "a1", "bob", `"one"`, 0), first)
	for i := range 3 {
		if _, err := plain.Send(ctx, seenDraft("bob", fmt.Sprintf("b%d", i), "alice", `"more"`, int64(1+i)), now); err != nil {
			t.Fatal(err)
		}
	}
	retry("retry after the peer's three", seenDraft("alice", "a1", "bob", `"one"`, 0), first)
	second, err := plain.Send(ctx, seenDraft("alice", "a2", "bob", `"two"`, 4), now)
	if err != nil || second.Message.ConvSeq != 5 {
		t.Fatalf("second: %+v, %v", second, err)
	}
	retry("retry after its own later send", seenDraft("alice", "a1", "bob", `"one"`, 0), first)
	retry("retry of the newest", seenDraft("alice", "a2", "bob", `"two"`, 4), second)
	if _, err := plain.Send(ctx, seenDraft("alice", "a1", "bob", `"other text"`, 0), now); !errors.Is(err, im.ErrClientMsgIDReused) {
		t.Fatalf("reuse with other content: %v, want ErrClientMsgIDReused", err)
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		if page, err := plain.Page(ctx, u, 0, 10, wire.EntrySize); err != nil || len(page.Entries) != 5 {
			t.Fatalf("%s: %d entries, %v; want the 5 messages once each", u, len(page.Entries), err)
		}
	}
	// A send stored the old way (with an idempotency item) is found by a
	// retry that says what it had seen, and the other way round the
	// idempotency item is what the old path reads.
	old, err := plain.Send(ctx, draft("bob", "b-old", "alice", `"old"`), now)
	if err != nil {
		t.Fatal(err)
	}
	retry("a retry with seen of a send without", seenDraft("bob", "b-old", "alice", `"old"`, 5), old)
}

// Concurrent tries of one draft (a client that resent while the first try
// was in flight, each on its own Lambda) store it once: the head is read
// before the span and the put takes head + 1 only if it is free.
func TestConcurrentTriesOfADraftWithSeenStoreItOnce(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	st := newStore(t)
	st.SendMode = dynamo.SendClaim
	if _, err := st.Send(ctx, seenDraft("bob", "b0", "alice", `"before"`, 0), now); err != nil {
		t.Fatal(err)
	}
	const tries = 8
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids = map[im.MessageID]int{}
	)
	for i := range tries {
		wg.Go(func() {
			// Some tries interleave with the peer's sends.
			if i%3 == 0 {
				_, _ = st.Send(ctx, seenDraft("bob", fmt.Sprintf("b%d", i+1), "alice", `"peer"`, 0), now)
			}
			got, err := st.Send(ctx, seenDraft("alice", "a1", "bob", `"once"`, 1), now)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("try %d: %v", i, err)
				return
			}
			ids[got.Message.ID]++
		})
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("tries answered with %d message ids, want 1: %v", len(ids), ids)
	}
	page, err := st.Page(ctx, "bob", 0, 50, wire.EntrySize)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range page.Entries {
		if string(e.Message.Body) == `"once"` {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("bob's inbox holds the message %d times, want once", n)
	}
}

// A send with seen that died after its log put, before placing the message
// (the claims fail), has no ACK; its retry finds the log item above seen
// and places it in both inboxes, answering as a replay.
func TestTheRetryOfASendWithSeenPlacesWhatACrashLeft(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	plain, crashing, crash := claimStores(t)
	crash.Store(true)
	if _, err := crashing.Send(ctx, seenDraft("alice", "a1", "bob", `"one"`, 0), now); err == nil {
		t.Fatal("a send whose placement failed was acknowledged")
	}
	crash.Store(false)
	got, err := plain.Send(ctx, seenDraft("alice", "a1", "bob", `"one"`, 0), now)
	if err != nil || !got.Replayed || got.Inboxed["alice"] != 1 || got.Inboxed["bob"] != 1 {
		t.Fatalf("retry: %+v, %v; want a replay at seq 1 in both inboxes", got, err)
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		if page, err := plain.Page(ctx, u, 0, 10, wire.EntrySize); err != nil || len(page.Entries) != 1 || page.Entries[0].Message.ID != got.Message.ID {
			t.Fatalf("%s: %+v, %v; want the message once", u, page.Entries, err)
		}
	}
}

// A seen above the conversation's head cannot come from what the device
// holds (a store reset since it queued the draft): the retry still finds
// the earlier try, looking at the whole log.
func TestASeenAboveTheHeadStillFindsTheEarlierTry(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	st := newStore(t)
	st.SendMode = dynamo.SendClaim
	first, err := st.Send(ctx, seenDraft("alice", "a1", "bob", `"one"`, 57), now)
	if err != nil || first.Message.ConvSeq != 1 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := st.Send(ctx, seenDraft("alice", "a1", "bob", `"one"`, 57), now)
	if err != nil || !again.Replayed || again.Message.ID != first.Message.ID {
		t.Fatalf("retry: %+v, %v; want a replay of %s", again, err, first.Message.ID)
	}
}

// Whatever seen a client claims, a send reads at most SeenWindow log items
// looking for an earlier try (newest first), so a client that says it has
// seen nothing of a long conversation costs a bounded read; an earlier try
// within the window is found.
func TestASendReadsAtMostTheSeenWindowOfTheLog(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	var widest atomic.Int64
	plain, counting := newStores(t, func(ctx context.Context, in any) error {
		q, ok := in.(*dynamodb.QueryInput)
		if !ok || q.ScanIndexForward == nil || *q.ScanIndexForward {
			return nil
		}
		from, _ := q.ExpressionAttributeValues[":from"].(*types.AttributeValueMemberS)
		to, _ := q.ExpressionAttributeValues[":to"].(*types.AttributeValueMemberS)
		if from == nil || to == nil || !strings.HasPrefix(from.Value, "s#") {
			return nil
		}
		var lo, hi int64
		fmt.Sscanf(from.Value, "s#%d", &lo)
		fmt.Sscanf(to.Value, "s#%d", &hi)
		if n := hi - lo + 1; n > widest.Load() {
			widest.Store(n)
		}
		return nil
	})
	plain.SendMode, counting.SendMode = dynamo.SendClaim, dynamo.SendClaim
	counting.SeenWindow = 5
	for i := range 20 {
		if _, err := plain.Send(ctx, seenDraft("bob", fmt.Sprintf("b%d", i), "alice", `"peer"`, int64(i)), now); err != nil {
			t.Fatal(err)
		}
	}
	first, err := counting.Send(ctx, seenDraft("alice", "a1", "bob", `"late"`, 0), now)
	if err != nil || first.Replayed || first.Message.ConvSeq != 21 {
		t.Fatalf("a send that had seen nothing: %+v, %v", first, err)
	}
	for i := range 3 {
		if _, err := plain.Send(ctx, seenDraft("bob", fmt.Sprintf("c%d", i), "alice", `"peer"`, int64(21+i)), now); err != nil {
			t.Fatal(err)
		}
	}
	again, err := counting.Send(ctx, seenDraft("alice", "a1", "bob", `"late"`, 0), now)
	if err != nil || !again.Replayed || again.Message.ID != first.Message.ID {
		t.Fatalf("a retry within the window: %+v, %v; want a replay of %s", again, err, first.Message.ID)
	}
	if w := widest.Load(); w == 0 || w > 5 {
		t.Fatalf("the widest log span read for an earlier try was %d items, want 1-5", w)
	}
}
