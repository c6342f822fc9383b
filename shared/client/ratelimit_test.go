package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
// allows, on its first connection.
func TestADeviceBehindInManyGroupsWaitsOutItsQueryLimit(t *testing.T) {
	t.Parallel()
	const groups = 16
	st := startStackWith(t, devstack.Options{RateLimits: "query=6/30s", Parameters: map[string]string{"GroupDelivery": "read"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alice := newDevice(t, st, "alice", "laptop").dial(t)
	for i := range groups {
		g, err := alice.CreateGroup(ctx, fmt.Sprintf("g%d", i), "bob")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alice.SendDraft(ctx, Draft{ConversationID: g.ConversationID, Body: []byte(fmt.Sprintf(`"m%d"`, i))}); err != nil {
			t.Fatal(err)
		}
	}
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
			query := out && wire.RefOf(string(b)) != "" && limitKind(b) == kindQuery
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
