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
