package queue

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// The one batch loop of the queue consumers: a body the codec refuses is
// dropped (never retried: it can never succeed), a message whose handling
// fails is reported for retry, and so is one the invocation has too little
// time left to start; the others are handled, concurrently. What is
// reported goes to Retry (its wait), what is dropped does not.
func TestConsumerReportsFailuresAndDropsMalformedMessages(t *testing.T) {
	t.Parallel()
	var handled atomic.Int64
	retried := &retries{}
	c := Consumer[int]{
		Retry:  retried,
		Name:   "test message",
		Decode: strconv.Atoi,
		Handle: func(_ context.Context, _ string, v int) error {
			handled.Add(1)
			if v < 0 {
				return errors.New("transient")
			}
			return nil
		},
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "ok", Body: "1"}, {MessageId: "bad", Body: "x"}, {MessageId: "fails", Body: "-1"}, {MessageId: "ok2", Body: "2"}}}
	resp, err := c.Lambda(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	if !slices.Equal(failed, []string{"fails"}) || handled.Load() != 3 {
		t.Errorf("failures %v after %d handled, want [fails] after 3", failed, handled.Load())
	}
	if !slices.Equal(retried.ids, []string{"fails"}) {
		t.Errorf("retried %v, want [fails]", retried.ids)
	}
	c.Reserve = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	handled.Store(0)
	resp, _ = c.Lambda(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "late", Body: "1"}}})
	if len(resp.BatchItemFailures) != 1 || handled.Load() != 0 {
		t.Errorf("with too little time left: %+v after %d handled, want it left for retry unstarted", resp.BatchItemFailures, handled.Load())
	}
	if !slices.Equal(retried.ids, []string{"fails", "late"}) {
		t.Errorf("retried %v, want [fails late]", retried.ids)
	}
}

// retries records the messages a consumer hands its Retrier.
type retries struct{ ids []string }

func (r *retries) RetrySoon(_ context.Context, failed []events.SQSMessage, _ *slog.Logger) {
	for _, m := range failed {
		r.ids = append(r.ids, m.MessageId)
	}
}
