// Package eventsource does locally what a Lambda SQS event source mapping
// does in AWS: it long-polls a queue, invokes the handler with batches shaped
// like events.SQSEvent, deletes what succeeded and leaves the reported batch
// item failures (or the whole batch on error) to reappear after the
// visibility timeout — or sooner, where the function set their visibility
// itself (queue.Backoff) — and the queue's redrive policy moves them to
// the DLQ.
// Like the mapping, it deletes what succeeded with DeleteMessageBatch, and
// retries a batch whose invocation was throttled (ErrThrottled) with a
// growing wait while the batch is still in flight, instead of leaving it
// for the visibility timeout: AWS's "Handling errors for an SQS event
// source in Lambda" says a throttled invocation is retried, backing off,
// until the message's time in flight passes the queue's visibility
// timeout, while an error of the function's code waits out the timeout.
package eventsource

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// ErrThrottled is what a Handler's error matches (errors.Is) when the
// invocation never ran because the function had no concurrency left (the
// local Lambda runtime's devstack.ThrottleError).
var ErrThrottled = errors.New("throttled: no concurrency left for the invocation")

// Waits between the attempts of a throttled batch: the first, doubling
// (each drawn from its upper half), at most the last. AWS does not publish
// its own; these retry within a second or two when a burst of other
// invocations ends, and do not spin while the account stays saturated.
const (
	throttleRetryFirst = 200 * time.Millisecond
	throttleRetryMax   = 5 * time.Second
)

// Handler is an SQS-triggered Lambda handler with partial batch responses.
type Handler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// Poller feeds one queue to one handler.
type Poller struct {
	Client   *sqs.Client
	QueueURL string
	QueueARN string
	Handler  Handler
	// BatchSize is the most messages per invocation (1..10, default 10).
	BatchSize int32
	// WaitTime is the long-poll wait (default 1s, at most 20s).
	WaitTime time.Duration
	// Concurrency is how many pollers run at once (default 2).
	Concurrency int
	// VisibilityTimeout is the queue's: a throttled batch is retried
	// until it has been in flight this long (default 30 s, SQS's).
	VisibilityTimeout time.Duration
	// Log receives structured logs (slog.Default when nil).
	Log *slog.Logger
}

// Run polls until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	n := p.Concurrency
	if n <= 0 {
		n = 2
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { p.loop(ctx) })
	}
	wg.Wait()
}

// log is the poller's logger (Log, or slog's default).
func (p *Poller) log() *slog.Logger { return cmp.Or(p.Log, slog.Default()) }

func (p *Poller) loop(ctx context.Context) {
	batch := p.BatchSize
	if batch <= 0 || batch > 10 {
		batch = 10
	}
	wait := p.WaitTime
	if wait <= 0 {
		wait = time.Second
	}
	for ctx.Err() == nil {
		out, err := p.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(p.QueueURL),
			MaxNumberOfMessages:         batch,
			WaitTimeSeconds:             int32(min(wait, 20*time.Second) / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			p.log().Warn("receive failed", "queue", p.QueueURL, "err", err.Error())
			sleep(ctx, time.Second)
			continue
		}
		if len(out.Messages) == 0 {
			if wait < time.Second {
				sleep(ctx, wait)
			}
			continue
		}
		p.invoke(ctx, out.Messages, time.Now())
	}
}

// invoke hands msgs, received at received, to the handler (again, after a
// wait, while a throttled invocation leaves time in flight) and deletes
// what it did not report failed.
func (p *Poller) invoke(ctx context.Context, msgs []types.Message, received time.Time) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		ev.Records[i] = events.SQSMessage{
			MessageId:      aws.ToString(m.MessageId),
			ReceiptHandle:  aws.ToString(m.ReceiptHandle),
			Body:           aws.ToString(m.Body),
			Md5OfBody:      aws.ToString(m.MD5OfBody),
			Attributes:     m.Attributes,
			EventSource:    "aws:sqs",
			EventSourceARN: p.QueueARN,
			AWSRegion:      regionOf(p.QueueARN),
		}
	}
	resp, err := p.Handler(ctx, ev)
	visibility := cmp.Or(p.VisibilityTimeout, 30*time.Second)
	for wait, tries := throttleRetryFirst, 1; errors.Is(err, ErrThrottled); wait, tries = min(2*wait, throttleRetryMax), tries+1 {
		pause := wait/2 + rand.N(wait/2+1)
		if ctx.Err() != nil {
			break // the stack is stopping
		}
		if time.Since(received)+pause >= visibility {
			p.log().Warn("invocation throttled until the batch's visibility timeout; it returns to the queue", "queue", p.QueueURL, "attempts", tries, "messages", len(msgs))
			break
		}
		sleep(ctx, pause)
		resp, err = p.Handler(ctx, ev)
	}
	failed := map[string]bool{}
	if err != nil {
		if !errors.Is(err, ErrThrottled) {
			p.log().Error("handler failed; the batch returns after the visibility timeout", "err", err.Error(), "messages", len(msgs))
		}
		for _, m := range msgs {
			failed[aws.ToString(m.MessageId)] = true
		}
	}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	// What succeeded is deleted in one DeleteMessageBatch, as Lambda's
	// event source mapping does (a receive returns at most 10).
	var done []types.DeleteMessageBatchRequestEntry
	for i, m := range msgs {
		if failed[aws.ToString(m.MessageId)] {
			continue // back after the function's retry wait, or the visibility timeout
		}
		done = append(done, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	if len(done) == 0 {
		return
	}
	out, err := p.Client.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(p.QueueURL), Entries: done})
	switch {
	case err != nil:
		p.log().Warn("delete failed; the batch will be processed again", "err", err.Error(), "messages", len(done))
	case len(out.Failed) > 0:
		p.log().Warn("delete failed; messages will be processed again", "failed", len(out.Failed), "code", aws.ToString(out.Failed[0].Code))
	}
}

func regionOf(arn string) string {
	parts := strings.Split(arn, ":")
	if len(parts) > 3 {
		return parts[3]
	}
	return ""
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
