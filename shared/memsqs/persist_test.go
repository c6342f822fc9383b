package memsqs_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/signet-im/signet/shared/memsqs"
)

func sdkOf(t *testing.T, s *memsqs.Server) *sqs.Client {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return sqs.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")},
		func(o *sqs.Options) { o.BaseEndpoint = aws.String(ts.URL) })
}

// Issue 14: a journaled memsqs opened again (after a kill: the first is
// never closed) has its queues, their attributes and every message not
// deleted — the one in flight visible again, the delayed one still
// delayed — and answers with URLs of the endpoint it now serves on.
func TestAJournaledQueueComesBackWithEveryUndeletedMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sqs.jsonl")
	first, err := memsqs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c, ctx := sdkOf(t, first), context.Background()
	dlq, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("dlq")})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl, AttributeNames: []types.QueueAttributeName{"QueueArn"}})
	if err != nil {
		t.Fatal(err)
	}
	redrive := `{"deadLetterTargetArn":"` + attrs.Attributes["QueueArn"] + `","maxReceiveCount":"5"}`
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("work"), Attributes: map[string]string{"VisibilityTimeout": "60", "RedrivePolicy": redrive}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(body string, delay int32) {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body), DelaySeconds: delay}); err != nil {
			t.Fatal(err)
		}
	}
	send("deleted", 0)
	got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("receive %v, %v", got, err)
	}
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: got.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	send("in flight", 0)
	if got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl}); err != nil || len(got.Messages) != 1 {
		t.Fatalf("receive %v, %v", got, err)
	}
	send("waiting", 0)
	send("delayed", 600)

	again, err := memsqs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Messages() != 3 {
		t.Fatalf("Messages() = %d, want 3", again.Messages())
	}
	c2 := sdkOf(t, again)
	url, err := c2.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("work")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(url.QueueUrl) == aws.ToString(q.QueueUrl) || !strings.HasSuffix(aws.ToString(url.QueueUrl), "/work") {
		t.Fatalf("queue URL %s: want the new endpoint's (was %s)", aws.ToString(url.QueueUrl), aws.ToString(q.QueueUrl))
	}
	a, err := c2.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Attributes["VisibilityTimeout"] != "60" || a.Attributes["RedrivePolicy"] != redrive || a.Attributes["ApproximateNumberOfMessagesDelayed"] != "1" {
		t.Fatalf("attributes after reopen %v", a.Attributes)
	}
	out, err := c2.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range out.Messages {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	sort.Strings(bodies)
	if strings.Join(bodies, ",") != "in flight,waiting" {
		t.Fatalf("received after reopen %q; want the in-flight and waiting messages", bodies)
	}
	// A queue read back from the journal keeps journaling.
	if _, err := c2.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: aws.String("after reopen")}); err != nil {
		t.Fatal(err)
	}
	third, err := memsqs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if third.Messages() != 4 {
		t.Fatalf("Messages() = %d after a send to a reopened queue, want 4", third.Messages())
	}
	first.Close()
}

// A journaled message keeps its message attributes across a restart.
func TestAJournaledMessageKeepsItsAttributes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sqs.jsonl")
	first, err := memsqs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c, ctx := sdkOf(t, first), context.Background()
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("signet-callbacks-x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("e"),
		MessageAttributes: map[string]types.MessageAttributeValue{"Signet-Signature": {DataType: aws.String("String"), StringValue: aws.String("v1=ab")}}}); err != nil {
		t.Fatal(err)
	}
	again, err := memsqs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	c2 := sdkOf(t, again)
	url, err := c2.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("signet-callbacks-x")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c2.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, MessageAttributeNames: []string{"All"}})
	if err != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].MessageAttributes["Signet-Signature"].StringValue) != "v1=ab" {
		t.Fatalf("after a restart: %+v %v", got, err)
	}
}
