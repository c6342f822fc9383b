package handler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// scheduler records what it is asked to schedule; fail makes every call fail.
type scheduler struct {
	calls []scheduled
	fail  bool
}

type scheduled struct {
	checks []im.Check
	delay  time.Duration
}

func (s *scheduler) Schedule(_ context.Context, cs []im.Check, delay time.Duration) error {
	if len(cs) == 0 || len(cs) > im.MaxChecksPerSchedule {
		return errors.New("out of bounds")
	}
	s.calls = append(s.calls, scheduled{cs, delay})
	if s.fail {
		return errors.New("queue down")
	}
	return nil
}

// The redelivery checks of one invocation's pushes are scheduled together:
// one queue message per attempt number and at most im.MaxChecksPerSchedule
// checks, each at its attempt's delay; every push's trace says when it will
// be checked — or, when scheduling failed, that its message waits for a
// pull (the device's next ping shows it the head).
func TestChecksAreScheduledTogetherByAttempt(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		s := &scheduler{fail: fail}
		h := (&Deps{Scheduler: s, Redelivery: im.DefaultRedelivery()}).delivery()
		cs := &checks{}
		const first = im.MaxChecksPerSchedule + 3
		for i := range first {
			cs.add(im.Check{User: "u", Seq: int64(i + 1)}, im.Event{Message: "m", Type: im.EventPushed})
		}
		cs.add(im.Check{User: "u", Seq: 9, Attempt: 2}, im.Event{Message: "m2", Type: im.EventPushed})
		tr := h.trail("test", "r")
		h.scheduleChecks(context.Background(), tr, cs)

		byAttempt := map[int][]int{}
		for _, c := range s.calls {
			want, _ := h.Redelivery.CheckDelay(c.checks[0].Attempt)
			if c.delay != want {
				t.Errorf("attempt %d scheduled at %v, want %v", c.checks[0].Attempt, c.delay, want)
			}
			for _, ch := range c.checks {
				if ch.Attempt != c.checks[0].Attempt {
					t.Errorf("one message mixes attempts %d and %d", c.checks[0].Attempt, ch.Attempt)
				}
			}
			byAttempt[c.checks[0].Attempt] = append(byAttempt[c.checks[0].Attempt], len(c.checks))
		}
		if got := byAttempt[0]; len(got) != 2 || got[0]+got[1] != first || len(byAttempt[2]) != 1 || len(s.calls) != 3 {
			t.Errorf("fail=%v: messages per attempt %v, want attempt 0 in two (%d checks) and attempt 2 in one", fail, byAttempt, first)
		}
		want := im.EventRedeliveryScheduled
		if fail {
			want = im.EventAwaitingPull
		}
		if len(tr.events) != first+1 {
			t.Fatalf("fail=%v: %d trace events, want one per push (%d)", fail, len(tr.events), first+1)
		}
		for _, e := range tr.events {
			if e.Type != want {
				t.Fatalf("fail=%v: a push's event is %s, want %s", fail, e.Type, want)
			}
		}
	}
}
