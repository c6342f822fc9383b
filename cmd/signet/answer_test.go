package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Issue 16: `signet chat` shows that an alert asks for an answer and its
// escalation's re-notification, and /answer gives the answer; a second,
// different answer is refused in the server's words.
func TestChatAnswersAnAlert(t *testing.T) {
	st := startLocal(t)
	var keyOut, errOut bytes.Buffer
	if code := run(context.Background(), []string{"apps", "create", "--name", "pager", "--allow-user", "bob", "--api", st.HTTPURL}, &keyOut, &errOut); code != 0 {
		t.Fatalf("apps create: %d %s", code, errOut.String())
	}
	key := strings.TrimSpace(keyOut.String())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, inW := io.Pipe()
	stdin = in
	var out syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"chat", "--user", "bob", "--url", st.URL, "--data", t.TempDir()}, &out, &out)
	}()
	waitText(t, &out, "Commands:")
	// bob's laptop, a second chat session, hears of the phone's answer.
	laptopIn, laptopW := io.Pipe()
	stdin = laptopIn
	var laptop syncBuffer
	laptopDone := make(chan int)
	go func() {
		laptopDone <- run(ctx, []string{"chat", "--user", "bob", "--device", "laptop", "--url", st.URL, "--data", t.TempDir()}, &laptop, &laptop)
	}()
	waitText(t, &laptop, "Commands:")
	req, _ := http.NewRequest("POST", st.HTTPURL+"/v1/messages", strings.NewReader(`{"to":["bob"],"title":"Deploy 7?","body":"","priority":"urgent","ack":{"options":["approve","reject"]},"escalation":{"everySeconds":1,"renotify":1,"steps":[{"to":["bob"]}]}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Idempotency-Key", "d7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %v %v", resp, err)
	}
	resp.Body.Close()
	waitText(t, &out, "it asks for an answer: /to a:pager, then /answer approve|reject")
	waitText(t, &out, "again: URGENT ⚑ Deploy 7?") // the escalation's re-notification
	fmt.Fprintln(inW, "/answer approve")           // not in the conversation yet
	waitText(t, &out, "no alert here asks for an answer")
	fmt.Fprintln(inW, "/to a:pager")
	fmt.Fprintln(inW, "/answer approve")
	waitText(t, &out, `Answered approve to "Deploy 7?".`)
	waitText(t, &laptop, "You answered approve on another device")
	fmt.Fprintln(inW, "/answer reject")
	waitText(t, &out, "answered \"approve\" already")
	fmt.Fprintln(laptopW, "/quit")
	if code := <-laptopDone; code != 0 {
		t.Fatalf("laptop chat exit %d:\n%s", code, laptop.String())
	}
	fmt.Fprintln(inW, "/quit")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("chat exit %d:\n%s", code, out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("chat did not quit")
	}
}
