package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// sharedCounter is a hand-written in-memory Counter: the one global count
// several containers (Limiters) share; calls counts its round trips.
type sharedCounter struct {
	mu     sync.Mutex
	totals map[string]int64
	calls  int
	fail   bool
}

func (s *sharedCounter) AddUsage(_ context.Context, u im.UserID, key string, n int64, _ time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail {
		return 0, errors.New("throttled")
	}
	if s.totals == nil {
		s.totals = map[string]int64{}
	}
	s.totals[string(u)+"/"+key] += n
	return s.totals[string(u)+"/"+key], nil
}

func (s *sharedCounter) Usage(_ context.Context, u im.UserID, key string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return 0, errors.New("throttled")
	}
	return s.totals[string(u)+"/"+key], nil
}

func TestCheckSaysWhatTheNextConnectWouldMeetWithoutCountingOne(t *testing.T) {
	t.Parallel()
	ctr := &sharedCounter{}
	lim := map[Action]Limit{Connect: {Per: 3, Window: time.Minute}, Send: {Per: 2, Window: time.Minute}}
	connector, checker := &Limiter{Limits: lim, Counter: ctr}, &Limiter{Limits: lim, Counter: ctr}
	now := time.Date(2026, 12, 1, 10, 0, 20, 0, time.UTC)
	for i := range 2 {
		if _, ok := connector.Allow(context.Background(), "carol", Connect, now); !ok {
			t.Fatalf("connect %d refused", i+1)
		}
		if _, ok, err := checker.Check(context.Background(), "carol", Connect, now); !ok || err != nil {
			t.Fatalf("check after %d of 3 connects: ok %v, %v; want admitted", i+1, ok, err)
		}
	}
	if got := ctr.totals["carol/connect#"+strconv.FormatInt(now.Truncate(time.Minute).UnixMilli(), 10)]; got != 2 {
		t.Fatalf("the counter is %d after 2 connects and 2 checks, want 2: a check counted", got)
	}
	if _, ok := connector.Allow(context.Background(), "carol", Connect, now); !ok {
		t.Fatal("the third connect was refused")
	}
	wait, ok, err := checker.Check(context.Background(), "carol", Connect, now.Add(10*time.Second))
	if ok || err != nil || wait != 30*time.Second {
		t.Fatalf("check at the limit: ok %v, retry after %s, %v; want refused for the 30 s left", ok, wait, err)
	}
	if _, ok, _ := checker.Check(context.Background(), "carol", Connect, now.Add(time.Minute)); !ok {
		t.Fatal("the next window's check was refused")
	}
	if _, ok, _ := checker.Check(context.Background(), "dave", Connect, now); !ok {
		t.Fatal("another user's check was refused")
	}
	// A penalty spends the window's budget: the check sees it too.
	if err := connector.Penalize(context.Background(), "dave", Connect, now); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := checker.Check(context.Background(), "dave", Connect, now); ok {
		t.Fatal("the check admitted a penalized user")
	}
	// Actions counted per container: refused once this container refused them.
	sender := &Limiter{Limits: lim, Counter: ctr}
	for range 2 {
		sender.Allow(context.Background(), "erin", Send, now)
	}
	if _, ok, _ := sender.Check(context.Background(), "erin", Send, now); ok {
		t.Fatal("a check in the container that counted the whole budget admitted the next send")
	}
	ctr.fail = true
	if _, ok, err := checker.Check(context.Background(), "frank", Connect, now); !ok || err == nil {
		t.Fatalf("check with the counter failing: ok %v, %v; want admitted with the error", ok, err)
	}
}

func TestAUserWithinTheLimitCostsNoCounterCall(t *testing.T) {
	t.Parallel()
	ctr := &sharedCounter{}
	l := &Limiter{Limits: map[Action]Limit{Send: {Per: 100, Window: time.Minute}}, Counter: ctr, Flush: 8}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 7 {
		if _, ok := l.Allow(context.Background(), "alice", Send, now.Add(time.Duration(i)*time.Second)); !ok {
			t.Fatalf("frame %d refused", i+1)
		}
	}
	if ctr.calls != 0 {
		t.Fatalf("%d counter calls for 7 frames, want 0 (one per 8)", ctr.calls)
	}
	if _, ok := l.Allow(context.Background(), "bob", Query, now); !ok {
		t.Fatal("an action without a limit was refused")
	}
}

func TestTheLimitHoldsAcrossContainers(t *testing.T) {
	t.Parallel()
	ctr := &sharedCounter{}
	lim := map[Action]Limit{Send: {Per: 40, Window: time.Minute}}
	containers := []*Limiter{{Limits: lim, Counter: ctr, Flush: 4}, {Limits: lim, Counter: ctr, Flush: 4}, {Limits: lim, Counter: ctr, Flush: 4}}
	now := time.Date(2026, 12, 1, 10, 0, 10, 0, time.UTC)
	admitted := 0
	var wait time.Duration
	for i := range 300 {
		if w, ok := containers[i%3].Allow(context.Background(), "mallory", Send, now); ok {
			admitted++
		} else {
			wait = w
		}
	}
	// At most Flush−1 unflushed frames per container beyond the limit.
	if admitted < 40 || admitted > 40+3*3 {
		t.Fatalf("admitted %d of 300 across 3 containers, want 40..49", admitted)
	}
	if wait != 50*time.Second {
		t.Fatalf("retry after %s, want the 50 s left in the window", wait)
	}
	if ctr.calls > 300/4+3 {
		t.Fatalf("%d counter calls for 300 frames", ctr.calls)
	}
	// The next window starts afresh; another user was never affected.
	if _, ok := containers[0].Allow(context.Background(), "mallory", Send, now.Add(time.Minute)); !ok {
		t.Fatal("refused in the next window")
	}
	if _, ok := containers[1].Allow(context.Background(), "alice", Send, now); !ok {
		t.Fatal("another user refused")
	}
}

func TestOneContainerAloneStopsAUserWithoutACounter(t *testing.T) {
	t.Parallel()
	l := &Limiter{Limits: map[Action]Limit{Group: {Per: 5, Window: 10 * time.Second}}}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		if _, ok := l.Allow(context.Background(), "alice", Group, now); !ok {
			t.Fatalf("frame %d refused", i+1)
		}
	}
	if _, ok := l.Allow(context.Background(), "alice", Group, now); ok {
		t.Fatal("6th group op in 10 s admitted")
	}
}

func TestACounterOutageFailsOpen(t *testing.T) {
	t.Parallel()
	var errs int
	l := &Limiter{Limits: map[Action]Limit{Send: {Per: 100, Window: time.Minute}}, Counter: &sharedCounter{fail: true}, Flush: 2, OnError: func(error) { errs++ }}
	for range 10 {
		if _, ok := l.Allow(context.Background(), "alice", Send, time.Now()); !ok {
			t.Fatal("refused while the counter fails")
		}
	}
	if errs != 5 {
		t.Fatalf("%d errors reported, want 5", errs)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	got, err := Parse("send=10/1s, query=5/1m")
	if err != nil || got[Send] != (Limit{10, time.Second}) || got[Query] != (Limit{5, time.Minute}) || got[Group] != Defaults[Group] {
		t.Fatalf("Parse = %v, %v", got, err)
	}
	if off, err := Parse("off"); err != nil || off != nil {
		t.Fatalf("off = %v, %v", off, err)
	}
	for _, bad := range []string{"send", "send=0/1m", "send=5/1ms", "teleport=1/1m", "send=5/2h"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func BenchmarkAllowWithinTheLimit(b *testing.B) {
	l := &Limiter{Limits: Defaults, Counter: &sharedCounter{}}
	now := time.Now()
	users := make([]im.UserID, 1000)
	for i := range users {
		users[i] = im.UserID("u" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.Allow(context.Background(), users[i%len(users)], Query, now)
	}
}

func TestAClientThatKeepsSendingAfterItsRefusalIsIgnoringTheLimit(t *testing.T) {
	t.Parallel()
	lim := map[Action]Limit{Send: {Per: 5, Window: time.Minute}}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// refuse sends frames more frames of mallory's on conn at at, each
	// refused: whether the last made it (or her) one ignoring the limit.
	refuse := func(l *Limiter, conn string, at time.Time, frames int) (ignoring bool) {
		for range frames {
			if _, ok := l.Allow(context.Background(), "mallory", Send, at); ok {
				t.Fatal("a frame beyond the limit was admitted")
			}
			ignoring = l.Refused("mallory", conn, Send, at)
		}
		return ignoring
	}
	full := func() *Limiter {
		l := &Limiter{Limits: lim}
		for range 5 {
			l.Allow(context.Background(), "mallory", Send, now)
		}
		if refuse(l, "laptop", now, 1) {
			t.Fatal("the first refusal is ignoring")
		}
		return l
	}
	for _, tc := range []struct {
		name     string
		after    time.Duration // when the frames beyond the limit are sent, after the first refusal
		frames   int
		ignoring bool
	}{
		{"in flight when refused", 0, 100, false},
		{"within the grace", Grace, 100, false},
		{"a few late", Grace + time.Second, EjectAfter - 1, false},
		{"ignoring", Grace + time.Second, EjectAfter, true},
	} {
		l := full()
		if got := refuse(l, "laptop", now.Add(tc.after), tc.frames); got != tc.ignoring {
			t.Errorf("%s: ignoring = %v, want %v", tc.name, got, tc.ignoring)
		}
		if l.Refused("alice", "a", Send, now) || l.Refused("mallory", "laptop", Query, now) {
			t.Errorf("%s: another user or action counted as ignoring", tc.name)
		}
		// A new window starts clean.
		if _, ok := l.Allow(context.Background(), "mallory", Send, now.Add(time.Minute)); !ok {
			t.Errorf("%s: refused in the next window", tc.name)
		}
		if l.Refused("mallory", "laptop", Send, now.Add(time.Minute)) {
			t.Errorf("%s: still ignoring in the next window", tc.name)
		}
	}

	// Her phone, online well after the laptop's refusal, sends its outbox
	// (a frame per conversation, at once): told in its turn, it is not
	// ignoring; it is once it keeps sending past its own grace.
	l := full()
	later := now.Add(2 * Grace)
	if refuse(l, "phone", later, 3*EjectAfter) {
		t.Error("the phone's outbox, in flight at its first refusal, counted as ignoring the laptop's")
	}
	if !refuse(l, "phone", later.Add(Grace+time.Second), EjectAfter) {
		t.Error("the phone kept sending past its own grace and is not ignoring")
	}

	// A client that opens a new connection for every few frames: each
	// connection's are in its grace, but together, past the user's, they
	// are ignoring.
	l = full()
	ignoring := false
	for i := range UserEjectAfter {
		if ignoring {
			t.Fatalf("ignoring after %d connections, want %d", i, UserEjectAfter)
		}
		ignoring = refuse(l, "c"+strconv.Itoa(i), later.Add(time.Duration(i)*100*time.Millisecond), 1)
	}
	if !ignoring {
		t.Errorf("%d connections of one frame each past the user's grace: not ignoring", UserEjectAfter)
	}
}

func TestPenalizeRefusesTheActionInEveryContainerAtItsNextCall(t *testing.T) {
	t.Parallel()
	ctr := &sharedCounter{}
	lim := map[Action]Limit{Connect: {Per: 60, Window: time.Minute}, Send: {Per: 100, Window: time.Minute}}
	sender, connector := &Limiter{Limits: lim, Counter: ctr}, &Limiter{Limits: lim, Counter: ctr}
	now := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	if _, ok := connector.Allow(context.Background(), "mallory", Connect, now); !ok {
		t.Fatal("first connect refused")
	}
	calls := ctr.calls
	if calls != 1 {
		t.Fatalf("%d counter calls for a connect, want 1 (connects are counted globally each time)", calls)
	}
	if err := sender.Penalize(context.Background(), "mallory", Connect, now); err != nil {
		t.Fatal(err)
	}
	if err := sender.Penalize(context.Background(), "mallory", Connect, now); err != nil || ctr.calls != calls+1 {
		t.Fatalf("a second penalty in the window: %v, %d counter calls; want one call in all", err, ctr.calls-calls)
	}
	wait, ok := connector.Allow(context.Background(), "mallory", Connect, now.Add(time.Second))
	if ok || wait != 29*time.Second {
		t.Fatalf("connect after a penalty: ok %v, retry after %s; want refused for the 29 s left", ok, wait)
	}
	if _, ok := sender.Allow(context.Background(), "mallory", Connect, now); ok {
		t.Fatal("the penalizing container admitted a connect")
	}
	if _, ok := connector.Allow(context.Background(), "alice", Connect, now); !ok {
		t.Fatal("another user's connect was refused")
	}
	if _, ok := connector.Allow(context.Background(), "mallory", Connect, now.Add(time.Minute)); !ok {
		t.Fatal("the next window's connect was refused")
	}
	if err := (&Limiter{}).Penalize(context.Background(), "mallory", Connect, now); err != nil {
		t.Fatal("penalizing without limits:", err)
	}
}
