package devstack_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/wire"
)

type httpResult struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func call(t *testing.T, st *devstack.Stack, method, path, key string, headers map[string]string, body string) httpResult {
	t.Helper()
	req, _ := http.NewRequest(method, st.HTTPURL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := httpResult{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func createApp(t *testing.T, st *devstack.Stack, name string, users []string, rate int) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"name": name, "allowUsers": users, "ratePerMinute": rate})
	r := call(t, st, "POST", "/v1/apps", devstack.DefaultAdminKey, nil, string(b))
	if r.status != http.StatusCreated {
		t.Fatalf("create app: %d %s", r.status, r.raw)
	}
	return r.body["key"].(string)
}

func recipientStates(r httpResult) map[string]map[string]any {
	out := map[string]map[string]any{}
	recs, _ := r.body["recipients"].([]any)
	for _, x := range recs {
		m := x.(map[string]any)
		out[m["userId"].(string)] = m
	}
	return out
}

// The scenario: an alert to three users (one online, one offline
// who connects later, one whose device never acks), read back over time.
func TestAlertToThreeUsersShowsEachPathToDelivery(t *testing.T) {
	t.Parallel()
	policy := im.Redelivery{PushTimeout: time.Second, Backoff: []time.Duration{time.Second, time.Second, time.Second, time.Second}}
	st := startStack(t, devstack.Options{Redelivery: &policy})
	key := createApp(t, st, "monitoring", []string{"ann", "ben", "cid"}, 100)

	ann := dial(t, st, "ann", "phone") // online, acks
	cid := dial(t, st, "cid", "pager") // online, never acks
	body := `{"to":["ann","ben","cid"],"title":"DB primary down","body":"failover needed","priority":"urgent"}`
	r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "inc-42"}, body)
	if r.status != http.StatusAccepted {
		t.Fatalf("post: %d %s", r.status, r.raw)
	}
	id := r.body["messageId"].(string)
	if got := recipientStates(r); len(got) != 3 || got["ben"]["state"] != "stored" {
		t.Fatalf("accepted = %s", r.raw)
	}
	push := ann.next("message", 5*time.Second)
	if _, from, b := push.pushed(t); from != "app.monitoring" || !strings.Contains(b, "DB primary down") {
		t.Fatalf("ann got %s from %s", b, from)
	}
	ann.write(map[string]any{"action": "ack", "upTo": push.Seq})

	status := func() map[string]map[string]any {
		r := call(t, st, "GET", "/v1/messages/"+id, key, nil, "")
		if r.status != http.StatusOK {
			t.Fatalf("status: %d %s", r.status, r.raw)
		}
		return recipientStates(r)
	}
	waitFor(t, "ann delivered", func() bool { return status()["ann"]["state"] == "delivered" })
	// ann reads it: the read watermark of the app's conversation.
	ann.readPushed(push)
	waitFor(t, "ann read", func() bool { return status()["ann"]["state"] == "read" })
	if s := status(); s["ben"]["state"] != "stored" || s["cid"]["state"] != "pushed" || s["ann"]["deliveredAt"] == nil || s["ann"]["readAt"] == nil {
		t.Fatalf("states = %v", s)
	}

	// ben connects later and syncs; his ack makes it delivered.
	ben := dial(t, st, "ben", "laptop")
	ben.write(map[string]any{"action": "sync", "cursor": 0})
	page := ben.next("sync", 5*time.Second)
	if len(page.Messages) != 1 || page.Messages[0].Message.MessageID != id {
		t.Fatalf("ben's sync = %+v", page)
	}
	ben.write(map[string]any{"action": "ack", "upTo": page.Messages[0].Seq})
	waitFor(t, "ben delivered", func() bool { return status()["ben"]["state"] == "delivered" })

	// cid never acks: re-pushed on the backoff schedule, then no more.
	for range 1 + policy.MaxRetries() {
		cid.next("message", 10*time.Second)
	}
	cid.quiet("message", 3*time.Second)
	s := status()
	if s["cid"]["state"] != "pushed" || s["cid"]["pushes"].(float64) != float64(1+policy.MaxRetries()) {
		t.Fatalf("cid = %v, want pushed %d times", s["cid"], 1+policy.MaxRetries())
	}

	tr := call(t, st, "GET", "/v1/messages/"+id+"/trace", key, nil, "")
	if tr.status != http.StatusOK {
		t.Fatalf("trace: %d %s", tr.status, tr.raw)
	}
	count := map[string]int{}
	for _, e := range tr.body["events"].([]any) {
		ev := e.(map[string]any)
		k := ev["type"].(string)
		if u, ok := ev["userId"].(string); ok {
			k += ":" + u
		}
		count[k]++
		if ev["function"] == "" || ev["at"] == "" {
			t.Fatalf("event without function or time: %v", ev)
		}
	}
	want := map[string]int{
		"created": 1, "stored": 1, "inboxed:ann": 1, "inboxed:ben": 1, "inboxed:cid": 1,
		"acked:ann": 1, "read:ann": 1, "acked:ben": 1, "awaiting_pull:ben": 1,
		"pushed:cid": 1 + policy.MaxRetries(), "redelivery_scheduled:cid": policy.MaxRetries(), "awaiting_pull:cid": 1,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("trace has %d %q events, want %d (all: %v)", count[k], k, n, count)
		}
	}
}

func TestAlertIdempotencyReplayAndConflict(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	key := createApp(t, st, "hr", []string{"*"}, 100)
	body := `{"to":["ann"],"title":"Sign the form","body":"today"}`
	first := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "k1"}, body)
	again := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "k1"}, body)
	if first.status != 202 || again.status != 202 || first.raw != again.raw {
		t.Fatalf("replay: %d %s / %d %s", first.status, first.raw, again.status, again.raw)
	}
	other := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "k1"}, `{"to":["ann"],"title":"Other","body":"x"}`)
	if other.status != http.StatusConflict || other.body["error"].(map[string]any)["code"] != "conflict" {
		t.Fatalf("conflict: %d %s", other.status, other.raw)
	}
	if head, _, _ := st.Store.Head(context.Background(), "ann"); head != 1 {
		t.Fatalf("ann's inbox head = %d after a replay and a conflict, want 1", head)
	}
}

func TestAlertRejectionsStoreNothing(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	key := createApp(t, st, "ops", []string{"ann"}, 3)
	ok := `{"to":["ann"],"title":"t","body":"b"}`
	idem := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	cases := []struct {
		name    string
		method  string
		path    string
		key     string
		headers map[string]string
		body    string
		status  int
		code    string
	}{
		{"no key", "POST", "/v1/messages", "", idem("a"), ok, 401, "unauthorized"},
		{"bad key", "POST", "/v1/messages", "sk_ops_nope", idem("a"), ok, 401, "unauthorized"},
		{"garbage key", "POST", "/v1/messages", "hello", idem("a"), ok, 401, "unauthorized"},
		{"no idempotency key", "POST", "/v1/messages", key, nil, ok, 400, "bad_request"},
		{"malformed JSON", "POST", "/v1/messages", key, idem("b"), `{"to":`, 400, "bad_request"},
		{"unknown field", "POST", "/v1/messages", key, idem("c"), `{"to":["ann"],"title":"t","body":"b","x":1}`, 400, "bad_request"},
		{"missing title", "POST", "/v1/messages", key, idem("d"), `{"to":["ann"],"body":"b"}`, 400, "bad_request"},
		{"bad priority", "POST", "/v1/messages", key, idem("e"), `{"to":["ann"],"title":"t","body":"b","priority":"asap"}`, 400, "bad_request"},
		{"bad user id", "POST", "/v1/messages", key, idem("f"), `{"to":["a:b"],"title":"t","body":"b"}`, 400, "bad_request"},
		{"group out of scope", "POST", "/v1/messages", key, idem("g"), `{"group":"ops","title":"t","body":"b"}`, 403, "forbidden"},
		{"no recipients", "POST", "/v1/messages", key, idem("g2"), `{"title":"t","body":"b"}`, 400, "bad_request"},
		{"out of scope", "POST", "/v1/messages", key, idem("h"), `{"to":["ann","zoe"],"title":"t","body":"b"}`, 403, "forbidden"},
		{"oversize", "POST", "/v1/messages", key, idem("i"), `{"to":["ann"],"title":"t","body":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "too_large"},
		{"admin cannot post", "POST", "/v1/messages", devstack.DefaultAdminKey, idem("j"), ok, 403, "forbidden"},
		{"app cannot create apps", "POST", "/v1/apps", key, nil, `{"name":"x"}`, 403, "forbidden"},
		{"unknown message", "GET", "/v1/messages/m404", key, nil, "", 404, "not_found"},
		// Issue 11 findings 8 and 12: bodies every reader reads alike,
		// display text without controls, no app sender as a recipient.
		{"invalid UTF-8", "POST", "/v1/messages", key, idem("u1"), "{\"to\":[\"ann\"],\"title\":\"t\xff\",\"body\":\"b\"}", 400, "bad_request"},
		{"duplicate key", "POST", "/v1/messages", key, idem("u2"), `{"to":["ann"],"title":"t","title":"u","body":"b"}`, 400, "bad_request"},
		{"lone surrogate", "POST", "/v1/messages", key, idem("u3"), `{"to":["ann"],"title":"t\ud800","body":"b"}`, 400, "bad_request"},
		{"NUL in title", "POST", "/v1/messages", key, idem("u4"), `{"to":["ann"],"title":"t\u0000","body":"b"}`, 400, "bad_request"},
		{"bidi override in title", "POST", "/v1/messages", key, idem("u5"), `{"to":["ann"],"title":"Invoice \u202egpj.exe","body":"b"}`, 400, "bad_request"},
		{"app sender as recipient", "POST", "/v1/messages", key, idem("u6"), `{"to":["app.ops"],"title":"t","body":"b"}`, 400, "bad_request"},
	}
	for _, tc := range cases {
		r := call(t, st, tc.method, tc.path, tc.key, tc.headers, tc.body)
		e, _ := r.body["error"].(map[string]any)
		if r.status != tc.status || e == nil || e["code"] != tc.code || e["message"] == "" {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.raw, tc.status, tc.code)
		}
	}
	if head, _, _ := st.Store.Head(context.Background(), "ann"); head != 0 {
		t.Fatalf("ann's inbox head = %d after rejected requests", head)
	}
	// Rate limit: 3 per minute for this app (rejections above took no slot
	// only if they failed before the limiter; count what is left). The
	// limit is per calendar minute: start the posts well inside one.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 15*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	statuses := []int{}
	for i := range 5 {
		statuses = append(statuses, call(t, st, "POST", "/v1/messages", key, idem(fmt.Sprint("r", i)), ok).status)
	}
	if statuses[len(statuses)-1] != http.StatusTooManyRequests {
		t.Fatalf("statuses %v: the 5th post in a minute should be 429", statuses)
	}
	r := call(t, st, "POST", "/v1/messages", key, idem("r9"), ok)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("429 without Retry-After: %d %v", r.status, r.header)
	}
	// Issue 11 finding 10: a retry of an accepted key is answered with its
	// stored 202 even when the quota is spent (and the scheme's case is free).
	accepted := call(t, st, "POST", "/v1/messages", "", map[string]string{"Idempotency-Key": "r0", "Authorization": "bearer " + key}, ok)
	if accepted.status != http.StatusAccepted || accepted.body["messageId"] == nil {
		t.Fatalf("retry of an accepted key with the quota spent: %d %s, want its 202", accepted.status, accepted.raw)
	}
	if head, _, _ := st.Store.Head(context.Background(), "ann"); head != 3 {
		t.Fatalf("ann's inbox head = %d after 3 accepted alerts and a replay, want 3", head)
	}
	// Another app may not read this app's alerts; a revoked key stops working.
	other := createApp(t, st, "other", []string{"*"}, 10)
	first := call(t, st, "POST", "/v1/messages", other, idem("o1"), ok)
	id := first.body["messageId"].(string)
	if r := call(t, st, "GET", "/v1/messages/"+id, key, nil, ""); r.status != 403 {
		t.Fatalf("foreign read: %d %s", r.status, r.raw)
	}
	if r := call(t, st, "GET", "/v1/messages/"+id, devstack.DefaultAdminKey, nil, ""); r.status != 200 {
		t.Fatalf("admin read: %d %s", r.status, r.raw)
	}
	if r := call(t, st, "DELETE", "/v1/apps/other", devstack.DefaultAdminKey, nil, ""); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	if r := call(t, st, "POST", "/v1/messages", other, idem("o2"), ok); r.status != 401 {
		t.Fatalf("revoked key: %d %s", r.status, r.raw)
	}
}

// Chat messages have a trace too, readable with the admin key. With
// TraceSample 1 the send writes it in full (each connection pushed and its
// redelivery check); by default a send that went as expected and was not
// sampled writes nothing to the trace table and its trace is derived from
// what is stored (issue 12) — the same lifecycle, per user.
func TestChatMessageTrace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sample  string
		written bool
	}{{"1", true}, {"", false}} {
		t.Run("TraceSample="+cmp.Or(c.sample, "default"), func(t *testing.T) {
			t.Parallel()
			var o devstack.Options
			if c.sample != "" {
				o.Parameters = map[string]string{"TraceSample": c.sample}
			}
			st := startStack(t, o)
			alice := dial(t, st, "alice", "laptop")
			bob := dial(t, st, "bob", "phone")
			var sent frame
			for i := 0; ; i++ {
				// An id in the sampled share is written in full: send
				// again until one is not (one in 50 is).
				alice.send(fmt.Sprintf("c%d", i), "bob", "hi")
				sent = alice.next("sent", 5*time.Second)
				f := bob.next("message", 5*time.Second)
				bob.write(map[string]any{"action": "ack", "upTo": f.Seq})
				if c.written || !im.MessageID(sent.MessageID).Sampled(st.Config.TraceSample) {
					break
				}
			}
			want := []string{`"type":"created"`, `"type":"stored"`, `"type":"inboxed"`, `"type":"pushed"`, `"function":"send"`, `"type":"acked"`, `"function":"ack"`}
			if c.written {
				// The send function writes its trace when its pushes are
				// done, which is after the ACK (sent goes out before any
				// push): wait for both.
				want = append(want, `"type":"redelivery_scheduled"`, `"connectionId":"`)
			}
			var raw string
			waitFor(t, "send and ack events in the trace", func() bool {
				r := call(t, st, "GET", "/v1/messages/"+sent.MessageID+"/trace", devstack.DefaultAdminKey, nil, "")
				raw = r.raw
				for _, w := range want {
					if !strings.Contains(r.raw, w) {
						return false
					}
				}
				return r.status == 200
			})
			// What the trace table holds for the message: the send's
			// item when written, nothing when derived.
			time.Sleep(300 * time.Millisecond) // the send's flush follows its pushes
			out, err := st.DynamoDB.Query(context.Background(), &dynamodb.QueryInput{
				TableName:                 aws.String(st.Resources.Tables["TraceTable"]),
				KeyConditionExpression:    aws.String("messageId = :m"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":m": &types.AttributeValueMemberS{Value: sent.MessageID}},
				ConsistentRead:            aws.Bool(true),
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(out.Items) > 0; got != c.written {
				t.Fatalf("trace items of %s: %d, want written=%v; trace:\n%s", sent.MessageID, len(out.Items), c.written, raw)
			}
		})
	}
}

// An alert to a group reaches every current member, scoped by allowGroups.
// A group alert once wrote and pushed each member one after another inside
// the alerts function's 10 s: a few hundred members timed out. It goes
// through the fan-out queue now, in batches (here of 2), exactly once each.
func TestAlertToAGroupReachesItsMembers(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{FanoutBatch: 2})
	owner := dial(t, st, "lead", "laptop")
	owner.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:oncall", "name": "On-call", "users": []string{"ann", "ben"}}, nil)
	owner.request(map[string]any{"action": "group", "op": "remove", "conversationId": "g:oncall", "users": []string{"ben"}}, nil)
	b, _ := json.Marshal(map[string]any{"name": "pager", "allowUsers": []string{"zoe"}, "allowGroups": []string{"oncall"}})
	r := call(t, st, "POST", "/v1/apps", devstack.DefaultAdminKey, nil, string(b))
	if r.status != http.StatusCreated {
		t.Fatalf("create app: %d %s", r.status, r.raw)
	}
	key := r.body["key"].(string)
	r = call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "p1"}, `{"group":"oncall","to":["zoe"],"title":"disk full","body":"db-3"}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("post: %d %s", r.status, r.raw)
	}
	var got []string
	for _, rc := range r.body["recipients"].([]any) {
		got = append(got, rc.(map[string]any)["userId"].(string))
		if state := rc.(map[string]any)["state"]; state != "queued" {
			t.Errorf("recipient %v: state %v, want queued (the fan-out queue delivers it)", rc, state)
		}
	}
	slices.Sort(got)
	if strings.Join(got, ",") != "ann,lead,zoe" { // ben was removed
		t.Fatalf("recipients = %v", got)
	}
	waitFor(t, "the alert in every member's inbox", func() bool {
		for _, u := range []im.UserID{"ann", "lead", "zoe"} {
			if head, _, _ := st.Store.Head(context.Background(), u); head < 1 {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second) // a retried job would land by now
	for _, u := range []im.UserID{"ann", "lead", "zoe"} {
		if head, _, _ := st.Store.Head(context.Background(), u); head != 1 {
			t.Errorf("%s inbox head = %d, want the alert exactly once", u, head)
		}
	}
	// The status now shows every recipient stored (or further).
	id := r.body["messageId"].(string)
	status := call(t, st, "GET", "/v1/messages/"+id, key, nil, "")
	for _, rc := range status.body["recipients"].([]any) {
		if state := rc.(map[string]any)["state"]; state == "queued" {
			t.Errorf("after the fan-out, %v is still queued", rc)
		}
	}
	if head, _, _ := st.Store.Head(context.Background(), "ben"); head != 0 {
		t.Errorf("removed member got the alert")
	}
	if r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "p2"}, `{"group":"nope","title":"t","body":"b"}`); r.status != http.StatusForbidden {
		t.Fatalf("foreign group: %d %s", r.status, r.raw)
	}
}

// Issue 11 findings 5 and 6: any user could mark any app's alert
// conversation read up to its shared head (learning how many alerts the app
// sent, and writing "read by <outsider>" into other people's traces), and
// an app's trace showed its recipients' devices, connections and requests.
func TestOnlyRecipientsReadAlertsAndAppsSeeNoDevices(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	key := createApp(t, st, "payroll", []string{"*"}, 100)
	ann := dial(t, st, "ann", "laptop")
	zoe := dial(t, st, "zoe", "laptop")
	post := func(idem, to string) string {
		t.Helper()
		r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": idem}, `{"to":["`+to+`"],"title":"Payslip","body":"ready"}`)
		if r.status != 202 {
			t.Fatalf("post: %d %s", r.status, r.raw)
		}
		return r.body["messageId"].(string)
	}
	annsAlert := post("k1", "ann")
	ann.next("message", 5*time.Second)
	bobsAlert := post("k2", "bob") // convSeq 2 of a:payroll, not ann's
	zoe.write(map[string]any{"action": "read", "conversationId": "a:payroll", "upTo": 1})
	if e := zoe.next("error", 5*time.Second); e.Code != string(wire.CodeForbidden) {
		t.Errorf("outsider read: %+v, want forbidden", e)
	}
	ann.write(map[string]any{"action": "read", "conversationId": "a:payroll", "upTo": 2})
	if e := ann.next("error", 5*time.Second); e.Code != string(wire.CodeBadRequest) {
		t.Errorf("read beyond ann's own last alert: %+v, want bad_request", e)
	}
	ann.write(map[string]any{"action": "read", "conversationId": "a:payroll", "upTo": 1})
	waitFor(t, "ann's read in her alert's trace", func() bool {
		r := call(t, st, "GET", "/v1/messages/"+annsAlert+"/trace", devstack.DefaultAdminKey, nil, "")
		return strings.Contains(r.raw, `"type":"read"`)
	})
	for _, who := range []string{devstack.DefaultAdminKey, key} {
		if r := call(t, st, "GET", "/v1/messages/"+bobsAlert+"/trace", who, nil, ""); r.status != 200 || strings.Contains(r.raw, `"type":"read"`) {
			t.Errorf("bob's alert trace: %d %s, want no read by anyone", r.status, r.raw)
		}
	}
	admin := call(t, st, "GET", "/v1/messages/"+annsAlert+"/trace", devstack.DefaultAdminKey, nil, "").raw
	app := call(t, st, "GET", "/v1/messages/"+annsAlert+"/trace", key, nil, "").raw
	for _, field := range []string{`"deviceId"`, `"connectionId"`, `"requestId"`} {
		if !strings.Contains(admin, field) {
			t.Errorf("admin trace lacks %s: %s", field, admin)
		}
		if strings.Contains(app, field) {
			t.Errorf("app trace shows %s: %s", field, app)
		}
	}
	if !strings.Contains(app, `"userId":"ann"`) || !strings.Contains(app, `"type":"pushed"`) {
		t.Errorf("app trace lost states: %s", app)
	}
}

// failFirstAppend fails the first inbox append of an alert to user (as a
// crash of the alerts function between storing the alert and reaching
// that inbox would): the app is answered 500 and retries with its key.
type failFirstAppend struct {
	handler.AlertStore
	user   im.UserID
	failed *atomic.Bool
}

func (f failFirstAppend) AppendInbox(ctx context.Context, u im.UserID, m im.Message, expiry time.Duration, now time.Time) (int64, error) {
	if u == f.user && f.failed.CompareAndSwap(false, true) {
		return 0, errors.New("injected: the function stopped before this inbox")
	}
	return f.AlertStore.AppendInbox(ctx, u, m, expiry, now)
}

// An alert that reaches a user's inbox after a later alert of the same app
// (its post failed half-way and was retried once the later one had been
// read) is below the user's read watermark of the app's conversation when
// it arrives — alert convSeqs number every user's alerts. The user has not
// read it: its status says delivered, not read (a status once said read: a
// false confirmation of an on-call alert), and it counts unread. The
// conversation's last alert stays the later one. A read naming its inbox
// seq reads it (a read at or below the watermark was once ignored, so it
// stayed unread for good): read in its status, 0 unread, the user's other
// device told.
func TestAnAlertInboxedAfterALaterOneIsNotReadByItsWatermark(t *testing.T) {
	t.Parallel()
	var failed atomic.Bool
	st := startStack(t, devstack.Options{Configure: func(fn string, h *handler.Deps) {
		if fn == "AlertsFunction" && h.AlertStore != nil {
			h.AlertStore = failFirstAppend{AlertStore: h.AlertStore, user: "ann", failed: &failed}
		}
	}})
	key := createApp(t, st, "monitoring", []string{"ann"}, 100)
	ann := dial(t, st, "ann", "phone")
	first := `{"to":["ann"],"title":"disk 90%","body":"db-1"}`
	if r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "a1"}, first); r.status != http.StatusInternalServerError {
		t.Fatalf("first post: %d %s; want 500 (the injected failure)", r.status, r.raw)
	}
	r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "a2"}, `{"to":["ann"],"title":"disk 95%","body":"db-1"}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("second post: %d %s", r.status, r.raw)
	}
	second := ann.next("message", 5*time.Second)
	ann.write(map[string]any{"action": "ack", "upTo": second.Seq})
	ann.readPushed(second)
	status := func(id string) map[string]any {
		r := call(t, st, "GET", "/v1/messages/"+id, key, nil, "")
		if r.status != http.StatusOK {
			t.Fatalf("status: %d %s", r.status, r.raw)
		}
		return recipientStates(r)["ann"]
	}
	waitFor(t, "the second alert read", func() bool { return status(r.body["messageId"].(string))["state"] == "read" })
	r = call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "a1"}, first)
	if r.status != http.StatusAccepted {
		t.Fatalf("first post retried: %d %s", r.status, r.raw)
	}
	late := ann.next("message", 5*time.Second)
	ann.write(map[string]any{"action": "ack", "upTo": late.Seq})
	id := r.body["messageId"].(string)
	waitFor(t, "the late alert delivered", func() bool { return status(id)["state"] != "pushed" })
	if s := status(id); s["state"] != "delivered" || s["readAt"] != nil {
		t.Fatalf("the late alert's status for ann: %v; want delivered, not read", s)
	}
	convs, _, err := st.Store.Conversations(context.Background(), "ann", "", 10)
	if err != nil || len(convs) != 1 {
		t.Fatalf("ann's conversations: %+v, %v", convs, err)
	}
	var secondConvSeq int64
	_ = json.Unmarshal(second.Message, &struct {
		ConvSeq *int64 `json:"convSeq"`
	}{&secondConvSeq})
	if c := convs[0]; c.Last != secondConvSeq || c.Unread() != 1 {
		t.Fatalf("ann's app conversation: last %d, unread %d; want the later alert's %d and 1 unread", c.Last, c.Unread(), secondConvSeq)
	}
	tablet := dial(t, st, "ann", "tablet")
	ann.write(map[string]any{"action": "read", "conversationId": "a:monitoring", "upTo": secondConvSeq, "inboxSeq": late.Seq})
	if f := tablet.next("read", 5*time.Second); f.UpTo != secondConvSeq || f.InboxSeq != late.Seq {
		t.Fatalf("ann's tablet was told %+v; want the read up to inbox seq %d", f, late.Seq)
	}
	if s := status(id); s["state"] != "read" || s["readAt"] == nil {
		t.Fatalf("the late alert's status once ann read it: %v; want read", s)
	}
	convs, _, err = st.Store.Conversations(context.Background(), "ann", "", 10)
	if err != nil || len(convs) != 1 || convs[0].Unread() != 0 || convs[0].ReadSeq != late.Seq {
		t.Fatalf("ann's conversations after the read: %+v, %v; want 0 unread, read up to inbox seq %d", convs, err, late.Seq)
	}
}

// An urgent alert that reaches an inbox after a later alert of its app
// (below the read watermark) is re-pushed until read like any other: the
// repeat once took the watermark for a read and skipped it. Once read by
// its inbox seq, the re-pushes stop.
func TestALateUrgentAlertIsRepushedUntilRead(t *testing.T) {
	t.Parallel()
	var failed atomic.Bool
	st := startStack(t, devstack.Options{Configure: func(fn string, h *handler.Deps) {
		if fn == "AlertsFunction" && h.AlertStore != nil {
			h.AlertStore = failFirstAppend{AlertStore: h.AlertStore, user: "ann", failed: &failed}
		}
	}})
	key := createApp(t, st, "oncall", []string{"ann"}, 100)
	ann := dial(t, st, "ann", "phone")
	urgent := `{"to":["ann"],"title":"Pager","body":"","priority":"urgent","repeat":{"everySeconds":3,"times":10}}`
	if r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "u1"}, urgent); r.status != http.StatusInternalServerError {
		t.Fatalf("urgent post: %d %s; want 500 (the injected failure)", r.status, r.raw)
	}
	laterID := postAlert(t, st, key, "n1", `{"to":["ann"],"title":"FYI","body":""}`)
	later := ann.next("message", 5*time.Second)
	ann.write(map[string]any{"action": "ack", "upTo": later.Seq})
	ann.readPushed(later)
	// The read names no inbox seq (an older client): applied after the
	// retried post, it would read the late alert too (protocol.md, read).
	waitFor(t, "the later alert read", func() bool {
		return recipientStates(call(t, st, "GET", "/v1/messages/"+laterID, key, nil, ""))["ann"]["state"] == "read"
	})
	r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "u1"}, urgent)
	if r.status != http.StatusAccepted {
		t.Fatalf("urgent post retried: %d %s", r.status, r.raw)
	}
	id := r.body["messageId"].(string)
	late := ann.next("message", 5*time.Second)
	ann.write(map[string]any{"action": "ack", "upTo": late.Seq})
	f := ann.next("message", 15*time.Second)
	if mid, _, _ := f.pushed(t); mid != id || f.Renotify < 1 || !f.Urgent {
		t.Fatalf("the late urgent alert's re-push: %s renotify %d urgent %v", mid, f.Renotify, f.Urgent)
	}
	var convSeq int64
	_ = json.Unmarshal(later.Message, &struct {
		ConvSeq *int64 `json:"convSeq"`
	}{&convSeq})
	ann.write(map[string]any{"action": "read", "conversationId": "a:oncall", "upTo": convSeq, "inboxSeq": late.Seq})
	waitFor(t, "the late urgent alert read", func() bool {
		return recipientStates(call(t, st, "GET", "/v1/messages/"+id, key, nil, ""))["ann"]["state"] == "read"
	})
	// A tick already running may still re-push it once; a tick that starts
	// after the read finds nobody due and schedules no more.
	n := len(traceDetails(t, st, key, id, "escalated"))
	time.Sleep(3 * 3 * time.Second)
	if got := traceDetails(t, st, key, id, "escalated"); len(got) > n+1 {
		t.Fatalf("re-pushed %d times after the read: %v", len(got)-n, got)
	}
}
