package eventsource_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/signet-im/signet/shared/eventsource"
	"github.com/signet-im/signet/shared/testkit"
)

// call is one invocation the handler saw: its message's receive count.
type call struct {
	receives int
	at       time.Time
}

func (c call) String() string {
	return fmt.Sprintf("receive %d at %s", c.receives, c.at.Format("15:04:05.000"))
}

// fixture is a queue on memsqs with one message and a poller feeding it to
// handle, which sees every invocation's first record.
type fixture struct {
	calls chan call
	done  chan struct{} // closed when handle answers without an error
}

// pollOne starts a poller over a new queue with the given visibility
// timeout, sends it one message and runs handle (given the invocation's
// number, from 1) for every invocation until the test ends.
func pollOne(t *testing.T, visibility time.Duration, handle func(n int, c call) error) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	client := testkit.MemSQS(t)
	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobs"),
		Attributes: map[string]string{"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second))}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("job")}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{calls: make(chan call, 1000), done: make(chan struct{})}
	var n int
	var once sync.Once
	p := &eventsource.Poller{Client: client, QueueURL: aws.ToString(q.QueueUrl), QueueARN: "arn:aws:sqs:us-east-1:000000000000:jobs",
		WaitTime: 100 * time.Millisecond, Concurrency: 1, VisibilityTimeout: visibility,
		Handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			receives, _ := strconv.Atoi(ev.Records[0].Attributes["ApproximateReceiveCount"])
			c := call{receives: receives, at: time.Now()}
			f.calls <- c
			n++
			err := handle(n, c)
			if err == nil {
				once.Do(func() { close(f.done) })
			}
			return events.SQSEventResponse{}, err
		}}
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return f
}

// wait waits up to within for the handler to succeed, and returns the
// invocations it saw.
func (f *fixture) wait(t *testing.T, within time.Duration, why string) []call {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(within):
		t.Fatalf("no successful invocation within %v: %s", within, why)
	}
	var out []call
	for {
		select {
		case c := <-f.calls:
			out = append(out, c)
		default:
			return out
		}
	}
}

// A batch whose invocation is throttled is invoked again soon, still on
// its first receive, as AWS's event source mapping does; it does not wait
// out the queue's visibility timeout (ten minutes here, three for the
// fan-out queue: a group alert's fan-out throttled on a busy account once
// stalled for those three minutes locally).
func TestAThrottledBatchIsRetriedWhileInFlight(t *testing.T) {
	t.Parallel()
	f := pollOne(t, 10*time.Minute, func(n int, _ call) error {
		if n <= 3 {
			return fmt.Errorf("fanout: %w", eventsource.ErrThrottled)
		}
		return nil
	})
	calls := f.wait(t, time.Minute, "a throttled batch waited for its visibility timeout")
	if len(calls) != 4 {
		t.Fatalf("%d invocations, want 4 (3 throttled, then one that ran)", len(calls))
	}
	for i, c := range calls {
		if c.receives != 1 {
			t.Errorf("invocation %d was of receive %d, want 1: the batch went back to the queue", i+1, c.receives)
		}
	}
	// The waits grow: each pause at least half of its doubling step.
	for i := 1; i < len(calls); i++ {
		if gap, least := calls[i].at.Sub(calls[i-1].at), 100*time.Millisecond<<(i-1); gap < least {
			t.Errorf("retry %d came %v after the last, want at least %v", i, gap, least)
		}
	}
}

// A batch still throttled when its time in flight reaches the visibility
// timeout is left to the queue: it is received again (receive 2), and the
// first receive is not invoked after that.
func TestAThrottledBatchReturnsToTheQueueAtItsVisibilityTimeout(t *testing.T) {
	t.Parallel()
	f := pollOne(t, time.Second, func(_ int, c call) error {
		if c.receives < 2 {
			return fmt.Errorf("fanout: %w", eventsource.ErrThrottled)
		}
		return nil
	})
	calls := f.wait(t, time.Minute, "the batch never came back")
	last := calls[len(calls)-1]
	if last.receives != 2 {
		t.Fatalf("the invocation that ran was of receive %d, want 2", last.receives)
	}
	if len(calls) < 3 || calls[len(calls)-2].receives != 1 {
		t.Fatalf("invocations %v: want the first receive throttled more than once (retried in flight), then receive 2", calls)
	}
	if first := calls[0]; calls[len(calls)-2].at.Sub(first.at) >= time.Second {
		t.Errorf("the first receive was invoked %v after its first attempt, past its 1 s visibility timeout", calls[len(calls)-2].at.Sub(first.at))
	}
}

// An error of the function's own code is not retried in flight: the batch
// returns after the visibility timeout, on its next receive.
func TestAFailedBatchWaitsItsVisibilityTimeout(t *testing.T) {
	t.Parallel()
	f := pollOne(t, 2*time.Second, func(n int, _ call) error {
		if n == 1 {
			return errors.New("the function failed")
		}
		return nil
	})
	calls := f.wait(t, time.Minute, "the failed batch never came back")
	if len(calls) != 2 || calls[0].receives != 1 || calls[1].receives != 2 {
		t.Fatalf("invocations %v: want receive 1 (failed), then receive 2", calls)
	}
	if gap := calls[1].at.Sub(calls[0].at); gap < 2*time.Second {
		t.Errorf("the failed batch came back after %v, before its 2 s visibility timeout", gap)
	}
}
