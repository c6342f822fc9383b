package im

import (
	"fmt"
	"strings"
)

// UserID names a person or an app sender. It is 1–64 characters of
// [A-Za-z0-9._@-]; it never contains ':' so conversation ids stay parseable.
type UserID string

// DeviceID names one device of a user (a laptop, a phone). Same alphabet as UserID.
type DeviceID string

// ConnectionID is API Gateway's id of one WebSocket connection.
type ConnectionID string

// ConversationID names a conversation: "d:<a>:<b>" for 1:1 (a < b) or "g:<id>" for a group.
type ConversationID string

// MessageID is the server-assigned, globally unique id of a message.
type MessageID string

// DefaultDevice is the device id used when a client names none.
const DefaultDevice DeviceID = "default"

// MaxIDLength is the longest user, device or client message id accepted.
const MaxIDLength = 64

// validID reports whether s is 1–64 characters of [A-Za-z0-9._@-].
func validID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}

// Valid reports whether u is a well-formed user id.
func (u UserID) Valid() bool { return validID(string(u)) }

// AppSenderPrefix starts the user id of every app sender ("app.<appId>").
const AppSenderPrefix = "app."

// Person reports whether u can be a person's id: well-formed and not in a
// namespace the system uses for its own senders. Tokens, recipients and
// group members must be people; only an app's alerts come from "app.<id>",
// so nobody can send messages that look like an app's.
func (u UserID) Person() bool { return u.Valid() && !strings.HasPrefix(string(u), AppSenderPrefix) }

// Valid reports whether d is a well-formed device id.
func (d DeviceID) Valid() bool { return validID(string(d)) }

// ValidClientMsgID reports whether id is an acceptable client message id:
// 1–64 printable ASCII characters without spaces.
func ValidClientMsgID(id string) bool {
	if len(id) == 0 || len(id) > MaxIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// Direct returns the 1:1 conversation id of a and b; Direct(a, b) == Direct(b, a).
func Direct(a, b UserID) ConversationID {
	if b < a {
		a, b = b, a
	}
	return ConversationID("d:" + string(a) + ":" + string(b))
}

// IsGroup reports whether c names a group conversation.
func (c ConversationID) IsGroup() bool { return strings.HasPrefix(string(c), "g:") }

// Members returns the two users of a 1:1 conversation id. It fails for group
// ids, malformed ids and ids whose users are not in sorted order (the
// normalised form is the only accepted spelling).
func (c ConversationID) Members() (UserID, UserID, error) {
	rest, ok := strings.CutPrefix(string(c), "d:")
	if !ok {
		return "", "", fmt.Errorf("conversation %q: %w", c, ErrNotDirect)
	}
	a, b, ok := strings.Cut(rest, ":")
	ua, ub := UserID(a), UserID(b)
	if !ok || !ua.Valid() || !ub.Valid() || ub < ua {
		return "", "", fmt.Errorf("conversation %q: %w", c, ErrMalformedConversation)
	}
	return ua, ub, nil
}

// AppConversation reports whether c is an app's alert conversation ("a:<app>").
func (c ConversationID) AppConversation() bool { return strings.HasPrefix(string(c), "a:") }

// CanRead reports whether user u may mark conversation c read: a member of
// a 1:1 conversation; for a well-formed group or app conversation id the
// store checks membership (a group's members; an app's recipients, up to
// the last alert they received).
func (c ConversationID) CanRead(u UserID) error {
	if c.AppConversation() {
		if !validID(strings.TrimPrefix(string(c), "a:")) {
			return fmt.Errorf("conversation %q: %w", c, ErrMalformedConversation)
		}
		return nil
	}
	if c.IsGroup() {
		if !c.ValidGroup() {
			return fmt.Errorf("conversation %q: %w", c, ErrMalformedConversation)
		}
		return nil // membership is checked by the store, which knows it
	}
	_, err := c.Peer(u)
	return err
}

// Peer returns the other member of the 1:1 conversation c as seen by user u.
// It returns ErrNotMember when u is not one of the two users.
func (c ConversationID) Peer(u UserID) (UserID, error) {
	a, b, err := c.Members()
	if err != nil {
		return "", err
	}
	switch u {
	case a:
		return b, nil
	case b:
		return a, nil
	}
	return "", fmt.Errorf("user %s in %s: %w", u, c, ErrNotMember)
}
