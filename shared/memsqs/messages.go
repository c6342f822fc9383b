package memsqs

import (
	"crypto/md5"
	"encoding/hex"
	"regexp"
	"time"
	"unicode/utf8"
)

// sendEntry is one message to send (SendMessage or a batch entry).
type sendEntry struct {
	Id                      string
	MessageBody             string
	DelaySeconds            *int
	MessageAttributes       map[string]attrValue
	MessageSystemAttributes map[string]any
	MessageGroupId          string
	MessageDeduplicationId  string
}

// check validates an entry against q's attributes and returns its delay.
func (e *sendEntry) check(a attrs) (time.Duration, *apiError) {
	if e.MessageBody == "" {
		return 0, errorf("MissingParameter", "MissingParameter", "The request must contain the parameter MessageBody.")
	}
	if len(e.MessageSystemAttributes) > 0 {
		return 0, unsupported("message system attributes")
	}
	if aerr := checkAttributes(e.MessageAttributes); aerr != nil {
		return 0, aerr
	}
	if e.MessageGroupId != "" || e.MessageDeduplicationId != "" {
		return 0, invalidParameter("The request include parameter that is not valid for this queue type")
	}
	if len(e.MessageBody)+attributesSize(e.MessageAttributes) > a.maxSize {
		return 0, invalidParameter("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", a.maxSize)
	}
	if !validContents(e.MessageBody) {
		return 0, errorf("InvalidMessageContents", "InvalidMessageContents", "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF")
	}
	delay := a.delay
	if e.DelaySeconds != nil {
		delay = *e.DelaySeconds
	}
	if delay < 0 || delay > 900 {
		return 0, invalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: must be between 0 and 900, if provided.", delay)
	}
	return time.Duration(delay) * time.Second, nil
}

// validContents reports whether s holds only the characters SQS accepts.
func validContents(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

// newMessage is a message of entry e as sent now.
func (c *call) newMessage(e sendEntry) *message {
	m := newMessage(messageID(), e.MessageBody, c.now)
	m.setAttributes(e.MessageAttributes)
	return m
}

// setAttributes gives m its message attributes and their digest.
func (m *message) setAttributes(a map[string]attrValue) {
	if len(a) > 0 {
		m.attrs, m.attrsMD5 = a, attributesMD5(a)
	}
}

// newMessage is a message as sent.
func newMessage(id, body string, sent time.Time) *message {
	sum := md5.Sum([]byte(body))
	return &message{id: id, body: body, md5: hex.EncodeToString(sum[:]), sent: sent}
}

func (c *call) sendMessage(body []byte) (any, error) {
	var in struct {
		queueRef
		sendEntry
	}
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delay, aerr := in.check(q.attrs)
	if aerr != nil {
		return nil, aerr
	}
	m := c.newMessage(in.sendEntry)
	q.add(m, delay)
	out := map[string]string{"MessageId": m.id, "MD5OfMessageBody": m.md5}
	if m.attrsMD5 != "" {
		out["MD5OfMessageAttributes"] = m.attrsMD5
	}
	return out, nil
}

// batchEntryID is the form of a batch entry's Id.
var batchEntryID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// checkBatch refuses an empty, oversized or ill-identified batch.
func checkBatch(ids []string) error {
	if len(ids) == 0 {
		return errorf("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", "There should be at least one SendMessageBatchRequestEntry in the request.")
	}
	if len(ids) > 10 {
		return errorf("TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "Maximum number of entries per request are 10. You have sent %d.", len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if !batchEntryID.MatchString(id) {
			return errorf("InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")
		}
		if seen[id] {
			return errorf("BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "Id %s repeated.", id)
		}
		seen[id] = true
	}
	return nil
}

// batchAnswer is the answer to a batch: the entries that succeeded (S) and
// those that failed.
type batchAnswer[S any] struct {
	Successful []S
	Failed     []batchFailure
}

// batchFailure is one failed entry of a batch answer.
type batchFailure struct {
	Id          string
	SenderFault bool
	Code        string
	Message     string
}

func failure(id string, e *apiError) batchFailure {
	return batchFailure{Id: id, SenderFault: !e.server, Code: e.code, Message: e.msg}
}

func (c *call) sendMessageBatch(body []byte) (any, error) {
	var in struct {
		queueRef
		Entries []sendEntry
	}
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	ids, size := make([]string, len(in.Entries)), 0
	for i, e := range in.Entries {
		ids[i], size = e.Id, size+len(e.MessageBody)
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if size > q.attrs.maxSize {
		return nil, errorf("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", "Batch requests cannot be longer than %d bytes. You have sent %d bytes.", q.attrs.maxSize, size)
	}
	type ok struct {
		Id, MessageId, MD5OfMessageBody string
		MD5OfMessageAttributes          string `json:",omitempty"`
	}
	out := batchAnswer[ok]{Successful: []ok{}, Failed: []batchFailure{}}
	for _, e := range in.Entries {
		delay, aerr := e.check(q.attrs)
		if aerr != nil {
			out.Failed = append(out.Failed, failure(e.Id, aerr))
			continue
		}
		m := c.newMessage(e)
		q.add(m, delay)
		out.Successful = append(out.Successful, ok{e.Id, m.id, m.md5, m.attrsMD5})
	}
	return out, nil
}

// receivedMessage is a message in a ReceiveMessage answer.
type receivedMessage struct {
	MessageId, ReceiptHandle, MD5OfBody, Body string
	Attributes                                map[string]string    `json:",omitempty"`
	MessageAttributes                         map[string]attrValue `json:",omitempty"`
	MD5OfMessageAttributes                    string               `json:",omitempty"`
}

func (c *call) receiveMessage(body []byte) (any, error) {
	var in struct {
		queueRef
		MaxNumberOfMessages         *int
		WaitTimeSeconds             *int
		VisibilityTimeout           *int
		AttributeNames              []string
		MessageSystemAttributeNames []string
		MessageAttributeNames       []string
		ReceiveRequestAttemptId     string
	}
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	n := 1
	if in.MaxNumberOfMessages != nil {
		n = *in.MaxNumberOfMessages
	}
	if n < 1 || n > 10 {
		return nil, invalidParameter("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", n)
	}
	q.mu.Lock()
	wait, vis := q.attrs.receiveWait, q.attrs.visibility
	q.mu.Unlock()
	if in.WaitTimeSeconds != nil {
		wait = *in.WaitTimeSeconds
	}
	if wait < 0 || wait > 20 {
		return nil, invalidParameter("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", wait)
	}
	if in.VisibilityTimeout != nil {
		vis = *in.VisibilityTimeout
	}
	if vis < 0 || vis > 43200 {
		return nil, invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.", vis)
	}
	names := append(append([]string(nil), in.AttributeNames...), in.MessageSystemAttributeNames...)
	got := c.receive(q, n, time.Duration(vis)*time.Second, time.Duration(wait)*time.Second)
	out := make([]receivedMessage, len(got))
	for i, m := range got {
		out[i] = receivedMessage{MessageId: m.id, ReceiptHandle: m.handle, MD5OfBody: m.md5, Body: m.body, Attributes: systemAttributes(m, names)}
		if a := selectAttributes(m.attrs, in.MessageAttributeNames); a != nil {
			out[i].MessageAttributes, out[i].MD5OfMessageAttributes = a, attributesMD5(a)
		}
	}
	return map[string]any{"Messages": out}, nil
}

// snapshot is what a receive hands out of a message: copied under the
// queue's lock, since the message may be received again at once.
type snapshot struct {
	id, handle, md5, body string
	sent, firstReceive    time.Time
	receives              int
	attrs                 map[string]attrValue
}

// receive takes up to n messages, waiting up to wait for the first.
func (c *call) receive(q *queue, n int, vis, wait time.Duration) []snapshot {
	deadline := c.now.Add(wait)
	for {
		now := c.s.now()
		q.mu.Lock()
		got, dead := q.take(n, vis, now)
		out := make([]snapshot, len(got))
		for i, m := range got {
			out[i] = snapshot{m.id, m.handle, m.md5, m.body, m.sent, m.firstReceive, m.receives, m.attrs}
		}
		wake, next := q.wake, q.nextVisible()
		q.mu.Unlock()
		c.redrive(q, dead)
		if len(out) > 0 || !now.Before(deadline) {
			return out
		}
		sleep := deadline.Sub(now)
		if !next.IsZero() && next.Sub(now) < sleep {
			sleep = max(next.Sub(now), time.Millisecond)
		}
		t := time.NewTimer(sleep)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return nil
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// redrive moves messages received too often to the source queue's
// dead-letter queue, keeping their id, body and sent time. A dead-letter
// queue deleted since leaves them where they were (visible again).
func (c *call) redrive(from *queue, dead []*message) {
	if len(dead) == 0 {
		return
	}
	from.mu.Lock()
	arn := from.attrs.dlqARN
	from.mu.Unlock()
	to := c.queueByARN(arn)
	if to == nil {
		to = from
	}
	to.mu.Lock()
	defer to.mu.Unlock()
	for _, m := range dead {
		moved := &message{id: m.id, body: m.body, md5: m.md5, sent: m.sent}
		moved.setAttributes(m.attrs)
		if to == from {
			moved.receives = m.receives
		}
		to.add(moved, 0)
	}
}

// systemAttributes are the message attributes a receive asked for.
func systemAttributes(m snapshot, names []string) map[string]string {
	if len(names) == 0 {
		return nil
	}
	all := map[string]string{
		"SenderId":                         Account,
		"SentTimestamp":                    itoa(int(m.sent.UnixMilli())),
		"ApproximateReceiveCount":          itoa(m.receives),
		"ApproximateFirstReceiveTimestamp": itoa(int(m.firstReceive.UnixMilli())),
	}
	out := map[string]string{}
	for _, name := range names {
		if name == "All" {
			return all
		}
		if v, ok := all[name]; ok {
			out[name] = v
		}
	}
	return out
}

func (c *call) deleteMessage(body []byte) (any, error) {
	var in struct {
		queueRef
		ReceiptHandle string
	}
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if aerr := q.deleteByHandle(in.ReceiptHandle); aerr != nil {
		return nil, aerr
	}
	return struct{}{}, nil
}

// deleteByHandle deletes the message a receipt handle names. A handle of a
// message deleted since succeeds; a stale handle (a newer receive holds
// the message) succeeds and deletes nothing, as SQS documents.
func (q *queue) deleteByHandle(h string) *apiError {
	m, current, ok := q.byHandle(h)
	if !ok {
		return errorf("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "The input receipt handle \"%s\" is not a valid receipt handle.", h)
	}
	if m != nil && current {
		q.remove(m)
	}
	return nil
}

func (c *call) deleteMessageBatch(body []byte) (any, error) {
	type entry struct{ Id, ReceiptHandle string }
	return runBatch(c, body, func(e entry) string { return e.Id }, func(q *queue, e entry) *apiError {
		return q.deleteByHandle(e.ReceiptHandle)
	})
}

func (c *call) changeVisibility(body []byte) (any, error) {
	var in struct {
		queueRef
		ReceiptHandle     string
		VisibilityTimeout int
	}
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if aerr := c.changeByHandle(q, in.ReceiptHandle, in.VisibilityTimeout); aerr != nil {
		return nil, aerr
	}
	return struct{}{}, nil
}

// changeByHandle sets the visibility timeout of the in-flight message a
// receipt handle names, counted from now.
func (c *call) changeByHandle(q *queue, h string, secs int) *apiError {
	if secs < 0 || secs > 43200 {
		return invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.", secs)
	}
	m, current, ok := q.byHandle(h)
	if !ok {
		return errorf("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "The input receipt handle \"%s\" is not a valid receipt handle.", h)
	}
	if m == nil || !current || !m.inFlight {
		return errorf("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "Message does not exist or is not available for visibility timeout change.")
	}
	q.setVisibility(m, time.Duration(secs)*time.Second, c.now)
	return nil
}

func (c *call) changeVisibilityBatch(body []byte) (any, error) {
	type entry struct {
		Id, ReceiptHandle string
		VisibilityTimeout int
	}
	return runBatch(c, body, func(e entry) string { return e.Id }, func(q *queue, e entry) *apiError {
		return c.changeByHandle(q, e.ReceiptHandle, e.VisibilityTimeout)
	})
}

// runBatch serves a batch of entries that each succeed or fail alone
// (DeleteMessageBatch, ChangeMessageVisibilityBatch): it decodes the
// request, checks its entry ids, and applies do to each entry under the
// queue's lock.
func runBatch[E any](c *call, body []byte, id func(E) string, do func(*queue, E) *apiError) (any, error) {
	var in struct {
		queueRef
		Entries []E
	}
	q, err := c.decodeQueue(body, &in)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = id(e)
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	type ok struct{ Id string }
	out := batchAnswer[ok]{Successful: []ok{}, Failed: []batchFailure{}}
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, e := range in.Entries {
		if aerr := do(q, e); aerr != nil {
			out.Failed = append(out.Failed, failure(ids[i], aerr))
			continue
		}
		out.Successful = append(out.Successful, ok{ids[i]})
	}
	return out, nil
}
