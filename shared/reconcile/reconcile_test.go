package reconcile

import (
	"strings"
	"testing"
)

func entry(seq int64, id, conv string, cseq int64) Entry {
	return Entry{Seq: seq, MessageID: id, Conversation: conv, ConvSeq: cseq}
}

func ids(es []Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.MessageID)
	}
	return strings.Join(out, ",")
}

func TestCompareFindsEveryKindOfFault(t *testing.T) {
	t.Parallel()
	srv := Server{User: "bob", Head: 7, Epoch: "e1", Acked: 3, Entries: []Entry{
		entry(1, "m1", "d:a:b", 1), entry(2, "m2", "d:a:b", 2), entry(3, "m3", "g:x", 1),
		entry(4, "m4", "d:a:b", 3), entry(5, "m5", "g:x", 2), entry(6, "m6", "d:a:b", 4), entry(7, "m7", "d:a:b", 5),
	}}
	journal := []Entry{
		entry(1, "m1", "d:a:b", 1),
		entry(3, "m3", "g:x", 1),   // m2 (seq 2) is missing
		entry(1, "m1", "d:a:b", 1), // shown twice
		entry(5, "m5", "g:x", 2),
		entry(4, "m4", "d:a:b", 3), // after seq 5: out of order
		entry(9, "m9", "d:a:b", 9), // not on the server
	}
	r := Compare(srv, journal)
	checks := map[string][2]string{
		"missing":      {ids(r.Missing), "m2,m6,m7"},
		"pending":      {ids(r.Pending), ""},
		"duplicated":   {ids(r.Duplicated), "m1"},
		"out of order": {ids(r.OutOfOrder), "m4"},
		"unknown":      {ids(r.Unknown), "m9"},
		"unconfirmed":  {ids(r.Unconfirmed), "m5,m4,m9"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %q, want %q", name, c[0], c[1])
		}
	}
	if r.OK() || r.Highest != 9 || r.Received != 6 {
		t.Fatalf("report %+v", r)
	}
	text := r.Text()
	for _, want := range []string{"MISMATCH", "missing", "seq 2 m2 (d:a:b #2)", "duplicated"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

func TestCompareCleanJournalWithPendingTail(t *testing.T) {
	t.Parallel()
	srv := Server{User: "bob", Head: 3, Acked: 2, Entries: []Entry{entry(1, "m1", "c", 1), entry(2, "m2", "c", 2), entry(3, "m3", "c", 3)}}
	r := Compare(srv, []Entry{entry(1, "m1", "c", 1), entry(2, "m2", "c", 2)})
	if !r.OK() || ids(r.Pending) != "m3" || len(r.Unconfirmed) != 0 || len(r.Missing) != 0 {
		t.Fatalf("report %+v", r)
	}
	if !strings.Contains(r.Text(), "OK: nothing lost") {
		t.Fatalf("text:\n%s", r.Text())
	}
	// A seq reused by another message (a device mixing two epochs).
	r = Compare(srv, []Entry{entry(1, "m1", "c", 1), entry(2, "x2", "c", 2)})
	if r.OK() || ids(r.Mismatched) != "x2" {
		t.Fatalf("mismatch report %+v", r)
	}
}

// An app's alert conversation may reach an inbox out of convSeq order
// (its convSeqs number every user's alerts: a retried post, an
// escalation); the inbox seq orders it. Any other conversation may not.
func TestCompareOrdersAlertsByInboxSeqOnly(t *testing.T) {
	t.Parallel()
	for conv, want := range map[string]string{"a:monitoring": "", "d:alice:bob": "m1"} {
		entries := []Entry{entry(1, "m2", conv, 2), entry(2, "m1", conv, 1)}
		r := Compare(Server{User: "bob", Head: 2, Acked: 2, Entries: entries}, entries)
		if ids(r.OutOfOrder) != want || r.OK() != (want == "") {
			t.Fatalf("%s: out of order %q, want %q; report %+v", conv, ids(r.OutOfOrder), want, r)
		}
	}
}
