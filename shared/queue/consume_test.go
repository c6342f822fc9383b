package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// The one batch loop of the queue consumers: a body the codec refuses is
// dropped (never retried: it can never succeed) unless it is of a kind the
// codec does not know (a newer version's, during a deploy: left for
// retry, unhandled), a message whose handling fails is reported for
// retry, and so is one the invocation has too little time left to start;
// the others are handled, concurrently. What is reported goes to Retry
// (its wait), what is dropped does not.
func TestConsumerReportsFailuresAndDropsMalformedMessages(t *testing.T) {
	t.Parallel()
	var handled atomic.Int64
	retried := &retries{}
	c := Consumer[int]{
		Retry: retried,
		Name:  "test message",
		Decode: func(s string) (int, error) {
			if s == "newer" {
				return 0, fmt.Errorf("decode %q: %w", s, ErrUnknownKind)
			}
			return strconv.Atoi(s)
		},
		Handle: func(_ context.Context, _ string, v int) error {
			handled.Add(1)
			if v < 0 {
				return errors.New("transient")
			}
			return nil
		},
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "ok", Body: "1"}, {MessageId: "bad", Body: "x"}, {MessageId: "fails", Body: "-1"}, {MessageId: "newer", Body: "newer"}, {MessageId: "ok2", Body: "2"}}}
	resp, err := c.Lambda(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	slices.Sort(failed)
	if !slices.Equal(failed, []string{"fails", "newer"}) || handled.Load() != 3 {
		t.Errorf("failures %v after %d handled, want [fails newer] after 3", failed, handled.Load())
	}
	slices.Sort(retried.ids)
	if !slices.Equal(retried.ids, []string{"fails", "newer"}) {
		t.Errorf("retried %v, want [fails newer]", retried.ids)
	}
	retried.ids = []string{"fails"}
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
