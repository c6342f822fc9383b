package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/wire"
)

// A device back in more groups than its user's query budget lets it pull
// at once is refused some of its group syncs (rate_limited) and waits as
// it is told: it is never closed for ignoring the limit
// (rate_limit_ignored), and gets every group's message as the budget
// allows, on its first connection. It comes online at the start of a
// window (windows are aligned to the clock), so that a client that asked
// its refused group syncs again after groupSyncRetry (10 s) would do so
// inside the 15 s window, and be closed for it, every run.
func TestADeviceBehindInManyGroupsWaitsOutItsQueryLimit(t *testing.T) {
	t.Parallel()
	const groups, window = 16, 15 * time.Second
	st := startStackWith(t, devstack.Options{RateLimits: fmt.Sprintf("query=6/%s", window), Parameters: map[string]string{"GroupDelivery": "read"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	groupsWithAMessage(ctx, t, alice, groups, "bob")
	time.Sleep(time.Until(time.Now().Truncate(window).Add(window)))
	var dials, limited, ignored atomic.Int64
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.Dialer = func(ctx context.Context, url string, h http.Header) (Conn, error) {
			dials.Add(1)
			c, err := WebSocket(ctx, url, h)
			if err != nil {
				return nil, err
			}
			return watchedConn{Conn: c, seen: func(b []byte) {
				var e wire.Error
				if frameType(b) == wire.TypeError && json.Unmarshal(b, &e) == nil {
					switch e.Code {
					case wire.CodeRateLimited:
						limited.Add(1)
					case wire.CodeRateLimitIgnored:
						ignored.Add(1)
					}
				}
			}}, nil
		}
	})
	collect(t, bob, groups, 4*time.Minute)
	if ignored.Load() > 0 || dials.Load() != 1 {
		t.Fatalf("bob was told rate_limit_ignored %d times and dialed %d times; want never, and once", ignored.Load(), dials.Load())
	}
	if limited.Load() == 0 {
		t.Fatal("no group sync was refused: the test did not reach the limit")
	}
}

// groupsWithAMessage has owner create n groups with member, and send a
// message to each.
func groupsWithAMessage(ctx context.Context, t *testing.T, owner *Client, n int, member string) {
	t.Helper()
	for i := range n {
		g, err := owner.CreateGroup(ctx, fmt.Sprintf("g%d", i), member)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := owner.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: []byte(fmt.Sprintf(`"m%d"`, i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// Queries an app asks while one of their kind waits out its refusal
// (rate_limited) are held until its retryAfterMs: none goes out before
// then, and each is answered once it may — also when the connection is
// lost during the wait (the new one does not ask the refused ones again
// early).
func TestQueriesAskedWhileOneIsRefusedWaitItsRetryAfter(t *testing.T) {
	t.Parallel()
	const window, inFlight = 10 * time.Second, 250 * time.Millisecond
	st := startStackWith(t, devstack.Options{RateLimits: fmt.Sprintf("query=3/%s", window)})
	// The queries written and the refusals read, in order.
	type seenFrame struct {
		query bool
		wait  time.Duration // a refusal's retryAfterMs
		at    time.Time
	}
	var mu sync.Mutex
	var frames []seenFrame
	var first Conn // the first connection, lost after the first refusal
	var lost sync.Once
	var dials atomic.Int64
	record := func(out bool) func([]byte) {
		return func(b []byte) {
			var e wire.Error
			_ = json.Unmarshal(b, &e)
			ref := wire.RefOf(string(b))
			// (an inbox sync has a ref too, and a limit of its own)
			query := out && ref != "" && limitKind(b) == kindQuery && !strings.HasPrefix(ref, inboxSyncRef)
			refusal := !out && e.Code == wire.CodeRateLimited
			if query || refusal {
				mu.Lock()
				frames = append(frames, seenFrame{query: query, wait: time.Duration(e.RetryAfterMs) * time.Millisecond, at: time.Now()})
				c := first
				mu.Unlock()
				if refusal { // lost when the refusal is no longer in flight
					lost.Do(func() { time.AfterFunc(2*inFlight, func() { c.Close() }) })
				}
			}
		}
	}
	// From a window's start: a refusal then asks to wait most of it.
	time.Sleep(window - time.Duration(time.Now().UnixNano())%window + 300*time.Millisecond)
	alice := newDevice(t, st, "alice", "laptop").dial(t, func(o *Options) {
		o.Dialer = func(ctx context.Context, url string, h http.Header) (Conn, error) {
			c, err := WebSocket(ctx, url, h)
			if err != nil {
				return nil, err
			}
			dials.Add(1)
			mu.Lock()
			if first == nil {
				first = c
			}
			mu.Unlock()
			return watchedConn{Conn: c, seen: record(false), wrote: record(true)}, nil
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := alice.Summary(ctx); err != nil {
				errs <- err
			}
		}()
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a summary: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	refused := 0
	for i, r := range frames {
		if r.query {
			continue
		}
		refused++
		for _, f := range frames[i+1:] {
			// A query handed to the connection as the refusal came in
			// is on its way: inFlight later, it was asked after it.
			if f.query && f.at.After(r.at.Add(inFlight)) && f.at.Before(r.at.Add(r.wait-50*time.Millisecond)) {
				t.Fatalf("a query went out %s after a refusal that asked to wait %s", f.at.Sub(r.at).Round(time.Millisecond), r.wait)
			}
		}
	}
	if refused == 0 {
		t.Fatal("no query was refused: the test did not reach the limit")
	}
	if dials.Load() < 2 {
		t.Fatal("the connection was not lost during the wait")
	}
}

// watchedConn shows seen every frame it reads, and wrote every frame it
// writes (nil: none).
type watchedConn struct {
	Conn
	seen, wrote func([]byte)
}

func (w watchedConn) Write(ctx context.Context, b []byte) error {
	if w.wrote != nil {
		w.wrote(b)
	}
	return w.Conn.Write(ctx, b)
}

func (w watchedConn) Read(ctx context.Context) ([]byte, error) {
	b, err := w.Conn.Read(ctx)
	if err == nil {
		w.seen(b)
	}
	return b, err
}

// A group sync refused rate_limited holds the group syncs, not the inbox's
// sync (their refs say whose refusal it is): an inbox sync in flight when
// the refusal comes, whose page is lost, is asked again as usual
// (ResendAfter), not only when the group syncs' hold ends. Until the
// thirty-seventh session a refusal named no frame and was taken as the
// inbox sync's too: its 1:1 messages waited out the query window.
func TestAGroupSyncRefusalDoesNotHoldTheInboxSync(t *testing.T) {
	t.Parallel()
	const groups, window = 12, 30 * time.Second
	st := startStackWith(t, devstack.Options{RateLimits: fmt.Sprintf("query=3/%s", window), Parameters: map[string]string{"GroupDelivery": "read"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	groupsWithAMessage(ctx, t, alice, groups, "bob")
	// From a window's start: a refusal then asks to wait most of it.
	time.Sleep(window - time.Duration(time.Now().UnixNano())%window + 300*time.Millisecond)
	hc := &refusalHoldingConn{dropPush: []byte(`"gap-1"`)}
	bob := newDevice(t, st, "bob", "phone").dial(t, func(o *Options) {
		o.ResendAfter = 2 * time.Second
		o.Dialer = func(ctx context.Context, url string, h http.Header) (Conn, error) {
			c, err := WebSocket(ctx, url, h)
			if err != nil {
				return nil, err
			}
			hc.mu.Lock()
			defer hc.mu.Unlock()
			if hc.Conn != nil {
				return nil, fmt.Errorf("the test's connection was lost")
			}
			hc.Conn = c
			return hc, nil
		}
	})
	waitFor(t, "a group sync refused", func() bool { hc.mu.Lock(); defer hc.mu.Unlock(); return len(hc.held) > 0 })
	// A gap in bob's inbox (gap-1's pushes are lost) makes him sync; the
	// refusals reach him while that sync is in flight, and its page is lost.
	hc.mu.Lock()
	hc.armed = true
	hc.mu.Unlock()
	for _, body := range []string{`"gap-1"`, `"gap-2"`} {
		if _, err := alice.Send(ctx, "bob", json.RawMessage(body)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(4 * time.Minute)
	for {
		select {
		case m := <-bob.Messages():
			if string(m.Body) != `"gap-2"` {
				continue
			}
			hc.mu.Lock()
			defer hc.mu.Unlock()
			if !hc.released || hc.dropPage {
				t.Fatalf("the test did not run as planned: refusals released %v, the sync page still to drop %v", hc.released, hc.dropPage)
			}
			if hc.groupSyncsAfter > 0 {
				t.Fatalf("the 1:1 messages came after the group syncs' hold ended (%d group syncs asked again before them): the inbox sync waited for it", hc.groupSyncsAfter)
			}
			return
		case <-deadline:
			t.Fatal("gap-2 never reached bob")
		}
	}
}

// refusalHoldingConn, for the test above, holds the group sync refusals it reads
// until it is armed and the client writes an inbox sync; then passes them
// on, ahead of that sync's page, which it drops. It drops every push
// holding dropPush, and counts the group syncs written after the release.
type refusalHoldingConn struct {
	Conn
	dropPush []byte

	mu              sync.Mutex
	held, pending   [][]byte
	armed, released bool
	dropPage        bool
	groupSyncsAfter int
}

func (h *refusalHoldingConn) Write(ctx context.Context, b []byte) error {
	var f wire.Sync
	if json.Unmarshal(b, &f) == nil && f.Action == wire.ActionSync {
		h.mu.Lock()
		switch {
		case f.ConversationID == "" && h.armed && !h.released:
			h.released, h.dropPage = true, true
		case f.ConversationID != "" && h.released:
			h.groupSyncsAfter++
		}
		h.mu.Unlock()
	}
	return h.Conn.Write(ctx, b)
}

func (h *refusalHoldingConn) Read(ctx context.Context) ([]byte, error) {
	for {
		h.mu.Lock()
		if h.released && len(h.held) > 0 {
			b := h.held[0]
			h.held = h.held[1:]
			h.mu.Unlock()
			return b, nil
		}
		if len(h.pending) > 0 {
			b := h.pending[0]
			h.pending = h.pending[1:]
			h.mu.Unlock()
			return b, nil
		}
		h.mu.Unlock()
		b, err := h.Conn.Read(ctx)
		if err != nil {
			return nil, err
		}
		var e wire.Error
		_ = json.Unmarshal(b, &e)
		h.mu.Lock()
		switch {
		case !h.released && e.Code == wire.CodeRateLimited && strings.HasPrefix(e.Ref, groupSyncRef):
			h.held = append(h.held, b)
		case h.released && h.dropPage && frameType(b) == wire.TypeSync:
			h.dropPage = false
		case frameType(b) == wire.TypeMessage && bytes.Contains(b, h.dropPush):
		default:
			h.pending = append(h.pending, b)
		}
		h.mu.Unlock()
	}
}
