package dynamo_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// claimStores are two claim-mode stores on the same tables; the second
// fails every claim (an index update that records an inbox seq) while
// crash is set, as a Lambda killed between its writes would leave it.
func claimStores(t *testing.T) (plain, crashing *dynamo.Store, crash *atomic.Bool) {
	crash = new(atomic.Bool)
	plain, crashing = newStores(t, func(ctx context.Context, in any) error {
		if u, ok := in.(*dynamodb.UpdateItemInput); ok && crash.Load() && strings.Contains(aws.ToString(u.UpdateExpression), "#iseq") {
			return errors.New("the Lambda was killed")
		}
		return nil
	})
	plain.SendMode, crashing.SendMode = dynamo.SendClaim, dynamo.SendClaim
	return plain, crashing, crash
}

// Issue 12, SendMode claim: a send that stored its log and idempotency
// items and then died before placing the message (its claims fail here)
// has no ACK; the other participant's next send places it first, so both
// inboxes hold the conversation in convSeq order, each message once; the
// retry of the crashed send gets its message back (the same id) with the
// inbox seqs it has.
func TestAClaimedSendLeftUnplacedIsPlacedFirstAndRetriedWhole(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	plain, crashing, crash := claimStores(t)
	if _, err := plain.Send(ctx, draft("alice", "a1", "bob", `"one"`), now); err != nil {
		t.Fatal(err)
	}
	crash.Store(true)
	if _, err := crashing.Send(ctx, draft("alice", "a2", "bob", `"two"`), now); err == nil {
		t.Fatal("a send whose placement failed was acknowledged")
	}
	crash.Store(false)
	for _, u := range []im.UserID{"alice", "bob"} {
		if page, err := plain.Page(ctx, u, 0, 10, wire.EntrySize); err != nil || len(page.Entries) != 1 {
			t.Fatalf("%s before the next send: %+v, %v; want only the first message", u, page.Entries, err)
		}
	}
	three, err := plain.Send(ctx, draft("bob", "b1", "alice", `"three"`), now)
	if err != nil || three.Message.ConvSeq != 3 {
		t.Fatalf("bob's send: %+v, %v; want convSeq 3 after the unplaced 2", three, err)
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		page, err := plain.Page(ctx, u, 0, 10, wire.EntrySize)
		if err != nil || len(page.Entries) != 3 {
			t.Fatalf("%s: %+v, %v; want 3 entries", u, page.Entries, err)
		}
		for i, e := range page.Entries {
			if e.Seq != int64(i+1) || e.Message.ConvSeq != int64(i+1) {
				t.Fatalf("%s entry %d: seq %d convSeq %d; want both %d (one order in both inboxes)", u, i, e.Seq, e.Message.ConvSeq, i+1)
			}
		}
		if three.Inboxed[u] != 3 {
			t.Fatalf("bob's send says %s has it at %d, want 3", u, three.Inboxed[u])
		}
	}
	again, err := plain.Send(ctx, draft("alice", "a2", "bob", `"two"`), now)
	if err != nil || !again.Replayed || again.Message.ConvSeq != 2 || again.Inboxed["alice"] != 2 || again.Inboxed["bob"] != 2 {
		t.Fatalf("the retry of the crashed send: %+v, %v; want a replay of convSeq 2 at seq 2 in both inboxes", again, err)
	}
}

// The retry of a claimed send that died before placing its message places
// it (and answers as a replay), when no other send came first.
func TestTheRetryOfAClaimedSendPlacesWhatACrashLeft(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	plain, crashing, crash := claimStores(t)
	crash.Store(true)
	if _, err := crashing.Send(ctx, draft("alice", "a1", "bob", `"one"`), now); err == nil {
		t.Fatal("a send whose placement failed was acknowledged")
	}
	crash.Store(false)
	got, err := plain.Send(ctx, draft("alice", "a1", "bob", `"one"`), now)
	if err != nil || !got.Replayed || got.Inboxed["alice"] != 1 || got.Inboxed["bob"] != 1 {
		t.Fatalf("retry: %+v, %v; want a replay at seq 1 in both inboxes", got, err)
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		if page, err := plain.Page(ctx, u, 0, 10, wire.EntrySize); err != nil || len(page.Entries) != 1 || page.Entries[0].Message.ID != got.Message.ID {
			t.Fatalf("%s: %+v, %v; want the message once", u, page.Entries, err)
		}
	}
}
