package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

// lateStates holds the store write of the presence frame choosing status
// and of the register frame carrying token until release is closed, as a
// cold start holds an invocation; arrived hears when one is held.
type lateStates struct {
	handler.PresenceStore
	handler.WakeStore
	status  im.Status
	token   string
	arrived chan string
	release chan struct{}
}

func (l lateStates) SetStatus(ctx context.Context, u im.UserID, s im.Status, at time.Time) (im.Status, bool, error) {
	if s == l.status {
		l.arrived <- string(s)
		<-l.release
	}
	return l.PresenceStore.SetStatus(ctx, u, s, at)
}

func (l lateStates) SetPushEndpoint(ctx context.Context, u im.UserID, p im.PushEndpoint, at time.Time) (im.PushEndpoint, bool, error) {
	if p.Token == l.token {
		l.arrived <- p.Token
		<-l.release
	}
	return l.WakeStore.SetPushEndpoint(ctx, u, p, at)
}

// The frames of a connection run as concurrent invocations: a presence or
// register frame whose invocation runs after a later one's (here held in
// its store write until the later one is answered) changes nothing. The
// user chose invisible after online, and the device signed out after
// registering: invisible and no registration stand.
func TestAStateFrameWhoseInvocationRunsLateChangesNothing(t *testing.T) {
	t.Parallel()
	late := lateStates{status: im.StatusOnline, token: "fcm-token-1", arrived: make(chan string, 2), release: make(chan struct{})}
	st := startStackWith(t, devstack.Options{Configure: func(fn string, h *handler.Deps) {
		if fn == "PresenceFunction" {
			l := late
			l.PresenceStore, l.WakeStore = h.Presences, h.Wakes
			h.Presences, h.Wakes = l, l
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newDevice(t, st, "erin", "phone").dial(t)

	type result struct {
		status string
		err    error
	}
	first := make(chan result, 2)
	go func() {
		s, err := c.SetPresence(ctx, "online")
		first <- result{s, err}
	}()
	go func() {
		first <- result{"", c.Register(ctx, im.PlatformFCM, "fcm-token-1")}
	}()
	for range 2 {
		select {
		case <-late.arrived:
		case <-ctx.Done():
			t.Fatal("the first frames' invocations never reached the store")
		}
	}
	if s, err := c.SetPresence(ctx, "invisible"); err != nil || s != "offline" {
		t.Fatalf("invisible answered %q, %v; want offline", s, err)
	}
	if err := c.Register(ctx, im.PlatformFCM, ""); err != nil {
		t.Fatalf("sign-out: %v", err)
	}
	close(late.release)
	for range 2 {
		if r := <-first; r.err != nil || (r.status != "" && r.status != "offline") {
			t.Fatalf("a late frame answered %q, %v; want what stands (offline)", r.status, r.err)
		}
	}
	ps, err := st.Store.Presences(ctx, []im.UserID{"erin"}, time.Now(), time.Minute)
	if err != nil || len(ps) != 1 || ps[0].Chosen != im.StatusInvisible {
		t.Fatalf("presence after the late online frame: %+v, %v; want invisible chosen", ps, err)
	}
	if eps, err := st.Store.PushEndpoints(ctx, "erin"); err != nil || len(eps) != 0 {
		t.Fatalf("registrations after the late register frame: %+v, %v; want none (signed out)", eps, err)
	}
}

// A presence or register query superseded by a later one of its kind is
// not written again (asked again after a gateway error, on a new
// connection, or retried after internal): written later, API Gateway would
// receive it after the later one and the server would keep it. Its caller
// gets ErrSuperseded; other queries are asked again.
func TestASupersededStateQueryIsNotAskedAgain(t *testing.T) {
	t.Parallel()
	c := &Client{log: slog.New(slog.DiscardHandler), answers: map[string]*pendingQuery{}, latest: map[string]int64{}}
	ask := func(n int64, frame any) *pendingQuery {
		b, err := json.Marshal(frame)
		if err != nil {
			t.Fatal(err)
		}
		q := &pendingQuery{n: n, answer: make(chan json.RawMessage, 1), frame: b, state: stateOf(b), gone: make(chan struct{}), written: true}
		c.answers["q"+strconv.FormatInt(n, 10)] = q
		if q.state != "" {
			c.latest[q.state] = n
		}
		return q
	}
	online := ask(1, wire.Presence{Action: wire.ActionPresence, Status: "online"})
	token := "t"
	reg := ask(2, wire.Register{Action: wire.ActionRegister, Platform: im.PlatformFCM, Token: &token})
	summary := ask(3, wire.Summary{Action: wire.ActionSummary})
	invisible := ask(4, wire.Presence{Action: wire.ActionPresence, Status: "invisible"})

	got := c.unanswered()
	want := [][]byte{reg.frame, summary.frame, invisible.frame}
	if len(got) != len(want) {
		t.Fatalf("asked again %d frames, want %d (all but the superseded online)", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("asked again #%d: %s, want %s", i, got[i], want[i])
		}
	}
	select {
	case <-online.gone:
	default:
		t.Fatal("the superseded query's request was not told")
	}
	for ref, want := range map[string]bool{"q1": false, "q2": true, "q3": true, "q4": true} {
		if got := c.claimWrite(ref); got != want {
			t.Fatalf("%s may be written: %v, want %v (only the superseded online query, q1, may not)", ref, got, want)
		}
	}
	if s := stateOf([]byte(`{"action":"presence.query","users":["a"]}`)); s != "" {
		t.Fatalf("a presence query sets state %q, want none", s)
	}
}

// A state query waits for the one before it of its kind to finish, or for
// stateGap after that one's last write: API Gateway's receive time counts
// milliseconds, and frames received in the same one cannot be ordered.
func TestAStateQueryWaitsItsTurn(t *testing.T) {
	t.Parallel()
	c := &Client{log: slog.New(slog.DiscardHandler), answers: map[string]*pendingQuery{}, latest: map[string]int64{}, done: make(chan struct{})}
	prev := &pendingQuery{n: 1, state: statePresence, written: true, finished: make(chan struct{})}
	next := &pendingQuery{n: 2, state: statePresence}
	other := &pendingQuery{n: 3, state: stateRegister}
	c.answers["q1"] = prev
	ctx := context.Background()

	prev.writtenAt = time.Now().Add(-2 * stateGap)
	if err := c.stateTurn(ctx, next); err != nil {
		t.Fatal(err)
	}
	if err := c.stateTurn(ctx, other); err != nil { // another state: no wait
		t.Fatal(err)
	}

	prev.writtenAt = time.Now().Add(time.Hour) // no gap within the test
	turn := make(chan error, 1)
	go func() { turn <- c.stateTurn(ctx, next) }()
	select {
	case err := <-turn:
		t.Fatalf("the later presence query went out while the earlier one was unanswered: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(prev.finished)
	if err := <-turn; err != nil {
		t.Fatal(err)
	}
}
