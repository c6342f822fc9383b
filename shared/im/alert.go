package im

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"slices"
	"strings"
	"time"
)

// App is an enterprise application allowed to post alerts over HTTPS.
type App struct {
	ID string // also the key prefix: sk_<id>_<secret>
	// KeyHash is the SHA-256 of the key's secret part; the key itself is
	// shown once at creation and never stored.
	KeyHash string
	// AllowUsers lists the users the app may message; "*" allows everyone.
	AllowUsers []string
	// AllowGroups lists the groups the app may message.
	AllowGroups []string
	// RatePerMinute bounds the app's posts per minute.
	RatePerMinute int
	Revoked       bool
	CreatedAt     time.Time
	// RevokedAt and KeyRotatedAt are when it was revoked and when its key
	// was last replaced (zero if never).
	RevokedAt, KeyRotatedAt time.Time
	// Webhook, when set, receives the app's status callbacks.
	Webhook *Webhook
}

// Sender is the user id alerts of the app are sent from.
func (a App) Sender() UserID { return UserID(AppSenderPrefix + a.ID) }

// Conversation is the conversation an app's alerts appear in.
func (a App) Conversation() ConversationID { return ConversationID("a:" + a.ID) }

// Allows reports whether the app may message user u.
func (a App) Allows(u UserID) bool {
	for _, allowed := range a.AllowUsers {
		if allowed == "*" || allowed == string(u) {
			return true
		}
	}
	return false
}

// AllowsGroup reports whether the app may message every member of group
// id (the id without "g:").
func (a App) AllowsGroup(id string) bool {
	for _, allowed := range a.AllowGroups {
		if allowed == "*" || allowed == id {
			return true
		}
	}
	return false
}

// HashSecret returns the stored form of a key secret.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Matches compares a presented secret with the stored hash in constant time.
func (a App) Matches(secret string) bool {
	return subtle.ConstantTimeCompare([]byte(HashSecret(secret)), []byte(a.KeyHash)) == 1
}

// ParseAppKey splits "sk_<appId>_<secret>" into its app id and secret.
func ParseAppKey(key string) (appID, secret string, ok bool) {
	rest, ok := strings.CutPrefix(key, "sk_")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], validID(rest[:i])
}

// ValidAppID reports whether id can name an app (the user-id alphabet).
func ValidAppID(id string) bool { return validID(id) && !strings.Contains(id, "_") }

// Alert is the record of one alert an app posted.
type Alert struct {
	Message    Message
	App        string
	Recipients []UserID
	Title      string
	Priority   string
	// Expiry, when positive, is how long the alert stays in recipient
	// inboxes (the DynamoDB TTL of its entries) if shorter than retention.
	Expiry time.Duration
	// Ack, when set, asks the recipients for an answer (issue 16).
	Ack *AckSpec
	// Escalation, when set (with a required Ack), goes on notifying while
	// nobody answers.
	Escalation *Escalation
	// Escalated are the users escalation steps added (they may answer).
	Escalated []UserID
	// Repeat, when set (an urgent alert without an escalation), pushes the
	// alert again to each recipient who has neither read nor answered it.
	Repeat *Repeat
}

// Repeat re-pushes an urgent alert every Every, Times times, to each
// recipient who has neither read nor answered it (issue 16: urgent until
// acknowledged or read).
type Repeat struct {
	Every time.Duration
	Times int
}

// DefaultUrgentRepeat is an urgent alert's repeat unless it says another:
// every 5 minutes for half an hour.
var DefaultUrgentRepeat = Repeat{Every: 5 * time.Minute, Times: 6}

// Escalation re-notifies an alert that requires an answer, and widens its
// audience, until someone answers: every Every, the recipients notified so
// far are pushed it again (Renotify times per stage), then the next step's
// users get it; after the last step's re-notifications it ends. Tick 0 is
// the post; tick t is stage t / (Renotify+1), round t % (Renotify+1):
// round 0 of stage s ≥ 1 notifies Steps[s-1], other rounds re-notify.
type Escalation struct {
	Every    time.Duration
	Renotify int
	Steps    [][]UserID
}

// Escalation bounds (docs/openapi.yaml).
const (
	MaxEscalationSteps    = 5
	MaxEscalationRenotify = 10
	MinEscalationEvery    = time.Second
	MaxEscalationEvery    = 24 * time.Hour // past SQS's 15-minute delay a tick's job hops (FanoutJob.NotBefore)
)

// EscalationEnded is the tick of an escalation that stopped (answered) or
// ran its last tick.
const EscalationEnded = 1 << 30

// LastTick is the last tick of e: after it, the escalation has ended.
func (e Escalation) LastTick() int { return (len(e.Steps)+1)*(e.Renotify+1) - 1 }

// At says what tick t does: the step whose users it notifies (0: none, a
// re-notification of those notified so far).
func (e Escalation) At(t int) (stage, round int) { return t / (e.Renotify + 1), t % (e.Renotify + 1) }

// Notified lists the users an alert has reached by the start of stage:
// its recipients and the users of the steps before.
func (a Alert) Notified(stage int) []UserID {
	out := slices.Clone(a.Recipients)
	if a.Escalation == nil {
		return out
	}
	for _, step := range a.Escalation.Steps[:min(stage, len(a.Escalation.Steps))] {
		for _, u := range step {
			if !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	return out
}

// IsRecipient reports whether u received a (a recipient, or escalated to).
func (a Alert) IsRecipient(u UserID) bool {
	return slices.Contains(a.Recipients, u) || slices.Contains(a.Escalated, u)
}

// AckSpec is the answer an alert asks of its recipients: a person's
// acknowledgement, distinct from a device's ack of delivery.
type AckSpec struct {
	// Required: the alert is not done until someone answers (escalation
	// stops at the first answer).
	Required bool
	// Options are the answers a recipient may give (e.g. ack, decline).
	Options []string
	// FirstWins: the first recipient's answer is the alert's; later
	// answers are refused (approvals).
	FirstWins bool
}

// DefaultAckOption is the only option of an ack that names none.
const DefaultAckOption = "ack"

// MaxAckOptions bounds the options of one alert.
const MaxAckOptions = 5

// Allows reports whether option is one of s's options.
func (s AckSpec) Allows(option string) bool { return slices.Contains(s.Options, option) }

// Answer is one recipient's answer to an alert.
type Answer struct {
	User   UserID
	Device DeviceID
	Option string
	At     time.Time
}

// Delivery is one recipient's progress, derived from the inbox, the device
// ack cursors (the truth) and the trace (the times).
type Delivery struct {
	User        UserID
	State       string // stored, pushed, delivered, read
	Seq         int64
	StoredAt    time.Time
	PushedAt    time.Time
	DeliveredAt time.Time
	ReadAt      time.Time
	Pushes      int
}

// AlertStart is the state of an Idempotency-Key once an alert is begun.
type AlertStart struct {
	Alert Alert
	// Response is the final response of an earlier, completed request with
	// the same key ("" when the request still has to be completed).
	Response string
	// Replayed is true when the key was used before (with the same payload).
	Replayed bool
}

// States in the order a recipient reaches them.
var states = []string{"stored", "pushed", "delivered", "read"}

// StatesUpTo returns every state up to and including state.
func StatesUpTo(state string) []string {
	for i, s := range states {
		if s == state {
			return states[:i+1]
		}
	}
	return nil
}

// Progress derives one recipient's delivery state: stored when the message
// is in the inbox at seq; delivered when any of the user's devices acked a
// seq at or beyond it (the ack cursor is the truth, so states only move
// forward); pushed when the trace shows a push. Times come from the trace,
// falling back to the device cursor's time for delivery.
func Progress(d Delivery, seq int64, devices map[DeviceID]DeviceCursor, events []Event) Delivery {
	d.Seq = seq
	if seq == 0 {
		// Accepted, not yet in the inbox: a group alert's fan-out job
		// has not reached this recipient yet.
		d.State = "queued"
		return d
	}
	d.State = "stored"
	for _, e := range events {
		if e.User != d.User {
			continue
		}
		switch e.Type {
		case EventInboxed:
			if d.StoredAt.IsZero() {
				d.StoredAt = e.At
			}
		case EventPushed:
			d.Pushes++
			if d.PushedAt.IsZero() {
				d.PushedAt = e.At
			}
		case EventAcked:
			if d.DeliveredAt.IsZero() {
				d.DeliveredAt = e.At
			}
		case EventRead:
			if d.ReadAt.IsZero() {
				d.ReadAt = e.At
			}
		}
	}
	if d.Pushes > 0 {
		d.State = "pushed"
	}
	for _, c := range devices {
		if c.Acked >= seq {
			d.State = "delivered"
			if d.DeliveredAt.IsZero() {
				d.DeliveredAt = c.AckedAt
			}
		}
	}
	if !d.ReadAt.IsZero() {
		d.State = "read"
	}
	return d
}
