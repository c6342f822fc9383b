package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/provision"
	"github.com/signet-im/signet/shared/template"
	"github.com/signet-im/signet/shared/wire"
)

// newStore provisions the template's tables on a fresh minidyn, or on the
// endpoint in SIGNET_TEST_DYNAMODB_ENDPOINT (e.g. moto), under a unique prefix.
// The same contract runs against every backend.
func newStore(t *testing.T) *dynamo.Store {
	t.Helper()
	st, _ := newStores(t, nil)
	return st
}

// newStores is newStore that also returns a second store on the same
// tables whose DynamoDB client calls hook with each operation's input
// before sending it (to interleave another writer deterministically); an
// error from hook fails that call, as a failing DynamoDB request would.
func newStores(t *testing.T, hook func(ctx context.Context, input any) error) (plain, hooked *dynamo.Store) {
	t.Helper()
	endpoint := os.Getenv("SIGNET_TEST_DYNAMODB_ENDPOINT")
	if endpoint == "" {
		e, err := devstack.StartDynamoDB(os.Getenv(devstack.EnvEmulator), devstack.Place{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Stop)
		endpoint = e.Endpoint
	}
	db := dynamodb.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")},
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		t.Fatal(err)
	}
	names, err := provision.Tables(context.Background(), tmpl, db, fmt.Sprintf("st%d", time.Now().UnixNano()), nil)
	if err != nil {
		t.Fatal(err)
	}
	tables := dynamo.Tables{Connections: names["ConnectionsTable"], Inbox: names["InboxTable"], Messages: names["MessagesTable"], Alerts: names["AlertsTable"], Trace: names["TraceTable"]}
	// SIGNET_TEST_SEND_MODE runs the suite with a 1:1 send mode other
	// than the default (make test-send-transaction).
	newStore := func(db *dynamodb.Client) *dynamo.Store {
		st := dynamo.New(db, tables)
		if m := os.Getenv("SIGNET_TEST_SEND_MODE"); m != "" {
			st.SendMode = m
		}
		// Groups are created read-diffused, as a deployment's are by
		// default; SIGNET_TEST_GROUP_DELIVERY=write: written into inboxes
		// (make test-group-write).
		st.GroupReads = os.Getenv("SIGNET_TEST_GROUP_DELIVERY") != "write"
		return st
	}
	if hook == nil {
		return newStore(db), nil
	}
	hookedDB := dynamodb.New(db.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("testHook", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if err := hook(ctx, in.Parameters); err != nil {
					return middleware.InitializeOutput{}, middleware.Metadata{}, err
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
		})
	})
	return newStore(db), newStore(hookedDB)
}

func draft(from im.UserID, cmid string, to im.UserID, body string) im.Draft {
	return im.Draft{From: from, ClientMsgID: cmid, Conversation: im.Direct(from, to), Body: []byte(body)}
}

func TestSendIsIdempotentPerSenderAndClientMsgID(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	first, err := st.Send(ctx, draft("alice", "c1", "bob", `"hi"`), now)
	if err != nil || first.Replayed || first.Message.ConvSeq != 1 || first.Inboxed["bob"] != 1 || first.Inboxed["alice"] != 1 {
		t.Fatalf("first send = %+v, %v", first, err)
	}
	again, err := st.Send(ctx, draft("alice", "c1", "bob", `"hi"`), now.Add(time.Minute))
	if err != nil || !again.Replayed || again.Message.ID != first.Message.ID || again.Inboxed["bob"] != 1 || !again.Message.SentAt.Equal(first.Message.SentAt.Truncate(time.Millisecond)) {
		t.Fatalf("replay = %+v, %v", again, err)
	}
	if _, err := st.Send(ctx, draft("alice", "c1", "bob", `"other"`), now); !errors.Is(err, im.ErrClientMsgIDReused) {
		t.Fatalf("reuse with other content: %v", err)
	}
	// Another sender may use the same clientMsgId.
	other, err := st.Send(ctx, draft("bob", "c1", "alice", `"hi"`), now)
	if err != nil || other.Replayed || other.Message.ConvSeq != 2 {
		t.Fatalf("bob's c1 = %+v, %v (A→B and B→A share one conversation sequence)", other, err)
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		if head, _, err := st.Head(ctx, u); err != nil || head != 2 {
			t.Fatalf("%s head = %d, %v", u, head, err)
		}
	}
}

// sendAtOnce has each (from, to) pair send each messages in turn, all
// pairs at once, and every message also retried concurrently with itself.
func sendAtOnce(t *testing.T, st *dynamo.Store, pairs [][2]im.UserID, each int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(pairs)*each*2)
	for _, pair := range pairs {
		wg.Go(func() {
			for i := range each {
				d := draft(pair[0], fmt.Sprintf("c%d", i), pair[1], fmt.Sprint(i))
				var inner sync.WaitGroup
				for range 2 {
					inner.Go(func() {
						if _, err := st.Send(context.Background(), d, time.Now()); err != nil {
							errs <- err
						}
					})
				}
				inner.Wait()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestConcurrentSendsToOneInboxAreContiguousAndExactlyOnce(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	const senders, each = 6, 10
	var pairs [][2]im.UserID
	for s := range senders {
		pairs = append(pairs, [2]im.UserID{im.UserID(fmt.Sprintf("s%d", s)), "bob"})
	}
	sendAtOnce(t, st, pairs, each)
	page, err := st.Page(ctx, "bob", 0, 100, wire.EntrySize)
	if err != nil || page.Head != senders*each || len(page.Entries) != senders*each {
		t.Fatalf("page head %d entries %d, %v", page.Head, len(page.Entries), err)
	}
	ids := map[im.MessageID]bool{}
	for i, e := range page.Entries {
		if e.Seq != int64(i+1) || ids[e.Message.ID] {
			t.Fatalf("entry %d: seq %d, duplicate %v", i, e.Seq, ids[e.Message.ID])
		}
		ids[e.Message.ID] = true
	}
}

func TestPageLimitsAndCursorBeyondHead(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	for i := range 5 {
		if _, err := st.Send(ctx, draft("alice", fmt.Sprint(i), "bob", fmt.Sprint(i)), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	p, err := st.Page(ctx, "bob", 1, 2, wire.EntrySize)
	if err != nil || len(p.Entries) != 2 || p.Entries[0].Seq != 2 || p.Next != 3 || !p.More || p.Head != 5 {
		t.Fatalf("page = %+v, %v", p, err)
	}
	p, err = st.Page(ctx, "bob", 1, 100, func(im.Entry) int { return im.MaxPageBytes / 2 })
	if err != nil || len(p.Entries) != 2 || !p.More {
		t.Fatalf("byte-limited page = %d entries more=%v, %v", len(p.Entries), p.More, err)
	}
	first, _ := st.Page(ctx, "bob", 0, 1, wire.EntrySize)
	// A cursor beyond the head is refused, naming head and epoch: an empty
	// "success" would let the device keep a cursor that skips seqs 6..9.
	_, err = st.Page(ctx, "bob", 9, 100, wire.EntrySize)
	var he *im.HeadError
	if !errors.Is(err, im.ErrCursorBeyondHead) || !errors.As(err, &he) || he.Head != 5 || he.Position != 9 || he.Epoch == "" || he.Epoch != first.Epoch {
		t.Fatalf("page past head: %v (%+v), want ErrCursorBeyondHead with head 5 and epoch %q", err, he, first.Epoch)
	}
	p, err = st.Page(ctx, "nobody", 0, 100, wire.EntrySize)
	if err != nil || len(p.Entries) != 0 || p.Head != 0 {
		t.Fatalf("empty inbox page = %+v, %v", p, err)
	}
}

// An inbox has an epoch from the first time it is read, and keeps it when
// its first entry arrives: a device that synced an empty inbox and then
// meets a re-created one sees a different epoch.
func TestEveryInboxAnswerCarriesAStableEpoch(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	empty, err := st.Page(ctx, "bob", 0, 100, wire.EntrySize)
	if err != nil || empty.Epoch == "" || empty.Head != 0 {
		t.Fatalf("empty inbox page = %+v, %v; want head 0 and an epoch", empty, err)
	}
	head, epoch, err := st.EnsureHead(ctx, "bob", now)
	if err != nil || head != 0 || epoch != empty.Epoch {
		t.Fatalf("EnsureHead = %d %q %v, want 0 %q", head, epoch, err, empty.Epoch)
	}
	if _, err := st.Send(ctx, draft("alice", "1", "bob", "1"), now); err != nil {
		t.Fatal(err)
	}
	p, err := st.Page(ctx, "bob", 0, 100, wire.EntrySize)
	if err != nil || p.Head != 1 || len(p.Entries) != 1 || p.Epoch != empty.Epoch {
		t.Fatalf("after the first entry: %+v, %v; want head 1, epoch %q", p, err, empty.Epoch)
	}
	// alice's inbox was never read: her first entry creates her epoch.
	if _, epoch, err := st.Head(ctx, "alice"); err != nil || epoch == "" || epoch == empty.Epoch {
		t.Fatalf("sender's inbox epoch %q, %v", epoch, err)
	}
	// A head that exists keeps its epoch under EnsureHead.
	if _, again, err := st.EnsureHead(ctx, "bob", now); err != nil || again != empty.Epoch {
		t.Fatalf("EnsureHead on a live inbox: %q, %v", again, err)
	}
}

func TestAckIsForwardOnlyAndBoundedByHead(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	for i := range 3 {
		if _, err := st.Send(ctx, draft("alice", fmt.Sprint(i), "bob", "1"), now); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		upTo  int64
		moved bool
		old   int64
		err   error
		acked int64
	}{
		{2, true, 0, nil, 2},
		{1, false, 0, nil, 2},
		{2, false, 0, nil, 2},
		{4, false, 0, im.ErrAckBeyondHead, 2},
		{3, true, 2, nil, 3},
	}
	for _, s := range steps {
		r, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", UpTo: s.upTo, At: now})
		d, _ := st.Device(ctx, "bob", "phone")
		if moved, old := r.Moved, r.Old; moved != s.moved || old != s.old || !errors.Is(err, s.err) || d.Acked != s.acked {
			t.Fatalf("ack %d: moved %v old %d err %v acked %d; want %v %d %v %d", s.upTo, moved, old, err, d.Acked, s.moved, s.old, s.err, s.acked)
		}
	}
	devs, err := st.Devices(ctx, "bob")
	if err != nil || len(devs) != 1 || devs["phone"].Acked != 3 {
		t.Fatalf("devices = %+v, %v", devs, err)
	}
}

func TestSyncSlotAdmitsOnePerInterval(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	if _, err := st.TakeSyncSlot(ctx, "bob", now, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	wait, err := st.TakeSyncSlot(ctx, "bob", now.Add(500*time.Millisecond), 2*time.Second)
	if !errors.Is(err, im.ErrRateLimited) || wait <= 0 || wait > 2*time.Second {
		t.Fatalf("second slot: wait %s err %v", wait, err)
	}
	if _, err := st.TakeSyncSlot(ctx, "bob", now.Add(2*time.Second), 2*time.Second); err != nil {
		t.Fatalf("slot after the interval: %v", err)
	}
	if _, err := st.TakeSyncSlot(ctx, "carol", now, 2*time.Second); err != nil {
		t.Fatalf("other user: %v", err)
	}
}

func TestConnectionRecords(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	c := im.Connection{User: "bob", ID: "c1", Device: "phone", ConnectedAt: now, LastSeenAt: now}
	if err := st.SaveConnection(ctx, c); err != nil {
		t.Fatal(err)
	}
	if pull, err := st.TouchConnection(ctx, "bob", "c1", now.Add(time.Minute)); err != nil || pull {
		t.Fatalf("touch: pull %v, %v", pull, err)
	}
	// A group pull marked (redelivery gave up) is told by the next touch
	// only; a gone connection is not marked.
	if err := st.MarkPull(ctx, "bob", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkPull(ctx, "bob", "gone"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if pull, err := st.TouchConnection(ctx, "bob", "c1", now.Add(time.Minute)); err != nil || pull != want {
			t.Fatalf("touch %d after the mark: pull %v, %v; want %v", i+1, pull, err, want)
		}
	}
	conns, err := st.Connections(ctx, "bob")
	if err != nil || len(conns) != 1 || conns[0].Device != "phone" || !conns[0].LastSeenAt.Equal(now.Add(time.Minute).Truncate(time.Millisecond)) {
		t.Fatalf("connections = %+v, %v", conns, err)
	}
	if err := st.RemoveConnection(ctx, "bob", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := st.RemoveConnection(ctx, "bob", "c1"); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
	if _, err := st.TouchConnection(ctx, "bob", "c1", now); !errors.Is(err, im.ErrNotFound) {
		t.Fatalf("touch removed record: %v", err)
	}
}

// Regression: a 410 met by a push during a new connection's $connect
// handshake removed the new record, and that device got no more pushes.
func TestRemoveStaleConnectionKeepsYoungRecords(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	old := im.Connection{User: "bob", ID: "old", Device: "phone", ConnectedAt: now.Add(-time.Hour), LastSeenAt: now}
	young := im.Connection{User: "bob", ID: "young", Device: "phone", ConnectedAt: now, LastSeenAt: now}
	for _, c := range []im.Connection{old, young} {
		if err := st.SaveConnection(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := now.Add(-30 * time.Second)
	if removed, err := st.RemoveStaleConnection(ctx, "bob", "young", cutoff); err != nil || removed {
		t.Fatalf("young record: removed %v, %v", removed, err)
	}
	if removed, err := st.RemoveStaleConnection(ctx, "bob", "old", cutoff); err != nil || !removed {
		t.Fatalf("old record: removed %v, %v", removed, err)
	}
	conns, _ := st.Connections(ctx, "bob")
	if len(conns) != 1 || conns[0].ID != "young" {
		t.Fatalf("connections = %+v", conns)
	}
}

// Regression: when retention expired the entries right after a device's
// cursor, sync returned an empty page with hasMore and the same cursor, so
// a client looped forever. Now the page skips to the oldest retained entry
// and says it is truncated. Pages of 10 here: the expired stretch (18) is
// longer than a page, as it was (180 of pages of 100) until a run against
// moto spent 47 s on the sends.
func TestPageAfterExpiredEntriesIsTruncatedNotEmpty(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	for i := range 25 {
		if _, err := st.Send(ctx, draft("alice", fmt.Sprint(i), "bob", "1"), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// Retention removes seqs 1..18 (minidyn has no TTL: delete them as TTL would).
	for seq := int64(1); seq <= 18; seq++ {
		if err := st.ExpireEntry(ctx, "bob", seq); err != nil {
			t.Fatal(err)
		}
	}
	p, err := st.Page(ctx, "bob", 0, 10, wire.EntrySize)
	if err != nil || !p.Truncated || p.FirstSeq != 19 || len(p.Entries) != 7 || p.Entries[0].Seq != 19 || p.Next != 25 || p.More {
		t.Fatalf("page = truncated %v first %d entries %d next %d more %v, %v", p.Truncated, p.FirstSeq, len(p.Entries), p.Next, p.More, err)
	}
	p, err = st.Page(ctx, "bob", 19, 10, wire.EntrySize)
	if err != nil || p.Truncated || len(p.Entries) != 6 {
		t.Fatalf("page after the gap = %+v, %v", p, err)
	}
}

// AddUsage is the global counter of ratelimit.Limiter: it adds and returns
// the running total per user and key.
func TestAddUsageCountsPerUserAndKey(t *testing.T) {
	t.Parallel()
	st, ctx, exp := newStore(t), context.Background(), time.Now().Add(time.Hour)
	for i, want := range []int64{8, 16, 24} {
		if got, err := st.AddUsage(ctx, "alice", "send#1", 8, exp); err != nil || got != want {
			t.Fatalf("add %d: %d, %v; want %d", i, got, err, want)
		}
	}
	if got, err := st.AddUsage(ctx, "alice", "send#2", 3, exp); err != nil || got != 3 {
		t.Fatalf("another window: %d, %v", got, err)
	}
	if got, err := st.AddUsage(ctx, "bob", "send#1", 1, exp); err != nil || got != 1 {
		t.Fatalf("another user: %d, %v", got, err)
	}
	if head, _, err := st.Head(ctx, "alice"); err != nil || head != 0 {
		t.Fatalf("counters touched the inbox head: %d, %v", head, err)
	}
}

// Usage reads a counter without adding to it, and DeviceAdmissible says
// what EnsureDevice would without admitting anyone: the handshake check
// (GET /v1/handshake) answers from them and writes nothing.
func TestUsageAndDeviceAdmissibleReadWithoutWriting(t *testing.T) {
	t.Parallel()
	st, ctx, exp := newStore(t), context.Background(), time.Now().Add(time.Hour)
	if got, err := st.Usage(ctx, "alice", "connect#1"); err != nil || got != 0 {
		t.Fatalf("a counter never added to: %d, %v", got, err)
	}
	if _, err := st.AddUsage(ctx, "alice", "connect#1", 5, exp); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := st.Usage(ctx, "alice", "connect#1"); err != nil || got != 5 {
			t.Fatalf("usage after adding 5: %d, %v", got, err)
		}
	}
	if got, err := st.AddUsage(ctx, "alice", "connect#1", 1, exp); err != nil || got != 6 {
		t.Fatalf("reads added to the counter: %d, %v", got, err)
	}
	if err := st.DeviceAdmissible(ctx, "bob", "phone", 2); err != nil {
		t.Fatalf("a first device: %v", err)
	}
	if ds, err := st.Devices(ctx, "bob"); err != nil || len(ds) != 0 {
		t.Fatalf("devices after a check: %v, %v; want none", ds, err)
	}
	for _, d := range []im.DeviceID{"phone", "tablet"} {
		if err := st.EnsureDevice(ctx, "bob", d, 2, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DeviceAdmissible(ctx, "bob", "laptop", 2); !errors.Is(err, im.ErrDeviceLimit) {
		t.Fatalf("a third device under a limit of 2: %v, want im.ErrDeviceLimit", err)
	}
	if err := st.DeviceAdmissible(ctx, "bob", "tablet", 2); err != nil {
		t.Fatalf("a known device at the limit: %v", err)
	}
	if err := st.DeviceAdmissible(ctx, "bob", "laptop", 3); err != nil {
		t.Fatalf("a third device under a limit of 3: %v", err)
	}
}

// A 1:1 conversation has no head item of its own (issue 12): the sender's
// conversation index is its head. Both participants sending at once, each
// message also retried concurrently with itself, still give one gap-free
// conversation sequence, each message once, in both inboxes and in the
// history, and each sender's own messages read.
func TestBothParticipantsSendingAtOnceGiveOneGapFreeConversation(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	const each = 12
	sendAtOnce(t, st, [][2]im.UserID{{"alice", "bob"}, {"bob", "alice"}}, each)
	msgs, more, err := st.History(ctx, im.Direct("alice", "bob"), 0, 0, 100)
	if err != nil || more || len(msgs) != 2*each {
		t.Fatalf("history: %d messages, more %v, %v; want %d", len(msgs), more, err, 2*each)
	}
	ids := map[im.MessageID]bool{}
	for i, m := range msgs {
		if m.ConvSeq != int64(i+1) || ids[m.ID] {
			t.Fatalf("history[%d]: convSeq %d, duplicate %v", i, m.ConvSeq, ids[m.ID])
		}
		ids[m.ID] = true
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		page, err := st.Page(ctx, u, 0, 100, wire.EntrySize)
		if err != nil || page.Head != 2*each || len(page.Entries) != 2*each {
			t.Fatalf("%s: head %d, %d entries, %v", u, page.Head, len(page.Entries), err)
		}
		for i, e := range page.Entries {
			if e.Seq != int64(i+1) || !ids[e.Message.ID] {
				t.Fatalf("%s entry %d: seq %d, message %s not in the history", u, i, e.Seq, e.Message.ID)
			}
		}
	}
	// What you write you have read: each one's watermark is at their own
	// newest message.
	own := map[im.UserID]int64{}
	for _, m := range msgs {
		own[m.From] = m.ConvSeq
	}
	for _, u := range []im.UserID{"alice", "bob"} {
		convs, _, err := st.Conversations(ctx, u, "", 10)
		if err != nil || len(convs) != 1 || convs[0].Last != 2*each || convs[0].Read != own[u] {
			t.Fatalf("%s's conversations = %+v, %v; want last %d, read %d", u, convs, err, 2*each, own[u])
		}
	}
	// History still pages back from the newest.
	last, more, err := st.History(ctx, im.Direct("alice", "bob"), 0, 0, 5)
	if err != nil || !more || len(last) != 5 || last[4].ConvSeq != 2*each {
		t.Fatalf("newest 5: %d messages (last convSeq %d), more %v, %v", len(last), last[len(last)-1].ConvSeq, more, err)
	}
}

// A user's devices are read page by page: a client names its device, so a
// user can have more cursor items than one Query page holds (DynamoDB's
// 1 MB), and a device missed there would be missing from what delivered a
// message. Pages of one item stand in for full ones.
func TestDevicesAreReadPastTheFirstPage(t *testing.T) {
	t.Parallel()
	plain, hooked := newStores(t, func(_ context.Context, in any) error {
		if q, ok := in.(*dynamodb.QueryInput); ok {
			q.Limit = aws.Int32(1)
		}
		return nil
	})
	ctx := context.Background()
	for _, d := range []im.DeviceID{"phone", "tablet", "laptop"} {
		if err := plain.SetSyncNext(ctx, "bob", d, 0); err != nil {
			t.Fatal(err)
		}
	}
	devs, err := hooked.Devices(ctx, "bob")
	if err != nil || len(devs) != 3 {
		t.Fatalf("bob's devices read a page at a time: %v, %v; want all 3", devs, err)
	}
}

// The device limit holds against devices connecting for the first time at
// the same moment: each once counted the devices, saw room for one more
// and took it, so a burst of new device ids got past the limit. Every
// Query here is slowed, so all of a burst count before any of them writes.
// Forgetting a device makes room for exactly one; a known device is
// admitted at the limit as ever.
func TestSimultaneousNewDevicesCannotPassTheLimit(t *testing.T) {
	t.Parallel()
	_, st := newStores(t, func(_ context.Context, in any) error {
		if _, ok := in.(*dynamodb.QueryInput); ok {
			time.Sleep(30 * time.Millisecond)
		}
		return nil
	})
	ctx := context.Background()
	const limit = 3
	burst := func(prefix string, n int) (admitted []im.DeviceID, refused int) {
		t.Helper()
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			d := im.DeviceID(fmt.Sprintf("%s%02d", prefix, i))
			wg.Go(func() {
				<-start
				err := st.EnsureDevice(ctx, "bob", d, limit, time.Now())
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					admitted = append(admitted, d)
				case errors.Is(err, im.ErrDeviceLimit):
					refused++
				default:
					t.Errorf("device %s: %v", d, err)
				}
			})
		}
		close(start)
		wg.Wait()
		return admitted, refused
	}
	devices := func() int {
		t.Helper()
		ds, err := st.Devices(ctx, "bob")
		if err != nil {
			t.Fatal(err)
		}
		return len(ds)
	}
	admitted, refused := burst("first", 12)
	if len(admitted) != limit || refused != 12-limit || devices() != limit {
		t.Fatalf("12 new devices at once under a limit of %d: admitted %v, %d refused, %d stored", limit, admitted, refused, devices())
	}
	if err := st.EnsureDevice(ctx, "bob", admitted[0], limit, time.Now()); err != nil {
		t.Fatalf("a known device at the limit: %v", err)
	}
	if err := st.ForgetDevice(ctx, "bob", admitted[1]); err != nil {
		t.Fatal(err)
	}
	again, refused := burst("second", 6)
	if len(again) != 1 || refused != 5 || devices() != limit {
		t.Fatalf("6 new devices at once with one place free: admitted %v, %d refused, %d stored", again, refused, devices())
	}
}
