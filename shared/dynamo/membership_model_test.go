package dynamo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// The store's read-diffused group views checked against a model over
// random histories: messages sent, a member removed and added again
// (sometimes twice in a row), their device acking and their reads. For
// every history the member's pulls from every cursor give exactly the
// messages sent while they were a member (of the memberships kept: the
// current and the newest im.MaxPastSpans earlier ones that held one),
// once each and in order; where the device stands at connect is the start
// of the run that holds the first message due above its cursor; and the
// conversation list counts as unread exactly those due above the read
// watermark.
func TestGroupViewsAgreeWithAModelOfTheMemberships(t *testing.T) {
	t.Parallel()
	st, ctx := newStore(t), context.Background()
	st.GroupReads = true
	now := time.Now()
	for seed := range modelSeeds(8) {
		r := rand.New(rand.NewPCG(seed, 11))
		g := im.Group(fmt.Sprintf("model%d", seed))
		first := r.IntN(3)
		groupWith(t, st, g, []im.UserID{"bob"}, first, now)
		var (
			head, acked, read int64
			spans             [][2]int64 // bob's memberships (from, to]; to -1 while open
			active            = true
			log               []string
		)
		head = int64(first)
		spans = append(spans, [2]int64{0, -1})
		due := func() []int64 { // what bob receives, of the memberships kept
			var earlier [][2]int64
			for _, s := range spans[:len(spans)-1] {
				if s[1] > s[0] {
					earlier = append(earlier, s)
				}
			}
			if len(earlier) > im.MaxPastSpans {
				earlier = earlier[len(earlier)-im.MaxPastSpans:]
			}
			var out []int64
			for _, s := range append(earlier, spans[len(spans)-1]) {
				to := s[1]
				if to < 0 {
					to = head
				}
				for c := s[0] + 1; c <= to; c++ {
					out = append(out, c)
				}
			}
			return out
		}
		for range 10 + r.IntN(50) {
			switch k := r.IntN(20); {
			case k < 10:
				sendToGroup(t, st, g, 1, now)
				head++
				log = append(log, "send")
			case k < 13 && active:
				removeMember(t, st, g, "bob", now)
				spans[len(spans)-1][1], active = head, false
				log = append(log, fmt.Sprintf("remove@%d", head))
			case k < 15 && !active:
				for range 1 + r.IntN(2) { // added twice: the second changes nothing
					if _, err := st.ChangeMembers(ctx, im.MemberChange{Group: g, Actor: "alice", Op: im.OpAdd, Targets: []im.UserID{"bob"}, Role: im.RoleMember, Limit: 500, At: now}); err != nil {
						t.Fatal(err)
					}
				}
				spans, active = append(spans, [2]int64{head, -1}), true
				log = append(log, fmt.Sprintf("add@%d", head))
			case k < 18:
				// The device acks a message due to bob above its cursor.
				var above []int64
				for _, c := range due() {
					if c > acked {
						above = append(above, c)
					}
				}
				if len(above) == 0 {
					continue
				}
				upTo := above[r.IntN(len(above))]
				if _, err := st.AckGroup(ctx, g, im.AckRange{User: "bob", Device: "phone", UpTo: upTo, At: now}); err != nil {
					t.Fatalf("seed %d, history %v: ack %d: %v", seed, log, upTo, err)
				}
				acked = upTo
				log = append(log, fmt.Sprintf("ack %d", upTo))
			case active:
				if ds := due(); len(ds) > 0 {
					upTo := ds[r.IntN(len(ds))]
					if _, _, err := st.MarkRead(ctx, "bob", g, upTo, now); err != nil {
						t.Fatalf("seed %d, history %v: read %d: %v", seed, log, upTo, err)
					}
					read = max(read, upTo)
					log = append(log, fmt.Sprintf("read %d", upTo))
				}
			}
		}
		want := due()
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, history %v, head %d: %s", seed, log, head, fmt.Sprintf(format, args...))
		}
		end := head // where bob's view ends: a cursor beyond it is refused
		if !active {
			end = spans[len(spans)-1][1]
		}
		for cursor := int64(0); cursor <= end; cursor++ {
			var got []int64
			limit := 100 // pages of up to 100; from 0 also pages of 2
			if cursor == 0 {
				limit = 2
			}
			for c := cursor; ; {
				p, err := st.GroupPage(ctx, g, "bob", c, limit, func(im.Message) int { return 1 })
				if err != nil {
					fail("pull after %d: %v", c, err)
				}
				for _, m := range p.Messages {
					got = append(got, m.ConvSeq)
				}
				if !p.More {
					break
				}
				if p.Next <= c {
					fail("a page after %d continues at %d", c, p.Next)
				}
				c = p.Next
			}
			above := slices.DeleteFunc(slices.Clone(want), func(c int64) bool { return c <= cursor })
			if !slices.Equal(got, above) {
				fail("pulls after %d give %v, want %v", cursor, got, above)
			}
		}
		// Where the device stands: before the first message due above its
		// cursor (at the start of its membership's run), or at the end.
		stand := end
		for _, c := range want {
			if c > acked {
				for _, s := range spans {
					if to := s[1]; c > s[0] && (to < 0 || c <= to) {
						stand = max(acked, s[0])
					}
				}
				break
			}
		}
		pos, err := st.ReadGroups(ctx, "bob", "phone")
		pos = slices.DeleteFunc(pos, func(p im.GroupPosition) bool { return p.Conversation != g }) // the seeds before share bob
		if err != nil || len(pos) != 1 || pos[0] != (im.GroupPosition{Conversation: g, Head: end, Acked: stand}) {
			fail("the device (acked %d) stands at %+v, %v; want head %d, at %d", acked, pos, err, end, stand)
		}
		states, err := st.ConversationStates(ctx, g, []im.UserID{"bob"})
		if err != nil {
			t.Fatal(err)
		}
		list, _, err := st.Conversations(ctx, "bob", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		unread := int64(len(slices.DeleteFunc(slices.Clone(want), func(c int64) bool { return c <= read })))
		i := slices.IndexFunc(list, func(s im.ConversationState) bool { return s.Conversation == g })
		if i < 0 || list[i].Unread() != unread || states["bob"].Delivered != acked {
			fail("bob's row %+v (unread %d), delivered %d; want unread %d (read %d), delivered %d", list, list[max(i, 0)].Unread(), states["bob"].Delivered, unread, read, acked)
		}
	}
}

// modelSeeds is how many random histories a model test runs: n on the
// in-process emulators, 2 against an external one (moto, the contract
// run: it sorts a whole table on every Query, and the histories there
// check DynamoDB's semantics, not more of the model's paths).
func modelSeeds(n uint64) uint64 {
	if os.Getenv("SIGNET_TEST_DYNAMODB_ENDPOINT") != "" {
		return min(n, 2)
	}
	return n
}
