package dynamo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// groupWithLog creates group g with alice and bob, and n messages in its log.
func groupWithLog(t *testing.T, st *Store, g im.ConversationID, n int) []im.Message {
	t.Helper()
	ctx, now := context.Background(), time.Now()
	if _, err := st.CreateGroup(ctx, g, "Ops", "alice", []im.UserID{"bob"}, now); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := st.SendGroup(ctx, im.Draft{From: "alice", ClientMsgID: fmt.Sprint(i), Conversation: g, Body: []byte(fmt.Sprint(i))}, now); err != nil {
			t.Fatal(err)
		}
	}
	log, err := st.Log(ctx, g, 0, int64(n))
	if err != nil || len(log) != n {
		t.Fatalf("log: %d, %v", len(log), err)
	}
	return log
}

// appendAll appends log to u's inbox from a fresh position.
func appendAll(t *testing.T, st *Store, u im.UserID, log []im.Message) []im.Entry {
	t.Helper()
	ctx := context.Background()
	pos, err := st.Positions(ctx, log[0].Conversation, []im.UserID{u})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []im.Message
	for _, m := range log {
		if m.ConvSeq > pos[u].Last {
			msgs = append(msgs, m)
		}
	}
	entries, err := st.AppendGroup(ctx, log[0].Conversation, u, pos[u], msgs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// inboxOf returns u's whole inbox as (conversation, convSeq) in seq order,
// failing on a gap.
func inboxOf(t *testing.T, st *Store, u im.UserID) []logRef {
	t.Helper()
	var out []logRef
	cursor := int64(0)
	for {
		p, err := st.Page(context.Background(), u, cursor, 100, func(e im.Entry) int { return 100 })
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Entries {
			if e.Seq != cursor+1 {
				t.Fatalf("%s's inbox skips from %d to %d", u, cursor, e.Seq)
			}
			cursor = e.Seq
			out = append(out, logRef{e.Message.Conversation, e.Message.ConvSeq})
		}
		if !p.More {
			return out
		}
	}
}

// assertOnceInOrder checks that u's inbox holds group g's messages 1..n
// once each, in order, and returns the whole inbox.
func assertOnceInOrder(t *testing.T, st *Store, u im.UserID, g im.ConversationID, n int) []logRef {
	t.Helper()
	inbox := inboxOf(t, st, u)
	if seqs := groupSeqs(inbox, g); !slices.Equal(seqs, upTo(n)) {
		t.Fatalf("%s's group entries = %v, want 1..%d once each", u, seqs, n)
	}
	return inbox
}

// groupSeqs returns the convSeqs of g in refs, in order.
func groupSeqs(refs []logRef, g im.ConversationID) []int64 {
	var out []int64
	for _, r := range refs {
		if r.c == g {
			out = append(out, r.cseq)
		}
	}
	return out
}

func upTo(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// Issue 12: a fan-out append claims a message in the member's conversation
// index and then puts its entry, two writes instead of a transaction. A run
// that crashed between the two leaves a claim without its entry: the next
// run puts the claimed message first (nothing is skipped), and only then the
// ones after it.
func TestAFanOutThatCrashedAfterItsClaimIsCompletedInOrder(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	g := im.Group("ops")
	log := groupWithLog(t, st, g, 5)
	appendAll(t, st, "bob", log[:2])
	// The crashed run: message 3 claimed at the next seq, no entry.
	pos, err := st.Positions(context.Background(), g, []im.UserID{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.UpdateItem(context.Background(), claim(st.tables.Inbox, "bob", log[2], pos["bob"].Head+1, 2)); err != nil {
		t.Fatal(err)
	}
	// The retry of the job that claimed 3 has nothing after it to append:
	// it completes the claim alone (the fan-out calls AppendGroup for a
	// member whose claim is not in place even when it owes nothing more).
	pos, err = st.Positions(context.Background(), g, []im.UserID{"bob"})
	if err != nil || pos["bob"].LastInPlace {
		t.Fatalf("position %+v, %v: the claim of 3 should not be in place", pos["bob"], err)
	}
	got, err := st.AppendGroup(context.Background(), g, "bob", pos["bob"], nil, time.Now())
	if err != nil || len(got) != 1 || got[0].Message.ConvSeq != 3 {
		t.Fatalf("completing the claim put %+v, %v; want message 3", got, err)
	}
	if got = appendAll(t, st, "bob", log); len(got) != 2 || got[0].Message.ConvSeq != 4 {
		t.Fatalf("the next run put %d entries (first %+v), want 4 and 5", len(got), got)
	}
	assertOnceInOrder(t, st, "bob", g, 5)
}

// A claimed seq that another append took before the claim's entry was put
// (a 1:1 message landed in between) moves the claim to the new head: the
// message still lands once, after everything before it.
func TestAClaimWhoseSeqWasTakenMoves(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx := context.Background()
	g := im.Group("ops")
	log := groupWithLog(t, st, g, 4)
	appendAll(t, st, "bob", log[:1])
	pos, err := st.Positions(ctx, g, []im.UserID{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.UpdateItem(ctx, claim(st.tables.Inbox, "bob", log[1], pos["bob"].Head+1, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Send(ctx, im.Draft{From: "carol", ClientMsgID: "x", Conversation: im.Direct("bob", "carol"), Body: []byte(`"hi"`)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	appendAll(t, st, "bob", log)
	inbox := assertOnceInOrder(t, st, "bob", g, 4)
	if len(inbox) != 5 || inbox[1].c != im.Direct("bob", "carol") {
		t.Fatalf("bob's inbox = %v, want group 1, carol's message, group 2..4", inbox)
	}
}

// Concurrent fan-out runs (SQS delivers a job twice, two jobs overlap) and
// 1:1 sends into the same inbox: every group message once, in order, and
// the inbox gap-free.
func TestConcurrentFanOutsAndSendsKeepOneCopyInOrder(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx := context.Background()
	g := im.Group("ops")
	const n = 20
	log := groupWithLog(t, st, g, n)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for r := range 6 {
		wg.Go(func() {
			for i := r % 3; i < n; i += 7 {
				pos, err := st.Positions(ctx, g, []im.UserID{"bob"})
				if err != nil {
					errs <- err
					return
				}
				var msgs []im.Message
				for _, m := range log[:i+1] {
					if m.ConvSeq > pos["bob"].Last {
						msgs = append(msgs, m)
					}
				}
				if _, err := st.AppendGroup(ctx, g, "bob", pos["bob"], msgs, time.Now()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 10 {
			if _, err := st.Send(ctx, im.Draft{From: "carol", ClientMsgID: fmt.Sprint(i), Conversation: im.Direct("bob", "carol"), Body: []byte(`"hi"`)}, time.Now()); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	appendAll(t, st, "bob", log)
	inbox := assertOnceInOrder(t, st, "bob", g, n)
	if len(inbox) != n+10 {
		t.Fatalf("bob's inbox holds %d entries, want %d", len(inbox), n+10)
	}
}

// A member whose conversation index item does not (yet) say so — a staged
// create's members between its commit and their index items, or an item
// written by other means — still sends: when the index item fails the
// send's membership condition, the member item decides.
func TestAMemberWithoutAnIndexItemStillSends(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	g := im.Group("staged")
	if _, err := st.CreateGroup(ctx, g, "Staged", "alice", []im.UserID{"bob"}, now); err != nil {
		t.Fatal(err)
	}
	// Bob's index item as a staged create leaves it until it is written:
	// nothing (a bare item, since minidyn's REMOVE leaves attributes).
	bare := map[string]types.AttributeValue{attrUser: s("bob"), attrSK: s(convIndexSK(g))}
	if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Inbox), Item: bare}); err != nil {
		t.Fatal(err)
	}
	got, err := st.SendGroup(ctx, im.Draft{From: "bob", ClientMsgID: "x", Conversation: g, Body: []byte(`"hi"`)}, now)
	if err != nil || got.Message.ConvSeq != 1 {
		t.Fatalf("bob's send = %+v, %v; want convSeq 1", got.Message, err)
	}
	if log, err := st.Log(ctx, g, 0, 10); err != nil || len(log) != 1 || log[0].From != "bob" {
		t.Fatalf("log = %+v, %v", log, err)
	}
	// Removed, he is refused by either path.
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpRemove, Targets: []im.UserID{"bob"}, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SendGroup(ctx, im.Draft{From: "bob", ClientMsgID: "y", Conversation: g, Body: []byte(`"out"`)}, now); err == nil {
		t.Fatal("a removed member's send was stored")
	}
}
