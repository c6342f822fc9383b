package im

import (
	"errors"
	"fmt"
)

// Domain errors. Adapters wrap them with context; the wire layer maps them to
// error codes in exactly one table (see package wire).
var (
	// ErrNotDirect: the conversation is not a 1:1 conversation.
	ErrNotDirect = errors.New("not a direct conversation")
	// ErrMalformedConversation: the conversation id is not in normalised form.
	ErrMalformedConversation = errors.New("malformed conversation id")
	// ErrNotMember: the user does not belong to the conversation.
	ErrNotMember = errors.New("not a member of the conversation")
	// ErrClientMsgIDReused: a clientMsgId was retried with different content.
	ErrClientMsgIDReused = errors.New("clientMsgId reused with different content")
	// ErrReadBeyondHead: a read watermark beyond the conversation's last message.
	ErrReadBeyondHead = errors.New("read beyond conversation head")
	// ErrAckBeyondHead: a device acked a sequence the inbox has not reached.
	ErrAckBeyondHead = errors.New("ack beyond inbox head")
	// ErrCursorBeyondHead: a sync cursor the inbox has not reached: the
	// device's position belongs to an earlier sequence of this inbox.
	ErrCursorBeyondHead = errors.New("cursor beyond inbox head")
	// ErrContention: a conditional write lost its race too many times; retry later.
	ErrContention = errors.New("too much contention, retry")
	// ErrRateLimited: the caller exceeded a rate limit.
	ErrRateLimited = errors.New("rate limited")
	// ErrNotFound: the item does not exist.
	ErrNotFound = errors.New("not found")
	// ErrIdempotencyConflict: an Idempotency-Key was reused with another payload.
	ErrIdempotencyConflict = errors.New("idempotency key reused with a different payload")
	// ErrAppExists: an app with that id exists.
	ErrAppExists = errors.New("app exists")
	// ErrGone: the connection no longer exists.
	ErrGone = errors.New("connection gone")
	// ErrEndpointDisabled: a device's push endpoint is disabled (APNs or
	// FCM refused its token); it must register again.
	ErrEndpointDisabled = errors.New("push endpoint disabled")
	// ErrDeviceLimit: the user has the most devices allowed, and this
	// device id is not one of them.
	ErrDeviceLimit = errors.New("device limit reached")
	// ErrDeviceHoldsDelivered: forgetting the device would move the user's
	// delivered watermark back (it acked further than every other device).
	ErrDeviceHoldsDelivered = errors.New("device acked further than every other device")
)

// Group errors.
var (
	// ErrForbidden: the caller's role does not allow the operation.
	ErrForbidden = errors.New("not allowed")
	// ErrGroupFull: the group has reached its member limit.
	ErrGroupFull = errors.New("group is full")
	// ErrLastOwner: the operation would leave the group without an owner.
	ErrLastOwner = errors.New("a group needs an owner")
	// ErrAlreadyAnswered: the recipient answered this alert with another
	// option, or (first answer wins) another recipient answered first.
	ErrAlreadyAnswered = errors.New("already answered")
	// ErrNoSuchGroup: the group does not exist.
	ErrNoSuchGroup = errors.New("no such group")
	// ErrGroupExists: a group with that id exists.
	ErrGroupExists = errors.New("group exists")
	// ErrAlreadyCreated: a create again of a group the caller created
	// under that id and name (its answer was lost): the store returns the
	// group's members with it, and the handler answers as the first time.
	ErrAlreadyCreated = errors.New("group already created by this caller")
)

// HeadError is a position (a sync cursor, an ack) beyond the inbox head. It
// names the head and its epoch so the device can start over from them.
type HeadError struct {
	// Err is ErrCursorBeyondHead or ErrAckBeyondHead.
	Err error
	// Position is the cursor or ack the device sent.
	Position int64
	// Head and Epoch are the inbox's.
	Head  int64
	Epoch string
}

func (e *HeadError) Error() string {
	return fmt.Sprintf("%v: %d > head %d (epoch %s)", e.Err, e.Position, e.Head, e.Epoch)
}

func (e *HeadError) Unwrap() error { return e.Err }
