package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

func TestAppendGroupIsExactlyOnceAndInOrder(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	g := im.Group("ops")
	if _, err := st.CreateGroup(ctx, g, "Ops", "alice", nil, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"bob"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 100; i++ {
		if _, err := st.SendGroup(ctx, im.Draft{From: "alice", ClientMsgID: fmt.Sprint(i), Conversation: g, Body: []byte(fmt.Sprint(i))}, now); err != nil {
			t.Fatal(err)
		}
	}
	// A 1:1 message lands in bob's inbox in between: the head moves.
	if _, err := st.Send(ctx, im.Draft{From: "carol", ClientMsgID: "x", Conversation: im.Direct("bob", "carol"), Body: []byte(`"hi"`)}, now); err != nil {
		t.Fatal(err)
	}
	log, err := st.Log(ctx, g, 0, 100)
	if err != nil || len(log) != 100 {
		t.Fatalf("log: %d, %v", len(log), err)
	}
	pos, err := st.Positions(ctx, g, []im.UserID{"bob"})
	if err != nil || pos["bob"].Head != 1 || pos["bob"].Last != 0 {
		t.Fatalf("positions = %+v, %v", pos, err)
	}
	// A stale position (head 0) is retried; a second run appends nothing.
	entries, err := st.AppendGroup(ctx, g, "bob", im.InboxPosition{}, log, now)
	if err != nil || len(entries) != 100 {
		t.Fatalf("append: %d, %v", len(entries), err)
	}
	again, err := st.AppendGroup(ctx, g, "bob", im.InboxPosition{}, log, now)
	if err != nil || len(again) != 0 {
		t.Fatalf("second append: %d, %v", len(again), err)
	}
	var got []int64
	cursor := int64(0)
	for {
		page, err := st.Page(ctx, "bob", cursor, 100, wire.EntrySize)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			if e.Message.Conversation == g {
				got = append(got, e.Message.ConvSeq)
			}
		}
		if !page.More {
			break
		}
		cursor = page.Next
	}
	want := make([]int64, 100)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("bob's group entries = %v", got)
	}
}

// Regression: a member removed before the group's first message (left at
// head 0) still counted as a member and could send.
func TestRemovedBeforeAnyMessageIsOut(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	g := im.Group("early")
	if _, err := st.CreateGroup(ctx, g, "Early", "alice", nil, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"bob"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpRemove, Targets: []im.UserID{"bob"}, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Member(ctx, g, "bob")
	if err != nil || m.Active() || !m.Removed || m.Receives(1) {
		t.Fatalf("bob = %+v, %v", m, err)
	}
	if _, err := st.SendGroup(ctx, im.Draft{From: "bob", ClientMsgID: "x", Conversation: g, Body: []byte(`"hi"`)}, now); !errors.Is(err, im.ErrNotMember) {
		t.Fatalf("removed member's send: %v", err)
	}
	// Added again, he is in from the current head on.
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"bob"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	if m, _ := st.Member(ctx, g, "bob"); !m.Active() {
		t.Fatalf("re-added bob = %+v", m)
	}
	if _, err := st.SendGroup(ctx, im.Draft{From: "bob", ClientMsgID: "y", Conversation: g, Body: []byte(`"back"`)}, now); err != nil {
		t.Fatal(err)
	}
	// The member limit counts current members only.
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"c1", "c2"}, Role: im.RoleMember, Limit: 3, At: now}); !errors.Is(err, im.ErrGroupFull) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpRemove, Targets: []im.UserID{"alice"}, Limit: 500, At: now}); !errors.Is(err, im.ErrLastOwner) {
		t.Fatalf("last owner leaving: %v", err)
	}
}

func TestGroupSendIsIdempotentPerSenderAndClientMsgID(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	g := im.Group("idem")
	if _, err := st.CreateGroup(ctx, g, "Idem", "alice", nil, now); err != nil {
		t.Fatal(err)
	}
	d := im.Draft{From: "alice", ClientMsgID: "c1", Conversation: g, Body: []byte(`"once"`)}
	first, err := st.SendGroup(ctx, d, now)
	if err != nil || first.Replayed || first.Message.ConvSeq != 1 {
		t.Fatalf("first = %+v, %v", first, err)
	}
	again, err := st.SendGroup(ctx, d, now.Add(time.Second))
	if err != nil || !again.Replayed || again.Message.ID != first.Message.ID || again.Message.ConvSeq != 1 {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	d.Body = []byte(`"other"`)
	if _, err := st.SendGroup(ctx, d, now); !errors.Is(err, im.ErrClientMsgIDReused) {
		t.Fatalf("reuse with other content: %v", err)
	}
	if _, head, _, err := st.GroupInfo(ctx, g); err != nil || head != 1 {
		t.Fatalf("head = %d, %v", head, err)
	}
}

// A group send retried after its sender left the group is answered as
// the first (the sender's device may have lost the ACK); a retry whose
// look-up of the earlier send fails is an error to ask again with, not
// forbidden — which would tell the device that an ACKed message was
// refused (the chaos run's hell profile found one).
func TestAGroupSendRetriedAfterItsSenderLeftIsAnsweredAsTheFirst(t *testing.T) {
	t.Parallel()
	ctx, now, g := context.Background(), time.Now(), im.Group("left")
	var fail atomic.Bool
	plain, hooked := newStores(t, func(_ context.Context, in any) error {
		if get, ok := in.(*dynamodb.GetItemInput); ok && fail.Load() {
			if sk, _ := get.Key["sk"].(*types.AttributeValueMemberS); sk != nil && strings.HasPrefix(sk.Value, "i#") {
				return errors.New("the look-up of the earlier send failed")
			}
		}
		return nil
	})
	if _, err := plain.CreateGroup(ctx, g, "Left", "alice", []im.UserID{"bob"}, now); err != nil {
		t.Fatal(err)
	}
	d := im.Draft{From: "bob", ClientMsgID: "c1", Conversation: g, Body: []byte(`"bye"`)}
	first, err := plain.SendGroup(ctx, d, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "bob", Op: im.OpRemove, Targets: []im.UserID{"bob"}, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	again, err := hooked.SendGroup(ctx, d, now.Add(time.Second))
	if err != nil || !again.Replayed || again.Message.ID != first.Message.ID {
		t.Fatalf("retry after leaving: %+v, %v; want a replay of %s", again, err, first.Message.ID)
	}
	fail.Store(true)
	if _, err := hooked.SendGroup(ctx, d, now.Add(time.Second)); err == nil || errors.Is(err, im.ErrNotMember) {
		t.Fatalf("retry whose look-up failed: %v; want the failure, not not-a-member", err)
	}
	fail.Store(false)
	if _, err := hooked.SendGroup(ctx, im.Draft{From: "bob", ClientMsgID: "c2", Conversation: g, Body: []byte(`"late"`)}, now); !errors.Is(err, im.ErrNotMember) {
		t.Fatalf("a new send after leaving: %v; want not a member", err)
	}
}

// Issue 11 finding 13: the group transaction did not check the actor's own
// role, so an admin demoted while adding still completed the add.
func TestAdminDemotedDuringAddCannotCompleteIt(t *testing.T) {
	t.Parallel()
	ctx, now, g := context.Background(), time.Now(), im.Group("race")
	var plain *dynamo.Store
	var once sync.Once
	plain, bobs := newStores(t, func(ctx context.Context, in any) error {
		if _, ok := in.(*dynamodb.TransactWriteItemsInput); ok {
			// Bob read his admin role; before his add commits, alice demotes him.
			once.Do(func() {
				if _, err := plain.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpRole, Targets: []im.UserID{"bob"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
					t.Errorf("demote: %v", err)
				}
			})
		}
		return nil
	})
	if _, err := plain.CreateGroup(ctx, g, "Race", "alice", nil, now); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"bob"}, Role: im.RoleAdmin, Limit: 500, At: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := bobs.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "bob", Op: im.OpAdd, Targets: []im.UserID{"carol"}, Role: im.RoleMember, Limit: 500, At: now}); !errors.Is(err, im.ErrForbidden) {
		t.Fatalf("add by a just-demoted admin: %v, want forbidden", err)
	}
	if m, err := plain.Member(ctx, g, "carol"); err != nil || m.Role.Valid() {
		t.Fatalf("carol = %+v, %v; want never a member", m, err)
	}
}

// Issue 11 finding 7: a user named twice made a transaction touch one item
// twice (DynamoDB refuses it: the answer was internal).
func TestGroupChangesCountAUserNamedTwiceOnce(t *testing.T) {
	t.Parallel()
	st, ctx, now, g := newStore(t), context.Background(), time.Now(), im.Group("dups")
	added, err := st.CreateGroup(ctx, g, "Dups", "alice", []im.UserID{"bob", "carol"}, now)
	if err != nil || len(added) != 3 {
		t.Fatalf("create = %+v, %v", added, err)
	}
	for _, op := range []im.GroupOp{im.OpAdd, im.OpRole, im.OpRemove} {
		role := im.RoleAdmin
		if op == im.OpRemove {
			role = ""
		}
		changed, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: op, Targets: []im.UserID{"dave", "dave", "bob", "bob"}, Role: role, Limit: 500, At: now})
		if err != nil {
			t.Fatalf("%s with duplicates: %v", op, err)
		}
		if len(changed) == 0 || len(changed) > 2 {
			t.Errorf("%s changed %+v, want each user at most once", op, changed)
		}
	}
	if _, _, count, err := st.GroupInfo(ctx, g); err != nil || count != 2 {
		t.Fatalf("count = %d, %v; want alice and carol", count, err)
	}
}

// users returns n user ids with prefix.
func users(prefix string, n int) []im.UserID {
	out := make([]im.UserID, n)
	for i := range out {
		out[i] = im.UserID(fmt.Sprintf("%s%03d", prefix, i))
	}
	return out
}

// failingFrom returns a hook that fails the nth TransactWriteItems
// (counting from 1) and, when alsoAfter, every call of any kind after it
// too (a function that crashed there).
func failingFrom(nth int, alsoAfter bool) func(context.Context, any) error {
	var mu sync.Mutex
	transactions, failed := 0, false
	return func(_ context.Context, in any) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := in.(*dynamodb.TransactWriteItemsInput); ok {
			transactions++
			if transactions == nth {
				failed = true
				return errors.New("injected: DynamoDB unavailable")
			}
		}
		if failed && alsoAfter {
			return errors.New("injected: the function crashed")
		}
		return nil
	}
}

// groupIsNowhere asserts that nobody can see or use group g.
func groupIsNowhere(t *testing.T, st *dynamo.Store, g im.ConversationID, owner, member im.UserID) {
	t.Helper()
	ctx := context.Background()
	if _, _, _, err := st.GroupInfo(ctx, g); !errors.Is(err, im.ErrNoSuchGroup) {
		t.Errorf("GroupInfo: %v, want no such group", err)
	}
	if ms, err := st.Members(ctx, g); err != nil || len(ms) != 0 {
		t.Errorf("Members = %d members, %v; want none", len(ms), err)
	}
	for _, u := range []im.UserID{owner, member} {
		if m, err := st.Member(ctx, g, u); err != nil || m.Role.Valid() {
			t.Errorf("Member(%s) = %+v, %v; want never a member", u, m, err)
		}
		convs, _, err := st.Conversations(ctx, u, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, cs := range convs {
			if cs.Conversation == g {
				t.Errorf("%s's conversation list shows %s", u, g)
			}
		}
	}
	if _, err := st.SendGroup(ctx, im.Draft{From: owner, ClientMsgID: "m1", Conversation: g, Body: []byte(`{"text":"hi"}`)}, time.Now()); err == nil {
		t.Error("the owner could send into it")
	}
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: owner, Op: im.OpAdd, Targets: []im.UserID{"zed"}, Role: im.RoleMember, Limit: 500, At: time.Now()}); !errors.Is(err, im.ErrNoSuchGroup) {
		t.Errorf("add: %v, want no such group", err)
	}
}

// Issue 11 finding 7: a create of more members than one transaction holds
// (45) stored its first members and then failed, leaving a group behind.
func TestALargeGroupCreateThatFailsStoresNothingAnyoneCanSee(t *testing.T) {
	t.Parallel()
	ctx, now, g := context.Background(), time.Now(), im.Group("big-fail")
	plain, failing := newStores(t, failingFrom(3, false)) // the head and one staging chunk pass, the next fails
	_, err := failing.CreateGroup(ctx, g, "Big", "alice", users("m", 300), now)
	if err == nil {
		t.Fatal("the create succeeded through a failing DynamoDB")
	}
	groupIsNowhere(t, plain, g, "alice", "m250")
	// What it staged is gone: the id is free at once, and only the new
	// members are members.
	added, err := plain.CreateGroup(ctx, g, "Big", "alice", users("n", 120), now)
	if err != nil || len(added) != 121 {
		t.Fatalf("create again = %d, %v", len(added), err)
	}
	ms, err := plain.Members(ctx, g)
	if err != nil || len(ms) != 121 {
		t.Fatalf("members = %d, %v; want alice and n000..n119 only", len(ms), err)
	}
	for _, m := range ms {
		if m.User != "alice" && m.User[0] != 'n' {
			t.Errorf("%s is a member, left from the failed create", m.User)
		}
	}
}

// A staged create that crashed (its clean-up failing too) leaves nothing
// visible, keeps its id for a create that may still be under way, and
// gives the id up once abandoned.
func TestACrashedLargeGroupCreateIsInvisibleAndItsIdFreedWhenAbandoned(t *testing.T) {
	t.Parallel()
	ctx, now, g := context.Background(), time.Now(), im.Group("big-crash")
	plain, crashing := newStores(t, failingFrom(3, true))
	if _, err := crashing.CreateGroup(ctx, g, "Big", "alice", users("m", 300), now); err == nil {
		t.Fatal("the create succeeded through a crash")
	}
	groupIsNowhere(t, plain, g, "alice", "m050")
	if _, err := plain.CreateGroup(ctx, g, "Big", "bob", nil, now.Add(time.Minute)); !errors.Is(err, im.ErrGroupExists) {
		t.Fatalf("a create a minute later: %v, want the id taken (the first may still be under way)", err)
	}
	later := now.Add(20 * time.Minute)
	if _, err := plain.CreateGroup(ctx, g, "Mine", "bob", users("n", 2), later); err != nil {
		t.Fatalf("a create after the crashed one was abandoned: %v", err)
	}
	ms, err := plain.Members(ctx, g)
	if err != nil || len(ms) != 3 {
		t.Fatalf("members = %+v, %v; want bob, n000, n001", ms, err)
	}
	if name, _, count, err := plain.GroupInfo(ctx, g); err != nil || name != "Mine" || count != 3 {
		t.Fatalf("GroupInfo = %q, %d, %v", name, count, err)
	}
}

func TestALargeGroupCreateMakesEveryMemberAtOnce(t *testing.T) {
	t.Parallel()
	st, ctx, now, g := newStore(t), context.Background(), time.Now(), im.Group("big")
	added, err := st.CreateGroup(ctx, g, "Big", "alice", users("m", 250), now)
	if err != nil || len(added) != 251 {
		t.Fatalf("create = %d, %v", len(added), err)
	}
	if _, _, count, err := st.GroupInfo(ctx, g); err != nil || count != 251 {
		t.Fatalf("count = %d, %v", count, err)
	}
	if ms, err := st.Members(ctx, g); err != nil || len(ms) != 251 {
		t.Fatalf("members = %d, %v", len(ms), err)
	}
	convs, _, err := st.Conversations(ctx, "m249", "", 10)
	if err != nil || len(convs) != 1 || convs[0].Conversation != g {
		t.Fatalf("m249's conversations = %+v, %v", convs, err)
	}
	if _, err := st.SendGroup(ctx, im.Draft{From: "m249", ClientMsgID: "m1", Conversation: g, Body: []byte(`{"text":"hi"}`)}, now); err != nil {
		t.Fatalf("the last member sends: %v", err)
	}
}

// Member changes that race for the group head are retried, never refused:
// every add lands and the count is right.
func TestConcurrentMemberChangesAllLand(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	g := im.Group("race")
	if _, err := st.CreateGroup(ctx, g, "Race", "alice", nil, now); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Go(func() {
			if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{im.UserID(fmt.Sprintf("m%02d", i))}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a concurrent add failed: %v", err)
	}
	members, err := st.Members(ctx, g)
	if err != nil || len(members) != 13 {
		t.Fatalf("%d members, %v; want 13", len(members), err)
	}
}

// A member removed after the send read their membership and before its
// transaction commits is refused and nothing is stored: the send's write
// of the sender's read watermark is conditional on the index item saying
// member, which the removal changed in its own transaction.
func TestARemovalBetweenTheSendsReadAndItsWriteRefusesTheSend(t *testing.T) {
	t.Parallel()
	var plain *dynamo.Store
	var removed atomic.Bool
	ctx, now := context.Background(), time.Now()
	g := im.Group("race")
	plain, hooked := newStores(t, func(ctx context.Context, in any) error {
		if _, ok := in.(*dynamodb.TransactWriteItemsInput); ok && removed.CompareAndSwap(false, true) {
			_, err := plain.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpRemove, Targets: []im.UserID{"bob"}, Limit: 500, At: now})
			return err
		}
		return nil
	})
	if _, err := plain.CreateGroup(ctx, g, "Race", "alice", []im.UserID{"bob"}, now); err != nil {
		t.Fatal(err)
	}
	_, err := hooked.SendGroup(ctx, im.Draft{From: "bob", ClientMsgID: "x", Conversation: g, Body: []byte(`"late"`)}, now)
	if !removed.Load() || !errors.Is(err, im.ErrNotMember) {
		t.Fatalf("send by a member removed under it: %v (removal ran: %v); want %v", err, removed.Load(), im.ErrNotMember)
	}
	head, _, _, err := plain.FanoutMark(ctx, g)
	if err != nil || head != 0 {
		t.Fatalf("group head = %d, %v; want 0 (nothing stored)", head, err)
	}
	if log, err := plain.Log(ctx, g, 0, 10); err != nil || len(log) != 0 {
		t.Fatalf("log = %v, %v; want empty", log, err)
	}
	// Alice, still a member, sends; the log starts at 1.
	s, err := plain.SendGroup(ctx, im.Draft{From: "alice", ClientMsgID: "y", Conversation: g, Body: []byte(`"on"`)}, now)
	if err != nil || s.Message.ConvSeq != 1 {
		t.Fatalf("alice's send = %+v, %v; want convSeq 1", s.Message, err)
	}
}

// A create sent again by its creator (its answer was lost) is told so,
// with the group's members among those it named; anyone else, or another
// name, finds the id taken.
func TestACreateSentAgainByItsCreatorIsRecognised(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	for _, size := range []int{2, 60} { // in one transaction, and staged
		g := im.Group(fmt.Sprintf("again-%d", size))
		named := users("m", size)
		if _, err := st.CreateGroup(ctx, g, "Ops", "alice", named, now); err != nil {
			t.Fatal(err)
		}
		again, err := st.CreateGroup(ctx, g, "Ops", "alice", named, now.Add(time.Second))
		if !errors.Is(err, im.ErrAlreadyCreated) || len(again) != size+1 {
			t.Fatalf("%d: the same create again = %d members, %v", size, len(again), err)
		}
		for _, other := range []struct {
			owner im.UserID
			name  string
		}{{"dave", "Ops"}, {"alice", "Other"}} {
			if _, err := st.CreateGroup(ctx, g, other.name, other.owner, named, now); !errors.Is(err, im.ErrGroupExists) {
				t.Fatalf("%d: %s creating %q over it: %v, want the id taken", size, other.owner, other.name, err)
			}
		}
		removeMember(t, st, g, "m000", now)
		if again, err := st.CreateGroup(ctx, g, "Ops", "alice", named, now); !errors.Is(err, im.ErrAlreadyCreated) || len(again) != size {
			t.Fatalf("%d: again after a removal = %d members, %v", size, len(again), err)
		}
		if ms, _ := st.Members(ctx, g); len(ms) != size+1 {
			t.Fatalf("%d: members = %d: a create again changed them", size, len(ms))
		}
	}
}

// A membership change sent again with its op id — its answer was lost,
// or its invocation failed after storing it — is answered as the first
// time: the users it changed, though it changes nothing more. Without
// the op id (or with another actor's) nothing is listed, and a leave
// sent again is refused: its actor is no member any more.
func TestAGroupChangeSentAgainWithItsOpIDListsWhatItChanged(t *testing.T) {
	t.Parallel()
	st, ctx, now, g := newStore(t), context.Background(), time.Now(), im.Group("again")
	if _, err := st.CreateGroup(ctx, g, "Again", "alice", []im.UserID{"bob", "carol", "dave"}, now); err != nil {
		t.Fatal(err)
	}
	change := func(actor im.UserID, op im.GroupOp, role im.Role, opID string, targets ...im.UserID) []im.UserID {
		t.Helper()
		return changeWithOpID(t, st, im.MemberChange{Group: g, Actor: actor, Op: op, Targets: targets, Role: role, Limit: 500, At: now, OpID: opID})
	}
	cases := []struct {
		actor   im.UserID
		op      im.GroupOp
		role    im.Role
		targets []im.UserID
	}{
		{"alice", im.OpAdd, im.RoleMember, []im.UserID{"erin", "bob"}},
		{"alice", im.OpRemove, "", []im.UserID{"bob", "carol"}},
		{"alice", im.OpRole, im.RoleAdmin, []im.UserID{"dave", "erin"}},
		{"erin", im.OpRemove, "", []im.UserID{"erin"}}, // a leave
	}
	want := [][]im.UserID{{"erin"}, {"bob", "carol"}, {"dave", "erin"}, {"erin"}}
	for i, c := range cases {
		opID := fmt.Sprintf("op-%d", i)
		if got := change(c.actor, c.op, c.role, opID, c.targets...); !slices.Equal(got, want[i]) {
			t.Fatalf("%s %s changed %v, want %v", c.actor, c.op, got, want[i])
		}
		_, _, before, _ := st.GroupInfo(ctx, g)
		if got := change(c.actor, c.op, c.role, opID, c.targets...); !slices.Equal(got, want[i]) {
			t.Errorf("%s %s sent again with its op id changed %v, want %v as the first time", c.actor, c.op, got, want[i])
		}
		if _, _, after, _ := st.GroupInfo(ctx, g); after != before {
			t.Errorf("%s %s sent again moved the member count %d -> %d", c.actor, c.op, before, after)
		}
		if c.actor == "alice" {
			if got := change(c.actor, c.op, c.role, "", c.targets...); len(got) != 0 {
				t.Errorf("%s %s sent again without its op id changed %v, want nobody", c.actor, c.op, got)
			}
		}
	}
	if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "erin", Op: im.OpRemove, Targets: []im.UserID{"erin"}, Limit: 500, At: now}); !errors.Is(err, im.ErrNotMember) {
		t.Errorf("a leave sent again without its op id: %v, want %v", err, im.ErrNotMember)
	}
	// Another actor's change with the same op id is another change.
	if got := change("alice", im.OpRemove, "", "op-3", "erin"); len(got) != 0 {
		t.Errorf("alice's remove with erin's leave's op id changed %v, want nobody (erin left)", got)
	}
	// A later change does not make the first one sent again apply again:
	// a copy that arrives after it (the SDK asked again while the first
	// copy's invocation still ran) is answered as the first and changes
	// nothing.
	if got := change("alice", im.OpRole, im.RoleMember, "op-4", "dave"); !slices.Equal(got, []im.UserID{"dave"}) {
		t.Fatalf("dave back to member: %v", got)
	}
	if got := change("alice", im.OpRole, im.RoleAdmin, "op-2", "dave", "erin"); !slices.Equal(got, want[2]) {
		t.Errorf("the role change sent again after a later one changed %v, want %v as the first time", got, want[2])
	}
	if m, err := st.Member(ctx, g, "dave"); err != nil || m.Role != im.RoleMember {
		t.Errorf("dave = %+v, %v; want still a member: the later change stands", m, err)
	}
}

// changeWithOpID makes change ch (fatal on an error) and returns whom it
// answered changed.
func changeWithOpID(t *testing.T, st *dynamo.Store, ch im.MemberChange) []im.UserID {
	t.Helper()
	changed, err := st.ChangeMembers(context.Background(), ch)
	if err != nil {
		t.Fatalf("%s %s %v (op id %q): %v", ch.Actor, ch.Op, ch.Targets, ch.OpID, err)
	}
	return usersOf(changed)
}

// usersOf lists the users of members, in order.
func usersOf(members []im.Member) []im.UserID {
	out := make([]im.UserID, len(members))
	for i, m := range members {
		out[i] = m.User
	}
	return out
}

// A copy of a change that arrives after later changes of the same members
// undoes none of them, whatever the change: a removal sent again after the
// member was added back leaves them in, an add sent again after a removal
// leaves them out, and a change that changed nobody the first time (the
// role was already so) changes nobody when its copy comes after a later
// change either. Two copies at once: one applies it, both answer it.
func TestAGroupChangeSentAgainAfterALaterOneUndoesNothing(t *testing.T) {
	t.Parallel()
	st, ctx, now, g := newStore(t), context.Background(), time.Now(), im.Group("late-copy")
	if _, err := st.CreateGroup(ctx, g, "Late copy", "alice", []im.UserID{"bob", "carol"}, now); err != nil {
		t.Fatal(err)
	}
	change := func(op im.GroupOp, role im.Role, opID string, targets ...im.UserID) []im.UserID {
		t.Helper()
		return changeWithOpID(t, st, im.MemberChange{Group: g, Actor: "alice", Op: op, Targets: targets, Role: role, Limit: 500, At: now, OpID: opID})
	}
	member := func(u im.UserID) im.Member {
		t.Helper()
		m, err := st.Member(ctx, g, u)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	change(im.OpRemove, "", "rm-bob", "bob")
	change(im.OpAdd, im.RoleMember, "add-bob", "bob")
	if got := change(im.OpRemove, "", "rm-bob", "bob"); !slices.Equal(got, []im.UserID{"bob"}) {
		t.Errorf("the removal sent again after the add answered %v, want [bob] as the first time", got)
	}
	if !member("bob").Active() {
		t.Errorf("bob = %+v: the removal's late copy removed him again", member("bob"))
	}
	change(im.OpRemove, "", "rm-bob-2", "bob")
	if got := change(im.OpAdd, im.RoleMember, "add-bob", "bob"); !slices.Equal(got, []im.UserID{"bob"}) {
		t.Errorf("the add sent again after a removal answered %v, want [bob]", got)
	}
	if member("bob").Active() {
		t.Errorf("bob = %+v: the add's late copy added him back", member("bob"))
	}
	if got := change(im.OpRole, im.RoleMember, "noop", "carol"); len(got) != 0 {
		t.Fatalf("carol made what she is changed %v", got)
	}
	change(im.OpRole, im.RoleAdmin, "promote", "carol")
	if got := change(im.OpRole, im.RoleMember, "noop", "carol"); len(got) != 0 {
		t.Errorf("the change of nobody sent again after a later one changed %v, want nobody", got)
	}
	if r := member("carol").Role; r != im.RoleAdmin {
		t.Errorf("carol's role %s: the late copy of a change of nobody demoted her", r)
	}
	// Two copies at once.
	answers := make(chan []im.UserID, 2)
	for range 2 {
		go func() {
			changed, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"dave"}, Role: im.RoleMember, Limit: 500, At: now, OpID: "add-dave"})
			if err != nil {
				t.Errorf("a copy of the add: %v", err)
			}
			answers <- usersOf(changed)
		}()
	}
	for range 2 {
		if got := <-answers; !slices.Equal(got, []im.UserID{"dave"}) {
			t.Errorf("a copy of an add sent twice at once answered %v, want [dave]", got)
		}
	}
	if _, _, count, err := st.GroupInfo(ctx, g); err != nil || count != 3 {
		t.Errorf("members after: %d, %v; want 3 (alice, carol, dave)", count, err)
	}
}
