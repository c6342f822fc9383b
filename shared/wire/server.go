package wire

import (
	"encoding/json"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// Server frame types.
const (
	TypeSent    = "sent"
	TypeMessage = "message"
	TypeSync    = "sync"
	TypePong    = "pong"
	TypeError   = "error"
	TypeRead    = "read"
	TypeReceipt = "receipt"
	TypeHistory = "history"
	TypeNotify  = "notify"
	// Group read diffusion (docs/proposal-group-read-diffusion.md).
	TypeGroupMessage = "groupMessage"
	TypeGroupSync    = "groupSync"
)

// HistoryPage answers a history request: messages in ascending convSeq.
type HistoryPage struct {
	// Type is "history".
	Type string `json:"type"`
	// Ref echoes the request's ref.
	Ref string `json:"ref,omitempty"`
	// ConversationID names the conversation.
	ConversationID string `json:"conversationId"`
	// Messages are ascending by convSeq, all below the request's before.
	Messages []Message `json:"messages"`
	// HasMore is true when older messages exist: ask again with Before.
	HasMore bool `json:"hasMore"`
	// Before is the value to page further back with.
	Before int64 `json:"before"`
}

// Receipt kinds.
const (
	ReceiptDelivered = "delivered"
	ReceiptRead      = "read"
)

// Receipt tells a 1:1 sender how far the peer has the conversation:
// {"type":"receipt","kind":"delivered"|"read","conversationId":…,"userId":…,"upTo":convSeq}.
// Receipts are watermarks: every message up to UpTo has reached that state.
type Receipt struct {
	// Type is "receipt".
	Type string `json:"type"`
	// Kind is "delivered" (a device of the user persisted it) or "read".
	Kind string `json:"kind"`
	// ConversationID names the conversation.
	ConversationID string `json:"conversationId"`
	// UserID is the user the receipt is about (the peer).
	UserID string `json:"userId"`
	// UpTo is the convSeq up to which the state holds.
	UpTo int64 `json:"upTo"`
}

// ReadSync tells a user's other devices that the conversation was read up
// to UpTo: {"type":"read","conversationId":…,"upTo":N}.
type ReadSync struct {
	// Type is "read".
	Type string `json:"type"`
	// ConversationID names the conversation.
	ConversationID string `json:"conversationId"`
	// UpTo is the user's read watermark (a convSeq).
	UpTo int64 `json:"upTo"`
	// InboxSeq, in an app's alert conversation, is the inbox seq up to
	// which the user has read its alerts.
	InboxSeq int64 `json:"inboxSeq,omitempty"`
}

// Sent is the server ACK of a send, sent only once the message is durable in
// every recipient inbox.
type Sent struct {
	// Type is "sent".
	Type string `json:"type"`
	// ClientMsgID echoes the send's clientMsgId.
	ClientMsgID string `json:"clientMsgId"`
	// MessageID is the server's id of the message; the same on every retry.
	MessageID string `json:"messageId"`
	// ConversationID is the normalised conversation id.
	ConversationID string `json:"conversationId"`
	// ConvSeq is the message's position in the conversation.
	ConvSeq int64 `json:"convSeq"`
	// SentAt is when the server accepted the message (RFC 3339, UTC).
	SentAt string `json:"sentAt"`
	// Seq and Message, in 1:1, are the message's entry in the sender's own
	// inbox: the sending connection is not pushed its own message, it
	// applies this entry as if pushed (the stored bytes, at Seq). In a
	// written group, absent: the copy reaches the sender's inbox by
	// fan-out. In a group under read diffusion, when the send said
	// ownFromSent: Message without Seq, and Proof, applied as a
	// groupMessage push would be (the sending connection is not pushed it).
	Seq     int64    `json:"seq,omitempty"`
	Message *Message `json:"message,omitempty"`
	Proof   string   `json:"proof,omitempty"`
}

// Entry returns the sender's own inbox entry a 1:1 "sent" carries.
func (s Sent) Entry() (Entry, bool) {
	if s.Seq < 1 || s.Message == nil {
		return Entry{}, false
	}
	return Entry{Seq: s.Seq, Message: *s.Message}, true
}

// Message is a message as clients see it.
type Message struct {
	// MessageID is the server's id of the message.
	MessageID string `json:"messageId"`
	// ConversationID is the normalised conversation id.
	ConversationID string `json:"conversationId"`
	// ConvSeq is the message's position in the conversation.
	ConvSeq int64 `json:"convSeq"`
	// From is the sender's user id.
	From string `json:"from"`
	// Body is the JSON value the sender sent.
	Body json.RawMessage `json:"body"`
	// SentAt is when the server accepted the message (RFC 3339, UTC).
	SentAt string `json:"sentAt"`
}

// Entry is one inbox entry: a message at the recipient's inbox seq.
type Entry struct {
	// Seq is the recipient's inbox sequence number of this message.
	Seq int64 `json:"seq"`
	// Message is the message.
	Message Message `json:"message"`
}

// Push is the server frame {"type":"message",...}: one inbox entry pushed live.
type Push struct {
	// Type is "message".
	Type string `json:"type"`
	Entry
	// Urgent marks an urgent alert: clients alert the user even in
	// do-not-disturb (issue 16).
	Urgent bool `json:"urgent,omitempty"`
	// Renotify numbers an escalation's re-notification of an alert the
	// device may have already: show it again (a device that has the entry
	// would otherwise drop it as a duplicate).
	Renotify int `json:"renotify,omitempty"`
}

// SyncPage is the server's answer to a sync.
type SyncPage struct {
	// Type is "sync".
	Type string `json:"type"`
	// Ref echoes the sync's ref, when it had one.
	Ref string `json:"ref,omitempty"`
	// Messages are the entries with seq > cursor, ascending, contiguous.
	Messages []Entry `json:"messages"`
	// NextCursor is the cursor to continue from.
	NextCursor int64 `json:"nextCursor"`
	// HasMore reports whether entries beyond NextCursor exist now.
	HasMore bool `json:"hasMore"`
	// Head is the inbox's last allocated seq.
	Head int64 `json:"head"`
	// Epoch identifies the inbox sequence; if it changes, resync from 0.
	Epoch string `json:"epoch"`
	// Truncated is true when entries after the cursor expired (retention):
	// the page starts at FirstSeq. The client should show a summary rather
	// than pretend nothing was missed.
	Truncated bool `json:"truncated,omitempty"`
	// FirstSeq is the oldest retained seq after the cursor (with Truncated).
	FirstSeq int64 `json:"firstSeq,omitempty"`
	// PushTimeoutMs is how long a pushed entry may stay unacked before the
	// server pushes it again: a device that batches acks sends each within
	// well under this (omitted: 5 s).
	PushTimeoutMs int64 `json:"pushTimeoutMs,omitempty"`
	// Groups, on the last page of a sync (no more to pull), lists the
	// caller's groups under read diffusion and the last convSeq due to
	// them in each: pull those above this device's cursor, and those it
	// has never pulled, with a group sync.
	Groups []GroupHead `json:"groups,omitempty"`
}

// GroupHead names a group under read diffusion and the last convSeq due
// to the user in it.
type GroupHead struct {
	ConversationID string `json:"conversationId"`
	Head           int64  `json:"head"`
}

// GroupPush is the server frame {"type":"groupMessage","message":{…}}: a
// message of a group under read diffusion pushed live. It has no inbox
// seq: the device applies it at its convSeq in the group (pulling the
// gap first, with a group sync, if it has not every one before it) and
// acks the group ({"action":"ack","conversationId":…,"upTo":convSeq}).
type GroupPush struct {
	// Type is "groupMessage".
	Type string `json:"type"`
	// Message is the message.
	Message Message `json:"message"`
	// Proof, when set, proves the group's log reaches the message's convSeq
	// (im.GroupProof): an ack up to it that brings it back costs no read.
	Proof string `json:"proof,omitempty"`
}

// GroupSyncPage answers a group sync: the group's messages above the
// cursor that are due to the caller, ascending and contiguous unless
// Truncated.
type GroupSyncPage struct {
	// Type is "groupSync".
	Type string `json:"type"`
	// Ref echoes the sync's ref, when it had one.
	Ref string `json:"ref,omitempty"`
	// ConversationID names the group.
	ConversationID string `json:"conversationId"`
	// Messages are the messages with convSeq > cursor.
	Messages []Message `json:"messages"`
	// NextCursor is the cursor to continue from.
	NextCursor int64 `json:"nextCursor"`
	// HasMore reports whether messages beyond NextCursor are due.
	HasMore bool `json:"hasMore"`
	// Head is the last convSeq due to the caller: the group's head, or
	// where they left it.
	Head int64 `json:"head"`
	// Truncated is true when messages after the cursor expired (history
	// retention): the page starts at FirstSeq.
	Truncated bool  `json:"truncated,omitempty"`
	FirstSeq  int64 `json:"firstSeq,omitempty"`
	// PushTimeoutMs is as in a sync page.
	PushTimeoutMs int64 `json:"pushTimeoutMs,omitempty"`
	// Proof, on a page with messages, is the proof of NextCursor (as a
	// push's of its message).
	Proof string `json:"proof,omitempty"`
}

// NewGroupPush is the push frame of group message m (read diffusion), with
// the proof of its convSeq under key (none: no proof).
func NewGroupPush(m im.Message, key []byte) GroupPush {
	f := GroupPush{Type: TypeGroupMessage, Message: FromMessage(m)}
	if len(key) > 0 {
		f.Proof = im.GroupProof(key, m.Conversation, m.ConvSeq)
	}
	return f
}

// NewGroupSyncPage is the frame of group page p of conversation c, with
// the proof of its last message under key (none: no proof).
func NewGroupSyncPage(c im.ConversationID, p im.GroupPage, pushTimeout time.Duration, key []byte) GroupSyncPage {
	msgs := make([]Message, len(p.Messages))
	for i, m := range p.Messages {
		msgs[i] = FromMessage(m)
	}
	f := GroupSyncPage{Type: TypeGroupSync, ConversationID: string(c), Messages: msgs, NextCursor: p.Next, HasMore: p.More, Head: p.Head,
		Truncated: p.Truncated, FirstSeq: p.FirstSeq, PushTimeoutMs: pushTimeout.Milliseconds()}
	if n := len(p.Messages); n > 0 && len(key) > 0 {
		f.Proof = im.GroupProof(key, c, p.Messages[n-1].ConvSeq)
	}
	return f
}

// GroupHeads converts the store's positions of a device's groups.
func GroupHeads(groups []im.GroupPosition) []GroupHead {
	var out []GroupHead
	for _, b := range groups {
		out = append(out, GroupHead{ConversationID: string(b.Conversation), Head: b.Head})
	}
	return out
}

// MessageSize is the encoded size of a message inside a group sync page.
func MessageSize(m im.Message) int {
	b, err := json.Marshal(FromMessage(m))
	if err != nil {
		return im.MaxPageBytes
	}
	return len(b) + 1
}

// Pong answers a ping. It carries the inbox head and epoch, so a connected
// device whose pushes were all lost learns at its next ping that it is
// behind (or that the inbox restarted) and syncs.
type Pong struct {
	// Type is "pong".
	Type string `json:"type"`
	// Head is the inbox's last allocated seq.
	Head int64 `json:"head"`
	// Epoch identifies the inbox sequence.
	Epoch string `json:"epoch"`
	// Groups, when set, are groups under read diffusion this device is
	// behind in, named when pushing to the connection gave up on one (the
	// notify that said so may have been lost) or its record was gone:
	// pull each with a group sync.
	Groups []GroupHead `json:"groups,omitempty"`
}

// Notify is the server frame {"type":"notify","head":N,"epoch":E}: the
// inbox head moved and pushing has given up (redelivery exhausted): sync
// from the cursor if it is below head.
type Notify struct {
	// Type is "notify".
	Type string `json:"type"`
	// Head is the inbox's last allocated seq.
	Head int64 `json:"head"`
	// Epoch identifies the inbox sequence.
	Epoch string `json:"epoch"`
	// Groups, when set, are groups under read diffusion in which pushing
	// to this device gave up: pull each with a group sync.
	Groups []GroupHead `json:"groups,omitempty"`
}

// Timestamp formats t the way every frame does: RFC 3339 in UTC with milliseconds.
func Timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// FromMessage converts a domain message into its wire form.
func FromMessage(m im.Message) Message {
	return Message{
		MessageID:      string(m.ID),
		ConversationID: string(m.Conversation),
		ConvSeq:        m.ConvSeq,
		From:           string(m.From),
		Body:           json.RawMessage(m.Body),
		SentAt:         Timestamp(m.SentAt),
	}
}

// FromEntry converts a domain inbox entry into its wire form.
func FromEntry(e im.Entry) Entry { return Entry{Seq: e.Seq, Message: FromMessage(e.Message)} }

// NewSent builds the server ACK for a stored draft.
func NewSent(clientMsgID string, m im.Message) Sent {
	return Sent{
		Type:           TypeSent,
		ClientMsgID:    clientMsgID,
		MessageID:      string(m.ID),
		ConversationID: string(m.Conversation),
		ConvSeq:        m.ConvSeq,
		SentAt:         Timestamp(m.SentAt),
	}
}

// NewSentEntry builds the server ACK of a 1:1 send that also carries the
// sender's own inbox entry (seq): the sending connection's copy.
func NewSentEntry(clientMsgID string, e im.Entry) Sent {
	s := NewSent(clientMsgID, e.Message)
	m := FromMessage(e.Message)
	s.Seq, s.Message = e.Seq, &m
	return s
}

// NewSentGroupMessage builds the server ACK of a send to a group under
// read diffusion that carries the message and its proof under key (none:
// no proof): the sending connection's copy.
func NewSentGroupMessage(clientMsgID string, m im.Message, key []byte) Sent {
	s := NewSent(clientMsgID, m)
	p := NewGroupPush(m, key)
	s.Message, s.Proof = &p.Message, p.Proof
	return s
}

// NewPush builds the push frame of an inbox entry.
func NewPush(e im.Entry) Push { return Push{Type: TypeMessage, Entry: FromEntry(e)} }

// NewSyncPage builds the sync answer for a page; pushTimeout is the
// server's redelivery push timeout, announced to the device.
func NewSyncPage(p im.Page, pushTimeout time.Duration) SyncPage {
	msgs := make([]Entry, len(p.Entries))
	for i, e := range p.Entries {
		msgs[i] = FromEntry(e)
	}
	return SyncPage{Type: TypeSync, Messages: msgs, NextCursor: p.Next, HasMore: p.More, Head: p.Head, Epoch: p.Epoch, Truncated: p.Truncated, FirstSeq: p.FirstSeq, PushTimeoutMs: pushTimeout.Milliseconds()}
}

// EntrySize is the encoded size of an entry inside a sync page, used to keep
// pages under the gateway's message limit.
func EntrySize(e im.Entry) int {
	b, err := json.Marshal(FromEntry(e))
	if err != nil {
		return im.MaxPageBytes
	}
	return len(b) + 1 // the separating comma
}
