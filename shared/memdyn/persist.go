package memdyn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/signet-im/signet/shared/journal"
)

// record is one journal record: a table created (def: its CreateTable
// request), its TTL set (def: the UpdateTimeToLive request) or dropped, an
// item put (item: as stored) or deleted (key).
type record struct {
	Op    string          `json:"op"`
	Table string          `json:"t,omitempty"`
	Def   json.RawMessage `json:"def,omitempty"`
	Item  json.RawMessage `json:"item,omitempty"`
	Key   Item            `json:"key,omitempty"`
}

// Open returns a server whose tables live in the journal at path (see
// package journal): the tables and items written there are read back, the
// journal is compacted to them, and every change from now on is appended
// before its call is answered. Close it when done.
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
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.journal.Close()
}

// Items counts the items of every table (the banner of a restarted stack).
func (s *Server) Items() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tables {
		n += t.items.Len()
	}
	return n
}

// note queues a record for the journal, if the server has one (not while
// Open replays it); flush appends the queue of one API call before
// answering it. The caller holds s.mu.
func (s *Server) note(r record) {
	if s.journal != nil {
		s.pending = append(s.pending, journal.Encode(r))
	}
}

// flush appends the changes of the call just made to the journal.
func (s *Server) flush() error {
	if s.journal == nil || len(s.pending) == 0 {
		return nil
	}
	err := s.journal.Append(s.pending...)
	s.pending = s.pending[:0]
	if err != nil {
		return &apiError{typ: "InternalServerError", msg: "memdyn could not write its journal: " + err.Error()}
	}
	return nil
}

// compactJSON is a request body on one line (journal records are lines).
func compactJSON(body []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, body); err != nil {
		return append(json.RawMessage(nil), body...)
	}
	return b.Bytes()
}

// replay applies one journal record.
func (s *Server) replay(raw []byte) error {
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	switch r.Op {
	case "table":
		_, err := s.createTable(r.Def)
		return err
	case "ttl":
		_, err := s.updateTTL(r.Def)
		return err
	case "drop":
		delete(s.tables, r.Table)
		return nil
	case "put", "del":
		t, err := s.table(r.Table)
		if err != nil {
			return fmt.Errorf("%s of table %s, which does not exist", r.Op, r.Table)
		}
		it := r.Key
		if r.Op == "put" {
			if err := json.Unmarshal(r.Item, &it); err != nil {
				return err
			}
		}
		k, err := t.keyOf(it, r.Op == "del")
		if err != nil {
			return err
		}
		if r.Op == "del" {
			t.remove(k)
			return nil
		}
		return t.put(k, it)
	}
	return fmt.Errorf("unknown journal record %q", r.Op)
}

// snapshot emits the current state as journal records: each table, its
// TTL setting and its items.
func (s *Server) snapshot(emit func([]byte) error) error {
	names := make([]string, 0, len(s.tables))
	for n := range s.tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := s.tables[n]
		recs := []record{{Op: "table", Def: t.def}}
		if t.ttlAttr != "" {
			def, _ := json.Marshal(map[string]any{"TableName": n, "TimeToLiveSpecification": map[string]any{"AttributeName": t.ttlAttr, "Enabled": t.ttlOn}})
			recs = append(recs, record{Op: "ttl", Def: def})
		}
		for _, r := range recs {
			raw, _ := json.Marshal(r)
			if err := emit(raw); err != nil {
				return err
			}
		}
		var err error
		t.items.Ascend(func(e *entry) bool {
			raw, merr := json.Marshal(record{Op: "put", Table: n, Item: e.raw})
			if merr != nil {
				err = merr
				return false
			}
			err = emit(raw)
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
