package im

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Member's answers checked against a model over random histories of a
// group: messages sent, the member removed and added again. The model
// keeps, per convSeq, whether it was sent while the user was a member
// (of the memberships the record keeps: the current one and the newest
// MaxPastSpans earlier ones that held a message). For every history:
// Receives says exactly that; the runs Range hands out from 0 cover the
// due convSeqs once each, in order, and from any cursor exactly those
// above it; LastDue is the highest; HistoryWindow pages from the newest
// down through every due convSeq, each once.
func TestMemberAgreesWithAModelOfItsMemberships(t *testing.T) {
	t.Parallel()
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 7))
		var (
			head  int64
			m     = Member{User: "u", Role: RoleMember, Joined: int64(r.IntN(3))}
			spans [][2]int64 // memberships in (from, to]; to -1 while open
		)
		head = m.Joined
		spans = append(spans, [2]int64{m.Joined, -1})
		var log []string
		for range r.IntN(90) {
			switch k := r.IntN(10); {
			case k < 6:
				head++
				log = append(log, "send")
			case k < 8 && m.Active():
				m.Removed, m.Left = true, head
				spans[len(spans)-1][1] = head
				log = append(log, fmt.Sprintf("remove@%d", head))
			case !m.Active():
				m = m.Rejoined(head, RoleMember)
				spans = append(spans, [2]int64{head, -1})
				log = append(log, fmt.Sprintf("add@%d", head))
			}
		}
		// The memberships the record keeps: the current (or last) one,
		// and the newest MaxPastSpans earlier ones that held a message.
		cur := spans[len(spans)-1]
		var earlier [][2]int64
		for _, s := range spans[:len(spans)-1] {
			if s[1] > s[0] {
				earlier = append(earlier, s)
			}
		}
		if len(earlier) > MaxPastSpans {
			earlier = earlier[len(earlier)-MaxPastSpans:]
		}
		due := map[int64]bool{}
		for _, s := range append(earlier, cur) {
			to := s[1]
			if to < 0 {
				to = head
			}
			for c := s[0] + 1; c <= to; c++ {
				due[c] = true
			}
		}
		var want []int64
		for c := int64(1); c <= head; c++ {
			if due[c] {
				want = append(want, c)
			}
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, history %v, member %+v, head %d: %s", seed, log, m, head, fmt.Sprintf(format, args...))
		}
		for c := int64(1); c <= head+1; c++ {
			if m.Receives(c) != due[c] && c <= head {
				fail("Receives(%d) = %v", c, !due[c])
			}
		}
		// From every cursor, Range's runs give exactly what is due above it.
		for start := int64(0); start <= head; start++ {
			var got []int64
			last := start
			for range head + 2 {
				from, to := m.Range(last, head)
				if from >= to {
					break
				}
				if from < last {
					fail("Range(%d) = (%d, %d] starts below the cursor", last, from, to)
				}
				for c := from + 1; c <= to; c++ {
					got = append(got, c)
				}
				last = to
			}
			var above []int64
			for _, c := range want {
				if c > start {
					above = append(above, c)
				}
			}
			if !slices.Equal(got, above) {
				fail("from cursor %d Range gives %v, want %v", start, got, above)
			}
		}
		var top int64
		if len(want) > 0 {
			top = want[len(want)-1]
		}
		if got := m.LastDue(head); got != top {
			fail("LastDue = %d, want %d", got, top)
		}
		if end := m.End(head); end < top {
			fail("End = %d, below the last due %d", end, top)
		}
		// History from the newest down: each page one membership's window.
		var paged []int64
		before := int64(0)
		for range len(spans) + 2 {
			after, below, more, ok := m.HistoryWindow(before)
			if !ok {
				break
			}
			hi := head
			if below > 0 {
				hi = min(head, below-1)
			}
			for c := hi; c > after; c-- {
				paged = append(paged, c)
			}
			if !more {
				break
			}
			before = after + 1
		}
		slices.Reverse(paged)
		if !slices.Equal(paged, want) {
			fail("history pages give %v, want %v", paged, want)
		}
	}
}
