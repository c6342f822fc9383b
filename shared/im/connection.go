package im

import (
	"slices"
	"strings"
	"time"
)

// Connection is one live (or recently live) WebSocket of a user's device.
// A connection record is a routing hint, never proof that the socket lives.
type Connection struct {
	User        UserID
	ID          ConnectionID
	Device      DeviceID
	ConnectedAt time.Time
	LastSeenAt  time.Time
}

// DefaultMaxConnections is how many connections one user may hold at once
// unless configured otherwise: ten devices' worth. Opening one more closes
// the oldest.
const DefaultMaxConnections = 10

// DefaultMaxDevices is how many devices one user may have unless configured
// otherwise: a device id the user has not connected with before is
// refused beyond it (ErrDeviceLimit) until an operator forgets one.
const DefaultMaxDevices = 20

// Oldest returns the connections of conns beyond the newest max, oldest
// first (by ConnectedAt, then id), never keep: those to close so that at
// most max remain, keep among them.
func Oldest(conns []Connection, max int, keep ConnectionID) []Connection {
	if max < 1 || len(conns) <= max {
		return nil
	}
	sorted := slices.Clone(conns)
	slices.SortFunc(sorted, func(a, b Connection) int {
		if c := a.ConnectedAt.Compare(b.ConnectedAt); c != 0 {
			return c
		}
		return strings.Compare(string(a.ID), string(b.ID))
	})
	sorted = slices.DeleteFunc(sorted, func(c Connection) bool { return c.ID == keep })
	n := len(sorted) - (max - 1) // keep itself is the max-th
	if n <= 0 {
		return nil
	}
	return sorted[:n]
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
	// RegisteredAt is when the device first connected (zero for a device
	// from before the device limit).
	RegisteredAt time.Time
}
