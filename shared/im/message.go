package im

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// MaxBodyBytes is the largest accepted message body, JSON-encoded.
const MaxBodyBytes = 16 << 10

// Message is the canonical, immutable record of one message in a conversation.
type Message struct {
	ID           MessageID
	Conversation ConversationID
	ConvSeq      int64
	From         UserID
	Body         []byte // compact JSON
	SentAt       time.Time
	// TakenBy is the connection that took this message of a read-diffused
	// group from its own send's "sent" (ownFromSent): the fan-out does not
	// push it there. "" for every other message.
	TakenBy ConnectionID
}

// Entry is one message in one user's inbox at inbox sequence Seq.
type Entry struct {
	Seq     int64
	Message Message
}

// EntryRef points at one inbox entry and the message it holds.
type EntryRef struct {
	Seq          int64
	ID           MessageID
	Conversation ConversationID
	ConvSeq      int64
	From         UserID
}

// Draft is a message a sender asks the server to accept. ClientMsgID makes
// the send idempotent per sender.
type Draft struct {
	From         UserID
	ClientMsgID  string
	Conversation ConversationID
	Body         []byte // compact JSON
	// Seen, when set, is the newest convSeq of the conversation the device
	// had when it first queued the message (every retry says the same): a
	// try of it that was stored took a convSeq above Seen, so a 1:1 send
	// finds an earlier try in the log above Seen and needs no idempotency
	// item of its own (issue 12; nil: the idempotency item).
	Seen *int64
	// OwnConnection is the sending connection when the client takes its
	// own group message from "sent" (ownFromSent): a read-diffused group
	// records it on the message (Message.TakenBy).
	OwnConnection ConnectionID
}

// Fingerprint is a digest of what a retry must repeat for the server to treat
// it as the same send: the conversation and the body.
func (d Draft) Fingerprint() string {
	h := sha256.New()
	h.Write([]byte(d.Conversation))
	h.Write([]byte{0})
	h.Write(d.Body)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Recipients returns whose inboxes a 1:1 message goes into: the peer and the
// sender (for the sender's other devices), once each.
func (d Draft) Recipients() ([]UserID, error) {
	peer, err := d.Conversation.Peer(d.From)
	if err != nil {
		return nil, err
	}
	if peer == d.From {
		return []UserID{d.From}, nil
	}
	return []UserID{peer, d.From}, nil
}

// Stored is the outcome of an accepted send: the message and, per recipient,
// the inbox sequence it landed at.
type Stored struct {
	Message Message
	// Inboxed maps each recipient to the inbox seq of this message.
	Inboxed map[UserID]int64
	// Replayed is true when the send was a retry of an already stored message.
	Replayed bool
	// ReadDiffused says a group message went to a group under read
	// diffusion (known for a first try, false for a replay).
	ReadDiffused bool
}
