package devstack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
)

// answer sends c's answer to alert id and returns the frame that answers it.
func answer(t *testing.T, c *wsClient, ref, id, option string) frame {
	t.Helper()
	c.write(map[string]any{"action": "answer", "ref": ref, "messageId": id, "option": option})
	f := c.nextOf(5*time.Second, "answer", "error")
	if f.Ref != ref {
		t.Fatalf("answer to %s: ref %q, want %q", ref, f.Ref, ref)
	}
	return f
}

// postAlert posts an alert with key and returns its messageId.
func postAlert(t *testing.T, st *devstack.Stack, key, idem, body string) string {
	t.Helper()
	// As an app should (README, Idempotency): again with the same key after
	// a 5xx, API Gateway's answer to an invocation that was throttled (the
	// stack's account concurrency is a new account's 10) or failed, and
	// may have stored the alert.
	for attempt := 1; ; attempt++ {
		r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": idem}, body)
		if r.status >= 500 && attempt < 5 {
			t.Logf("post %s: %d %s; posting again", idem, r.status, r.raw)
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
			continue
		}
		if r.status != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", body, r.status, r.raw)
		}
		return r.body["messageId"].(string)
	}
}

// Issue 16: an alert may ask its recipients for an answer; each answers
// once (forward-only, idempotent), only with the alert's options, only if
// it was for them; the status API and the trace show every answer, and the
// recipient's other devices hear of it.
func TestAnAlertAsksEachRecipientForOneAnswer(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	key := createApp(t, st, "deploys", []string{"ann", "ben", "cid"}, 100)
	ann, annLaptop, ben, cid := dial(t, st, "ann", "phone"), dial(t, st, "ann", "laptop"), dial(t, st, "ben", "phone"), dial(t, st, "cid", "phone")

	id := postAlert(t, st, key, "d-1", `{"to":["ann","ben"],"title":"Deploy 7 to prod?","body":"","ack":{"options":["approve","reject"]}}`)
	_, _, body := ann.next("message", 5*time.Second).pushed(t)
	if !strings.Contains(body, `"ack":{"firstAnswerWins":false,"options":["approve","reject"],"required":true}`) {
		t.Fatalf("the alert's body does not say what it asks: %s", body)
	}
	annLaptop.next("message", 5*time.Second)

	if f := answer(t, ann, "a1", id, "approve"); f.Type != "answer" || f.Option != "approve" || f.UserID != "ann" || f.MessageID != id {
		t.Fatalf("ann's answer: %+v", f)
	}
	if f := annLaptop.next("answer", 5*time.Second); f.Option != "approve" || f.Ref != "" {
		t.Fatalf("ann's laptop heard %+v", f)
	}
	if f := answer(t, ann, "a2", id, "approve"); f.Type != "answer" || f.Option != "approve" {
		t.Fatalf("the same answer again: %+v", f)
	}
	refusals := []struct {
		who              *wsClient
		id, option, code string
	}{
		{ann, id, "reject", "conflict"},   // an answer cannot change
		{ben, id, "maybe", "bad_request"}, // not one of the options
		{ben, id, "Nope!", "bad_request"}, // not an option at all
		{cid, id, "approve", "forbidden"}, // not a recipient
		{ben, "m-no-such-alert", "approve", "forbidden"},
	}
	for i, r := range refusals {
		if f := answer(t, r.who, fmt.Sprintf("r%d", i), r.id, r.option); f.Type != "error" || f.Code != r.code {
			t.Errorf("answer %q to %s: %+v, want %s", r.option, r.id, f, r.code)
		}
	}
	if f := answer(t, ben, "b1", id, "reject"); f.Type != "answer" || f.Option != "reject" {
		t.Fatalf("ben's answer: %+v", f)
	}
	plain := postAlert(t, st, key, "d-2", `{"to":["ben"],"title":"FYI","body":"no answer needed"}`)
	if f := answer(t, ben, "b2", plain, "ack"); f.Code != "bad_request" {
		t.Fatalf("an answer to an alert that asks for none: %+v", f)
	}

	r := call(t, st, "GET", "/v1/messages/"+id, key, nil, "")
	states := recipientStates(r)
	ack, _ := r.body["ack"].(map[string]any)
	counts, _ := r.body["counts"].(map[string]any)
	if states["ann"]["answer"] != "approve" || states["ben"]["answer"] != "reject" || states["ann"]["answeredAt"] == nil ||
		ack["answered"] != float64(2) || ack["required"] != true || counts["answered"] != float64(2) {
		t.Fatalf("status: %s", r.raw)
	}
	tr := call(t, st, "GET", "/v1/messages/"+id+"/trace", key, nil, "")
	var got []string
	for _, e := range tr.body["events"].([]any) {
		if ev := e.(map[string]any); ev["type"] == "answered" {
			got = append(got, fmt.Sprintf("%s:%s", ev["userId"], ev["detail"]))
		}
	}
	if strings.Join(got, ",") != "ann:approve,ben:reject" {
		t.Fatalf("answered events %v, want ann's and ben's once each", got)
	}
}

// Issue 16: with firstAnswerWins (approvals), of recipients answering at
// once exactly one answer stands; the others are refused, naming it.
func TestTheFirstAnswerWinsAnApproval(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	key := createApp(t, st, "approvals", []string{"ann", "ben", "cid"}, 100)
	clients := []*wsClient{dial(t, st, "ann", "p"), dial(t, st, "ben", "p"), dial(t, st, "cid", "p")}
	id := postAlert(t, st, key, "po-7", `{"to":["ann","ben","cid"],"title":"Approve PO-7?","body":"$12,400","ack":{"options":["approve","reject"],"firstAnswerWins":true}}`)
	for _, c := range clients {
		c.next("message", 5*time.Second)
	}
	options := []string{"approve", "reject", "approve"}
	for i, c := range clients { // all three at once
		c.write(map[string]any{"action": "answer", "ref": "x", "messageId": id, "option": options[i]})
	}
	var won []string
	var refused []frame
	for i, c := range clients {
		f := c.nextOf(5*time.Second, "answer", "error")
		switch {
		case f.Type == "answer":
			won = append(won, fmt.Sprintf("%s:%s", f.UserID, f.Option))
			if f.Option != options[i] {
				t.Errorf("%s's answer came back as %q", f.UserID, f.Option)
			}
		case f.Code == "conflict":
			refused = append(refused, f)
		default:
			t.Fatalf("answer: %+v", f)
		}
	}
	if len(won) != 1 || len(refused) != 2 {
		t.Fatalf("won %v, refused %d: exactly one answer must stand", won, len(refused))
	}
	winner, opt, _ := strings.Cut(won[0], ":")
	for _, f := range refused {
		var msg string
		_ = json.Unmarshal(f.Message, &msg)
		if !strings.Contains(msg, winner) || !strings.Contains(msg, opt) {
			t.Errorf("refusal %q does not name the answer that stands (%s)", msg, won[0])
		}
	}
	r := call(t, st, "GET", "/v1/messages/"+id, key, nil, "")
	ack, _ := r.body["ack"].(map[string]any)
	if ack["answer"] != opt || ack["answeredBy"] != winner || ack["answered"] != float64(1) {
		t.Fatalf("status: %s", r.raw)
	}
}

// traceDetails lists "type:user:detail" of an alert's trace events of the given types.
func traceDetails(t *testing.T, st *devstack.Stack, key, id string, types ...string) []string {
	t.Helper()
	tr := call(t, st, "GET", "/v1/messages/"+id+"/trace", key, nil, "")
	var out []string
	for _, e := range tr.body["events"].([]any) {
		ev := e.(map[string]any)
		for _, typ := range types {
			if ev["type"] == typ {
				u, _ := ev["userId"].(string)
				d, _ := ev["detail"].(string)
				out = append(out, fmt.Sprintf("%s:%s:%s", typ, u, d))
			}
		}
	}
	return out
}

// Issue 16: an alert that requires an answer escalates on schedule to the
// next step's users while nobody answers, and stops the moment one does.
func TestAnUnansweredAlertEscalatesAndStopsAtTheFirstAnswer(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	key := createApp(t, st, "pager", []string{"ann", "ben", "cid"}, 100)
	ann, ben, cid := dial(t, st, "ann", "p"), dial(t, st, "ben", "p"), dial(t, st, "cid", "p")
	// Every second: re-notify ann, then ben (step 1), re-notify both,
	// then cid (step 2), re-notify all three.
	id := postAlert(t, st, key, "inc-1", `{"to":["ann"],"title":"DB down","body":"","priority":"urgent","ack":{"options":["ack"]},
		"escalation":{"everySeconds":1,"renotify":1,"steps":[{"to":["ben"]},{"to":["cid"]}]}}`)
	first := ann.next("message", 5*time.Second)
	ann.write(map[string]any{"action": "ack", "upTo": first.Seq})
	again := ann.next("message", 10*time.Second) // the re-notification
	if again.Seq != first.Seq || again.Renotify != 1 || !again.Urgent || !first.Urgent || first.Renotify != 0 {
		t.Fatalf("ann's re-notification is seq %d (renotify %d, urgent %v), the alert seq %d (renotify %d, urgent %v): want the same seq, flagged",
			again.Seq, again.Renotify, again.Urgent, first.Seq, first.Renotify, first.Urgent)
	}
	ann.write(map[string]any{"action": "ack", "upTo": first.Seq})
	got := ben.next("message", 10*time.Second) // step 1
	if mid, _, _ := got.pushed(t); mid != id {
		t.Fatalf("ben got %s, want the alert %s", mid, id)
	}
	if f := answer(t, ben, "b1", id, "ack"); f.Type != "answer" {
		t.Fatalf("ben's answer: %+v", f)
	}
	// Stopped: cid never gets it, and nobody is re-notified after the
	// answer (two more intervals and the poll would have done both).
	waitFor(t, "the escalation to end", func() bool {
		esc, _ := call(t, st, "GET", "/v1/messages/"+id, key, nil, "").body["escalation"].(map[string]any)
		return esc["state"] == "ended"
	})
	cid.quiet("message", 3*time.Second)
	r := call(t, st, "GET", "/v1/messages/"+id, key, nil, "")
	esc := r.body["escalation"].(map[string]any)
	if to, _ := esc["escalatedTo"].([]any); len(to) != 1 || to[0] != "ben" || recipientStates(r)["ben"]["answer"] != "ack" {
		t.Fatalf("status: %s", r.raw)
	}
	ended := traceDetails(t, st, key, id, "escalation_ended")
	if len(ended) != 1 || !strings.Contains(ended[0], "answered (ack by ben)") {
		t.Fatalf("escalation_ended events: %v", ended)
	}
	if esc := traceDetails(t, st, key, id, "escalated"); strings.Join(esc, ",") != "escalated:ann:tick 1: re-notify 1 of 1,escalated:ben:tick 2: step 1" {
		t.Fatalf("escalated events: %v", esc)
	}
}

// Issue 16: when nobody answers, the escalation runs every step and ends.
func TestAnAlertNobodyAnswersReachesTheLastStepAndEnds(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	key := createApp(t, st, "pager", []string{"ann", "ben"}, 100)
	ben := dial(t, st, "ben", "p")
	id := postAlert(t, st, key, "inc-2", `{"to":["ann"],"title":"Disk full","body":"","ack":{},"escalation":{"everySeconds":1,"steps":[{"to":["ben"]}]}}`)
	if mid, _, _ := ben.next("message", 10*time.Second).pushed(t); mid != id {
		t.Fatalf("ben got %s", mid)
	}
	waitFor(t, "the escalation to end", func() bool {
		esc, _ := call(t, st, "GET", "/v1/messages/"+id, key, nil, "").body["escalation"].(map[string]any)
		return esc["state"] == "ended"
	})
	// The escalation job records its trace after the state it reads back:
	// wait for the event, then check there is exactly one.
	var ended []string
	waitFor(t, "the escalation_ended event", func() bool {
		ended = traceDetails(t, st, key, id, "escalation_ended")
		return len(ended) > 0
	})
	if len(ended) != 1 || !strings.Contains(ended[0], "nobody answered") {
		t.Fatalf("escalation_ended events: %v", ended)
	}
	// Bad escalations are refused and store nothing.
	for _, bad := range []string{
		`{"to":["ann"],"title":"x","body":"","escalation":{"everySeconds":1,"steps":[{"to":["ben"]}]}}`,                          // no ack
		`{"to":["ann"],"title":"x","body":"","ack":{"required":false},"escalation":{"everySeconds":1,"steps":[{"to":["ben"]}]}}`, // not required
		`{"to":["ann"],"title":"x","body":"","ack":{},"escalation":{"everySeconds":86401,"steps":[{"to":["ben"]}]}}`,             // over a day
		`{"to":["ann"],"title":"x","body":"","ack":{},"escalation":{"everySeconds":1,"steps":[{"to":["zed"]}]}}`,                 // outside the app's scope
	} {
		if r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "bad"}, bad); r.status != http.StatusBadRequest && r.status != http.StatusForbidden {
			t.Errorf("%s: %d %s", bad, r.status, r.raw)
		}
	}
}

// Issue 16: an escalation step may name a group: its members at the time
// of the post are the step's users (the app needs the group in its scope).
func TestAnEscalationStepMayNameAGroup(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	lead := dial(t, st, "lead", "p")
	lead.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:l2", "name": "Second line", "users": []string{"ben", "cid"}}, nil)
	b, _ := json.Marshal(map[string]any{"name": "pager", "allowUsers": []string{"ann", "ben", "cid", "lead"}, "allowGroups": []string{"l2"}})
	r := call(t, st, "POST", "/v1/apps", devstack.DefaultAdminKey, nil, string(b))
	if r.status != http.StatusCreated {
		t.Fatalf("create app: %d %s", r.status, r.raw)
	}
	key := r.body["key"].(string)
	if r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "g-bad"},
		`{"to":["ann"],"title":"x","body":"","ack":{},"escalation":{"everySeconds":1,"steps":[{"group":"l3"}]}}`); r.status != http.StatusForbidden {
		t.Fatalf("a group outside the app's scope: %d %s", r.status, r.raw)
	}
	id := postAlert(t, st, key, "g-1", `{"to":["ann"],"title":"DB down","body":"","ack":{},"escalation":{"everySeconds":1,"steps":[{"group":"l2"}]}}`)
	ben := dial(t, st, "ben", "p")
	got := ben.next("message", 15*time.Second)
	if mid, _, _ := got.pushed(t); mid != id {
		t.Fatalf("ben got %s, want the alert", mid)
	}
	waitFor(t, "the escalation to end", func() bool {
		esc, _ := call(t, st, "GET", "/v1/messages/"+id, key, nil, "").body["escalation"].(map[string]any)
		return esc["state"] == "ended"
	})
	esc := call(t, st, "GET", "/v1/messages/"+id, key, nil, "").body["escalation"].(map[string]any)
	var to []string
	for _, u := range esc["escalatedTo"].([]any) {
		to = append(to, u.(string))
	}
	if strings.Join(to, ",") != "ben,cid,lead" { // the group's members: the creator is one
		t.Fatalf("escalated to %v", to)
	}
}
