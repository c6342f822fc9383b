package memsqs

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/signet-im/signet/shared/journal"
)

// record is one journal record: a queue created (with its attributes) or
// given new attributes, deleted or purged; a message added (visible from
// visibleAt) or removed (deleted, expired or moved to a dead-letter queue).
// Receives are not journaled: after a restart every message is visible
// again once its delay has passed, as after a visibility timeout.
type record struct {
	Op      string        `json:"op"`
	Queue   string        `json:"q"`
	ARN     string        `json:"arn,omitempty"`
	Attrs   *journalAttrs `json:"attrs,omitempty"`
	Created int64         `json:"created,omitempty"`
	ID      string        `json:"id,omitempty"`
	Body    *string       `json:"body,omitempty"`
	Sent    int64         `json:"sent,omitempty"`
	Visible int64         `json:"visible,omitempty"`
	// MsgAttrs are an added message's message attributes.
	MsgAttrs map[string]attrValue `json:"ma,omitempty"`
}

// journalAttrs are a queue's attributes as journaled.
type journalAttrs struct {
	Delay, Visibility, Retention, MaxSize, ReceiveWait int
	Redrive, DLQARN                                    string
	MaxReceives                                        int
}

func toJournal(a attrs) *journalAttrs {
	return &journalAttrs{a.delay, a.visibility, a.retention, a.maxSize, a.receiveWait, a.redrive, a.dlqARN, a.maxReceives}
}

func (j *journalAttrs) attrs() attrs {
	return attrs{j.Delay, j.Visibility, j.Retention, j.MaxSize, j.ReceiveWait, j.Redrive, j.DLQARN, j.MaxReceives}
}

// Open returns a server whose queues and messages live in the journal at
// path (see package journal): they are read back, the journal is
// compacted to them, and every change from now on is appended before the
// call that made it is answered. Close it when done.
func Open(path string) (*Server, error) {
	s := New()
	j, err := journal.Load(path, s.replay, s.snapshot)
	if err != nil {
		return nil, err
	}
	s.journal = j
	return s, nil
}

// Close closes the server's journal, if it has one.
func (s *Server) Close() error { return s.journal.Close() }

// Messages counts the messages of every queue.
func (s *Server) Messages() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, q := range s.queues {
		q.mu.Lock()
		n += len(q.byID)
		q.mu.Unlock()
	}
	return n
}

// note appends a record to the journal, if the server has one (not while
// Open replays it). A failed write is kept by the journal and fails the
// call being served (journalError).
func (s *Server) note(r record) {
	if s.journal != nil {
		_ = s.journal.Append(journal.Encode(r))
	}
}

// journalError is the journal's write failure, as an answer.
func (s *Server) journalError() error {
	if s.journal == nil {
		return nil
	}
	if err := s.journal.Err(); err != nil {
		return &apiError{shape: "InternalError", code: "InternalError", msg: "memsqs could not write its journal: " + err.Error(), server: true}
	}
	return nil
}

// replay applies one journal record.
func (s *Server) replay(raw []byte) error {
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	if r.Op == "queue" {
		if r.Attrs == nil {
			return fmt.Errorf("queue %s without attributes", r.Queue)
		}
		q := newQueue(r.Queue, r.ARN, r.Attrs.attrs(), time.UnixMilli(r.Created))
		q.record = s.note
		s.queues[r.Queue] = q
		return nil
	}
	q, ok := s.queues[r.Queue]
	if !ok {
		return fmt.Errorf("%s on queue %s, which does not exist", r.Op, r.Queue)
	}
	switch r.Op {
	case "attrs":
		if r.Attrs == nil {
			return fmt.Errorf("attrs of %s without attributes", r.Queue)
		}
		q.attrs = r.Attrs.attrs()
	case "drop":
		delete(s.queues, r.Queue)
	case "purge":
		q.purge()
	case "add":
		if r.Body == nil {
			return fmt.Errorf("message %s without a body", r.ID)
		}
		m := newMessage(r.ID, *r.Body, time.UnixMilli(r.Sent))
		m.setAttributes(r.MsgAttrs)
		q.add(m, time.UnixMilli(r.Visible).Sub(m.sent))
	case "rm":
		if m, ok := q.byID[r.ID]; ok {
			q.remove(m)
		}
	default:
		return fmt.Errorf("unknown journal record %q", r.Op)
	}
	return nil
}

// snapshot emits the current state as journal records: each queue
// (dead-letter queues first, so redrive policies find them), then its
// messages.
func (s *Server) snapshot(emit func([]byte) error) error {
	names := make([]string, 0, len(s.queues))
	for n := range s.queues {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := s.queues[names[i]], s.queues[names[j]]
		if (a.attrs.dlqARN == "") != (b.attrs.dlqARN == "") {
			return a.attrs.dlqARN == ""
		}
		return names[i] < names[j]
	})
	for _, n := range names {
		q := s.queues[n]
		recs := []record{{Op: "queue", Queue: n, ARN: q.arn, Attrs: toJournal(q.attrs), Created: q.created.UnixMilli()}}
		msgs := make([]*message, 0, len(q.byID))
		for _, m := range q.byID {
			msgs = append(msgs, m)
		}
		sort.Slice(msgs, func(i, j int) bool { return msgs[i].sent.Before(msgs[j].sent) })
		for _, m := range msgs {
			recs = append(recs, addRecord(n, m))
		}
		for _, r := range recs {
			raw, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := emit(raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// addRecord journals m, added to queue.
func addRecord(queue string, m *message) record {
	body := m.body
	visible := m.visibleAt
	if m.inFlight || visible.Before(m.sent) {
		visible = m.sent // a received message is visible again after a restart
	}
	return record{Op: "add", Queue: queue, ID: m.id, Body: &body, Sent: m.sent.UnixMilli(), Visible: visible.UnixMilli(), MsgAttrs: m.attrs}
}
