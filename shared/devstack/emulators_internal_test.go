package devstack

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The process's one goaws serves every stack's queues: a stack creating
// or deleting a queue must not wait out another stack's long poll (the
// cost benchmark polls for 20 s), nor hold up every request queued behind
// it. Its long polls under way are woken and answer with no message; the
// queue change then runs alone. Fails if serialized makes the change wait
// for the poll: the poll here ends when woken, or after a minute.
func TestAQueueChangeWakesTheLongPollsUnderWay(t *testing.T) {
	polling, woken := make(chan struct{}), make(chan struct{})
	h := serialized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" {
			close(polling)
			select {
			case <-r.Context().Done(): // woken (or abandoned)
				close(woken)
			case <-time.After(time.Minute): // the wait of a poll nothing woke
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	request := func(target string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		r.Header.Set("X-Amz-Target", target)
		return r
	}
	polled := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, request("AmazonSQS.ReceiveMessage"))
		polled <- rec.Code
	}()
	<-polling
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("AmazonSQS.CreateQueue")) // returns only once the poll let go
	select {
	case <-woken:
	default:
		t.Fatal("the queue change ran while a long poll was under way")
	}
	if rec.Code != http.StatusOK {
		t.Fatalf("CreateQueue: status %d", rec.Code)
	}
	if code := <-polled; code != http.StatusOK {
		t.Fatalf("the woken poll answered %d, want an empty 200", code)
	}
	// A poll after the change is not woken by it.
	h2 := serialized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Err() != nil {
			t.Error("a poll started after the queue change was cancelled")
		}
	}))
	h2.ServeHTTP(httptest.NewRecorder(), request("AmazonSQS.CreateQueue"))
	h2.ServeHTTP(httptest.NewRecorder(), request("AmazonSQS.ReceiveMessage"))
}
