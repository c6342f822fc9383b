package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/signet-im/signet/shared/im"
)

// Fanout is the SQS queue of fan-out jobs: group messages to member inboxes
// and presence changes to peers.
type Fanout struct {
	client *sqs.Client
	url    string
}

// NewFanout returns a fan-out queue posting to url.
func NewFanout(client *sqs.Client, url string) *Fanout { return &Fanout{client: client, url: url} }

// fanoutBody is the JSON form of an im.FanoutJob, with short keys: k kind,
// c conversation, s convSeq up to, m members of a batch, u presence user,
// a alert message id, t escalation tick, d device, g urgent, n a wake-up
// of the devices without a connection only, nb not before (Unix ms), f
// and r a read-diffused group's range, o its batch of connections. (x,
// the sending connection not pushed message s, was carried until the
// twenty-first session: the log item records it now, and a job that still
// carries it decodes as if it did not.)
type fanoutBody struct {
	Kind    string   `json:"k"`
	Conv    string   `json:"c,omitempty"`
	UpTo    int64    `json:"s,omitempty"`
	Members []string `json:"m,omitempty"`
	User    string   `json:"u,omitempty"`
	Alert   string   `json:"a,omitempty"`
	Tick    int      `json:"t,omitempty"`
	Device  string   `json:"d,omitempty"`
	Urgent  bool     `json:"g,omitempty"`
	Unconn  bool     `json:"n,omitempty"`
	NotBef  int64    `json:"nb,omitempty"`
	// From and Reads: a read-diffused group's job pushes (From, UpTo].
	From  int64 `json:"f,omitempty"`
	Reads bool  `json:"r,omitempty"`
	// Online: a batch of connections, each [user, device, connection id].
	Online [][3]string `json:"o,omitempty"`
}

// EncodeJob renders a job as a queue message body.
func EncodeJob(j im.FanoutJob) string {
	b := fanoutBody{Kind: string(j.Kind), Conv: string(j.Conversation), UpTo: j.UpTo, User: string(j.User), Alert: string(j.Alert), Tick: j.Tick,
		Device: string(j.Device), Urgent: j.Urgent, Unconn: j.Unconnected, From: j.From, Reads: j.Reads}
	if !j.NotBefore.IsZero() {
		b.NotBef = j.NotBefore.UnixMilli()
	}
	for _, m := range j.Members {
		b.Members = append(b.Members, string(m))
	}
	for _, c := range j.Online {
		b.Online = append(b.Online, [3]string{string(c.User), string(c.Device), string(c.ID)})
	}
	out, _ := json.Marshal(b)
	return string(out)
}

// DecodeJob parses a queue message body into a job.
func DecodeJob(s string) (im.FanoutJob, error) {
	var b fanoutBody
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		return im.FanoutJob{}, fmt.Errorf("decode fan-out job: %w", err)
	}
	j := im.FanoutJob{Kind: im.FanoutKind(b.Kind), Conversation: im.ConversationID(b.Conv), UpTo: b.UpTo, User: im.UserID(b.User), Alert: im.MessageID(b.Alert), Tick: b.Tick,
		Device: im.DeviceID(b.Device), Urgent: b.Urgent, Unconnected: b.Unconn, From: b.From, Reads: b.Reads}
	if b.NotBef > 0 {
		j.NotBefore = time.UnixMilli(b.NotBef).UTC()
	}
	for _, m := range b.Members {
		j.Members = append(j.Members, im.UserID(m))
	}
	for _, c := range b.Online {
		j.Online = append(j.Online, im.Connection{User: im.UserID(c[0]), Device: im.DeviceID(c[1]), ID: im.ConnectionID(c[2])})
	}
	switch j.Kind {
	case im.FanoutMessages:
		if !j.Conversation.ValidGroup() || j.UpTo < 1 {
			return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: missing fields", s)
		}
	case im.FanoutPresence:
		if !j.User.Valid() {
			return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: missing user", s)
		}
	case im.FanoutAlert:
		if j.Alert == "" || len(j.Members) == 0 {
			return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: missing alert or recipients", s)
		}
	case im.FanoutEscalate, im.FanoutRepeat:
		if j.Alert == "" || j.Tick < 1 {
			return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: missing alert or tick", s)
		}
	case im.FanoutCoveredAlerts:
		if !j.User.Valid() || j.UpTo <= j.From || j.From < 0 {
			return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: missing user or span", s)
		}
		if j.Conversation != "" && !j.Conversation.AppConversation() {
			return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: not an app conversation", s)
		}
	case im.FanoutCallback:
		if j.Alert == "" || j.User != "" && !j.User.Valid() {
			return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: missing alert or bad user", s)
		}
	case im.FanoutWake:
		// A read-diffused group's message has no inbox seq: its wake job
		// names the group and seq 0.
		if !j.User.Valid() || j.Alert == "" || (j.UpTo < 1 && !j.Conversation.ValidGroup()) {
			return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: missing user, message or seq", s)
		}
	case "":
		return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: no kind", s)
	default:
		return im.FanoutJob{}, fmt.Errorf("decode fan-out job %q: kind %q: %w", s, b.Kind, ErrUnknownKind)
	}
	return j, nil
}

// Enqueue posts jobs, visible after delay: delayed or single jobs one
// SendMessage each (goaws ignores DelaySeconds in batches), others in
// SendMessageBatch calls of 10.
func (f *Fanout) Enqueue(ctx context.Context, delay time.Duration, jobs ...im.FanoutJob) error {
	secs := int32(math.Ceil(min(max(delay, 0), MaxDelay).Seconds()))
	if secs > 0 || len(jobs) == 1 {
		for _, j := range jobs {
			_, err := f.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.url), MessageBody: aws.String(EncodeJob(j)), DelaySeconds: secs})
			if err != nil {
				return fmt.Errorf("enqueue fan-out job: %w", err)
			}
		}
		return nil
	}
	for start := 0; start < len(jobs); start += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for i, j := range jobs[start:min(start+10, len(jobs))] {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(EncodeJob(j)), DelaySeconds: secs})
		}
		out, err := f.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(f.url), Entries: entries})
		if err != nil {
			return fmt.Errorf("enqueue %d fan-out jobs: %w", len(entries), err)
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("enqueue fan-out jobs: %d of %d failed (%s)", len(out.Failed), len(entries), aws.ToString(out.Failed[0].Code))
		}
	}
	return nil
}
