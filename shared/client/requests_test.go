package client

import (
	"encoding/json"
	"testing"
	"time"
)

// A request takes one answer; a second answer to its ref (a duplicated
// frame, or one that came after the request gave up) is dropped, never
// waited on: the session goroutine that delivers it also sends, acks and
// reads every other frame. A CI chaos run had a device wedged this way for
// good (its session blocked 13 minutes on the full answer channel; a send
// of that device never left its outbox).
func TestASecondAnswerToARequestDoesNotBlockTheSession(t *testing.T) {
	t.Parallel()
	c := &Client{answers: map[string]*pendingQuery{"q1": {answer: make(chan json.RawMessage, 1)}}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.answer("q1", []byte(`{"type":"group","n":1}`))
		c.answer("q1", []byte(`{"type":"group","n":1}`)) // the duplicate
		c.answer("q2", []byte(`{"type":"group"}`))       // nobody waits for q2
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("answer blocked on a second answer to the same ref")
	}
	if got := string(<-c.answers["q1"].answer); got != `{"type":"group","n":1}` {
		t.Errorf("the request got %s, want its first answer", got)
	}
}
