// Package reconcile compares what the server holds for a user (消息流水核对:
// the server's journal) with what a device recorded receiving (its
// journal), by inbox seq: which messages are missing on the device, which
// it holds twice or out of order, which it has that the server never
// recorded as delivered. It is plain Go: callers read the two journals
// (DynamoDB, an SDK store, a JSON lines file) and print the Report.
package reconcile

import (
	"fmt"
	"sort"
	"strings"

	"github.com/signet-im/signet/shared/im"
)

// Entry is one inbox entry as a journal records it.
type Entry struct {
	Seq          int64  `json:"seq"`
	MessageID    string `json:"messageId"`
	Conversation string `json:"conversationId"`
	ConvSeq      int64  `json:"convSeq"`
	From         string `json:"from,omitempty"`
}

func (e Entry) String() string {
	return fmt.Sprintf("seq %d %s (%s #%d)", e.Seq, e.MessageID, e.Conversation, e.ConvSeq)
}

// Server is the server's side of one inbox.
type Server struct {
	User string
	// Head is the inbox's last allocated seq; Epoch its sequence's id.
	Head  int64
	Epoch string
	// Entries are the retained entries, ascending by seq.
	Entries []Entry
	// Acked is the device's ack cursor on the server (-1: unknown).
	Acked int64
	// LogMismatches are entries whose conversation log does not hold the
	// same message at that convSeq (filled by the caller that read the
	// logs; nil when the logs were not checked).
	LogMismatches []Entry
}

// Report is the outcome of a reconciliation. An empty report but for
// Pending means the device holds exactly what the server delivered to it.
type Report struct {
	User string `json:"user"`
	// Head and Epoch are the server's; Received is how many entries the
	// journal holds; Highest its highest seq.
	Head     int64  `json:"head"`
	Epoch    string `json:"epoch"`
	Received int    `json:"received"`
	Highest  int64  `json:"highest"`
	// Missing are server entries at or below Highest the device does not
	// have: a hole it skipped.
	Missing []Entry `json:"missing"`
	// Pending are server entries above Highest: not delivered yet (not an
	// error for a device that is offline or catching up).
	Pending []Entry `json:"pending"`
	// Duplicated are journal entries of a message the journal already
	// held (shown twice).
	Duplicated []Entry `json:"duplicated"`
	// OutOfOrder are journal entries received after an entry with a
	// higher seq, or of a conversation after a higher convSeq of it — not
	// of an app's alert conversation, whose convSeqs number every user's
	// alerts and may reach an inbox out of their order (a post retried
	// after a failure, an escalation): the inbox seq orders those.
	OutOfOrder []Entry `json:"outOfOrder"`
	// Mismatched are journal entries whose seq holds another message on
	// the server (the device mixes two sequences of this inbox).
	Mismatched []Entry `json:"mismatched"`
	// Unknown are journal entries at seqs the server does not hold (expired
	// by retention, or from another epoch).
	Unknown []Entry `json:"unknown"`
	// Unconfirmed are journal entries above the server's ack cursor: on the
	// device, but the server cannot confirm them delivered yet.
	Unconfirmed []Entry `json:"unconfirmed"`
	// LogMismatches are inbox entries their conversation log contradicts.
	LogMismatches []Entry `json:"logMismatches"`
}

// OK reports whether nothing is lost, duplicated, reordered or mixed up
// (pending and unconfirmed entries are in flight, not faults).
func (r Report) OK() bool {
	return len(r.Missing)+len(r.Duplicated)+len(r.OutOfOrder)+len(r.Mismatched)+len(r.LogMismatches) == 0
}

// Compare reconciles the server's inbox with a device journal, given in
// the order the device received (or stored) the entries.
func Compare(srv Server, journal []Entry) Report {
	r := Report{User: srv.User, Head: srv.Head, Epoch: srv.Epoch, Received: len(journal), LogMismatches: srv.LogMismatches}
	bySeq := make(map[int64]Entry, len(srv.Entries))
	for _, e := range srv.Entries {
		bySeq[e.Seq] = e
	}
	held := map[string]bool{}
	have := map[int64]bool{}
	var lastSeq int64
	lastConv := map[string]int64{}
	for _, e := range journal {
		if held[e.MessageID] {
			r.Duplicated = append(r.Duplicated, e)
			continue
		}
		held[e.MessageID] = true
		have[e.Seq] = true
		if e.Seq < lastSeq || (e.ConvSeq > 0 && e.ConvSeq < lastConv[e.Conversation] && !im.ConversationID(e.Conversation).AppConversation()) {
			r.OutOfOrder = append(r.OutOfOrder, e)
		}
		lastSeq = max(lastSeq, e.Seq)
		lastConv[e.Conversation] = max(lastConv[e.Conversation], e.ConvSeq)
		s, ok := bySeq[e.Seq]
		switch {
		case !ok:
			r.Unknown = append(r.Unknown, e)
		case s.MessageID != e.MessageID:
			r.Mismatched = append(r.Mismatched, e)
		}
		if srv.Acked >= 0 && e.Seq > srv.Acked {
			r.Unconfirmed = append(r.Unconfirmed, e)
		}
	}
	r.Highest = lastSeq
	for _, s := range srv.Entries {
		switch {
		case have[s.Seq]:
		case s.Seq <= lastSeq:
			r.Missing = append(r.Missing, s)
		default:
			r.Pending = append(r.Pending, s)
		}
	}
	return r
}

// Text renders the report for people.
func (r Report) Text() string {
	var b strings.Builder
	verdict := "OK: nothing lost, duplicated or out of order"
	if !r.OK() {
		verdict = "MISMATCH"
	}
	fmt.Fprintf(&b, "Reconciliation of %s's inbox (head %d, epoch %s): %s\n", r.User, r.Head, r.Epoch, verdict)
	fmt.Fprintf(&b, "  device journal: %d entries, highest seq %d\n", r.Received, r.Highest)
	section := func(name, meaning string, es []Entry) {
		fmt.Fprintf(&b, "  %-14s %6d  %s\n", name, len(es), meaning)
		sorted := append([]Entry(nil), es...)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Seq < sorted[j].Seq })
		for i, e := range sorted {
			if i == 10 {
				fmt.Fprintf(&b, "      … %d more\n", len(sorted)-10)
				break
			}
			fmt.Fprintf(&b, "      %s\n", e)
		}
	}
	section("missing", "on the server at or below the device's highest seq, not on the device", r.Missing)
	section("duplicated", "held twice by the device", r.Duplicated)
	section("out of order", "received after a higher seq (or convSeq)", r.OutOfOrder)
	section("mismatched", "the server holds another message at that seq", r.Mismatched)
	section("log mismatch", "the conversation log contradicts the inbox entry", r.LogMismatches)
	section("unknown", "not on the server (expired, or another epoch)", r.Unknown)
	section("unconfirmed", "on the device above the server's ack cursor", r.Unconfirmed)
	section("pending", "on the server above the device's highest seq (not delivered yet)", r.Pending)
	return b.String()
}
