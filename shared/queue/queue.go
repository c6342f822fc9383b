// Package queue schedules Signet's redelivery checks on an SQS delay queue
// through the AWS SDK v2, and decodes them in the consumer.
//
// The attempt number travels in the message body, never in SQS's receive
// count, so redelivery stays bounded on every SQS implementation.
package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/signet-im/signet/shared/im"
)

// MaxDelay is SQS's largest DelaySeconds.
const MaxDelay = 900 * time.Second

// Redelivery is the SQS queue of redelivery checks.
type Redelivery struct {
	client *sqs.Client
	url    string
}

// NewRedelivery returns a scheduler posting to the queue at url.
func NewRedelivery(client *sqs.Client, url string) *Redelivery {
	return &Redelivery{client: client, url: url}
}

// body is the JSON form of an im.Check in a queue message.
type body struct {
	User       string `json:"u"`
	Device     string `json:"d"`
	Connection string `json:"c"`
	Seq        int64  `json:"s"`
	Attempt    int    `json:"a"`
}

// Encode renders a check as a queue message body.
func Encode(c im.Check) string {
	b, _ := json.Marshal(body{string(c.User), string(c.Device), string(c.Connection), c.Seq, c.Attempt})
	return string(b)
}

// Decode parses a queue message body into a check.
func Decode(s string) (im.Check, error) {
	var b body
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		return im.Check{}, fmt.Errorf("decode redelivery check: %w", err)
	}
	c := im.Check{User: im.UserID(b.User), Device: im.DeviceID(b.Device), Connection: im.ConnectionID(b.Connection), Seq: b.Seq, Attempt: b.Attempt}
	if !c.User.Valid() || c.Connection == "" || c.Seq < 1 || c.Attempt < 0 {
		return im.Check{}, fmt.Errorf("decode redelivery check %q: missing fields", s)
	}
	return c, nil
}

// Schedule enqueues c to become visible after delay (rounded up to whole
// seconds, at most 15 minutes).
func (r *Redelivery) Schedule(ctx context.Context, c im.Check, delay time.Duration) error {
	secs := int32(math.Ceil(min(max(delay, 0), MaxDelay).Seconds()))
	_, err := r.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:     aws.String(r.url),
		MessageBody:  aws.String(Encode(c)),
		DelaySeconds: secs,
	})
	if err != nil {
		return fmt.Errorf("schedule redelivery %s#%d attempt %d: %w", c.User, c.Seq, c.Attempt, err)
	}
	return nil
}
