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
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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

// A retried claim-mode send whose message is in place (the common retry:
// the ACK was lost on a weak network) is answered from item reads — the
// conversation index items and the entry they claimed — with no Query
// beyond the head reads every send attempt makes (a placement's would add
// as many again and more: under chaos on a slow emulator, retries doing
// whole placements swamped the stack), and says where the message is in
// each inbox, for the newest message of the conversation and an older one.
func TestARetryOfAPlacedClaimedSendReadsItemsOnly(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	var queries atomic.Int32
	plain, counting := newStores(t, func(ctx context.Context, in any) error {
		if _, ok := in.(*dynamodb.QueryInput); ok {
			queries.Add(1)
		}
		return nil
	})
	plain.SendMode, counting.SendMode = dynamo.SendClaim, dynamo.SendClaim
	first, err := plain.Send(ctx, draft("alice", "a1", "bob", `"one"`), now)
	if err != nil {
		t.Fatal(err)
	}
	second, err := counting.Send(ctx, draft("bob", "b1", "alice", `"two"`), now)
	if err != nil {
		t.Fatal(err)
	}
	perAttempt := queries.Swap(0)
	again, err := counting.Send(ctx, draft("bob", "b1", "alice", `"two"`), now)
	if err != nil || !again.Replayed || again.Message.ID != second.Message.ID || again.Inboxed["alice"] != 2 || again.Inboxed["bob"] != 2 {
		t.Fatalf("retry of the newest: %+v, %v; want a replay of %s at seq 2 in both inboxes", again, err, second.Message.ID)
	}
	if q := queries.Load(); q > perAttempt {
		t.Fatalf("the retry of a placed send made %d Queries, want at most the %d of a send's head reads", q, perAttempt)
	}
	older, err := counting.Send(ctx, draft("alice", "a1", "bob", `"one"`), now)
	if err != nil || !older.Replayed || older.Message.ID != first.Message.ID || older.Inboxed["alice"] != 1 || older.Inboxed["bob"] != 1 {
		t.Fatalf("retry of the older: %+v, %v; want a replay of %s at seq 1 in both inboxes", older, err, first.Message.ID)
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		if page, err := plain.Page(ctx, u, 0, 10, wire.EntrySize); err != nil || len(page.Entries) != 2 {
			t.Fatalf("%s: %+v, %v; want the two messages once each", u, page.Entries, err)
		}
	}
}

// Issue 12: a claim-mode send that loses the race for its claimed seq —
// another conversation's send put an entry there between its claim and its
// put — follows the entries up (the claim moves one seq, the entry goes
// there) instead of reading the inbox head again, and both messages end up
// in the inbox once each, gap-free, at the seqs the sends answered.
func TestALostRaceForTheClaimedSeqFollowsTheEntriesUp(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	var (
		raced   atomic.Bool
		queries atomic.Int32
		plain   *dynamo.Store
		carol   im.Stored
		raceErr error
	)
	alice := im.Direct("alice", "bob")
	plain, racing := newStores(t, func(ctx context.Context, in any) error {
		switch in := in.(type) {
		case *dynamodb.QueryInput:
			if raced.Load() {
				queries.Add(1)
			}
		case *dynamodb.PutItemInput:
			conv, _ := in.Item["conversationId"].(*types.AttributeValueMemberS)
			user, _ := in.Item["userId"].(*types.AttributeValueMemberS)
			if conv != nil && user != nil && conv.Value == string(alice) && user.Value == "bob" && !raced.Swap(true) {
				// Carol's send to bob commits first, at the seq alice's
				// send has just claimed in bob's inbox.
				carol, raceErr = plain.Send(ctx, draft("carol", "c1", "bob", `"first"`), now)
			}
		}
		return nil
	})
	plain.SendMode, racing.SendMode = dynamo.SendClaim, dynamo.SendClaim
	hello, err := plain.Send(ctx, draft("bob", "b0", "alice", `"hello"`), now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := racing.Send(ctx, draft("alice", "a1", "bob", `"second"`), now)
	if err != nil || raceErr != nil || !raced.Load() {
		t.Fatalf("alice: %v; carol: %v; raced %v", err, raceErr, raced.Load())
	}
	if carol.Inboxed["bob"] != 2 || got.Inboxed["bob"] != 3 {
		t.Fatalf("bob's inbox seqs: carol's %d, alice's %d; want 2 and 3", carol.Inboxed["bob"], got.Inboxed["bob"])
	}
	if q := queries.Load(); q != 0 {
		t.Fatalf("after losing the race alice's send made %d Queries; want none (it follows the entries up)", q)
	}
	page, err := plain.Page(ctx, "bob", 0, 10, wire.EntrySize)
	if err != nil || len(page.Entries) != 3 || page.Entries[0].Message.ID != hello.Message.ID || page.Entries[1].Message.ID != carol.Message.ID || page.Entries[2].Message.ID != got.Message.ID {
		t.Fatalf("bob's inbox: %+v, %v; want his hello, carol's message, then alice's", page.Entries, err)
	}
}

// A claimed seq another message took before the claim's entry was put (the
// claiming send crashed between claim and entry; another send came): the
// retry moves the claim to the head + 1 and puts the entry there at once,
// instead of reading every position again for another round.
func TestARetryWhoseClaimedSeqWasTakenPlacesAboveTheHeadAtOnce(t *testing.T) {
	t.Parallel()
	ctx, now := context.Background(), time.Now()
	var (
		crashed, retrying atomic.Bool
		batchGets         atomic.Int32
	)
	alice := im.Direct("alice", "bob")
	plain, hooked := newStores(t, func(ctx context.Context, in any) error {
		switch in := in.(type) {
		case *dynamodb.BatchGetItemInput:
			if retrying.Load() {
				batchGets.Add(1)
			}
		case *dynamodb.PutItemInput:
			conv, _ := in.Item["conversationId"].(*types.AttributeValueMemberS)
			user, _ := in.Item["userId"].(*types.AttributeValueMemberS)
			if conv != nil && user != nil && conv.Value == string(alice) && user.Value == "bob" && !crashed.Swap(true) {
				return errors.New("crash between the claim and the entry")
			}
		}
		return nil
	})
	plain.SendMode, hooked.SendMode = dynamo.SendClaim, dynamo.SendClaim
	hello, err := plain.Send(ctx, draft("bob", "b0", "alice", `"hello"`), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hooked.Send(ctx, draft("alice", "a1", "bob", `"second"`), now); err == nil {
		t.Fatal("the send whose entry put crashed succeeded")
	}
	// Carol's send takes seq 2 of bob's inbox, which alice's claim names.
	carol, err := plain.Send(ctx, draft("carol", "c1", "bob", `"first"`), now)
	if err != nil || carol.Inboxed["bob"] != 2 {
		t.Fatalf("carol: %+v, %v; want bob's seq 2", carol, err)
	}
	retrying.Store(true)
	got, err := hooked.Send(ctx, draft("alice", "a1", "bob", `"second"`), now)
	if err != nil || got.Inboxed["bob"] != 3 {
		t.Fatalf("alice's retry: %+v, %v; want bob's seq 3", got, err)
	}
	// The send's positions, the index items of its replay, the placement's
	// positions and the head above the taken seq: 4. A placement that moves
	// the claim and then starts a new round reads positions again (5).
	if n := batchGets.Load(); n > 4 {
		t.Errorf("the retry made %d BatchGetItem calls; want 4 (the placement moves the claim and puts the entry at once)", n)
	}
	page, err := plain.Page(ctx, "bob", 0, 10, wire.EntrySize)
	if err != nil || len(page.Entries) != 3 || page.Entries[0].Message.ID != hello.Message.ID || page.Entries[1].Message.ID != carol.Message.ID || page.Entries[2].Message.ID != got.Message.ID {
		t.Fatalf("bob's inbox: %+v, %v; want his hello, carol's message, then alice's", page.Entries, err)
	}
}
