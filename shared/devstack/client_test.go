package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
)

// frame is any server frame, decoded loosely for assertions.
type frame struct {
	Type         string          `json:"type"`
	Code         string          `json:"code"`
	Message      json.RawMessage `json:"message"`
	ClientMsgID  string          `json:"clientMsgId"`
	MessageID    string          `json:"messageId"`
	Conversation string          `json:"conversationId"`
	Change       string          `json:"change"` // a membership notice's
	ConvSeq      int64           `json:"convSeq"`
	Seq          int64           `json:"seq"`
	Messages     []struct {
		Seq     int64 `json:"seq"`
		Message struct {
			MessageID string          `json:"messageId"`
			From      string          `json:"from"`
			Body      json.RawMessage `json:"body"`
			ConvSeq   int64           `json:"convSeq"`
		} `json:"message"`
	} `json:"messages"`
	NextCursor   int64  `json:"nextCursor"`
	HasMore      bool   `json:"hasMore"`
	Head         int64  `json:"head"`
	Epoch        string `json:"epoch"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	RequestID    string `json:"requestId"`
	Ref          string `json:"ref"`
	Option       string `json:"option"`
	UserID       string `json:"userId"`
	Urgent       bool   `json:"urgent"`
	Renotify     int    `json:"renotify"`
	UpTo         int64  `json:"upTo"`
	InboxSeq     int64  `json:"inboxSeq"`
	Kind         string `json:"kind"`
}

// pushed decodes the message of a "message" frame.
func (f frame) pushed(t *testing.T) (id, from string, body string) {
	t.Helper()
	var m struct {
		MessageID string          `json:"messageId"`
		From      string          `json:"from"`
		Body      json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(f.Message, &m); err != nil {
		t.Fatalf("message frame: %v", err)
	}
	return m.MessageID, m.From, string(m.Body)
}

// wsClient is a protocol-only test client: it speaks raw JSON frames.
type wsClient struct {
	t      *testing.T
	conn   *websocket.Conn
	frames chan frame
	raw    chan string
	// backlog holds frames read while waiting for another type.
	backlog []frame
	// readErr is the error that ended the connection (set before frames closes).
	readErr error
}

func token(t testing.TB, user string, device string) string {
	t.Helper()
	return tokenAt(t, user, device, time.Now())
}

// tokenAt mints a token issued at now (a simulated clock's time).
func tokenAt(t testing.TB, user, device string, now time.Time) string {
	t.Helper()
	tok, err := auth.Mint([]byte(devstack.DefaultSecret), im.UserID(user), im.DeviceID(device), now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func dial(t *testing.T, st *devstack.Stack, user, device string) *wsClient {
	t.Helper()
	c := dialNoCleanup(t, st, user, device)
	c.t = t
	t.Cleanup(func() { c.conn.CloseNow() })
	return c
}

// dialNoCleanup connects a protocol-only client; the caller closes it.
func dialNoCleanup(t testing.TB, st *devstack.Stack, user, device string) *wsClient {
	t.Helper()
	return dialToken(t, st, user, device, token(t, user, device))
}

func dialToken(t testing.TB, st *devstack.Stack, user, device, tok string) *wsClient {
	t.Helper()
	var conn *websocket.Conn
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, resp, err := websocket.Dial(ctx, st.URL+"?token="+tok, nil)
		cancel()
		if err == nil {
			conn = c
			break
		}
		// A $connect whose invocation failed (throttled, timed out on a
		// loaded machine) answers 500: a client retries, as the SDK does.
		if resp == nil || resp.StatusCode < 500 || attempt == 5 {
			t.Fatalf("dial %s/%s: %v", user, device, err)
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
	conn.SetReadLimit(1 << 20)
	c := &wsClient{conn: conn, frames: make(chan frame, 1024), raw: make(chan string, 1<<16)}
	go func() {
		defer close(c.frames)
		for {
			_, data, err := conn.Read(context.Background())
			if err != nil {
				c.readErr = err
				return
			}
			var f frame
			if err := json.Unmarshal(data, &f); err != nil {
				f = frame{Type: "unparseable"}
			}
			select {
			case c.raw <- string(data):
			default: // raw frames are kept for debugging only while there is room
			}
			c.frames <- f
		}
	}()
	return c
}

func (c *wsClient) write(v any) {
	c.t.Helper()
	var data []byte
	switch v := v.(type) {
	case string:
		data = []byte(v)
	default:
		data, _ = json.Marshal(v)
	}
	if err := c.conn.Write(context.Background(), websocket.MessageText, data); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next returns the next frame of the given type, failing after timeout
// (at least 30 s: on a loaded 2-core machine under -race a frame that
// normally takes milliseconds can take seconds); frames of other types stay
// in the backlog for later calls.
func (c *wsClient) next(typ string, timeout time.Duration) frame {
	c.t.Helper()
	return c.nextOf(timeout, typ)
}

// nextOf returns the next frame of any of the given types (as next).
func (c *wsClient) nextOf(timeout time.Duration, types ...string) frame {
	c.t.Helper()
	timeout = max(timeout, 30*time.Second)
	for i, f := range c.backlog {
		if slices.Contains(types, f.Type) {
			c.backlog = append(c.backlog[:i:i], c.backlog[i+1:]...)
			return f
		}
	}
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection closed while waiting for %q", types)
			}
			if slices.Contains(types, f.Type) {
				return f
			}
			c.backlog = append(c.backlog, f)
		case <-deadline:
			c.t.Fatalf("no %q frame within %s", types, timeout)
		}
	}
}

// quiet asserts no frame of type typ arrives within d.
func (c *wsClient) quiet(typ string, d time.Duration) {
	c.t.Helper()
	c.quietOf(typ, d, func(frame) bool { return true })
}

// quietOf asserts no frame of type typ that bad picks arrives within d
// (the others of that type are kept in the backlog too).
func (c *wsClient) quietOf(typ string, d time.Duration, bad func(frame) bool) {
	c.t.Helper()
	for _, f := range c.backlog {
		if f.Type == typ && bad(f) {
			c.t.Fatalf("unexpected %q frame: %+v", typ, f)
		}
	}
	deadline := time.After(d)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return
			}
			if f.Type == typ && bad(f) {
				c.t.Fatalf("unexpected %q frame: %+v", typ, f)
			}
			c.backlog = append(c.backlog, f)
		case <-deadline:
			return
		}
	}
}

// awaitSent waits until every id in bodies has its "sent", resending (with
// the same clientMsgId, so idempotently) those refused with rate_limited or
// internal, as a client must when frames are dispatched concurrently, and,
// as the SDK does after Options.ResendAfter, those with no answer at all
// (a "sent" is posted to the connection, and a post can fail under load).
func (c *wsClient) awaitSent(to string, bodies map[string]any, timeout time.Duration) {
	c.t.Helper()
	// Past the send function's 10 s timeout: an attempt still running is
	// not doubled.
	const resendAfter = 15 * time.Second
	left := map[string]time.Time{} // id -> when it was last (re)sent or refused
	for id := range bodies {
		left[id] = time.Now()
	}
	deadline := time.After(timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var resentAll time.Time
	resend := func(id string, after time.Duration) {
		left[id] = time.Now().Add(after)
		time.AfterFunc(after, func() { c.send(id, to, bodies[id]) })
	}
	for len(left) > 0 {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Errorf("connection closed with %d sends unacknowledged", len(left))
				return
			}
			_, waiting := left[f.ClientMsgID]
			switch {
			case f.Type == "sent":
				delete(left, f.ClientMsgID)
			case f.Type == "" && strings.Contains(string(f.Message), "Internal server error"):
				// API Gateway's own answer to a failed invocation (timed
				// out under contention, throttled): it names no request,
				// so every send still waiting is sent again, at most once a
				// second (each resend may fail the same way).
				if time.Since(resentAll) < time.Second {
					continue
				}
				resentAll = time.Now()
				for id := range left {
					resend(id, time.Duration(rand.IntN(500))*time.Millisecond)
				}
			case f.Type == "error" && waiting && (f.Code == "rate_limited" || f.Code == "internal"):
				// As the server asks, with jitter so that contenders spread.
				resend(f.ClientMsgID, time.Duration(max(f.RetryAfterMs, 100))*time.Millisecond+time.Duration(rand.IntN(200))*time.Millisecond)
			case f.Type == "error" && waiting:
				c.t.Errorf("send %s refused: %s %s", f.ClientMsgID, f.Code, f.Message)
				return
			default:
				c.backlog = append(c.backlog, f)
			}
		case <-tick.C:
			for id, at := range left {
				if time.Since(at) >= resendAfter {
					resend(id, 0)
				}
			}
		case <-deadline:
			c.t.Errorf("%d sends unacknowledged after %s", len(left), timeout)
			return
		}
	}
}

func (c *wsClient) send(clientMsgID, to string, body any) {
	c.t.Helper()
	c.write(map[string]any{"action": "send", "clientMsgId": clientMsgID, "to": to, "body": body})
}

// startStack starts a stack for one test with quick timings; the test
// fails on any fault the stack saw (Stack.Faults).
func startStack(t *testing.T, o devstack.Options) *devstack.Stack {
	t.Helper()
	st := startStackUnchecked(t, o)
	t.Cleanup(func() {
		st.Close()
		// The stack is as strict as AWS: a call a function's template role
		// does not allow, or a frame API Gateway would not deliver, fails
		// the test that caused it.
		if f := st.Faults(); len(f) > 0 {
			t.Errorf("the stack saw %d faults AWS would show:\n%s", len(f), strings.Join(f, "\n"))
		}
	})
	return st
}

// startStackUnchecked is startStack for a test that makes a fault and
// closes the stack itself.
func startStackUnchecked(t *testing.T, o devstack.Options) *devstack.Stack {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("t%d", time.Now().UnixNano())
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = time.Millisecond
	}
	if o.PollWait == 0 {
		o.PollWait = 200 * time.Millisecond
	}
	if o.RateLimits == "" {
		o.RateLimits = "off" // these tests burst; the rate limit tests set their own
	}
	o.DynamoDBEndpoint, o.SQSEndpoint = testEndpoints()
	o.Log = testLog()
	st, err := devstack.Start(context.Background(), o)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	return st
}

var _ = http.StatusOK

// testLog is the stack's log: stderr with SIGNET_TEST_LOG set, else nothing.
func testLog() *slog.Logger {
	if os.Getenv("SIGNET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}
