package wire

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/signet-im/signet/shared/im"
)

// Code is a wire error code. Codes are append-only.
type Code string

// Error codes.
const (
	// CodeBadRequest: the frame is malformed or misses a required field.
	CodeBadRequest Code = "bad_request"
	// CodeUnknownAction: the frame's action names no route.
	CodeUnknownAction Code = "unknown_action"
	// CodeTooLarge: the body or frame exceeds a size limit.
	CodeTooLarge Code = "too_large"
	// CodeForbidden: the caller may not act on this conversation or inbox.
	CodeForbidden Code = "forbidden"
	// CodeRateLimited: try again after retryAfterMs.
	CodeRateLimited Code = "rate_limited"
	// CodeInternal: the server failed; the request may be retried as is.
	CodeInternal Code = "internal"
	// CodeResync: the device's cursor or ack is beyond the inbox head (the
	// server's data was reset, restored or re-created): the frame carries
	// the head and epoch; forget the local position and sync from 0.
	CodeResync Code = "resync"
	// CodeConnectionLimit: pushed to a connection the server is about to
	// close because its user opened more than the per-user connection limit
	// (the oldest go). Do not reconnect at once: another device of the
	// user would be closed in turn.
	CodeConnectionLimit Code = "connection_limit"
	// CodeUnauthorized: the connection's token has expired; the server
	// closes the connection. Reconnect with a fresh token.
	CodeUnauthorized Code = "unauthorized"
	// CodeRateLimitIgnored: the connection kept sending an action after it
	// was refused rate_limited, and the server closes it; new connections
	// of the user are refused (HTTP 429) for up to a minute. Reconnect after
	// retryAfterMs, and wait as rate_limited asks.
	CodeRateLimitIgnored Code = "rate_limit_ignored"
	// CodeNotFound: the resource asked for does not exist (HTTP API).
	CodeNotFound Code = "not_found"
	// CodeConflict: an Idempotency-Key or a name was already used for
	// something else, or what is asked conflicts with the state of what it
	// changes: a device still connected (HTTP API).
	CodeConflict Code = "conflict"
)

// httpStatus is the HTTP status of every code: the alerts API answers
// with the same codes and messages as the WebSocket API (ProblemOf), in
// the status its code names.
var httpStatus = map[Code]int{
	CodeBadRequest:       http.StatusBadRequest,
	CodeUnknownAction:    http.StatusNotFound,
	CodeTooLarge:         http.StatusRequestEntityTooLarge,
	CodeForbidden:        http.StatusForbidden,
	CodeRateLimited:      http.StatusTooManyRequests,
	CodeInternal:         http.StatusInternalServerError,
	CodeResync:           http.StatusConflict,
	CodeConnectionLimit:  http.StatusTooManyRequests,
	CodeUnauthorized:     http.StatusUnauthorized,
	CodeRateLimitIgnored: http.StatusTooManyRequests,
	CodeNotFound:         http.StatusNotFound,
	CodeConflict:         http.StatusConflict,
}

// HTTPStatus returns the HTTP status of code (500 for a code without one,
// which TestEveryCodeHasAnHTTPStatus keeps from existing).
func HTTPStatus(code Code) int {
	if s, ok := httpStatus[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is the server frame {"type":"error",...}.
type Error struct {
	// Type is "error".
	Type string `json:"type"`
	// Code is one of the codes above.
	Code Code `json:"code"`
	// Message says what was wrong, for people.
	Message string `json:"message"`
	// RequestID identifies the request in the server's logs.
	RequestID string `json:"requestId"`
	// ClientMsgID is set when the error answers a send.
	ClientMsgID string `json:"clientMsgId,omitempty"`
	// Ref echoes the ref of the request it answers, when that had one.
	Ref string `json:"ref,omitempty"`
	// RetryAfterMs is set for rate_limited: when to try again.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
	// Head and Epoch are set for resync: the inbox's head and epoch.
	Head  *int64 `json:"head,omitempty"`
	Epoch string `json:"epoch,omitempty"`
}

// Problem is an error that already knows its wire code and client-safe message.
type Problem struct {
	Code         Code
	Msg          string
	RetryAfterMs int64
}

func (p *Problem) Error() string { return string(p.Code) + ": " + p.Msg }

// Problemf returns a Problem with a formatted message.
func Problemf(code Code, format string, args ...any) *Problem {
	return &Problem{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// RateLimited returns a rate_limited problem asking to retry after ms milliseconds.
func RateLimited(msg string, ms int64) *Problem {
	return &Problem{Code: CodeRateLimited, Msg: msg, RetryAfterMs: ms}
}

// domainCodes is the one table mapping domain errors to wire codes — and
// through the codes to HTTP statuses (HTTPStatus), for both APIs. Three
// domain errors are not in it, on purpose: im.ErrNotFound, im.ErrGone and
// im.ErrEndpointDisabled are conditions the handlers act on where they
// arise (a missing item, a closed connection, a device token APNs or FCM
// refused); one that escapes is a server fault (internal, which clients
// retry), never a "not found" a client would take as final.
var domainCodes = []struct {
	err  error
	code Code
	msg  string
}{
	{im.ErrNotMember, CodeForbidden, "you are not a member of this conversation"},
	{im.ErrMalformedConversation, CodeBadRequest, "conversationId must be d:<a>:<b> with the two user ids sorted"},
	{im.ErrNotDirect, CodeBadRequest, "conversationId must name a 1:1 conversation (d:<a>:<b>)"},
	{im.ErrClientMsgIDReused, CodeBadRequest, "clientMsgId was already used for a different message"},
	{im.ErrAckBeyondHead, CodeResync, "upTo is beyond the inbox head: the inbox's sequence restarted; sync from 0"},
	{im.ErrCursorBeyondHead, CodeResync, "cursor is beyond the inbox head: the inbox's sequence restarted; sync from 0"},
	{im.ErrReadBeyondHead, CodeBadRequest, "upTo is beyond the conversation's last message"},
	{im.ErrContention, CodeRateLimited, "the inbox is busy; retry with the same clientMsgId"},
	{im.ErrForbidden, CodeForbidden, "your role in this group does not allow that"},
	{im.ErrGroupFull, CodeBadRequest, "the group has reached its member limit"},
	{im.ErrLastOwner, CodeBadRequest, "a group needs at least one owner; make someone else owner first"},
	{im.ErrNoSuchGroup, CodeBadRequest, "no such group"},
	{im.ErrGroupExists, CodeBadRequest, "a group with this conversationId exists"},
	{im.ErrRateLimited, CodeRateLimited, "too many requests; retry later"},
	{im.ErrIdempotencyConflict, CodeConflict, "the Idempotency-Key was used with a different payload"},
	{im.ErrAlreadyAnswered, CodeConflict, "this alert was already answered"},
	{im.ErrAppExists, CodeConflict, "an app with this name exists"},
	{im.ErrDeviceLimit, CodeConflict, "the user has the most devices allowed; an operator must forget one first"},
	{im.ErrDeviceHoldsDelivered, CodeConflict, "the device acked further than the user's other devices; forget it once another has caught up"},
}

// ProblemOf translates any error into a client-safe Problem. Unknown errors
// become internal with a generic message: their text never reaches a client.
func ProblemOf(err error) *Problem {
	if p, ok := errors.AsType[*Problem](err); ok {
		return p
	}
	for _, d := range domainCodes {
		if errors.Is(err, d.err) {
			p := &Problem{Code: d.code, Msg: d.msg}
			if d.code == CodeRateLimited {
				p.RetryAfterMs = 250
			}
			return p
		}
	}
	return &Problem{Code: CodeInternal, Msg: "internal error; retry later"}
}

// NewError builds the error frame for err.
func NewError(err error, requestID, clientMsgID string) Error {
	p := ProblemOf(err)
	e := Error{Type: TypeError, Code: p.Code, Message: p.Msg, RequestID: requestID, ClientMsgID: clientMsgID, RetryAfterMs: p.RetryAfterMs}
	if h, ok := errors.AsType[*im.HeadError](err); ok {
		e.Head, e.Epoch = &h.Head, h.Epoch
	}
	return e
}
