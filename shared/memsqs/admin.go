package memsqs

import (
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var queueName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

func (c *call) createQueue(body []byte) (any, error) {
	var in struct {
		QueueName  string
		Attributes map[string]string
		Tags       map[string]string `json:"tags"`
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if strings.HasSuffix(in.QueueName, ".fifo") || in.Attributes["FifoQueue"] == "true" {
		return nil, unsupported("FIFO queues")
	}
	if !queueName.MatchString(in.QueueName) {
		return nil, invalidParameter("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	a := defaultAttrs()
	if err := c.applyAttrs(&a, in.Attributes); err != nil {
		return nil, err
	}
	if q, ok := c.s.queues[in.QueueName]; ok {
		q.mu.Lock()
		defer q.mu.Unlock()
		cur := q.attrs
		if err := c.applyAttrs(&cur, in.Attributes); err != nil || cur != q.attrs {
			return nil, errorf("QueueNameExists", "QueueAlreadyExists", "A queue already exists with the same name and a different value for attribute(s)")
		}
		return map[string]string{"QueueUrl": c.queueURL(q.name)}, nil
	}
	arn := "arn:aws:sqs:" + c.region + ":" + Account + ":" + in.QueueName
	q := newQueue(in.QueueName, arn, a, c.now)
	c.s.queues[in.QueueName] = q
	q.record = c.s.note
	c.s.note(record{Op: "queue", Queue: q.name, ARN: arn, Attrs: toJournal(a), Created: c.now.UnixMilli()})
	return map[string]string{"QueueUrl": c.queueURL(q.name)}, nil
}

// queueURL is the URL of the named queue on the endpoint the call came to.
func (c *call) queueURL(name string) string {
	return "http://" + c.host + "/" + Account + "/" + name
}

// applyAttrs validates and sets settable attributes. The caller holds the
// server's lock (read or write: the dead-letter queue is looked up by ARN)
// and whatever lock guards a.
func (c *call) applyAttrs(a *attrs, in map[string]string) error {
	ranges := map[string]struct {
		field  *int
		lo, hi int
	}{
		"DelaySeconds":                  {&a.delay, 0, 900},
		"VisibilityTimeout":             {&a.visibility, 0, 43200},
		"MessageRetentionPeriod":        {&a.retention, 60, 1209600},
		"MaximumMessageSize":            {&a.maxSize, 1024, 262144},
		"ReceiveMessageWaitTimeSeconds": {&a.receiveWait, 0, 20},
	}
	for name, v := range in {
		if r, ok := ranges[name]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < r.lo || n > r.hi {
				return invalidParameter("Invalid value for the parameter %s.", name)
			}
			*r.field = n
			continue
		}
		switch name {
		case "RedrivePolicy":
			if v == "" {
				a.redrive, a.dlqARN, a.maxReceives = "", "", 0
				continue
			}
			var p struct {
				DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
				MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
			}
			if err := json.Unmarshal([]byte(v), &p); err != nil {
				return invalidParameter("Value %s for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a valid JSON map.", v)
			}
			n, err := strconv.Atoi(strings.Trim(string(p.MaxReceiveCount), `"`))
			if err != nil || n < 1 || n > 1000 {
				return invalidParameter("Value %s for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: %s, valid values are from 1 to 1000 both inclusive.", v, p.MaxReceiveCount)
			}
			if c.queueByARNLocked(p.DeadLetterTargetArn) == nil {
				return invalidParameter("Value %s for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.", v)
			}
			a.redrive, a.dlqARN, a.maxReceives = v, p.DeadLetterTargetArn, n
		case "Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled", "RedriveAllowPolicy":
			// Accepted and not acted on: memsqs has no IAM or encryption
			// (the local stack enforces IAM in front of it).
		case "FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit":
			return unsupported("FIFO queues")
		default:
			return errorf("InvalidAttributeName", "InvalidAttributeName", "Unknown Attribute %s.", name)
		}
	}
	return nil
}

// queueByARNLocked is queueByARN for callers that may hold the server's
// write lock (CreateQueue): it reads the map without locking again.
func (c *call) queueByARNLocked(arn string) *queue {
	for _, q := range c.s.queues {
		if q.arn == arn {
			return q
		}
	}
	return nil
}

func (c *call) getQueueURL(body []byte) (any, error) {
	var in struct{ QueueName string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	q, ok := c.s.queues[in.QueueName]
	if !ok {
		return nil, noQueue()
	}
	return map[string]string{"QueueUrl": c.queueURL(q.name)}, nil
}

func (c *call) listQueues(body []byte) (any, error) {
	var in struct{ QueueNamePrefix string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	urls := []string{}
	for name := range c.s.queues {
		if strings.HasPrefix(name, in.QueueNamePrefix) {
			urls = append(urls, c.queueURL(name))
		}
	}
	sort.Strings(urls)
	return map[string][]string{"QueueUrls": urls}, nil
}

func (c *call) deleteQueue(body []byte) (any, error) {
	var in queueRef
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	c.s.mu.Lock()
	delete(c.s.queues, q.name)
	c.s.mu.Unlock()
	q.mu.Lock()
	q.record = nil
	q.purge()
	q.signal()
	q.mu.Unlock()
	if c.s.journal != nil {
		c.s.note(record{Op: "drop", Queue: q.name})
	}
	return struct{}{}, nil
}

func (c *call) purgeQueue(body []byte) (any, error) {
	var in queueRef
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.purge()
	q.mu.Unlock()
	return struct{}{}, nil
}

func (c *call) getQueueAttributes(body []byte) (any, error) {
	var in struct {
		queueRef
		AttributeNames []string
	}
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	visible, inFlight, delayed := q.counts(c.now)
	a, modified := q.attrs, q.modified
	q.mu.Unlock()
	all := map[string]string{
		"QueueArn":                              q.arn,
		"ApproximateNumberOfMessages":           itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": itoa(inFlight),
		"ApproximateNumberOfMessagesDelayed":    itoa(delayed),
		"CreatedTimestamp":                      itoa(int(q.created.Unix())),
		"LastModifiedTimestamp":                 itoa(int(modified.Unix())),
		"DelaySeconds":                          itoa(a.delay),
		"VisibilityTimeout":                     itoa(a.visibility),
		"MessageRetentionPeriod":                itoa(a.retention),
		"MaximumMessageSize":                    itoa(a.maxSize),
		"ReceiveMessageWaitTimeSeconds":         itoa(a.receiveWait),
		"SqsManagedSseEnabled":                  "false",
	}
	if a.redrive != "" {
		all["RedrivePolicy"] = a.redrive
	}
	out := map[string]string{}
	for _, name := range in.AttributeNames {
		if name == "All" {
			out = all
			break
		}
		v, ok := all[name]
		if !ok {
			if _, known := knownQueueAttributes[name]; !known {
				return nil, errorf("InvalidAttributeName", "InvalidAttributeName", "Unknown Attribute %s.", name)
			}
			continue
		}
		out[name] = v
	}
	return map[string]any{"Attributes": out}, nil
}

// knownQueueAttributes are SQS attribute names memsqs may not report (no
// value set) but must not refuse.
var knownQueueAttributes = map[string]struct{}{
	"Policy": {}, "RedrivePolicy": {}, "RedriveAllowPolicy": {}, "KmsMasterKeyId": {}, "KmsDataKeyReusePeriodSeconds": {},
	"FifoQueue": {}, "ContentBasedDeduplication": {}, "DeduplicationScope": {}, "FifoThroughputLimit": {},
}

func (c *call) setQueueAttributes(body []byte) (any, error) {
	var in struct {
		queueRef
		Attributes map[string]string
	}
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attrs
	if err := c.applyAttrs(&a, in.Attributes); err != nil {
		return nil, err
	}
	q.attrs, q.modified = a, c.now
	if q.record != nil {
		q.record(record{Op: "attrs", Queue: q.name, Attrs: toJournal(a)})
	}
	return struct{}{}, nil
}
