package memsqs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/memsqs"
)

// backend is one SQS implementation the contract runs against.
type backend struct {
	name     string
	endpoint func(t *testing.T) string
	// strict is false for third-party emulators, which differ from AWS's
	// documentation in details Signet does not rely on (goaws: receive
	// counts, batch answers, error codes; fauxqs accepts DelaySeconds 901,
	// bodies over 256 KiB and made-up receipt handles): those are logged.
	// The semantics Signet relies on are asserted on every backend.
	strict bool
}

// backends: memsqs and goaws in-process, or only SIGNET_TEST_SQS_ENDPOINT
// (fauxqs, LocalStack: make test-fauxqs, make test-localstack) when set.
func backends() []backend {
	if e := os.Getenv("SIGNET_TEST_SQS_ENDPOINT"); e != "" {
		return []backend{{"endpoint " + e, func(*testing.T) string { return e }, false}}
	}
	return []backend{
		{"memsqs", func(t *testing.T) string {
			endpoint, stop, err := memsqs.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			return endpoint
		}, true},
		{"goaws", func(t *testing.T) string {
			endpoint, err := devstack.StartGoaws()
			if err != nil {
				t.Fatal(err)
			}
			return endpoint
		}, false},
	}
}

var queues atomic.Int64

// fixture is a client and a fresh queue of one backend.
type fixture struct {
	t   *testing.T
	ctx context.Context
	sqs *sqs.Client
	url string
}

func newFixture(t *testing.T, b backend, attrs map[string]string) *fixture {
	t.Helper()
	c := sqs.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")},
		func(o *sqs.Options) { o.BaseEndpoint = aws.String(b.endpoint(t)) })
	f := &fixture{t: t, ctx: context.Background(), sqs: c}
	f.url = f.create(attrs)
	return f
}

func (f *fixture) create(attrs map[string]string) string {
	f.t.Helper()
	name := fmt.Sprintf("contract-%d-%d", time.Now().UnixNano(), queues.Add(1))
	out, err := f.sqs.CreateQueue(f.ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		f.t.Fatalf("create queue: %v", err)
	}
	return aws.ToString(out.QueueUrl)
}

func (f *fixture) send(body string, delay int32) string {
	f.t.Helper()
	out, err := f.sqs.SendMessage(f.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String(body), DelaySeconds: delay})
	if err != nil {
		f.t.Fatalf("send: %v", err)
	}
	return aws.ToString(out.MessageId)
}

func (f *fixture) receive(url string, n, wait int32) []types.Message {
	f.t.Helper()
	out, err := f.sqs.ReceiveMessage(f.ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: n, WaitTimeSeconds: wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		f.t.Fatalf("receive: %v", err)
	}
	return out.Messages
}

// receiveAll receives until want messages came or wait passed.
func (f *fixture) receiveAll(want int, wait time.Duration) []types.Message {
	f.t.Helper()
	var got []types.Message
	for deadline := time.Now().Add(wait); len(got) < want && time.Now().Before(deadline); {
		got = append(got, f.receive(f.url, 10, 1)...)
	}
	return got
}

func (f *fixture) del(handle *string) {
	f.t.Helper()
	if _, err := f.sqs.DeleteMessage(f.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(f.url), ReceiptHandle: handle}); err != nil {
		f.t.Fatalf("delete: %v", err)
	}
}

// differs reports a difference from AWS's documentation: an error on a
// strict backend, a logged known deviation on another (goaws).
func differs(t *testing.T, b backend, format string, a ...any) {
	t.Helper()
	if b.strict {
		t.Errorf(format, a...)
		return
	}
	t.Logf("%s differs from AWS (known): "+format, append([]any{b.name}, a...)...)
}

func bodies(ms []types.Message) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		out[aws.ToString(m.Body)] = true
	}
	return out
}

// TestContract runs every case against every backend: what Signet's
// redelivery and fan-out queues rely on, as AWS documents it.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for name, test := range contract {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					test(t, b)
				})
			}
		})
	}
}

var contract = map[string]func(*testing.T, backend){
	// Status callbacks to an app's queue carry their id and signature as
	// message attributes (issue 16).
	"MessageAttributesTravelWithTheMessage": func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		attrs := map[string]types.MessageAttributeValue{
			"Signet-Event-Id": {DataType: aws.String("String"), StringValue: aws.String("m1:read:ann")},
			"count":           {DataType: aws.String("Number"), StringValue: aws.String("42")},
			"raw":             {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2, 3}},
		}
		// AWS's digest of these attributes, computed apart from memsqs
		// (sorted names; length-prefixed name, type, value; 1 or 2 for the
		// transport type).
		const md5 = "41ecef339323a9dec0af65bb390ca8a5"
		sent, err := f.sqs.SendMessage(f.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String("e"), MessageAttributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(sent.MD5OfMessageAttributes); got != md5 {
			differs(t, b, "MD5OfMessageAttributes %q, want %s", got, md5)
		}
		out, err := f.sqs.ReceiveMessage(f.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.url), WaitTimeSeconds: 5, MessageAttributeNames: []string{"Signet-Event-Id", "raw"}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("receive: %v %v", out, err)
		}
		got := out.Messages[0].MessageAttributes
		if aws.ToString(got["Signet-Event-Id"].StringValue) != "m1:read:ann" || string(got["raw"].BinaryValue) != "\x01\x02\x03" {
			t.Fatalf("received attributes %+v, want the two asked for", got)
		}
		if _, extra := got["count"]; extra {
			differs(t, b, "a receive naming two attributes got the third too")
		}
		_, err = f.sqs.SendMessage(f.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String("e"),
			MessageAttributes: map[string]types.MessageAttributeValue{"x": {DataType: aws.String("Colour"), StringValue: aws.String("red")}}})
		if err == nil {
			differs(t, b, "an attribute of an unknown type was accepted")
		}
	},
	"SentMessagesAreReceivedOnceAndGoneWhenDeleted": func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		for i := range 3 {
			f.send("m"+strconv.Itoa(i), 0)
		}
		got := f.receiveAll(3, 30*time.Second)
		if len(got) != 3 || !bodies(got)["m0"] || !bodies(got)["m2"] {
			t.Fatalf("received %d messages %v, want m0..m2", len(got), bodies(got))
		}
		for _, m := range got {
			if m.Attributes["ApproximateReceiveCount"] != "1" || m.Attributes["SentTimestamp"] == "" {
				differs(t, b, "attributes %v: want receive count 1 and a sent time", m.Attributes)
			}
			f.del(m.ReceiptHandle)
		}
		if again := f.receive(f.url, 10, 1); len(again) != 0 {
			t.Fatalf("after deleting: received %v again", bodies(again))
		}
	},
	"ADelayedMessageStaysHiddenUntilItsDelay": func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		sent := time.Now()
		f.send("later", 2)
		if got := f.receive(f.url, 10, 0); len(got) != 0 {
			t.Fatalf("a message delayed 2 s was received at once: %v", bodies(got))
		}
		got := f.receiveAll(1, 30*time.Second)
		if len(got) != 1 || aws.ToString(got[0].Body) != "later" {
			t.Fatalf("received %v, want the delayed message", bodies(got))
		}
		if waited := time.Since(sent); waited < 1500*time.Millisecond {
			t.Fatalf("received %s after sending, before its 2 s delay", waited)
		}
	},
	"AMessageNotDeletedReturnsAfterItsVisibilityTimeoutWithANewHandle": func(t *testing.T, b backend) {
		f := newFixture(t, b, map[string]string{"VisibilityTimeout": "1"})
		id := f.send("again", 0)
		first := f.receiveAll(1, 30*time.Second)
		if len(first) != 1 {
			t.Fatalf("first receive: %d messages", len(first))
		}
		second := f.receiveAll(1, 30*time.Second)
		if len(second) != 1 || aws.ToString(second[0].MessageId) != id {
			t.Fatalf("second receive: %v, want message %s again", bodies(second), id)
		}
		if aws.ToString(second[0].ReceiptHandle) == aws.ToString(first[0].ReceiptHandle) {
			t.Error("the second receive reused the first receipt handle")
		}
		if got := second[0].Attributes["ApproximateReceiveCount"]; got != "2" {
			differs(t, b, "receive count %q, want 2", got)
		}
		f.del(second[0].ReceiptHandle)
	},
	"ChangingVisibilityToZeroReturnsTheMessageAtOnce": func(t *testing.T, b backend) {
		f := newFixture(t, b, map[string]string{"VisibilityTimeout": "600"})
		f.send("retry", 0)
		got := f.receiveAll(1, 30*time.Second)
		if len(got) != 1 {
			t.Fatalf("received %d", len(got))
		}
		if _, err := f.sqs.ChangeMessageVisibility(f.ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(f.url), ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
		if again := f.receiveAll(1, 10*time.Second); len(again) != 1 {
			t.Fatal("the message did not return after its visibility was set to 0 (its timeout is 600 s)")
		}
	},
	"ALongPollIsAnsweredWhenAMessageArrives": func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		done := make(chan []types.Message, 1)
		start := time.Now()
		go func() { done <- f.receive(f.url, 1, 20) }()
		time.Sleep(300 * time.Millisecond)
		f.send("wake", 0)
		got := <-done
		if len(got) != 1 || time.Since(start) > 15*time.Second {
			differs(t, b, "the 20 s long poll returned %d messages after %s, want the message sent while it waited", len(got), time.Since(start))
		}
	},
	"AMessageReceivedMoreThanMaxReceiveCountMovesToTheDeadLetterQueue": func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		dlq := f.url
		arn, err := f.sqs.GetQueueAttributes(f.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlq), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"2"}`, arn.Attributes["QueueArn"])
		f.url = f.create(map[string]string{"VisibilityTimeout": "1", "RedrivePolicy": policy})
		f.send("poison", 0)
		for i := range 2 {
			if got := f.receiveAll(1, 30*time.Second); len(got) != 1 {
				t.Fatalf("receive %d: %d messages", i+1, len(got))
			}
		}
		var moved []types.Message
		for deadline := time.Now().Add(30 * time.Second); len(moved) == 0 && time.Now().Before(deadline); {
			if got := f.receive(f.url, 10, 1); len(got) != 0 {
				t.Fatalf("received %d times, more than maxReceiveCount 2", 3)
			}
			moved = f.receive(dlq, 10, 1)
		}
		if len(moved) != 1 || aws.ToString(moved[0].Body) != "poison" {
			t.Fatalf("dead-letter queue holds %v, want the message", bodies(moved))
		}
	},
	"BatchesSendAndDeleteEachEntry": func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		var entries []types.SendMessageBatchRequestEntry
		for i := range 10 {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String("e" + strconv.Itoa(i)), MessageBody: aws.String("b" + strconv.Itoa(i))})
		}
		out, err := f.sqs.SendMessageBatch(f.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(f.url), Entries: entries})
		if err != nil || len(out.Failed) != 0 {
			t.Fatalf("send batch: %v, %d failed", err, len(out.Failed))
		}
		if len(out.Successful) != 10 {
			differs(t, b, "send batch answered %d entries sent, want 10", len(out.Successful))
		}
		got := f.receiveAll(10, 30*time.Second)
		if len(got) != 10 {
			t.Fatalf("received %d of 10", len(got))
		}
		var dels []types.DeleteMessageBatchRequestEntry
		for i, m := range got {
			dels = append(dels, types.DeleteMessageBatchRequestEntry{Id: aws.String("d" + strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		dout, err := f.sqs.DeleteMessageBatch(f.ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(f.url), Entries: dels})
		if err != nil || len(dout.Failed) != 0 {
			t.Fatalf("delete batch: %v, %d failed", err, len(dout.Failed))
		}
		if len(dout.Successful) != 10 {
			differs(t, b, "delete batch answered %d entries deleted, want 10", len(dout.Successful))
		}
		if again := f.receive(f.url, 10, 1); len(again) != 0 {
			t.Fatalf("after the batch delete: received %v", bodies(again))
		}
	},
	"QueueAttributesNameTheArnAndCountMessages": func(t *testing.T, b backend) {
		f := newFixture(t, b, map[string]string{"VisibilityTimeout": "600"})
		f.send("a", 0)
		f.send("b", 0)
		f.send("c", 900)
		if got := f.receiveAll(1, 30*time.Second); len(got) == 0 {
			t.Fatal("nothing received")
		}
		out, err := f.sqs.GetQueueAttributes(f.ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(f.url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		name := f.url[strings.LastIndexByte(f.url, '/')+1:]
		if arn := out.Attributes["QueueArn"]; !strings.HasPrefix(arn, "arn:aws:sqs:") || !strings.HasSuffix(arn, ":"+name) {
			t.Errorf("QueueArn %q, want arn:aws:sqs:…:%s", arn, name)
		}
		if out.Attributes["VisibilityTimeout"] != "600" {
			t.Errorf("VisibilityTimeout %q, want 600", out.Attributes["VisibilityTimeout"])
		}
		visible, _ := strconv.Atoi(out.Attributes["ApproximateNumberOfMessages"])
		inFlight, _ := strconv.Atoi(out.Attributes["ApproximateNumberOfMessagesNotVisible"])
		if visible+inFlight != 2 || inFlight < 1 {
			differs(t, b, "visible %d + in flight %d, want 2 with at least 1 in flight (and the delayed one apart)", visible, inFlight)
		}
	},
	"ErrorsAreTheModeledShapes": func(t *testing.T, b backend) {
		if !b.strict {
			t.Skipf("%s is not held to AWS's error answers (see backend.strict)", b.name)
		}
		f := newFixture(t, b, nil)
		_, err := f.sqs.SendMessage(f.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url + "-missing"), MessageBody: aws.String("x")})
		if _, ok := errors.AsType[*types.QueueDoesNotExist](err); !ok {
			t.Errorf("send to a missing queue: %v, want QueueDoesNotExist", err)
		}
		_, err = f.sqs.DeleteMessage(f.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(f.url), ReceiptHandle: aws.String("not-a-handle")})
		if _, ok := errors.AsType[*types.ReceiptHandleIsInvalid](err); !ok {
			t.Errorf("delete with a made-up handle: %v, want ReceiptHandleIsInvalid", err)
		}
		_, err = f.sqs.SendMessage(f.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String("x"), DelaySeconds: 901})
		if ae, ok := errors.AsType[smithy.APIError](err); !ok || ae.ErrorCode() != "InvalidParameterValue" {
			t.Errorf("DelaySeconds 901: %v, want InvalidParameterValue", err)
		}
		_, err = f.sqs.SendMessageBatch(f.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(f.url), Entries: []types.SendMessageBatchRequestEntry{}})
		if _, ok := errors.AsType[*types.EmptyBatchRequest](err); !ok {
			t.Errorf("empty batch: %v, want EmptyBatchRequest", err)
		}
		big := make([]byte, 262145)
		for i := range big {
			big[i] = 'x'
		}
		_, err = f.sqs.SendMessage(f.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String(string(big))})
		if ae, ok := errors.AsType[smithy.APIError](err); !ok || ae.ErrorCode() != "InvalidParameterValue" {
			t.Errorf("a 256 KiB + 1 body: %v, want InvalidParameterValue", err)
		}
		if got := f.receive(f.url, 10, 0); len(got) != 0 {
			t.Errorf("refused sends stored %d messages", len(got))
		}
	},
}
