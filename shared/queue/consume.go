package queue

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Consumer is how a Lambda function consumes one of Signet's queues: the
// queue's codec and the use case that handles one decoded message.
type Consumer[T any] struct {
	// Name names the queue's messages in logs ("redelivery check").
	Name string
	// Decode reads a message body; a body it refuses can never succeed
	// and is dropped (logged), not retried — unless its error wraps
	// ErrUnknownKind: that one is left for retry (logged).
	Decode func(body string) (T, error)
	// Handle handles one message; id is its SQS message id. An error
	// leaves the message for SQS to retry.
	Handle func(ctx context.Context, id string, v T) error
	// Reserve is the time the invocation must have left to start a
	// message; the rest of the batch is left for retry (0: no bound).
	Reserve time.Duration
	// Log receives the drops and failures (slog.Default when nil).
	Log func() *slog.Logger
	// Retry, when set, brings the messages that failed or were not
	// started back sooner than the queue's visibility timeout (Backoff).
	Retry Retrier
}

// Retrier brings a batch's failed messages back to their queue (Backoff).
type Retrier interface {
	RetrySoon(ctx context.Context, failed []events.SQSMessage, log *slog.Logger)
}

// DroppedMalformed begins the error logged for a message that does not
// decode, which is dropped (the local stack counts them as faults: only
// the stack's own functions enqueue, so each is a bug of one of them).
const DroppedMalformed = "dropping a malformed "

// LeftUnknownKind begins the error logged for a message of a kind this
// version does not know (ErrUnknownKind), which is left for retry (the
// local stack counts them as faults too: its functions are one version).
const LeftUnknownKind = "left for retry, of a kind this version does not know: "

// ErrUnknownKind is what a codec's error wraps for a well-formed message
// of a kind it does not know. During a deploy CloudFormation replaces the
// functions one by one, and a job a new function enqueues (a kind added
// since) may reach a consumer still on the old code: dropping it would
// lose what it carries (a status callback, a group's fan-out). The
// consumer leaves it for retry instead: by its next receive the new code
// may have it, and one that never finds it ends in the queue's DLQ, from
// which an operator moves it back (README, "When a DLQ alarm fires").
var ErrUnknownKind = errors.New("a kind this version does not know (enqueued by a newer version during a deploy?)")

// Lambda is the handler of an SQS event source mapping with
// ReportBatchItemFailures: the messages of a batch are handled
// concurrently (one slow message holds up no other), and each that failed
// or was not started is reported, so SQS retries just those (after
// Retry's wait, when set).
func (c Consumer[T]) Lambda(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	log := slog.Default()
	if c.Log != nil {
		log = c.Log()
	}
	var (
		resp  events.SQSEventResponse
		retry []events.SQSMessage
		mu    sync.Mutex
		wg    sync.WaitGroup
	)
	failed := func(rec events.SQSMessage) {
		mu.Lock()
		defer mu.Unlock()
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
		retry = append(retry, rec)
	}
	for _, rec := range ev.Records {
		v, err := c.Decode(rec.Body)
		if errors.Is(err, ErrUnknownKind) {
			log.ErrorContext(ctx, LeftUnknownKind+c.Name, "err", err.Error(), "sqsMessageId", rec.MessageId)
			failed(rec)
			continue
		}
		if err != nil {
			log.ErrorContext(ctx, DroppedMalformed+c.Name, "err", err.Error(), "sqsMessageId", rec.MessageId)
			continue
		}
		if dl, ok := ctx.Deadline(); ok && c.Reserve > 0 && time.Until(dl) < c.Reserve {
			log.WarnContext(ctx, c.Name+" left for retry: too little time left in this invocation", "sqsMessageId", rec.MessageId)
			failed(rec)
			continue
		}
		wg.Go(func() {
			if err := c.Handle(ctx, rec.MessageId, v); err != nil {
				log.ErrorContext(ctx, c.Name+" failed; left for retry", "err", err.Error(), "sqsMessageId", rec.MessageId)
				failed(rec)
			}
		})
	}
	wg.Wait()
	if c.Retry != nil && len(retry) > 0 {
		c.Retry.RetrySoon(ctx, retry, log)
	}
	return resp, nil
}
