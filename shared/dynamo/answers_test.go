package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
)

// Issue 16: an answer is once per recipient and forward-only; with first
// answer wins, of recipients answering at once exactly one answer stands.
// (The store contract suite: minidyn here, memdyn and moto in make
// test-stores.)
func TestAnswersAreOncePerRecipientAndTheFirstCanWin(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	now := time.Now()
	begin := func(key string, ack *im.AckSpec) im.MessageID {
		a, err := st.BeginAlert(ctx, "ops", key, key, im.Alert{Message: im.Message{Conversation: "a:ops", From: "app.ops", Body: []byte(`{}`)},
			App: "ops", Recipients: []im.UserID{"ann", "ben", "cid"}, Title: "t", Priority: "urgent", Ack: ack}, now)
		if err != nil {
			t.Fatal(err)
		}
		return a.Alert.Message.ID
	}
	id := begin("k1", &im.AckSpec{Required: true, Options: []string{"ack", "decline"}})
	a, err := st.Alert(ctx, id)
	if err != nil || a.Ack == nil || !a.Ack.Required || a.Ack.FirstWins || !a.Ack.Allows("decline") || a.Ack.Allows("maybe") {
		t.Fatalf("the alert's ack spec reads back as %+v, %v", a.Ack, err)
	}
	if _, recorded, err := st.Answer(ctx, id, im.Answer{User: "ann", Device: "p", Option: "ack", At: now}, false); err != nil || !recorded {
		t.Fatalf("ann's answer: %v %v", recorded, err)
	}
	if got, recorded, err := st.Answer(ctx, id, im.Answer{User: "ann", Device: "q", Option: "ack", At: now.Add(time.Second)}, false); err != nil || recorded || got.Device != "p" {
		t.Fatalf("the same answer again: %+v %v %v (want the first, not recorded)", got, recorded, err)
	}
	if _, _, err := st.Answer(ctx, id, im.Answer{User: "ann", Option: "decline", At: now}, false); !errors.Is(err, im.ErrAlreadyAnswered) {
		t.Fatalf("a changed answer: %v, want ErrAlreadyAnswered", err)
	}
	if _, _, err := st.Answer(ctx, id, im.Answer{User: "ben", Option: "decline", At: now.Add(time.Millisecond)}, false); err != nil {
		t.Fatal(err)
	}
	list, err := st.Answers(ctx, id)
	if err != nil || len(list) != 2 || list[0].User != "ann" || list[1].Option != "decline" {
		t.Fatalf("answers %+v, %v", list, err)
	}

	first := begin("k2", &im.AckSpec{Required: true, Options: []string{"approve", "reject"}, FirstWins: true})
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, u := range []im.UserID{"ann", "ben", "cid"} {
		wg.Go(func() { _, _, errs[i] = st.Answer(ctx, first, im.Answer{User: u, Option: "approve", At: now}, true) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, im.ErrAlreadyAnswered):
			t.Fatal(err)
		}
	}
	list, err = st.Answers(ctx, first)
	if won != 1 || err != nil || len(list) != 1 {
		t.Fatalf("%d answers won, %d stored (%v): exactly one must stand", won, len(list), err)
	}
	if _, recorded, err := st.Answer(ctx, first, im.Answer{User: list[0].User, Option: "approve", At: now}, true); err != nil || recorded {
		t.Fatalf("the winner's answer again: %v %v", recorded, err)
	}
}

// An alert can reach an inbox after a later alert of its app (a retried
// post, an escalation): its convSeq is below the user's read watermark when
// it arrives. It is unread until a read covers its inbox seq — a device
// names the inbox seq it has shown, and a stale device's read does not
// cover an alert it has not shown — and the read that covers it names it
// (for its trace and status callback) and clears the unread count.
func TestALateAlertIsReadByItsInboxSeq(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	now := time.Now()
	post := func(key string) im.Message { return postAlert(t, st, "ann", key, now) }
	append := func(m im.Message) int64 { return appendAlert(t, st, "ann", m, now) }
	early, later := post("k1"), post("k2")
	laterSeq := append(later)
	if r, err := st.ReadAlerts(ctx, "ann", "a:ops", later.ConvSeq, 0, now); err != nil || !r.Moved || r.ReadSeq != laterSeq || !slices.Equal(r.Read, []im.MessageID{later.ID}) {
		t.Fatalf("reading the later alert: %+v, %v", r, err)
	}
	earlySeq := append(early) // late: its convSeq is below the watermark
	mark, err := st.ReadWatermark(ctx, "ann", "a:ops")
	if err != nil || mark.CoversAlert(early.ConvSeq, earlySeq, now) || !mark.CoversAlert(later.ConvSeq, laterSeq, now) {
		t.Fatalf("after the late alert arrived: %+v, %v; want the later alert read, the late one not", mark, err)
	}
	state := func() im.ConversationState {
		cs, _, err := st.Conversations(ctx, "ann", "", 10)
		if err != nil || len(cs) != 1 {
			t.Fatalf("ann's conversations: %+v, %v", cs, err)
		}
		return cs[0]
	}
	if s := state(); s.Last != later.ConvSeq || s.Unread() != 1 || s.ReadSeq != laterSeq {
		t.Fatalf("with the late alert unread: %+v; want last %d, 1 unread, read seq %d", s, later.ConvSeq, laterSeq)
	}
	// A device that has not shown it yet reads what it has: nothing moves.
	if r, err := st.ReadAlerts(ctx, "ann", "a:ops", later.ConvSeq, laterSeq, now); err != nil || r.Moved {
		t.Fatalf("a stale device's read: %+v, %v; want nothing moved", r, err)
	}
	// The device that shows it reads up to its inbox seq.
	r, err := st.ReadAlerts(ctx, "ann", "a:ops", later.ConvSeq, earlySeq, now.Add(time.Second))
	if err != nil || !r.Moved || r.ReadSeq != earlySeq || !slices.Equal(r.Read, []im.MessageID{early.ID}) {
		t.Fatalf("reading the late alert: %+v, %v; want it named, read seq %d", r, err, earlySeq)
	}
	if s := state(); s.Unread() != 0 || s.ReadSeq != earlySeq {
		t.Fatalf("after reading the late alert: %+v; want 0 unread", s)
	}
	if mark, _ := st.ReadWatermark(ctx, "ann", "a:ops"); !mark.CoversAlert(early.ConvSeq, earlySeq, now) {
		t.Fatalf("the late alert is not covered after its read: %+v", mark)
	}
	// Again, the same read changes nothing and names nothing.
	if r, err := st.ReadAlerts(ctx, "ann", "a:ops", later.ConvSeq, earlySeq, now); err != nil || r.Moved || len(r.Read) > 0 {
		t.Fatalf("the read again: %+v, %v", r, err)
	}
	// An older client's read (no inbox seq) of the whole conversation
	// covers a late alert too: it reads up to the last alert.
	third, fourth := post("k3"), post("k4")
	append(fourth)
	thirdSeq := append(third) // late again
	if r, err := st.ReadAlerts(ctx, "ann", "a:ops", fourth.ConvSeq, 0, now); err != nil || r.ReadSeq != thirdSeq || !slices.Equal(r.Read, sorted(third.ID, fourth.ID)) {
		t.Fatalf("an older client's read: %+v, %v; want both named, read seq %d", r, err, thirdSeq)
	}
	if s := state(); s.Unread() != 0 {
		t.Fatalf("after an older client's read: %+v; want 0 unread", s)
	}
	// A device reading up to the late alert it shows (its convSeq, its
	// inbox seq) reads the later alert shown before it too.
	fifth, sixth := post("k6"), post("k7")
	append(sixth)
	fifthSeq := append(fifth)
	if r, err := st.ReadAlerts(ctx, "ann", "a:ops", fifth.ConvSeq, fifthSeq, now); err != nil || r.ReadSeq != fifthSeq || !slices.Equal(r.Read, sorted(fifth.ID, sixth.ID)) {
		t.Fatalf("reading up to a late alert: %+v, %v; want both named, read seq %d", r, err, fifthSeq)
	}
	if s := state(); s.Unread() != 0 {
		t.Fatalf("after reading up to a late alert: %+v; want 0 unread", s)
	}
	if _, err := st.ReadAlerts(ctx, "ann", "a:ops", sixth.ConvSeq+1, 0, now); !errors.Is(err, im.ErrReadBeyondHead) {
		t.Fatalf("a read beyond ann's last alert: %v; want ErrReadBeyondHead", err)
	}
	if _, err := st.ReadAlerts(ctx, "bob", "a:ops", 1, 0, now); !errors.Is(err, im.ErrNotMember) {
		t.Fatalf("a read by a user with no alert of the app: %v; want ErrNotMember", err)
	}
}

func sorted(ids ...im.MessageID) []im.MessageID {
	slices.Sort(ids)
	return ids
}

// ReadAlertsBefore names the alerts a read is about to cover before its
// write, and an error from that stops the read with nothing written (the
// read route enqueues their status callback jobs there); a read covering
// more inbox entries than ReadSpan names the alerts among the newest and
// tells the entries below, which it did not look through (the read route
// enqueues a job that reads them).
func TestAReadNamesItsAlertsBeforeItsWrite(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	now := time.Now()
	m := postAlert(t, st, "ann", "k1", now)
	seq := appendAlert(t, st, "ann", m, now)
	var named []im.MessageID
	refuse := func(ids []im.MessageID, _, _ int64) error { named = ids; return errors.New("queue down") }
	if _, err := st.ReadAlertsBefore(ctx, "ann", "a:ops", m.ConvSeq, seq, now, refuse); err == nil || !slices.Equal(named, []im.MessageID{m.ID}) {
		t.Fatalf("read refused before its write: %v, named %v", err, named)
	}
	if mark, err := st.ReadWatermark(ctx, "ann", "a:ops"); err != nil || mark.CoversAlert(m.ConvSeq, seq, now) {
		t.Fatalf("after the refused read: %+v, %v; want nothing read", mark, err)
	}
	named = nil
	var below [2]int64
	before := func(ids []im.MessageID, after, upTo int64) error {
		named, below = ids, [2]int64{after, upTo}
		return nil
	}
	r, err := st.ReadAlertsBefore(ctx, "ann", "a:ops", m.ConvSeq, seq, now, before)
	if err != nil || !r.Moved || !slices.Equal(named, r.Read) || !slices.Equal(r.Read, []im.MessageID{m.ID}) || below[1] > below[0] {
		t.Fatalf("read: %+v, %v, named %v, entries below %v", r, err, named, below)
	}

	st.ReadSpan = 3
	m2 := postAlert(t, st, "ann", "k2", now) // seq 2
	appendAlert(t, st, "ann", m2, now)
	for i := range 4 { // seqs 3-6
		if _, err := st.Send(ctx, im.Draft{From: "bob", ClientMsgID: fmt.Sprint("c", i), Conversation: im.Direct("ann", "bob"), Body: []byte(`"hi"`)}, now); err != nil {
			t.Fatal(err)
		}
	}
	m3 := postAlert(t, st, "ann", "k3", now)
	seq3 := appendAlert(t, st, "ann", m3, now) // 7
	r, err = st.ReadAlertsBefore(ctx, "ann", "a:ops", m3.ConvSeq, seq3, now, before)
	if err != nil || !r.Moved || !slices.Equal(named, []im.MessageID{m3.ID}) || below != [2]int64{seq, seq3 - 3} {
		t.Fatalf("a read of more than ReadSpan entries: %+v, %v, named %v, entries below %v; want [%s] named, (%d, %d] below", r, err, named, below, m3.ID, seq, seq3-3)
	}
	if mark, err := st.ReadWatermark(ctx, "ann", "a:ops"); err != nil || !mark.CoversAlert(m2.ConvSeq, 2, now) {
		t.Fatalf("after it: %+v, %v; want the alert below read all the same", mark, err)
	}
}

// An app's convSeqs number every user's alerts, so between two alerts of
// one user may lie hundreds of other users' alerts. A read names every
// alert of the user it covers (each gets its read event and status
// callback) and lowers the unread count by them, however many other
// users' alerts came between; and a read by convSeq alone (an older
// client) covers the alert at its upTo however many alerts of the app came
// after it. Before, both looked at the newest 200 convSeqs of the app's
// log only: the 20,000-message chaos run (40 users, 1,000 alerts) lost
// read status callbacks so. The by-convSeq window is made 20 convSeqs
// here (SetReadCover) so that 25 alerts reach past it: 250 took a minute
// on moto, which answers one request at a time.
func TestAReadNamesEveryAlertItCoversHoweverManyOtherUsersAlertsCameBetween(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	const window = 20
	dynamo.SetReadCover(st, window)
	now := time.Now()
	deliver := func(to im.UserID, key string) (im.Message, int64) {
		m := postAlert(t, st, to, key, now)
		return m, appendAlert(t, st, to, m, now)
	}
	others := 0
	othersAlerts := func(n int) { // posted to bob: they take convSeqs only
		for range n {
			others++
			postAlert(t, st, "bob", fmt.Sprintf("bob-%d", others), now)
		}
	}
	unread := func(u im.UserID) int64 {
		cs, _, err := st.Conversations(ctx, u, "", 10)
		if err != nil || len(cs) != 1 {
			t.Fatalf("%s's conversations: %+v, %v", u, cs, err)
		}
		return cs[0].Unread()
	}
	const between = window + 5 // more than the convSeqs a read by convSeq looks through

	// A device that names the inbox seq it has shown.
	a1, _ := deliver("ann", "ann-1")
	othersAlerts(between)
	a2, a2seq := deliver("ann", "ann-2")
	r, err := st.ReadAlerts(ctx, "ann", "a:ops", a2.ConvSeq, a2seq, now)
	want := []im.MessageID{a1.ID, a2.ID}
	slices.Sort(want)
	if err != nil || !r.Moved || r.ReadSeq != a2seq || !slices.Equal(r.Read, want) {
		t.Fatalf("ann's read of both alerts: %+v, %v; want %v named, read seq %d", r, err, want, a2seq)
	}
	if n := unread("ann"); n != 0 {
		t.Fatalf("ann has %d unread after reading both alerts", n)
	}

	// An older client: convSeq alone, not the last alert.
	c1, _ := deliver("carl", "carl-1")
	c2, c2seq := deliver("carl", "carl-2")
	othersAlerts(between)
	c3, c3seq := deliver("carl", "carl-3")
	r, err = st.ReadAlerts(ctx, "carl", "a:ops", c2.ConvSeq, 0, now)
	want = []im.MessageID{c1.ID, c2.ID}
	slices.Sort(want)
	if err != nil || !r.Moved || r.ReadSeq != c2seq || !slices.Equal(r.Read, want) {
		t.Fatalf("carl's read by convSeq up to his second alert: %+v, %v; want %v named, read seq %d", r, err, want, c2seq)
	}
	if n := unread("carl"); n != 1 {
		t.Fatalf("carl has %d unread, want 1 (the third alert)", n)
	}
	r, err = st.ReadAlerts(ctx, "carl", "a:ops", c3.ConvSeq, 0, now)
	if err != nil || !r.Moved || r.ReadSeq != c3seq || !slices.Equal(r.Read, []im.MessageID{c3.ID}) {
		t.Fatalf("carl's read of the rest: %+v, %v; want %s named", r, err, c3.ID)
	}
}

// AlertsInSpan names the alerts among a span of a user's inbox entries,
// a page of entries at a time, each page saying how far it read: a
// catch-up ack's callback job walks the span with it.
func TestAlertsInSpanPagesThroughAnInboxNamingOnlyAlerts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	now := time.Now()
	alert := func(key string) im.MessageID {
		m := postAlert(t, st, "ann", key, now)
		appendAlert(t, st, "ann", m, now)
		return m.ID
	}
	chat := func(n int) {
		for range n {
			if _, err := st.Send(ctx, im.Draft{From: "bob", ClientMsgID: fmt.Sprint(time.Now().UnixNano()), Conversation: im.Direct("ann", "bob"), Body: []byte(`"hi"`)}, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	a1 := alert("a1") // seq 1
	chat(5)           // 2-6
	a2 := alert("a2") // 7
	chat(3)           // 8-10
	a3 := alert("a3") // 11
	walk := func(after, upTo int64) []im.MessageID {
		t.Helper()
		var got []im.MessageID
		for pages := 0; after < upTo; pages++ {
			if pages > 10 {
				t.Fatalf("the walk of (%d, %d] does not end: at %d", after, upTo, after)
			}
			ids, reached, err := st.AlertsInSpan(ctx, "ann", "", after, upTo, 4)
			if err != nil {
				t.Fatal(err)
			}
			if reached <= after || reached > upTo {
				t.Fatalf("a page from %d of (.., %d] reached %d", after, upTo, reached)
			}
			got, after = append(got, ids...), reached
		}
		return got
	}
	if got, want := walk(0, 11), []im.MessageID{a1, a2, a3}; !slices.Equal(got, want) {
		t.Fatalf("alerts in (0, 11]: %v, want %v", got, want)
	}
	if got, want := walk(1, 10), []im.MessageID{a2}; !slices.Equal(got, want) {
		t.Fatalf("alerts in (1, 10]: %v, want %v", got, want)
	}
	if ids, reached, err := st.AlertsInSpan(ctx, "ann", "", 0, 11, 4); err != nil || reached != 4 || !slices.Equal(ids, []im.MessageID{a1}) {
		t.Fatalf("first page of 4 entries: %v up to %d, %v; want [%s] up to 4", ids, reached, err, a1)
	}
	// Of one app's conversation only (a catch-up read's job).
	if ids, reached, err := st.AlertsInSpan(ctx, "ann", "a:ops", 0, 11, 20); err != nil || reached != 11 || !slices.Equal(ids, []im.MessageID{a1, a2, a3}) {
		t.Fatalf("a:ops's alerts in (0, 11]: %v up to %d, %v", ids, reached, err)
	}
	if ids, reached, err := st.AlertsInSpan(ctx, "ann", "a:crm", 0, 11, 20); err != nil || reached != 11 || len(ids) > 0 {
		t.Fatalf("a:crm's alerts in (0, 11]: %v up to %d, %v; want none", ids, reached, err)
	}
}

// postAlert posts a normal alert of app ops to one user (key is its
// idempotency key and title) and returns its message, not yet in an inbox.
func postAlert(t *testing.T, st *dynamo.Store, to im.UserID, key string, now time.Time) im.Message {
	t.Helper()
	a, err := st.BeginAlert(context.Background(), "ops", key, key, im.Alert{Message: im.Message{Conversation: "a:ops", From: "app.ops", Body: []byte(`{}`)},
		App: "ops", Recipients: []im.UserID{to}, Title: key, Priority: "normal"}, now)
	if err != nil {
		t.Fatal(err)
	}
	return a.Alert.Message
}

// appendAlert appends an alert's message to its recipient's inbox and
// returns its inbox seq.
func appendAlert(t *testing.T, st *dynamo.Store, to im.UserID, m im.Message, now time.Time) int64 {
	t.Helper()
	seq, err := st.AppendInbox(context.Background(), to, m, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}
