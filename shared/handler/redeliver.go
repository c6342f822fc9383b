package handler

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/queue"
	"github.com/signet-im/signet/shared/wire"
)

// Redeliver consumes redelivery checks from SQS. A queue message carries
// the checks of one invocation's pushes (queue.Encode); for each check it
// does nothing if the device acked the entry, else re-pushes it, and the
// message's next checks are scheduled together while the policy allows.
// A message whose checks failed for a transient reason is reported as a
// batch item failure so SQS retries just it (its checks that did run may
// then push again: devices drop entries they already have).
//
// The messages of a batch, and the checks of a message, run concurrently:
// one recipient that stopped reading costs its own push deadline, not
// everyone's.
func (h *Handler) Redeliver(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var (
		resp events.SQSEventResponse
		mu   sync.Mutex
		wg   sync.WaitGroup
	)
	for _, rec := range ev.Records {
		wg.Go(func() {
			tr := h.trail("redeliver", rec.MessageId)
			err := h.redeliver(ctx, tr, rec.Body)
			tr.flush(ctx)
			if err != nil {
				h.log().ErrorContext(ctx, "redelivery check failed; will be retried", "err", err.Error(), "sqsMessageId", rec.MessageId)
				mu.Lock()
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return resp, nil
}

func (h *Handler) redeliver(ctx context.Context, tr *trail, body string) error {
	list, err := queue.Decode(body)
	if err != nil {
		// A malformed check can never succeed: drop it rather than loop.
		h.log().ErrorContext(ctx, "dropping malformed redelivery check", "err", err.Error())
		return nil
	}
	cs := &checks{}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, check := range list {
		wg.Go(func() {
			if err := h.redeliverOne(ctx, tr, cs, check); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	h.scheduleChecks(ctx, tr, cs)
	return errors.Join(errs...)
}

// redeliverOne runs one check, adding the next one (if any) to cs.
func (h *Handler) redeliverOne(ctx context.Context, tr *trail, cs *checks, check im.Check) error {
	log := h.log().With("userId", check.User, "deviceId", check.Device, "connectionId", check.Connection, "seq", check.Seq, "attempt", check.Attempt)
	dev, err := h.Inbox.Device(ctx, check.User, check.Device)
	if err != nil {
		return err
	}
	if dev.Acked >= check.Seq {
		log.DebugContext(ctx, "acked before redelivery check")
		return nil
	}
	if check.Attempt+1 > h.Redelivery.MaxRetries() {
		log.InfoContext(ctx, "awaiting_pull: redelivery exhausted")
		return nil
	}
	e, err := h.Inbox.Entry(ctx, check.User, check.Seq)
	if errors.Is(err, im.ErrNotFound) {
		log.WarnContext(ctx, "entry expired before redelivery")
		return nil
	}
	if err != nil {
		return err
	}
	frame, _ := json.Marshal(wire.NewPush(e))
	conn := im.Connection{User: check.User, Device: check.Device, ID: check.Connection}
	h.pushAndCollect(ctx, tr, cs, conn, e, frame, check.Attempt+1)
	return nil
}
