package devstack

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	signet "github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/eventsource"
	"github.com/signet-im/signet/shared/template"
)

// A handler that returns at once once raced its own context's cancel: the
// runtime then reported a timeout (API Gateway's "Internal server error")
// for an invocation that had answered. It must never.
func TestFastInvocationsAreNeverReportedAsTimeouts(t *testing.T) {
	t.Parallel()
	rt := newRuntime(4, func(string, ...any) {})
	fn := &function{id: "Fast", timeout: 10 * time.Second}
	h := invoke(rt, fn, func(ctx context.Context, n int) (int, error) { return n + 1, nil })
	for i := range 20000 {
		got, err := h(context.Background(), i)
		if err != nil || got != i+1 {
			t.Fatalf("invocation %d: %d, %v", i, got, err)
		}
	}
	if l := rt.limits(); len(l.Timeouts)+len(l.Throttles) > 0 {
		t.Fatalf("limits hit: %+v", l)
	}
}

func TestSlowInvocationTimesOutAndFreesItsSlot(t *testing.T) {
	t.Parallel()
	rt := newRuntime(1, func(string, ...any) {})
	fn := &function{id: "Slow", timeout: 50 * time.Millisecond}
	release := make(chan struct{})
	defer close(release)
	slow := invoke(rt, fn, func(ctx context.Context, _ int) (int, error) { <-release; return 0, nil })
	var te *TimeoutError
	if _, err := slow(context.Background(), 0); !errors.As(err, &te) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	// The slot is free again: the next invocation is not throttled.
	fast := invoke(rt, fn, func(ctx context.Context, n int) (int, error) { return n, nil })
	if _, err := fast(context.Background(), 1); err != nil {
		t.Fatalf("after a timeout: %v", err)
	}
	// With the slot taken, another invocation is throttled at once.
	busy := make(chan struct{})
	go func() {
		_, _ = invoke(rt, &function{id: "Busy", timeout: time.Minute}, func(ctx context.Context, _ int) (int, error) { close(busy); <-release; return 0, nil })(context.Background(), 0)
	}()
	<-busy
	var th *ThrottleError
	_, err := fast(context.Background(), 2)
	if !errors.As(err, &th) {
		t.Fatalf("err = %v, want a throttle", err)
	}
	// An SQS event source retries a throttled batch in flight.
	if !errors.Is(err, eventsource.ErrThrottled) {
		t.Errorf("a throttle is not eventsource.ErrThrottled: %v", err)
	}
}

// A queue's visibility timeout below the timeout of a function it
// triggers is refused, as AWS refuses that event source mapping; the
// template's pass, and an override applies to every queue.
func TestAQueueMayNotReturnMessagesBeforeItsFunctionCanTimeOut(t *testing.T) {
	t.Parallel()
	parse := func() *template.Template {
		tmpl, err := template.Parse(signet.Template)
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	if err := queueVisibility(parse(), 0); err != nil {
		t.Fatalf("the template's visibility timeouts: %v", err)
	}
	tmpl := parse()
	if err := queueVisibility(tmpl, 30*time.Second); err != nil {
		t.Fatalf("30 s: %v", err)
	}
	for id, q := range tmpl.Queues {
		if q.VisibilityTimeout != 30 {
			t.Errorf("queue %s: visibility %d s after a 30 s override", id, q.VisibilityTimeout)
		}
	}
	err := queueVisibility(parse(), 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "FanoutQueue -> FanoutFunction: queue visibility timeout: 20 seconds is less than function timeout: 30 seconds") {
		t.Fatalf("20 s, below the fan-out function's 30 s: %v", err)
	}
}
