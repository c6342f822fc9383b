package queue

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Retry waits of a failed queue message: RetryFirst after its first
// receive, doubling with each receive after it, at most RetryMax. A
// message whose visibility could not be changed waits its queue's
// visibility timeout (60 s for redelivery checks, 180 s for fan-out and
// presence jobs), as it did before the consumers set their own waits.
const (
	RetryFirst = 2 * time.Second
	RetryMax   = time.Minute
)

// RetryWait is how long a message received receives times waits after
// failing: RetryFirst × 2^(receives−1), at most RetryMax.
func RetryWait(receives int) time.Duration {
	d := RetryFirst
	for i := 1; i < receives && d < RetryMax; i++ {
		d *= 2
	}
	return min(d, RetryMax)
}

// Backoff brings a consumer's failed messages back after RetryWait
// instead of their queue's visibility timeout. Lambda's event source
// mapping leaves a message it is told failed in flight until the timeout
// ends (AWS advises six times the function's timeout: three minutes for
// fan-out jobs), so without it one transient error held up a group's
// delivery, an escalation step or a redelivery check for minutes. The
// function changes the visibility itself: its role needs
// sqs:ChangeMessageVisibility on its event source, which the template
// grants (SAM's AWSLambdaSQSQueueExecutionRole for an SQS event has only
// receive, delete and the queue's attributes).
type Backoff struct {
	client *sqs.Client
	urls   map[string]string // queue name → URL
}

// NewBackoff returns a backoff over client for the queues at urls (a
// record's queue is found by the name its event source ARN ends in; a
// queue not among them keeps its visibility timeout). Empty urls are
// skipped.
func NewBackoff(client *sqs.Client, urls ...string) *Backoff {
	b := &Backoff{client: client, urls: map[string]string{}}
	for _, u := range urls {
		if u != "" {
			b.urls[u[strings.LastIndex(u, "/")+1:]] = u
		}
	}
	return b
}

// RetrySoon sets the visibility of each failed record to its RetryWait
// (one ChangeMessageVisibility each: failures are rare, and not every
// emulator has the batch call). A call that fails is logged and its
// record waits its queue's visibility timeout: nothing is lost either
// way.
func (b *Backoff) RetrySoon(ctx context.Context, failed []events.SQSMessage, log *slog.Logger) {
	ctx = context.WithoutCancel(ctx) // the invocation's end must not cut it short
	for _, rec := range failed {
		url := b.urls[rec.EventSourceARN[strings.LastIndex(rec.EventSourceARN, ":")+1:]]
		if url == "" {
			continue
		}
		receives, _ := strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
		wait := RetryWait(receives)
		_, err := b.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: aws.String(rec.ReceiptHandle), VisibilityTimeout: int32(wait / time.Second),
		})
		if err != nil {
			log.WarnContext(ctx, "retry wait not set; the message returns after the queue's visibility timeout", "err", err.Error(), "sqsMessageId", rec.MessageId)
		}
	}
}
