package memsqs

import (
	"container/heap"
	"strconv"
	"sync"
	"time"
)

// message is one message of a queue.
type message struct {
	id, body, md5 string
	// attrs are its message attributes (never changed once sent: a
	// receive hands them out without copying), attrsMD5 their digest.
	attrs        map[string]attrValue
	attrsMD5     string
	sent         time.Time
	firstReceive time.Time
	receives     int
	// visibleAt is when a delayed or in-flight message becomes receivable;
	// heapIndex is its place in the queue's heap (-1 when not in it).
	visibleAt time.Time
	heapIndex int
	// handle is the receipt handle of the latest receive ("" before the
	// first); inFlight says it is held by that receive now.
	handle   string
	inFlight bool
	deleted  bool
}

// waiting is a heap of messages ordered by the time they become visible.
type waiting []*message

func (w waiting) Len() int           { return len(w) }
func (w waiting) Less(i, j int) bool { return w[i].visibleAt.Before(w[j].visibleAt) }
func (w waiting) Swap(i, j int) {
	w[i], w[j] = w[j], w[i]
	w[i].heapIndex, w[j].heapIndex = i, j
}
func (w *waiting) Push(x any) { m := x.(*message); m.heapIndex = len(*w); *w = append(*w, m) }
func (w *waiting) Pop() any {
	old := *w
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*w = old[:len(old)-1]
	m.heapIndex = -1
	return m
}

// attrs are a queue's settable attributes.
type attrs struct {
	delay, visibility, retention, maxSize, receiveWait int
	// redrive is the RedrivePolicy as given; dlqARN and maxReceives are
	// read from it.
	redrive     string
	dlqARN      string
	maxReceives int
}

// defaultAttrs are SQS's defaults for a new standard queue.
func defaultAttrs() attrs {
	return attrs{visibility: 30, retention: 345600, maxSize: 262144}
}

// queue is one standard queue. Every field below mu is guarded by it.
type queue struct {
	name, arn string
	created   time.Time
	// record, when set, journals every message added and removed (see Open).
	record func(record)

	mu       sync.Mutex
	attrs    attrs
	modified time.Time
	byID     map[string]*message
	ready    []*message // visible, oldest first; deleted ones are skipped
	head     int        // ready[head:] is the live part
	wait     waiting
	// wake is closed (and replaced) when a message becomes visible by a
	// send, so long polls need not wait for their deadline.
	wake     chan struct{}
	receipts uint64
}

func newQueue(name, arn string, a attrs, now time.Time) *queue {
	return &queue{name: name, arn: arn, created: now, modified: now, attrs: a, byID: map[string]*message{}, wake: make(chan struct{})}
}

// add enqueues a message, visible after delay.
func (q *queue) add(m *message, delay time.Duration) {
	q.byID[m.id] = m
	m.heapIndex = -1
	if delay > 0 {
		m.visibleAt = m.sent.Add(delay)
		heap.Push(&q.wait, m)
	} else {
		q.pushReady(m)
	}
	if q.record != nil {
		q.record(addRecord(q.name, m))
	}
}

func (q *queue) pushReady(m *message) {
	q.ready = append(q.ready, m)
	q.signal()
}

// signal wakes every long poll of the queue to look again.
func (q *queue) signal() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// setVisibility makes an in-flight message visible again after vis.
func (q *queue) setVisibility(m *message, vis time.Duration, now time.Time) {
	m.visibleAt = now.Add(vis)
	heap.Fix(&q.wait, m.heapIndex)
	q.signal()
}

// promote moves every waiting message whose time has come to the ready
// FIFO, and drops expired ones.
func (q *queue) promote(now time.Time) {
	for len(q.wait) > 0 && !q.wait[0].visibleAt.After(now) {
		m := heap.Pop(&q.wait).(*message)
		m.inFlight = false
		q.pushReady(m)
	}
}

// nextVisible is when the next waiting message becomes visible (zero if none).
func (q *queue) nextVisible() time.Time {
	if len(q.wait) == 0 {
		return time.Time{}
	}
	return q.wait[0].visibleAt
}

// take receives up to n visible messages for a visibility of vis, and
// returns those to move to the dead-letter queue (received more than
// maxReceives times) separately.
func (q *queue) take(n int, vis time.Duration, now time.Time) (got, dead []*message) {
	q.promote(now)
	retention := time.Duration(q.attrs.retention) * time.Second
	for len(got) < n && q.head < len(q.ready) {
		m := q.ready[q.head]
		q.ready[q.head] = nil
		q.head++
		if m.deleted {
			continue
		}
		if now.Sub(m.sent) > retention {
			q.remove(m)
			continue
		}
		if q.attrs.maxReceives > 0 && m.receives >= q.attrs.maxReceives {
			q.remove(m)
			dead = append(dead, m)
			continue
		}
		m.receives++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		q.receipts++
		m.handle = m.id + "#" + strconv.FormatUint(q.receipts, 36)
		m.inFlight = true
		m.visibleAt = now.Add(vis)
		heap.Push(&q.wait, m)
		got = append(got, m)
	}
	q.compact()
	return got, dead
}

// compact drops the consumed front of the ready FIFO once it is most of it.
func (q *queue) compact() {
	if q.head > 1024 && q.head*2 > len(q.ready) {
		q.ready = append([]*message(nil), q.ready[q.head:]...)
		q.head = 0
	}
}

// remove deletes m from the queue wherever it waits.
func (q *queue) remove(m *message) {
	m.deleted = true
	delete(q.byID, m.id)
	if m.heapIndex >= 0 {
		heap.Remove(&q.wait, m.heapIndex)
	}
	if q.record != nil {
		q.record(record{Op: "rm", Queue: q.name, ID: m.id})
	}
}

// byHandle finds the message a receipt handle names. ok is false for a
// handle this queue never issued; m is nil for a message since deleted.
func (q *queue) byHandle(h string) (m *message, current, ok bool) {
	id, n, found := cutLast(h, '#')
	if !found || id == "" {
		return nil, false, false
	}
	seq, err := strconv.ParseUint(n, 36, 64)
	if err != nil || seq == 0 || seq > q.receipts {
		return nil, false, false
	}
	m = q.byID[id]
	return m, m != nil && m.handle == h, true
}

// counts are the approximate numbers GetQueueAttributes reports.
func (q *queue) counts(now time.Time) (visible, inFlight, delayed int) {
	q.promote(now)
	for _, m := range q.ready[q.head:] {
		if !m.deleted {
			visible++
		}
	}
	for _, m := range q.wait {
		if m.inFlight {
			inFlight++
		} else {
			delayed++
		}
	}
	return visible, inFlight, delayed
}

// purge deletes every message.
func (q *queue) purge() {
	for _, m := range q.byID {
		m.deleted = true
	}
	q.byID, q.ready, q.head, q.wait = map[string]*message{}, nil, 0, nil
	if q.record != nil {
		q.record(record{Op: "purge", Queue: q.name})
	}
}

func cutLast(s string, sep byte) (before, after string, found bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
