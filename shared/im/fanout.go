package im

import "time"

// FanoutKind says what a fan-out job does.
type FanoutKind string

// Fan-out job kinds.
const (
	// FanoutMessages brings members' inboxes up to a group's convSeq UpTo.
	FanoutMessages FanoutKind = "m"
	// FanoutPresence pushes a user's visible presence to their 1:1 peers.
	FanoutPresence FanoutKind = "p"
	// FanoutAlert puts an accepted alert into the inboxes of Members (one
	// batch of its recipients) and pushes it.
	FanoutAlert FanoutKind = "a"
	// FanoutEscalate runs tick Tick of alert Alert's escalation.
	FanoutEscalate FanoutKind = "e"
	// FanoutCallback brings alert Alert's status callbacks up to date
	// (User's delivery state only, when set):
	// records the state changes not yet recorded and delivers those due.
	FanoutCallback FanoutKind = "c"
	// FanoutWake wakes User's devices registered for wake-ups (only Device
	// when set) about inbox entry UpTo (message Alert of Conversation), on
	// the wake queue.
	FanoutWake FanoutKind = "w"
	// FanoutRepeat runs re-push Tick of urgent alert Alert (its Repeat).
	FanoutRepeat FanoutKind = "r"
	// FanoutCoveredAlerts enqueues a FanoutCallback job for each alert
	// among User's inbox entries (From, UpTo] — of Conversation only, when
	// set — a page at a time: the part of an ack's range beyond the
	// entries the ack read itself (a catch-up ack of a device long
	// offline), or of a read's beyond those the read looked through (a
	// read of an app's alerts long after the last: the job names the
	// app's conversation, and traces each alert read by Device).
	FanoutCoveredAlerts FanoutKind = "k"
)

// FanoutJob is one message on the fan-out queue.
type FanoutJob struct {
	Kind FanoutKind
	// Conversation and UpTo: fill every member's inbox with the group's
	// messages up to convSeq UpTo (each member from where their inbox stands).
	Conversation ConversationID
	UpTo         int64
	// Members, when set, restricts the job to these users (one batch of a
	// large group); empty means "every member: split into batches first".
	Members []UserID
	// User is whose presence a FanoutPresence job pushes.
	User UserID
	// Alert is the message id of a FanoutAlert job's alert.
	Alert MessageID
	// Tick is the escalation tick of a FanoutEscalate job, the re-push of
	// a FanoutRepeat job.
	Tick int
	// Device and Urgent: the one device a FanoutWake job wakes ("" all of
	// the user's), and whether the entry is an urgent alert.
	Device DeviceID
	Urgent bool
	// Unconnected: a FanoutWake job wakes only those of the user's
	// registered devices that have no connection (an urgent alert pushed
	// to another device of the user that is connected).
	Unconnected bool
	// Reads marks a batch of a read-diffused group's job: push the
	// messages (From, UpTo] to the members' connected devices; nothing is
	// written to their inboxes.
	Reads bool
	From  int64
	// Online, when set, is a read-diffused group's batch of connections
	// (from the group's online index) each due every message of (From,
	// UpTo] pushed: the batch pushes to them without reading the group.
	Online []Connection
	// NotBefore, when set, is when the job is due: a job due later than
	// one SQS delay (15 minutes) reaches it in hops, each re-enqueued with
	// the delay left.
	NotBefore time.Time
}

// DefaultFanoutBatch is how many members one fan-out invocation fills.
const DefaultFanoutBatch = 50

// Batches splits members into jobs of at most size members each.
func (j FanoutJob) Batches(members []UserID, size int) []FanoutJob {
	if size < 1 {
		size = DefaultFanoutBatch
	}
	var out []FanoutJob
	for start := 0; start < len(members); start += size {
		b := j
		b.Members = members[start:min(start+size, len(members))]
		out = append(out, b)
	}
	return out
}
