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
	"strings"
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
	// Conv: a check of a read-diffused group's message (Seq its convSeq).
	Conv string `json:"g,omitempty"`
}

// MaxChecksPerMessage bounds the checks one queue message carries (the
// most a Scheduler is handed at once): ~100 bytes each, so a message stays
// inside one 64 KB SQS billing chunk.
const MaxChecksPerMessage = im.MaxChecksPerSchedule

// Encode renders checks as a queue message body: one check as a JSON
// object (the form every version reads), several as an array of them.
func Encode(cs ...im.Check) string {
	bs := make([]body, len(cs))
	for i, c := range cs {
		bs[i] = body{string(c.User), string(c.Device), string(c.Connection), c.Seq, c.Attempt, string(c.Conversation)}
	}
	var b []byte
	if len(bs) == 1 {
		b, _ = json.Marshal(bs[0])
	} else {
		b, _ = json.Marshal(bs)
	}
	return string(b)
}

// Decode parses a queue message body (one check, or an array of them)
// into its checks.
func Decode(s string) ([]im.Check, error) {
	var bs []body
	var err error
	if trimmed := strings.TrimLeft(s, " \t\r\n"); strings.HasPrefix(trimmed, "[") {
		err = json.Unmarshal([]byte(s), &bs)
	} else {
		bs = make([]body, 1)
		err = json.Unmarshal([]byte(s), &bs[0])
	}
	if err != nil {
		return nil, fmt.Errorf("decode redelivery check: %w", err)
	}
	if len(bs) == 0 || len(bs) > MaxChecksPerMessage {
		return nil, fmt.Errorf("decode redelivery check: %d checks in one message (1 to %d)", len(bs), MaxChecksPerMessage)
	}
	cs := make([]im.Check, len(bs))
	for i, b := range bs {
		c := im.Check{User: im.UserID(b.User), Device: im.DeviceID(b.Device), Connection: im.ConnectionID(b.Connection), Seq: b.Seq, Attempt: b.Attempt,
			Conversation: im.ConversationID(b.Conv)}
		if !c.User.Valid() || c.Connection == "" || c.Seq < 1 || c.Attempt < 0 || c.Conversation != "" && !c.Conversation.ValidGroup() {
			return nil, fmt.Errorf("decode redelivery check %q: missing fields", s)
		}
		cs[i] = c
	}
	return cs, nil
}

// Schedule enqueues checks (at most MaxChecksPerMessage) as one message
// that becomes visible after delay (rounded up to whole seconds, at most
// 15 minutes): the checks of one invocation's pushes cost one SQS request.
func (r *Redelivery) Schedule(ctx context.Context, cs []im.Check, delay time.Duration) error {
	if len(cs) == 0 || len(cs) > MaxChecksPerMessage {
		return fmt.Errorf("schedule redelivery: %d checks in one message (1 to %d)", len(cs), MaxChecksPerMessage)
	}
	secs := int32(math.Ceil(min(max(delay, 0), MaxDelay).Seconds()))
	_, err := r.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:     aws.String(r.url),
		MessageBody:  aws.String(Encode(cs...)),
		DelaySeconds: secs,
	})
	if err != nil {
		return fmt.Errorf("schedule redelivery of %d checks (%s#%d first) attempt %d: %w", len(cs), cs[0].User, cs[0].Seq, cs[0].Attempt, err)
	}
	return nil
}
