package wire

import (
	"encoding/json"
	"fmt"

	"github.com/signet-im/signet/shared/im"
)

// Client actions (route keys of the WebSocket API).
const (
	ActionSend = "send"
	ActionAck  = "ack"
	ActionSync = "sync"
	ActionPing = "ping"
	// ActionKeepalive keeps a connection from idling out: API Gateway
	// answers it itself (a MOCK integration) and sends nothing back.
	ActionKeepalive = "keepalive"
	ActionRead      = "read"
	ActionHistory   = "history"
)

// History is the client frame {"action":"history","conversationId":…,
// "before":convSeq,"limit":1..100}: page back through a conversation's log.
type History struct {
	// Action is "history".
	Action string `json:"action"`
	Query
	// ConversationID names a 1:1 conversation of the caller.
	ConversationID string `json:"conversationId"`
	// Before returns messages with convSeq < Before (0 or absent: the newest).
	Before int64 `json:"before,omitempty"`
	// Limit is the most messages wanted, 1..100 (default 50).
	Limit int `json:"limit,omitempty"`
}

// DecodeHistory validates a history frame.
func DecodeHistory(body string) (History, error) {
	var f History
	if err := decode(body, &f); err != nil {
		return History{}, err
	}
	bad := func(p *Problem) (History, error) { return History{Query: f.Query}, p }
	if err := f.Query.check(); err != nil {
		return bad(err)
	}
	if f.ConversationID == "" || len(f.ConversationID) > 3*im.MaxIDLength {
		return bad(Problemf(CodeBadRequest, "conversationId is required"))
	}
	if f.Before < 0 {
		return bad(Problemf(CodeBadRequest, "before must be a convSeq (or 0 for the newest)"))
	}
	if f.Limit == 0 {
		f.Limit = 50
	}
	if f.Limit < 1 || f.Limit > im.MaxPageEntries {
		return bad(Problemf(CodeBadRequest, "limit must be 1..%d", im.MaxPageEntries))
	}
	return f, nil
}

// Read is the client frame {"action":"read","conversationId":…,"upTo":N}:
// the user has read the conversation up to convSeq N. Watermarks only move
// forward; lower or equal values are ignored.
type Read struct {
	// Action is "read".
	Action string `json:"action"`
	// ConversationID names the conversation.
	ConversationID string `json:"conversationId"`
	// UpTo is the highest convSeq read.
	UpTo *int64 `json:"upTo"`
	// InboxSeq, for an app's alert conversation only, is the inbox seq of
	// the newest of its alerts the device has shown: the read then covers
	// exactly the alerts at or below it. An alert can reach an inbox after
	// a later alert of its app (a retried post, an escalation), below the
	// convSeq watermark, and only its inbox seq tells it apart.
	InboxSeq int64 `json:"inboxSeq,omitempty"`
	// Again marks a read written again after an error: its first
	// invocation may have failed after storing the watermark and before
	// telling anyone, so a read at the watermark that says again sends the
	// user's other devices their read frame and a 1:1 peer the receipt
	// again (without it, a read that moves nothing tells no one).
	Again bool `json:"again,omitempty"`
}

// DecodeRead validates a read frame (UpTo is set).
func DecodeRead(body string) (Read, error) {
	var f Read
	if err := decode(body, &f); err != nil {
		return Read{}, err
	}
	if f.ConversationID == "" || len(f.ConversationID) > 3*im.MaxIDLength {
		return Read{}, Problemf(CodeBadRequest, "conversationId is required")
	}
	if f.UpTo == nil || *f.UpTo < 1 {
		return Read{}, Problemf(CodeBadRequest, "upTo is required: a convSeq of at least 1")
	}
	if f.InboxSeq < 0 {
		return Read{}, Problemf(CodeBadRequest, "inboxSeq must be an inbox seq of at least 1")
	}
	if f.InboxSeq > 0 && !im.ConversationID(f.ConversationID).AppConversation() {
		return Read{}, Problemf(CodeBadRequest, "inboxSeq is for an app's alert conversation (a:<app>) only")
	}
	return f, nil
}

// Send is the client frame {"action":"send",...}: deliver Body to user To or
// into ConversationID, idempotently per (sender, ClientMsgID).
type Send struct {
	// Action is "send".
	Action string `json:"action"`
	// ClientMsgID is the client's id for this message, 1–64 printable ASCII
	// characters; a retry with the same id never creates a second message.
	ClientMsgID string `json:"clientMsgId"`
	// To names the recipient of a 1:1 message; exclusive with ConversationID.
	To string `json:"to,omitempty"`
	// ConversationID names the conversation ("d:<a>:<b>" with a < b); exclusive with To.
	ConversationID string `json:"conversationId,omitempty"`
	// Body is any JSON value, at most 16 KiB in its canonical encoding
	// (CanonicalBody: valid UTF-8, no key twice, numbers a double holds
	// exactly); that encoding is what is stored and pushed.
	Body json.RawMessage `json:"body"`
	// Seen is the newest convSeq of the conversation the device had when
	// it first queued the message, sent unchanged with every retry: the
	// server then finds an earlier try above it in the conversation's log
	// instead of keeping an idempotency item per message (1:1; optional).
	Seen *int64 `json:"seen,omitempty"`
	// OwnFromSent says the client applies its own message of a group
	// under read diffusion from the "sent" answer (which then carries it
	// and its proof): the sending connection is not pushed it (optional).
	OwnFromSent bool `json:"ownFromSent,omitempty"`
}

// Ack is the client frame {"action":"ack","upTo":N}: every inbox entry with
// seq ≤ N is persisted on this device. Acks are cumulative. With a
// conversationId (a group under read diffusion) it acks the group's log up
// to convSeq N instead: {"action":"ack","conversationId":"g:…","upTo":N}.
type Ack struct {
	// Action is "ack".
	Action string `json:"action"`
	// ConversationID, when set, names the group whose log UpTo is a
	// convSeq of ("": UpTo is an inbox seq).
	ConversationID string `json:"conversationId,omitempty"`
	// UpTo is the highest inbox seq (or group convSeq) persisted on the device.
	UpTo *int64 `json:"upTo"`
	// Proof, with ConversationID, is the proof the server gave with the
	// message at UpTo (a groupMessage's or a groupSync page's): with it the
	// ack costs no read of the group's log.
	Proof string `json:"proof,omitempty"`
	// Again marks an inbox ack written again after an error: its first
	// invocation may have failed after moving the cursor and before the
	// delivered receipts, so an ack at the cursor that says again sends
	// the receipts of the ack that moved it there (without it, an ack that
	// moves nothing tells no one).
	Again bool `json:"again,omitempty"`
}

// Sync is the client frame {"action":"sync","cursor":N,"limit":L}: return
// inbox entries with seq > Cursor in ascending order. With a
// conversationId (a group under read diffusion) it pulls the group's log
// above convSeq Cursor instead, within the caller's membership.
type Sync struct {
	// Action is "sync".
	Action string `json:"action"`
	// ConversationID, when set, names the group to pull ("": the inbox).
	ConversationID string `json:"conversationId,omitempty"`
	// Cursor is the last inbox seq (or group convSeq) the device has
	// persisted (0 for none).
	Cursor *int64 `json:"cursor"`
	// Limit is the most entries wanted, 1..100 (default 100).
	Limit int `json:"limit,omitempty"`
	// Query's ref is echoed in the page and in an error frame that
	// answers this sync: with it a client tells a refusal of a group's
	// pull (a query) from one of its inbox sync (SyncInterval) and from
	// one of an ack or a read, which carry none.
	Query
}

// Envelope reads just the action of any client frame.
type Envelope struct {
	// Action selects the route.
	Action string `json:"action"`
}

// decode unmarshals a frame, turning JSON errors into bad_request problems.
func decode(body string, v any) error {
	if err := json.Unmarshal([]byte(body), v); err != nil {
		return Problemf(CodeBadRequest, "frame is not valid JSON for this action: %s", jsonReason(err))
	}
	return nil
}

// jsonReason describes a JSON decoding error without echoing internals.
func jsonReason(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Sprintf("syntax error at offset %d", e.Offset)
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("field %q must be %s", e.Field, e.Type.String())
	}
	return "malformed"
}

// Every client frame has one decoder of one shape: DecodeX(body) returns
// the frame's struct, validated and with its defaults filled in, or a
// problem. Even with a problem the struct holds what could be read — its
// ref (only if valid), a send's clientMsgId — so the error frame can name
// them without reading the body again.

// DecodeSend validates a send frame. Its Body is the canonical encoding
// (CanonicalBody), the bytes stored and pushed; Draft names the sender.
func DecodeSend(body string) (Send, error) {
	var f Send
	if err := decode(body, &f); err != nil {
		return Send{}, err
	}
	if !im.ValidClientMsgID(f.ClientMsgID) {
		return Send{ClientMsgID: f.ClientMsgID}, Problemf(CodeBadRequest, "clientMsgId is required: 1-64 printable ASCII characters")
	}
	bad := func(p *Problem) (Send, error) { return Send{ClientMsgID: f.ClientMsgID}, p }
	switch {
	case f.To != "" && f.ConversationID != "":
		return bad(Problemf(CodeBadRequest, "give either to or conversationId, not both"))
	case f.To != "":
		if !im.UserID(f.To).Person() {
			return bad(Problemf(CodeBadRequest, "to must be a user id: 1-64 characters of [A-Za-z0-9._@-], not starting with %q", im.AppSenderPrefix))
		}
	case f.ConversationID == "":
		return bad(Problemf(CodeBadRequest, "to or conversationId is required"))
	}
	if len(f.Body) == 0 || string(f.Body) == "null" {
		return bad(Problemf(CodeBadRequest, "body is required"))
	}
	if f.Seen != nil && *f.Seen < 0 {
		return bad(Problemf(CodeBadRequest, "seen must be a convSeq (0 or more)"))
	}
	canon, err := CanonicalBody(f.Body)
	if err != nil {
		return bad(Problemf(CodeBadRequest, "%s", err.Error()))
	}
	if len(canon) > im.MaxBodyBytes {
		return bad(Problemf(CodeTooLarge, "body is %d bytes encoded; the limit is %d", len(canon), im.MaxBodyBytes))
	}
	f.Body = canon
	return f, nil
}

// Draft is the message the send frame asks user from to send.
func (f Send) Draft(from im.UserID) im.Draft {
	conv := im.ConversationID(f.ConversationID)
	if f.To != "" {
		conv = im.Direct(from, im.UserID(f.To))
	}
	return im.Draft{From: from, ClientMsgID: f.ClientMsgID, Conversation: conv, Body: f.Body, Seen: f.Seen}
}

// DecodeAck validates an ack frame (UpTo is set).
func DecodeAck(body string) (Ack, error) {
	var f Ack
	if err := decode(body, &f); err != nil {
		return Ack{}, err
	}
	if f.UpTo == nil || *f.UpTo < 0 {
		return Ack{}, Problemf(CodeBadRequest, "upTo is required: a non-negative inbox seq")
	}
	if f.ConversationID != "" && !im.ConversationID(f.ConversationID).ValidGroup() {
		return Ack{}, Problemf(CodeBadRequest, "conversationId of an ack must be a group id (g:<id>); acks of 1:1 and alert messages name their inbox seq alone")
	}
	if f.Proof != "" && (f.ConversationID == "" || len(f.Proof) > 64) {
		return Ack{}, Problemf(CodeBadRequest, "proof goes with a group's ack (conversationId), as the server gave it (at most 64 characters)")
	}
	return f, nil
}

// DecodeSync validates a sync frame (Cursor is set, Limit defaults to 100).
func DecodeSync(body string) (Sync, error) {
	var f Sync
	if err := decode(body, &f); err != nil {
		return Sync{}, err
	}
	if f.Cursor == nil || *f.Cursor < 0 {
		return Sync{}, Problemf(CodeBadRequest, "cursor is required: a non-negative inbox seq")
	}
	if f.ConversationID != "" && !im.ConversationID(f.ConversationID).ValidGroup() {
		return Sync{}, Problemf(CodeBadRequest, "conversationId of a sync must be a group id (g:<id>); 1:1 and alert messages are pulled from the inbox")
	}
	if f.Limit == 0 {
		f.Limit = im.MaxPageEntries
	}
	if f.Limit < 1 || f.Limit > im.MaxPageEntries {
		return Sync{}, Problemf(CodeBadRequest, "limit must be 1..%d", im.MaxPageEntries)
	}
	if err := f.Query.check(); err != nil {
		return Sync{}, err
	}
	return f, nil
}
