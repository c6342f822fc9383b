// Package ratelimit bounds what one user may do per window, per action
// (send, group changes, queries, presence), so that no user can spend the
// capacity everyone shares.
//
// It costs no DynamoDB call on the happy path. Each Lambda container counts
// a user's frames in memory; only every Flush-th frame of a user in a
// window does it add its count to the user's global counter (one UpdateItem
// returning the new total). A container that sees the total beyond the
// limit refuses that user until the window ends. So a user within the limit
// costs nothing per frame, and a user beyond it is stopped after at most
// Flush−1 extra frames per warm container (and at once, without any call,
// once one container alone has counted more than the limit).
//
// A refusal tells the client how long to wait. A connection that keeps
// sending the refused action regardless (EjectAfter frames more than Grace
// after its own first refusal), or a user whose connections together do
// (UserEjectAfter frames more than Grace after the user's first refusal),
// is ignoring the limit: Refused reports it, and the handler closes that
// connection and uses Penalize to refuse the user's new connections
// (action Connect) for the rest of the connect window, so that a flood of
// refusals cannot spend the capacity everyone shares either.
package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// Action names what is limited.
type Action string

// Limited actions.
const (
	Send     Action = "send"     // messages (1:1 and group)
	Group    Action = "group"    // group create, add, remove, leave, role, members
	Query    Action = "query"    // history, receipts, summary, presence.query
	Presence Action = "presence" // presence status changes
	Connect  Action = "connect"  // new WebSocket connections ($connect)
)

// Grace is how long after a connection's first refusal in a window its
// frames of the refused action still count as in flight (sent before the
// refusal arrived) rather than as ignoring it.
const Grace = 5 * time.Second

// EjectAfter is how many frames of a refused action a connection sends
// more than Grace after its own first refusal that make it one that
// ignores the limit. Each connection is told in its turn: a user's other
// device, which comes online after the first was refused and sends its
// outbox (a frame per conversation at once), is not ignoring anything.
const EjectAfter = 10

// UserEjectAfter is how many frames of a refused action all of a user's
// connections together send, more than Grace after the user's first
// refusal, that make the user one who ignores the limit: a client that
// opens a new connection every few frames, each with a grace of its own,
// is caught too.
const UserEjectAfter = 100

// everyCall names the actions whose every call consults the global counter
// (no container allowance): a $connect already costs DynamoDB writes, and a
// penalty (Penalize) must stop the next connection, in any container.
var everyCall = map[Action]bool{Connect: true}

// Limit is a budget: at most Per per Window.
type Limit struct {
	Per    int
	Window time.Duration
}

func (l Limit) String() string { return fmt.Sprintf("%d/%s", l.Per, l.Window) }

// Defaults are the limits unless configured otherwise (SIGNET_RATE_LIMITS).
var Defaults = map[Action]Limit{
	Send:     {Per: 120, Window: time.Minute},
	Group:    {Per: 60, Window: time.Minute},
	Query:    {Per: 300, Window: time.Minute},
	Presence: {Per: 60, Window: time.Minute},
	Connect:  {Per: 60, Window: time.Minute},
}

// DefaultFlush is how many frames of a user a container counts before it
// adds them to the global counter.
const DefaultFlush = 8

// Parse reads "send=120/1m,group=60/1m": any action not named keeps its
// default; "off" as the whole value turns every limit off (nil map).
func Parse(s string) (map[Action]Limit, error) {
	out := map[Action]Limit{}
	for a, l := range Defaults {
		out[a] = l
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	if s == "off" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		name, spec, ok := strings.Cut(strings.TrimSpace(part), "=")
		per, window, ok2 := strings.Cut(spec, "/")
		a := Action(name)
		if _, known := Defaults[a]; !ok || !ok2 || !known {
			return nil, fmt.Errorf("rate limit %q: want action=N/window with action one of send, group, query, presence, connect", part)
		}
		n, err := strconv.Atoi(per)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("rate limit %q: N must be a positive integer", part)
		}
		d, err := time.ParseDuration(window)
		if err != nil || d < time.Second || d > time.Hour {
			return nil, fmt.Errorf("rate limit %q: window must be a duration from 1s to 1h", part)
		}
		out[a] = Limit{Per: n, Window: d}
	}
	return out, nil
}

// Counter is the global count of a user's frames per action and window.
type Counter interface {
	// AddUsage adds n to the counter named key of user u (created if
	// absent, kept until expires) and returns the new total.
	AddUsage(ctx context.Context, u im.UserID, key string, n int64, expires time.Time) (int64, error)
}

// Limiter applies Limits to the users of one container. The zero Limits
// allow everything. Safe for concurrent use.
type Limiter struct {
	Limits  map[Action]Limit
	Counter Counter // nil: each container enforces the limit alone
	Flush   int     // 0: DefaultFlush
	// OnError is told when the global counter fails (the frame is admitted).
	OnError func(error)

	mu        sync.Mutex
	counts    map[key]*count
	lastSweep time.Time
}

type key struct {
	user   im.UserID
	action Action
	window int64 // window start, Unix ms
}

type count struct {
	local     int                 // frames this container admitted in the window
	unflushed int                 // of those, not yet added to the global counter
	blocked   bool                // the user is beyond the limit for the rest of the window
	user      refusals            // the user's refusals in the window
	conns     map[string]refusals // each connection's
	penalized bool                // Penalize has spent the budget globally
}

// refusals are the frames refused in a window: when the first was, and
// how many came more than Grace after it.
type refusals struct {
	first   time.Time
	ignored int
}

// add records a refusal at now.
func (r *refusals) add(now time.Time) {
	switch {
	case r.first.IsZero():
		r.first = now
	case now.Sub(r.first) > Grace:
		r.ignored++
	}
}

// Allow admits one frame of action by u at now, or returns how long until
// the window ends and the user may try again (ok false).
func (l *Limiter) Allow(ctx context.Context, u im.UserID, action Action, now time.Time) (retryAfter time.Duration, ok bool) {
	lim, limited := l.Limits[action]
	if !limited || lim.Per <= 0 || lim.Window <= 0 {
		return 0, true
	}
	start := now.Truncate(lim.Window)
	end := start.Add(lim.Window)
	k := key{u, action, start.UnixMilli()}
	flushAt := l.Flush
	if flushAt <= 0 {
		flushAt = DefaultFlush
	}

	l.mu.Lock()
	if l.counts[k] == nil {
		l.sweep(now)
	}
	c := l.countOf(k)
	if c.blocked || c.local >= lim.Per {
		c.blocked = true
		l.mu.Unlock()
		return end.Sub(now), false
	}
	c.local++
	c.unflushed++
	var flush int
	if (c.unflushed >= flushAt || everyCall[action]) && l.Counter != nil {
		flush, c.unflushed = c.unflushed, 0
	}
	l.mu.Unlock()
	if flush == 0 {
		return 0, true
	}

	name := fmt.Sprintf("%s#%d", action, k.window)
	total, err := l.Counter.AddUsage(ctx, u, name, int64(flush), end.Add(time.Minute))
	if err != nil {
		if l.OnError != nil {
			l.OnError(fmt.Errorf("rate counter of %s %s: %w", u, name, err))
		}
		return 0, true // fail open: a counter outage must not stop messaging
	}
	if total > int64(lim.Per) {
		l.mu.Lock()
		c.blocked = true
		l.mu.Unlock()
		return end.Sub(now), false
	}
	return 0, true
}

// UsageReader is a Counter that can also read a counter without adding
// to it (Check).
type UsageReader interface {
	// Usage returns the total of the counter named key of user u (0 if
	// absent).
	Usage(ctx context.Context, u im.UserID, key string) (int64, error)
}

// Check reports whether Allow would refuse u's next frame of action at
// now, without counting one: refused in this container for the rest of
// the window, or (for an action whose every call consults the global
// counter, such as Connect, and a Counter that is a UsageReader) at or
// beyond the limit in the global counter. It returns how long until the
// window ends when it would. A counter that cannot be read is reported,
// never taken for a refusal.
func (l *Limiter) Check(ctx context.Context, u im.UserID, action Action, now time.Time) (retryAfter time.Duration, ok bool, err error) {
	lim, limited := l.Limits[action]
	if !limited || lim.Per <= 0 || lim.Window <= 0 {
		return 0, true, nil
	}
	start := now.Truncate(lim.Window)
	end := start.Add(lim.Window)
	k := key{u, action, start.UnixMilli()}
	l.mu.Lock()
	c := l.counts[k]
	blocked := c != nil && (c.blocked || c.local >= lim.Per)
	l.mu.Unlock()
	if blocked {
		return end.Sub(now), false, nil
	}
	r, readable := l.Counter.(UsageReader)
	if !everyCall[action] || !readable {
		return 0, true, nil
	}
	total, err := r.Usage(ctx, u, fmt.Sprintf("%s#%d", action, k.window))
	if err != nil {
		return 0, true, fmt.Errorf("rate counter of %s %s: %w", u, action, err)
	}
	if total >= int64(lim.Per) {
		return end.Sub(now), false, nil
	}
	return 0, true, nil
}

// Refused records that a frame of action that Allow refused u at now came
// on connection conn, and reports whether conn, or u across its
// connections, has kept sending it regardless (EjectAfter and
// UserEjectAfter), in this container. A client that waits as it is told
// (retryAfterMs) never has.
func (l *Limiter) Refused(u im.UserID, conn string, action Action, now time.Time) (ignoring bool) {
	lim, limited := l.Limits[action]
	if !limited || lim.Window <= 0 {
		return false
	}
	k := key{u, action, now.Truncate(lim.Window).UnixMilli()}
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.countOf(k)
	if c.conns == nil {
		c.conns = map[string]refusals{}
	}
	r := c.conns[conn]
	r.add(now)
	c.conns[conn] = r
	c.user.add(now)
	return r.ignored >= EjectAfter || c.user.ignored >= UserEjectAfter
}

// Penalize spends u's whole budget of action for the current window, in
// this container and in the global counter, so that every container refuses
// the action until the window ends (for Connect, at the next $connect).
// Without a limit on action it does nothing; a second call in the same
// window and container makes no counter call.
func (l *Limiter) Penalize(ctx context.Context, u im.UserID, action Action, now time.Time) error {
	lim, limited := l.Limits[action]
	if !limited || lim.Per <= 0 || lim.Window <= 0 {
		return nil
	}
	start := now.Truncate(lim.Window)
	k := key{u, action, start.UnixMilli()}
	l.mu.Lock()
	c := l.countOf(k)
	c.blocked = true
	again := c.penalized
	c.penalized = true
	l.mu.Unlock()
	if l.Counter == nil || again {
		// Once per window and container: every later frame of an
		// ignoring user would otherwise cost a write.
		return nil
	}
	_, err := l.Counter.AddUsage(ctx, u, fmt.Sprintf("%s#%d", action, k.window), int64(lim.Per), start.Add(lim.Window).Add(time.Minute))
	return err
}

// countOf returns k's count, created if absent (called with l.mu held).
func (l *Limiter) countOf(k key) *count {
	if l.counts == nil {
		l.counts = map[key]*count{}
	}
	c := l.counts[k]
	if c == nil {
		c = &count{}
		l.counts[k] = c
	}
	return c
}

// sweep drops counts of windows that have ended, at most once a second
// (called with l.mu held when a count is created: the map holds only live
// windows, and stays as small as the users active in them).
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Second {
		return
	}
	l.lastSweep = now
	for k := range l.counts {
		if lim := l.Limits[k.action]; time.UnixMilli(k.window).Add(lim.Window).Before(now) {
			delete(l.counts, k)
		}
	}
}
