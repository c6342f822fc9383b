package im

import "time"

// EventType names one step of a message's path to a device.
type EventType string

// The steps a trace records, in the order a message usually takes them.
const (
	EventCreated             EventType = "created"              // the server accepted the request
	EventStored              EventType = "stored"               // durable in the conversation log
	EventInboxed             EventType = "inboxed"              // durable in a recipient inbox (User, Seq)
	EventPushed              EventType = "pushed"               // posted to a connection (Connection, Attempt)
	EventPushFailed          EventType = "push_failed"          // the post failed (Detail: "410" or the error)
	EventRedeliveryScheduled EventType = "redelivery_scheduled" // a check is due after Delay (Attempt)
	EventAcked               EventType = "acked"                // a device persisted it (User, Device, Seq)
	EventRead                EventType = "read"                 // the user read it
	EventAwaitingPull        EventType = "awaiting_pull"        // pushing stopped; the next sync delivers it
	EventAnswered            EventType = "answered"             // a recipient answered an alert (User, Device; Detail: the option)
	EventEscalated           EventType = "escalated"            // an unanswered alert was re-notified or reached a new step's user (User; Detail: tick and what)
	EventEscalationEnded     EventType = "escalation_ended"     // escalation stopped: answered, or its last step done (Detail)
	EventWoken               EventType = "woken"                // an offline device was sent an SNS wake-up (Device; Detail: platform, urgent) — not delivery
	EventWakeHeld            EventType = "wake_held"            // no wake-up: the user is in do-not-disturb and the message is not urgent
	EventWakeFailed          EventType = "wake_failed"          // the SNS publish failed (Device; Detail: the error)
)

// Event is one entry of a message's append-only trace.
type Event struct {
	Message    MessageID
	Type       EventType
	At         time.Time
	Function   string // the function that recorded it: send, redeliver, ack, alerts
	RequestID  string
	User       UserID
	Device     DeviceID
	Connection ConnectionID
	Seq        int64
	Attempt    int
	Delay      time.Duration
	Detail     string
}

// AckRange is one cumulative ack of a device: it persisted the user's inbox
// entries with From < seq ≤ UpTo. One record per ack, however many entries
// it covers; a 1:1 message's "acked" events are derived from it.
type AckRange struct {
	User       UserID
	Device     DeviceID
	Connection ConnectionID
	RequestID  string
	From, UpTo int64
	At         time.Time
	// Proven says the ack brought a valid proof (GroupProof) that its
	// group's log reaches UpTo: a group ack then need not read the log.
	Proven bool
}

// LastAck is what a device's cursor item keeps of the ack that last moved
// the cursor: its range; whether the cursor is still at its upTo (false:
// no range recorded up to the cursor); and whether an ack written again
// at it has since sent its receipts and events again (Inbox.MarkRetold),
// so that later ones need not.
type LastAck struct {
	AckRange
	Current, Retold bool
}

// AckResult is what one ack did: the device's previous cursor and whether
// it moved. TraceErr, when set, says the device's pending ack ranges could
// not be moved to the trace: the ack itself is stored, and its range with
// it, on the device's cursor item; a later ack moves them.
type AckResult struct {
	Old      int64
	Moved    bool
	TraceErr error
}

// Covers reports whether the ack covers inbox seq.
func (a AckRange) Covers(seq int64) bool { return a.From < seq && seq <= a.UpTo }

// Event is the "acked" event the ack records for the entry at seq of
// message id.
func (a AckRange) Event(id MessageID, seq int64) Event {
	return Event{Message: id, Type: EventAcked, At: a.At, Function: "ack", RequestID: a.RequestID,
		User: a.User, Device: a.Device, Connection: a.Connection, Seq: seq}
}
