package im

import (
	"fmt"
	"time"
)

// Redelivery is the bounded re-push policy of DESIGN invariant 6: the first
// check runs PushTimeout after the push; each check that finds the message
// unacked re-pushes it and, while Backoff has entries left, schedules the
// next check after Backoff[i]. So a message is re-pushed at most
// len(Backoff)+1 times, then waits for a pull.
type Redelivery struct {
	PushTimeout time.Duration   // default 5s
	Backoff     []time.Duration // default 2s, 4s, 8s, 16s
}

// DefaultRedelivery is the production policy: checks at +5s, then 2, 4, 8, 16 s
// apart: five re-pushes within 35 s of the first push.
func DefaultRedelivery() Redelivery {
	return Redelivery{
		PushTimeout: 5 * time.Second,
		Backoff:     []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second},
	}
}

// MaxRetries is how many re-pushes the policy allows.
func (r Redelivery) MaxRetries() int { return len(r.Backoff) + 1 }

// CheckDelay returns how long after push attempt `attempt` (0 = the first
// push) the next ack check runs, and false when no further check is due.
func (r Redelivery) CheckDelay(attempt int) (time.Duration, bool) {
	switch {
	case attempt < 0:
		return 0, false
	case attempt == 0:
		return r.PushTimeout, true
	case attempt <= len(r.Backoff):
		return r.Backoff[attempt-1], true
	}
	return 0, false
}

// Window is the time from the first push to the last re-push.
func (r Redelivery) Window() time.Duration {
	w := r.PushTimeout
	for _, d := range r.Backoff {
		w += d
	}
	return w
}

// Validate checks the policy against the limits of DESIGN invariant 6 and SQS
// (DelaySeconds ≤ 900).
func (r Redelivery) Validate() error {
	if r.PushTimeout < 0 || r.PushTimeout > 900*time.Second {
		return fmt.Errorf("push timeout %s: must be within 0..900s", r.PushTimeout)
	}
	if r.MaxRetries() > 5 {
		return fmt.Errorf("%d re-pushes: at most 5 are allowed", r.MaxRetries())
	}
	for _, d := range r.Backoff {
		if d < 0 || d > 900*time.Second {
			return fmt.Errorf("backoff %s: must be within 0..900s", d)
		}
	}
	if r.Window() > 60*time.Second {
		return fmt.Errorf("redelivery window %s: must be at most 60s", r.Window())
	}
	return nil
}

// MaxChecksPerSchedule is the most checks scheduled together (one queue
// message: ~100 bytes each keeps it inside one 64 KB SQS billing chunk).
const MaxChecksPerSchedule = 500

// Check is one scheduled redelivery check: is Seq acked by the device behind
// Connection? Attempt counts the pushes made so far minus one (0 after the
// first push). It travels in the queue message body, so correctness never
// depends on a queue's receive count.
type Check struct {
	User       UserID
	Device     DeviceID
	Connection ConnectionID
	Seq        int64
	Attempt    int
	// Conversation, when set, is a read-diffused group: Seq is then a
	// convSeq of its log, acked by the device's cursor in the group.
	Conversation ConversationID
}
