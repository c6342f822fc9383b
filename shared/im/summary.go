package im

import (
	"time"
	"unicode/utf8"
)

// MaxPreviewBytes bounds a conversation's last-message preview.
const MaxPreviewBytes = 160

// Preview returns the start of a message body (compact JSON) for a
// conversation list: at most MaxPreviewBytes, cut on a character boundary.
func Preview(body []byte) string {
	if len(body) <= MaxPreviewBytes {
		return string(body)
	}
	cut := MaxPreviewBytes
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return string(body[:cut])
}

// ConversationState is one conversation in a user's conversation index:
// what the summary shows after login.
type ConversationState struct {
	Conversation ConversationID
	// Last is the convSeq of the last message of the conversation in the
	// user's inbox.
	Last int64
	// Base is where the user's view of a group starts (the head when they
	// joined); 0 for 1:1 and alert conversations.
	Base int64
	// Read is the user's read watermark, Delivered the highest convSeq one
	// of the user's devices acked.
	Read, Delivered int64
	// Title is a group's name.
	Title string
	// Removed is set once the user was removed from the group; Left is the
	// convSeq after which they receive nothing.
	Removed bool
	Left    int64
	// Past are the user's earlier memberships of a group (Member.Past).
	Past []Span
	// LastFrom, LastAt and Preview describe the last message.
	LastFrom UserID
	LastAt   time.Time
	Preview  string
	// UnreadAlerts counts unread alerts in an app conversation, whose
	// convSeqs also number alerts to other users.
	UnreadAlerts int64
	// ReadSeq, in an app conversation, is the inbox seq up to which the
	// user has read its alerts (0 until a read set it): an alert can reach
	// the inbox after a later one, below the convSeq watermark.
	ReadSeq int64
	// ReadDiffused marks a read-diffused group (no inbox copies): Last is
	// its due head and Delivered the highest of the user's devices'
	// cursors in it.
	ReadDiffused bool
}

// Unread is the number of messages after the read watermark: head minus
// read, never counting messages before the user joined or sent while they
// were not a member.
func (s ConversationState) Unread() int64 {
	if s.Conversation.AppConversation() {
		return max(0, s.UnreadAlerts)
	}
	n := max(0, s.Last-max(s.Read, s.Base))
	for _, p := range s.Past {
		n += max(0, min(p.Left, s.Last)-max(s.Read, p.Joined))
	}
	return n
}

// AlertsRead is what a read of an app's alert conversation changed: the
// convSeq watermark (UpTo, Old before), the inbox seq up to which the
// user has read the app's alerts (ReadSeq) and the alerts it newly covered
// (Read; as many as were found, for the trace and status callbacks).
type AlertsRead struct {
	Moved     bool
	Old, UpTo int64
	ReadSeq   int64
	Read      []MessageID
}

// ReadMark is a user's read watermark of a conversation: UpTo (a convSeq)
// and when it last moved; in an app conversation also the inbox seq up to
// which its alerts are read (Seq, when HasSeq: a read has set it).
type ReadMark struct {
	UpTo   int64
	At     time.Time
	Seq    int64
	HasSeq bool
}

// CoversAlert reports whether the mark covers an alert at convSeq that
// reached the user's inbox at inboxSeq, storedAt: by the inbox seq once a
// read set it; before, by convSeq, counting only if the watermark moved
// after the alert was stored (an alert can reach an inbox after a later
// one; a zero storedAt is not checked).
func (r ReadMark) CoversAlert(convSeq, inboxSeq int64, storedAt time.Time) bool {
	if r.HasSeq {
		return inboxSeq > 0 && inboxSeq <= r.Seq
	}
	return r.UpTo >= convSeq && !r.At.Before(storedAt)
}
