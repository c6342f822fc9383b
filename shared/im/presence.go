package im

import "time"

// Status is the display state a user chooses.
type Status string

// Display states, and StatusOffline, which only others see.
const (
	StatusOnline    Status = "online"
	StatusAway      Status = "away"
	StatusDND       Status = "dnd"
	StatusInvisible Status = "invisible"
	// StatusOffline is what others see of a user with no live connection,
	// or an invisible one. Users cannot choose it.
	StatusOffline Status = "offline"
)

// Settable reports whether a user may choose s.
func (s Status) Settable() bool {
	return s == StatusOnline || s == StatusAway || s == StatusDND || s == StatusInvisible
}

// DefaultPresenceStale is how long a connection record counts as live after
// its last sign of life (connect, ping or any frame that touches it). The
// SDK pings every 24 minutes (every third keep-alive tick of 8; the others
// are keepalive frames API Gateway answers without touching the record). A
// connection that goes away ends with $disconnect, which removes its record
// at once: staleness only covers a $disconnect that failed.
const DefaultPresenceStale = 27 * time.Minute

// DefaultPresenceDebounce is how long a change of visible presence waits
// before it is pushed to peers, so that flapping connections push once.
const DefaultPresenceDebounce = 2 * time.Second

// Presence is what the server knows of a user's presence.
type Presence struct {
	User UserID
	// Chosen is the display state the user set ("" means online).
	Chosen Status
	// LastSeen is the latest sign of life of any of the user's connections.
	LastSeen time.Time
	// Live reports whether at least one connection is live.
	Live bool
}

// Visible is what other users see: offline without a live connection or
// when invisible, else the chosen state.
func (p Presence) Visible() Status {
	if !p.Live || p.Chosen == StatusInvisible {
		return StatusOffline
	}
	if p.Chosen == "" {
		return StatusOnline
	}
	return p.Chosen
}

// LivePresence derives presence from a user's connection records: live iff
// one was seen after now-stale.
func LivePresence(u UserID, chosen Status, conns []Connection, now time.Time, stale time.Duration) Presence {
	p := Presence{User: u, Chosen: chosen}
	for _, c := range conns {
		seen := c.LastSeenAt
		if c.ConnectedAt.After(seen) {
			seen = c.ConnectedAt
		}
		if seen.After(p.LastSeen) {
			p.LastSeen = seen
		}
	}
	p.Live = !p.LastSeen.IsZero() && p.LastSeen.After(now.Add(-stale))
	return p
}
