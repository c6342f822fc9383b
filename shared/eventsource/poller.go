// Package eventsource does locally what a Lambda SQS event source mapping
// does in AWS: it long-polls a queue, invokes the handler with batches shaped
// like events.SQSEvent, deletes what succeeded and leaves the reported batch
// item failures (or the whole batch on error) to reappear after the
// visibility timeout — or sooner, where the function set their visibility
// itself (queue.Backoff) — and the queue's redrive policy moves them to
// the DLQ.
// Like the mapping, it deletes what succeeded with DeleteMessageBatch.
package eventsource

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
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
		p.invoke(ctx, out.Messages)
	}
}

func (p *Poller) invoke(ctx context.Context, msgs []types.Message) {
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
	failed := map[string]bool{}
	if err != nil {
		p.log().Error("handler failed; the batch returns after the visibility timeout", "err", err.Error(), "messages", len(msgs))
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
