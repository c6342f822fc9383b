package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// A 1:1 message's acked events checked against a model over random
// histories: three devices of the recipient ack forward by random steps
// (their ranges ride on the cursor items and move to the trace eight at a
// time), and one device is forgotten when the store allows it (its
// ranges move to the trace then). For every message the trace names each
// device whose cursor reached it exactly once, with the time, connection
// and request of the ack whose range covered it; the forget is refused
// exactly while the device has acked further than every other.
func TestAckedEventsAgreeWithAModelOfTheAcks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.UnixMilli(1_800_000_000_000).UTC()
	var forgotten, refused int
	for seed := range modelSeeds(5) {
		st := newStore(t) // a table per history: minidyn scans the whole table for every Query
		r := rand.New(rand.NewPCG(seed, 17))
		to := im.UserID(fmt.Sprintf("bob%d", seed))
		n := 20 + r.IntN(30)
		seqs := make([]int64, n)
		ids := make([]im.MessageID, n)
		for i := range n {
			s, err := st.Send(ctx, draft("alice", fmt.Sprintf("m%d-%d", seed, i), to, `"hi"`), t0)
			if err != nil {
				t.Fatal(err)
			}
			seqs[i], ids[i] = s.Inboxed[to], s.Message.ID
		}
		devices := []im.DeviceID{"phone", "laptop", "tablet"}
		cursor := map[im.DeviceID]int64{}
		want := map[int64][]string{} // inbox seq → the acked events due
		gone := map[im.DeviceID]bool{}
		var log []string
		for step := 1; ; step++ {
			var live []im.DeviceID
			for _, d := range devices {
				if !gone[d] && cursor[d] < seqs[n-1] {
					live = append(live, d)
				}
			}
			if len(live) == 0 {
				break
			}
			d := live[r.IntN(len(live))]
			if r.IntN(12) == 0 && len(gone) == 0 {
				// An operator forgets d (half the time the device furthest
				// ahead): refused while it holds the delivered watermark
				// (acked further than every other).
				if r.IntN(2) == 0 {
					for _, o := range live {
						if cursor[o] > cursor[d] {
							d = o
						}
					}
				}
				var others int64
				for _, o := range devices {
					if o != d {
						others = max(others, cursor[o])
					}
				}
				err := st.ForgetDevice(ctx, to, d)
				log = append(log, fmt.Sprintf("forget %s", d))
				switch {
				case cursor[d] == 0:
					if !errors.Is(err, im.ErrNotFound) {
						t.Fatalf("seed %d, %v: forgetting a device that never acked: %v", seed, log, err)
					}
				case cursor[d] > others:
					if !errors.Is(err, im.ErrDeviceHoldsDelivered) {
						t.Fatalf("seed %d, %v: forgetting %s at %d (others at %d): %v; want it refused", seed, log, d, cursor[d], others, err)
					}
					refused++
				case err != nil:
					t.Fatalf("seed %d, %v: forgetting %s at %d (others at %d): %v", seed, log, d, cursor[d], others, err)
				default:
					gone[d] = true
					forgotten++
				}
				continue
			}
			upTo := min(seqs[n-1], cursor[d]+1+int64(r.IntN(6)))
			conn, req := im.ConnectionID(fmt.Sprintf("conn-%s-%d", d, step/10)), fmt.Sprintf("req-%d", step)
			res, err := st.Ack(ctx, im.AckRange{User: to, Device: d, Connection: conn, RequestID: req, UpTo: upTo, At: t0.Add(time.Duration(step) * time.Second)})
			if err != nil || !res.Moved || res.Old != cursor[d] {
				t.Fatalf("seed %d, %v: %s's ack up to %d: %+v, %v; want moved from %d", seed, log, d, upTo, res, err, cursor[d])
			}
			for s := cursor[d] + 1; s <= upTo; s++ {
				want[s] = append(want[s], fmt.Sprintf("%s/%s #%d +%ds %s %s", to, d, s, step, conn, req))
			}
			cursor[d] = upTo
			log = append(log, fmt.Sprintf("%s→%d", d, upTo))
		}
		for i, id := range ids {
			got := ackedEventList(t, st, id, t0)
			w := slices.Clone(want[seqs[i]])
			slices.Sort(w)
			slices.Sort(got)
			if !slices.Equal(got, w) {
				t.Fatalf("seed %d, acks %v: message %d (seq %d) acked events\n%v\nwant\n%v", seed, log, i, seqs[i], got, w)
			}
		}
	}
	if forgotten == 0 || refused == 0 {
		t.Fatalf("the histories forgot %d devices and were refused %d forgets: the seeds no longer cover both", forgotten, refused)
	}
}
