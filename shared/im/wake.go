package im

import "time"

// Offline push hand-off (issue 16): a device with no live connection is
// woken through Amazon SNS mobile push (APNs, FCM). A wake-up carries ids
// only, never a body, and is never counted as delivery: the device
// connects and syncs, and its ack is the delivery.

// Push platforms a device may register for wake-ups.
const (
	PlatformAPNS        = "apns"
	PlatformAPNSSandbox = "apns_sandbox"
	PlatformFCM         = "fcm"
)

// ValidPlatform reports whether p names a push platform.
func ValidPlatform(p string) bool {
	return p == PlatformAPNS || p == PlatformAPNSSandbox || p == PlatformFCM
}

// PushEndpoint is one device's registration for wake-ups: its platform,
// its token there and the SNS endpoint made for it.
type PushEndpoint struct {
	Device   DeviceID
	Platform string
	Token    string
	Endpoint string
	// WokeAt is when the device was last woken (one wake-up per window).
	WokeAt time.Time
}

// Wake is what a wake-up says: which entry is waiting, and whether it is
// urgent (it then reaches a user in do-not-disturb).
type Wake struct {
	Message      MessageID
	Conversation ConversationID
	Seq          int64
	Urgent       bool
}

// DefaultWakeWindow is the shortest time between two wake-ups of one
// device: a burst of messages to an offline phone is one notification.
const DefaultWakeWindow = time.Minute
