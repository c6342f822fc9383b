package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// An app's alert conversation checked against a model over random
// histories: alerts posted, reaching the inbox in any order (a retried
// post, an escalation: late, below the read watermark), other
// conversations' messages between them, and reads by a device that shows
// the inbox in order and names the newest alert it has shown (its convSeq
// and inbox seq), or by an older client that names the newest convSeq
// alone. The model: an alert is read once a read's inbox seq is at or
// above its own (an older client's, every alert in the inbox then). After
// every read it names exactly the alerts it newly covered, and the
// conversation list counts as unread exactly those not read.
func TestAlertReadsAgreeWithAModelOfTheInbox(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	now := time.Now()
	for seed := range modelSeeds(8) {
		r := rand.New(rand.NewPCG(seed, 13))
		user := im.UserID(fmt.Sprintf("ann%d", seed))
		type alert struct {
			m   im.Message
			seq int64 // inbox seq, 0 until it arrives
		}
		var (
			posted  []*alert // in the order posted
			arrived []*alert // in inbox order
			readSeq int64
			read    = map[im.MessageID]bool{}
			log     []string
			others  int
		)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, history %v: %s", seed, log, fmt.Sprintf(format, args...))
		}
		for step := range 20 + r.IntN(30) {
			var pending []*alert
			for _, a := range posted {
				if a.seq == 0 {
					pending = append(pending, a)
				}
			}
			switch k := r.IntN(10); {
			case k < 3 || len(posted) == 0:
				key := fmt.Sprintf("k%d", step)
				b, err := st.BeginAlert(ctx, "ops", key, key, im.Alert{Message: im.Message{Conversation: "a:ops", From: "app.ops", Body: []byte(`{}`)},
					App: "ops", Recipients: []im.UserID{user}, Title: key, Priority: "normal"}, now)
				if err != nil {
					t.Fatal(err)
				}
				posted = append(posted, &alert{m: b.Alert.Message})
				log = append(log, "post")
			case k < 6 && len(pending) > 0:
				// Mostly the oldest pending one; now and then a later one
				// overtakes it.
				a := pending[0]
				if r.IntN(3) == 0 {
					a = pending[r.IntN(len(pending))]
				}
				seq, err := st.AppendInbox(ctx, user, a.m, 0, now)
				if err != nil {
					t.Fatal(err)
				}
				a.seq = seq
				arrived = append(arrived, a)
				log = append(log, fmt.Sprintf("arrive #%d@%d", a.m.ConvSeq, seq))
			case k < 7:
				others++
				if _, err := st.Send(ctx, draft("carol", fmt.Sprintf("o%d-%d", seed, others), user, "hi"), now); err != nil {
					t.Fatal(err)
				}
				log = append(log, "other")
			case len(arrived) > 0:
				var upTo, inboxSeq int64
				older := r.IntN(5) == 0
				if older {
					// An older client: the newest convSeq in the inbox, no inbox seq.
					for _, a := range arrived {
						upTo = max(upTo, a.m.ConvSeq)
					}
					inboxSeq = arrived[len(arrived)-1].seq
					log = append(log, fmt.Sprintf("read #%d", upTo))
				} else {
					shown := arrived[r.IntN(len(arrived))] // the newest the device has shown
					upTo, inboxSeq = shown.m.ConvSeq, shown.seq
					log = append(log, fmt.Sprintf("read #%d@%d", upTo, inboxSeq))
				}
				sent := inboxSeq
				if older {
					sent = 0
				}
				res, err := st.ReadAlerts(ctx, user, "a:ops", upTo, sent, now)
				if err != nil {
					fail("read: %v", err)
				}
				var covered []im.MessageID
				for _, a := range arrived {
					if a.seq <= inboxSeq && !read[a.m.ID] {
						covered = append(covered, a.m.ID)
						read[a.m.ID] = true
					}
				}
				readSeq = max(readSeq, inboxSeq)
				slices.Sort(covered)
				got := slices.Clone(res.Read)
				slices.Sort(got)
				if !slices.Equal(got, covered) {
					fail("the read named %v, want %v", got, covered)
				}
				if res.ReadSeq != readSeq {
					fail("read seq %d, want %d", res.ReadSeq, readSeq)
				}
			}
			if len(arrived) == 0 || (!strings.HasPrefix(log[len(log)-1], "read") && step%5 != 0) {
				continue // checked after each read, and every fifth step
			}
			unread := 0
			for _, a := range arrived {
				if !read[a.m.ID] {
					unread++
				}
			}
			list, _, err := st.Conversations(ctx, user, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(list, func(s im.ConversationState) bool { return s.Conversation == "a:ops" })
			if i < 0 || list[i].Unread() != int64(unread) {
				fail("the conversation list %+v says %d unread, want %d", list, list[max(i, 0)].Unread(), unread)
			}
			mark, err := st.ReadWatermark(ctx, user, "a:ops")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range arrived {
				if mark.CoversAlert(a.m.ConvSeq, a.seq, now) != read[a.m.ID] {
					fail("the watermark %+v covers #%d@%d: %v, want %v", mark, a.m.ConvSeq, a.seq, !read[a.m.ID], read[a.m.ID])
				}
			}
		}
	}
}
