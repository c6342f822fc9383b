package queue

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Callbacks delivers status callbacks to apps' own SQS queues (an app's
// AWS-native alternative to a webhook).
type Callbacks struct{ client *sqs.Client }

// NewCallbacks returns a sender over client.
func NewCallbacks(client *sqs.Client) *Callbacks { return &Callbacks{client: client} }

// SendCallback posts body to the queue at url with attrs as string message
// attributes (the event id, timestamp and signature).
func (c *Callbacks) SendCallback(ctx context.Context, url, body string, attrs map[string]string) error {
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: map[string]types.MessageAttributeValue{}}
	for k, v := range attrs {
		in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	if _, err := c.client.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("send to %s: %w", url, err)
	}
	return nil
}
