package client

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
)

// dropPusher loses every push to user's connections whose frame type is
// in drop, as a network that eats frames would. Other frames go through.
type dropPusher struct {
	handler.Pusher
	stack   *atomic.Pointer[devstack.Stack] // set once the stack runs
	user    string
	drop    []string
	dropped *atomic.Int64
}

func (p *dropPusher) Push(ctx context.Context, id im.ConnectionID, data []byte) error {
	if st := p.stack.Load(); st != nil && st.Gateway.Context(string(id))[handler.ContextUser] == p.user {
		for _, typ := range p.drop {
			if bytes.HasPrefix(data, []byte(`{"type":"`+typ+`"`)) {
				p.dropped.Add(1)
				return nil
			}
		}
	}
	return p.Pusher.Push(ctx, id, data)
}

// dropStack starts a stack whose pushes of the given frame types to user are
// all lost, and returns the counter of dropped frames.
func dropStack(t *testing.T, user string, drop ...string) (*devstack.Stack, *atomic.Int64) {
	t.Helper()
	var (
		stack   atomic.Pointer[devstack.Stack]
		dropped atomic.Int64
	)
	st := startStackWith(t, devstack.Options{Configure: func(_ string, h *handler.Deps) {
		if h.Pusher != nil {
			h.Pusher = &dropPusher{Pusher: h.Pusher, stack: &stack, user: user, drop: drop, dropped: &dropped}
		}
	}})
	stack.Store(st)
	return st, &dropped
}

// connectCount counts the client's "connected" log lines: each is a
// (re)connect.
type connectCount struct {
	slog.Handler
	n *atomic.Int64
}

func (c connectCount) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "connected" {
		c.n.Add(1)
	}
	return nil
}

func (c connectCount) Enabled(context.Context, slog.Level) bool { return true }
func (c connectCount) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c connectCount) WithGroup(string) slog.Handler            { return c }

// A connected device that misses every push of a message and all its
// re-pushes is told at the end of redelivery (notify) and syncs: it
// catches up without a reconnect (DESIGN invariant 12).
func TestMissedPushesAreCaughtUpByNotifyWithoutReconnect(t *testing.T) {
	t.Parallel()
	st, dropped := dropStack(t, "bob", "message")
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	var connects atomic.Int64
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.Log = slog.New(connectCount{n: &connects})
		o.PingInterval = time.Hour // only notify can tell it
	})
	waitFor(t, "bob connected", bob.Connected)
	ids := sendN(t, alice, "bob", 0, 3)
	got := collect(t, bob, 3, 3*quick.Window()+30*time.Second)
	for i, m := range got {
		if m.MessageID != ids[i] {
			t.Fatalf("message %d is %s, want %s", i, m.MessageID, ids[i])
		}
	}
	// At least one message used up its redelivery before the device caught up.
	if dropped.Load() < int64(quick.MaxRetries()+1) {
		t.Fatalf("only %d pushes were dropped: the test did not exhaust a redelivery", dropped.Load())
	}
	if n := connects.Load(); n != 1 {
		t.Fatalf("bob connected %d times; catching up must not need a reconnect", n)
	}
}

// If the notify is lost too, the head in the next pong tells the device it
// is behind: the bound is HeadEvery keep-alive intervals (one ping; the
// keepalive frames between are answered by API Gateway, with no head) plus
// the catch-up grace.
func TestMissedPushesAndNotifyAreCaughtUpByPong(t *testing.T) {
	t.Parallel()
	st, dropped := dropStack(t, "bob", "message", "notify")
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	var connects atomic.Int64
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.Log = slog.New(connectCount{n: &connects})
		o.PingInterval = 2 * time.Second
	})
	waitFor(t, "bob connected", bob.Connected)
	ids := sendN(t, alice, "bob", 0, 2)
	got := collect(t, bob, 2, 3*quick.Window()+30*time.Second)
	if got[0].MessageID != ids[0] || got[1].MessageID != ids[1] {
		t.Fatalf("got %s %s, want %v", got[0].MessageID, got[1].MessageID, ids)
	}
	if dropped.Load() == 0 {
		t.Fatal("no push was dropped: the test did not exercise missed pushes")
	}
	if n := connects.Load(); n != 1 {
		t.Fatalf("bob connected %d times; catching up must not need a reconnect", n)
	}
}

// A device with a stored cursor meets a server whose tables were
// re-created (a reset local stack, a restore, a new table): the new
// sequence restarts at 1. The device must resync and show every new
// message, not drop seqs 1..16 as duplicates of what it holds.
func TestStoredCursorMeetsFreshServerAndShowsEveryNewMessage(t *testing.T) {
	t.Parallel()
	old := startStack(t)
	bobDev := newDevice(t, old, "bob", "phone")
	bob := bobDev.dial(t)
	before := sendN(t, newDevice(t, old, "alice", "laptop").dial(t), "bob", 0, 16)
	collect(t, bob, 16, time.Minute)
	waitFor(t, "bob acked 16 on the old server", func() bool {
		d, _ := old.Store.Device(context.Background(), "bob", "phone")
		return d.Acked == 16
	})
	bob.Close()

	fresh := startStack(t)
	bobDev.st = fresh
	var logs logRecorder
	bob = bobDev.dial(t, func(o *Options) { o.Log = slog.New(&logs) })
	alice := newDevice(t, fresh, "alice", "laptop").dial(t)
	after := sendN(t, alice, "bob", 100, 5)
	got := collect(t, bob, 5, time.Minute)
	for i, m := range got {
		if m.MessageID != after[i] || m.Seq != int64(i+1) {
			t.Fatalf("message %d: %s seq %d, want %s seq %d", i, m.MessageID, m.Seq, after[i], i+1)
		}
	}
	waitFor(t, "bob acked 5 on the fresh server", func() bool {
		d, _ := fresh.Store.Device(context.Background(), "bob", "phone")
		return d.Acked == 5
	})
	if !logs.has("resync") && !logs.has("epoch changed") {
		t.Fatalf("the device never resynced; it logged:\n%s", strings.Join(logs.all(), "\n"))
	}
	// What the device held from the old server is not shown again, and the
	// store now holds the new sequence at seqs 1..5.
	hist, err := bob.History(0, 0)
	if err != nil || len(hist) != 5 || hist[0].MessageID != after[0] {
		t.Fatalf("store after resync: %d messages, %v", len(hist), err)
	}
	if before[0] == after[0] {
		t.Fatal("the two servers issued the same message id")
	}
}

// logRecorder keeps the messages a client logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }

func (l *logRecorder) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

func (l *logRecorder) has(part string) bool {
	for _, m := range l.all() {
		if strings.Contains(m, part) {
			return true
		}
	}
	return false
}
