package im

import "time"

// Connection is one live (or recently live) WebSocket of a user's device.
// A connection record is a routing hint, never proof that the socket lives.
type Connection struct {
	User        UserID
	ID          ConnectionID
	Device      DeviceID
	ConnectedAt time.Time
	LastSeenAt  time.Time
}

// ConnectionTTL is how long a connection record outlives its last sign of
// life; API Gateway closes any connection after 2 h.
const ConnectionTTL = 2*time.Hour + 10*time.Minute

// DeviceCursor is what the server knows of one device's position in its inbox.
type DeviceCursor struct {
	// Acked is the highest seq the device acknowledged as persisted.
	Acked int64
	// AckedAt is when Acked last moved.
	AckedAt time.Time
	// SyncNext is the cursor a continuation sync page would start from, or 0
	// when the device's last sync was complete.
	SyncNext int64
}
