package queue

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/signet-im/signet/shared/testkit"
)

func TestRetryWaitDoublesFromTwoSecondsToAMinute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		receives int
		want     time.Duration
	}{
		{"receive count missing", 0, 2 * time.Second},
		{"first receive", 1, 2 * time.Second},
		{"second", 2, 4 * time.Second},
		{"fifth", 5, 32 * time.Second},
		{"sixth: capped", 6, time.Minute},
		{"hundredth", 100, time.Minute},
	} {
		if got := RetryWait(tc.receives); got != tc.want {
			t.Errorf("%s: RetryWait(%d) = %v, want %v", tc.name, tc.receives, got, tc.want)
		}
	}
}

// A failed message comes back after its retry wait, not its queue's
// visibility timeout (an hour here: before the consumers set their own
// waits, one transient error held a fan-out job for the queue's three
// minutes); a record of a queue the backoff was not given keeps the
// timeout.
func TestAFailedMessageComesBackAfterItsRetryWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := testkit.MemSQS(t)
	url := func(name string) string {
		out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"VisibilityTimeout": "3600"}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.QueueUrl)
	}
	jobs, other := url("jobs"), url("other")
	receive := func(url string, wait int32) []types.Message {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: wait,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Messages
	}
	var failed []events.SQSMessage
	for name, u := range map[string]string{"jobs": jobs, "other": other} {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(u), MessageBody: aws.String("job")}); err != nil {
			t.Fatal(err)
		}
		got := receive(u, 0)
		if len(got) != 1 {
			t.Fatalf("received %d messages from %s, want 1", len(got), u)
		}
		failed = append(failed, events.SQSMessage{MessageId: aws.ToString(got[0].MessageId), ReceiptHandle: aws.ToString(got[0].ReceiptHandle),
			Attributes: got[0].Attributes, EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:" + name})
	}

	start := time.Now()
	NewBackoff(client, jobs, "").RetrySoon(ctx, failed, slog.Default())
	var back []types.Message
	for len(back) == 0 && time.Since(start) < 30*time.Second {
		back = receive(jobs, 1)
	}
	switch {
	case len(back) != 1:
		t.Fatalf("the failed message is not back after %v (its queue's visibility timeout is an hour)", time.Since(start))
	case time.Since(start) < RetryFirst-500*time.Millisecond:
		t.Errorf("back after %v, before its retry wait %v", time.Since(start), RetryFirst)
	case back[0].Attributes["ApproximateReceiveCount"] != strconv.Itoa(2):
		t.Errorf("receive count %s, want 2", back[0].Attributes["ApproximateReceiveCount"])
	}
	if got := receive(other, 0); len(got) != 0 {
		t.Errorf("a message of a queue the backoff was not given is back: %d", len(got))
	}
}
