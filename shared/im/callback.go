package im

import (
	"strings"
	"time"
)

// Webhook is where an app wants its alerts' status callbacks (issue 16):
// every recipient state change is POSTed to URL (or sent to its SQS
// queue), signed with Secret (HMAC-SHA256; package webhook).
type Webhook struct {
	// URL is an https endpoint, or, for an app that prefers AWS-native
	// delivery, an SQS queue URL (Queue true): the events are sent to that
	// queue with the same id, timestamp and signature as message attributes.
	URL   string
	Queue bool
	// Secret signs each delivery. It is shown once, when the webhook is
	// set, and stored as it is: a signature needs the key itself.
	Secret string
	SetAt  time.Time
}

// CallbackType is the kind of state change a callback event reports.
type CallbackType string

// Callback event types: a recipient's state changes, and the alert's end.
const (
	CallbackDelivered CallbackType = "delivered" // a device of User has it (acked after persisting it)
	CallbackRead      CallbackType = "read"      // User read it
	CallbackAnswered  CallbackType = "answered"  // User acknowledged it (Answer: the option)
	CallbackEscalated CallbackType = "escalated" // an escalation step added User
	CallbackExpired   CallbackType = "expired"   // escalation ran its last step and nobody answered (no User)
)

// Callback event delivery states.
const (
	CallbackPending = "pending"   // not yet delivered; tried again at NextAt
	CallbackDone    = "delivered" // the endpoint answered 2xx
	CallbackDead    = "dead"      // every try failed; replayable by the app
)

// CallbackEvent is one state change of an app's alert, delivered to the
// app's webhook at least once. Its ID is stable — the same change always
// has the same id — so a receiver dedupes on it.
type CallbackEvent struct {
	ID      string
	App     string
	Type    CallbackType
	Message MessageID
	User    UserID
	// At is when the change happened (from the trace, the ack cursor or
	// the answer); Answer the option of an answered event; Detail says
	// more (an escalation's tick and step).
	At     time.Time
	Answer string
	Detail string
	// Delivery: State (pending, delivered, dead), tries so far, when the
	// next is due, the last failure, when it was delivered.
	State       string
	Attempts    int
	NextAt      time.Time
	LastError   string
	DeliveredAt time.Time
	CreatedAt   time.Time
}

// CallbackEventID is the stable id of the change typ of message id for
// user u ("" for an alert-wide change).
func CallbackEventID(id MessageID, typ CallbackType, u UserID) string {
	if u == "" {
		return string(id) + ":" + string(typ)
	}
	return string(id) + ":" + string(typ) + ":" + string(u)
}

// ParseCallbackEventID splits an event id into its message and the rest;
// ok is false when it is not one.
func ParseCallbackEventID(s string) (MessageID, bool) {
	id, _, ok := strings.Cut(s, ":")
	return MessageID(id), ok && len(id) > 0 && len(s) <= 200
}

// DefaultCallbackBackoff is the wait before each retry of a failed
// callback: 9 tries over about 15 hours, then the event is dead.
var DefaultCallbackBackoff = []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour}
