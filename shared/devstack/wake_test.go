package devstack_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/memsns"
	"github.com/signet-im/signet/shared/wire"
)

// startPushStack is a stack with offline push on (OfflinePush=on), its
// SNS the in-process memsns or SIGNET_TEST_SNS_ENDPOINT's (LocalStack).
func startPushStack(t *testing.T) *devstack.Stack {
	t.Helper()
	return startStack(t, devstack.Options{Parameters: map[string]string{"OfflinePush": "on"}, SNSEndpoint: testSNSEndpoint()})
}

// register registers c's device for wake-ups and checks the answer.
func register(t *testing.T, c *wsClient, platform, token string) {
	t.Helper()
	var got wire.Registered
	c.request(map[string]any{"action": "register", "platform": platform, "token": token}, &got)
	if got.Type != "registered" || got.Platform != platform || got.Registered != (token != "") {
		t.Fatalf("register answered %+v", got)
	}
}

// readPushed marks the conversation of pushed message f read up to it.
func (c *wsClient) readPushed(f frame) {
	c.t.Helper()
	var pm struct {
		ConvSeq        int64  `json:"convSeq"`
		ConversationID string `json:"conversationId"`
	}
	if err := json.Unmarshal(f.Message, &pm); err != nil {
		c.t.Fatalf("message frame: %v", err)
	}
	c.write(map[string]any{"action": "read", "conversationId": pm.ConversationID, "upTo": pm.ConvSeq})
}

// registeredOffline registers user's device for wake-ups on platform and
// takes it offline.
func registeredOffline(t *testing.T, st *devstack.Stack, user, device, platform, token string, before ...map[string]any) {
	t.Helper()
	c := dialNoCleanup(t, st, user, device)
	c.t = t
	register(t, c, platform, token)
	for _, frame := range before {
		c.request(frame, nil)
	}
	goOffline(t, st, c, user)
}

// goOffline closes c and waits until user has no connection record.
func goOffline(t *testing.T, st *devstack.Stack, c *wsClient, user string) {
	t.Helper()
	c.conn.CloseNow()
	waitFor(t, user+" offline", func() bool {
		conns, err := st.Store.Connections(context.Background(), im.UserID(user))
		return err == nil && len(conns) == 0
	})
}

// wakes returns every wake-up the stack's SNS was asked to send.
func wakes(t *testing.T, st *devstack.Stack) []memsns.Message {
	t.Helper()
	all, err := st.WakeMessages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []memsns.Message
	for _, ms := range all {
		out = append(out, ms...)
	}
	return out
}

// hintsDrained waits until the presence queue (presence pushes and wake
// jobs) has nothing visible, delayed or in flight: every wake job ran.
func hintsDrained(t *testing.T, st *devstack.Stack) {
	t.Helper()
	url := st.Resources.Queues["PresenceQueue"]
	waitFor(t, "the hints queue to drain", func() bool {
		out, err := st.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
				sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible, sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range out.Attributes {
			if n, _ := strconv.Atoi(v); n > 0 {
				return false
			}
		}
		return true
	})
}

// wakeIDs decodes what a wake-up carries: APNs' {"aps","signet"} or FCM
// v1's {"fcmV1Message":{"message":{"data","android"}}} — ids only.
func wakeIDs(t *testing.T, m memsns.Message) (messageID string, urgent bool, content map[string]any) {
	t.Helper()
	if err := json.Unmarshal([]byte(m.Message), &content); err != nil {
		t.Fatalf("wake-up %q: %v", m.Message, err)
	}
	if sig, ok := content["signet"].(map[string]any); ok {
		id, _ := sig["messageId"].(string)
		return id, sig["urgent"] == true, content
	}
	fcm, _ := content["fcmV1Message"].(map[string]any)
	msg, _ := fcm["message"].(map[string]any)
	data, _ := msg["data"].(map[string]any)
	id, _ := data["messageId"].(string)
	if id == "" {
		t.Fatalf("wake-up %q names no message", m.Message)
	}
	return id, data["urgent"] == "true", content
}

// Issue 16's "Done when": a device that is offline gets one SNS
// notification (seen in the emulator) and then syncs the alert — here
// three messages in a burst: one wake-up, ids only, then all three.
func TestAnOfflineDeviceGetsOneWakeUpThenSyncs(t *testing.T) {
	t.Parallel()
	st := startPushStack(t)
	key := createApp(t, st, "pager", []string{"bob"}, 100)
	registeredOffline(t, st, "bob", "phone", "apns", "a1b2c3d4e5f6")

	var ids []string
	for i, title := range []string{"Disk 91%", "Disk 95%", "Disk full"} {
		ids = append(ids, postAlert(t, st, key, "d-"+strconv.Itoa(i), `{"to":["bob"],"title":"`+title+`","body":"secret runbook text"}`))
	}
	waitFor(t, "a wake-up", func() bool { return len(wakes(t, st)) > 0 })
	hintsDrained(t, st)
	got := wakes(t, st)
	if len(got) != 1 {
		t.Fatalf("%d wake-ups for a burst of 3 to one offline device, want 1: %+v", len(got), got)
	}
	if strings.Contains(got[0].Message, "secret runbook") || strings.Contains(got[0].Message, "Disk") {
		t.Fatalf("a wake-up carries the message: %s", got[0].Message)
	}
	// Which of the three wakes the phone is a race (their jobs run at
	// once); the one that does is traced.
	woke, urgent, apns := wakeIDs(t, got[0])
	if sig, _ := apns["signet"].(map[string]any); !slices.Contains(ids, woke) || urgent || sig["conversationId"] != "a:pager" {
		t.Fatalf("wake-up %v, want one of the alerts %v, not urgent", apns, ids)
	}
	if aps, _ := apns["aps"].(map[string]any); aps["content-available"] != float64(1) || aps["interruption-level"] != nil {
		t.Fatalf("APNs payload %v", apns)
	}
	if !strings.Contains(got[0].TargetArn, ":endpoint/APNS/") {
		t.Fatalf("published to %s, not an APNs endpoint", got[0].TargetArn)
	}
	var traced []string
	waitFor(t, "the wake-up traced", func() bool {
		return len(traceDetails(t, st, devstack.DefaultAdminKey, woke, "woken")) > 0
	})
	for _, id := range ids {
		traced = append(traced, traceDetails(t, st, devstack.DefaultAdminKey, id, "woken", "wake_held", "wake_failed")...)
	}
	if len(traced) != 1 || traced[0] != "woken:bob:apns" {
		t.Fatalf("wake-up events in the three traces: %v", traced)
	}
	// A wake-up is not delivery: the alert is still only stored for bob.
	if s := recipientStates(call(t, st, "GET", "/v1/messages/"+woke, key, nil, ""))["bob"]["state"]; s != "stored" {
		t.Fatalf("bob's state after the wake-up: %v", s)
	}

	// The phone wakes, connects and syncs all three.
	phone := dial(t, st, "bob", "phone")
	phone.write(map[string]any{"action": "sync", "cursor": 0})
	page := phone.next("sync", 10*time.Second)
	if len(page.Messages) != 3 || page.Messages[0].Message.MessageID != ids[0] || page.Messages[2].Message.MessageID != ids[2] {
		t.Fatalf("bob's sync: %+v", page)
	}
	phone.write(map[string]any{"action": "ack", "upTo": page.Messages[2].Seq})
	waitFor(t, "bob delivered", func() bool {
		return recipientStates(call(t, st, "GET", "/v1/messages/"+ids[2], key, nil, ""))["bob"]["state"] == "delivered"
	})
	// Unregistered, the device is not woken again.
	register(t, phone, "apns", "")
	goOffline(t, st, phone, "bob")
	last := postAlert(t, st, key, "d-9", `{"to":["bob"],"title":"Recovered","body":""}`)
	waitFor(t, "the alert stored", func() bool {
		return len(traceDetails(t, st, devstack.DefaultAdminKey, last, "inboxed")) == 1
	})
	hintsDrained(t, st)
	if n := len(wakes(t, st)); n != 1 {
		t.Fatalf("%d wake-ups after the device unregistered, want still 1", n)
	}
}

// Issue 16's "Done when": an urgent alert reaches a DND user and a normal
// one is held from offline push.
func TestDoNotDisturbHoldsNormalWakeUpsButNotUrgentAlerts(t *testing.T) {
	t.Parallel()
	st := startPushStack(t)
	key := createApp(t, st, "noc", []string{"ann"}, 100)
	phone := dialNoCleanup(t, st, "ann", "phone")
	phone.t = t
	register(t, phone, "fcm", "fcm-token-ann")
	phone.request(map[string]any{"action": "presence", "status": "dnd"}, nil)
	for _, bad := range []map[string]any{
		{"action": "register", "platform": "webpush", "token": "x"},
		{"action": "register", "platform": "fcm", "token": "has space"},
		{"action": "register", "platform": "fcm"},
	} {
		phone.request(bad, nil, wire.CodeBadRequest)
	}
	goOffline(t, st, phone, "ann")

	normal := postAlert(t, st, key, "n-1", `{"to":["ann"],"title":"Weekly report","body":"","priority":"normal"}`)
	waitFor(t, "the normal alert held", func() bool {
		return len(traceDetails(t, st, devstack.DefaultAdminKey, normal, "wake_held")) == 1
	})
	hintsDrained(t, st)
	if got := wakes(t, st); len(got) != 0 {
		t.Fatalf("a normal alert woke a user in do-not-disturb: %+v", got)
	}
	urgent := postAlert(t, st, key, "u-1", `{"to":["ann"],"title":"DB primary down","body":"","priority":"urgent"}`)
	waitFor(t, "the urgent wake-up", func() bool { return len(wakes(t, st)) == 1 })
	got := wakes(t, st)[0]
	if !strings.Contains(got.TargetArn, ":endpoint/GCM/") {
		t.Fatalf("published to %s, not an FCM endpoint", got.TargetArn)
	}
	if id, isUrgent, _ := wakeIDs(t, got); id != urgent || !isUrgent || !strings.Contains(got.Message, `"priority":"high"`) {
		t.Fatalf("urgent wake-up %s", got.Message)
	}
	waitFor(t, "the urgent wake-up traced", func() bool {
		return len(traceDetails(t, st, devstack.DefaultAdminKey, urgent, "woken")) > 0
	})
	if w := traceDetails(t, st, devstack.DefaultAdminKey, urgent, "woken"); len(w) != 1 || w[0] != "woken:ann:fcm, urgent" {
		t.Fatalf("urgent alert's trace: %v", w)
	}
	// Back online she syncs both, the urgent one flagged when pushed.
	phone = dial(t, st, "ann", "phone")
	phone.write(map[string]any{"action": "sync", "cursor": 0})
	page := phone.next("sync", 10*time.Second)
	if len(page.Messages) != 2 || page.Messages[0].Message.MessageID != normal || page.Messages[1].Message.MessageID != urgent {
		t.Fatalf("ann's sync: %+v", page)
	}
	again := postAlert(t, st, key, "u-2", `{"to":["ann"],"title":"DB still down","body":"","priority":"urgent"}`)
	f := phone.next("message", 10*time.Second)
	if mid, _, _ := f.pushed(t); mid != again || !f.Urgent {
		t.Fatalf("the urgent push to a DND user: %s, urgent %v", mid, f.Urgent)
	}
}

// Issue 16: an urgent alert is re-pushed on its own schedule until each
// recipient reads (or answers) it — flagged urgent and numbered — and a
// schedule is refused where it makes no sense.
func TestAnUrgentAlertIsRepushedUntilReadOrAnswered(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	key := createApp(t, st, "oncall", []string{"ann", "ben", "cid"}, 100)
	for body, want := range map[string]string{
		`{"to":["ann"],"title":"x","body":"","repeat":{"everySeconds":5,"times":2}}`:                                                                                       "repeat is for urgent alerts",
		`{"to":["ann"],"title":"x","body":"","priority":"urgent","repeat":{"everySeconds":0,"times":2}}`:                                                                   "everySeconds",
		`{"to":["ann"],"title":"x","body":"","priority":"urgent","ack":{},"repeat":{"everySeconds":5,"times":1},"escalation":{"everySeconds":5,"steps":[{"to":["ben"]}]}}`: "not both",
	} {
		if r := call(t, st, "POST", "/v1/messages", key, map[string]string{"Idempotency-Key": "bad"}, body); r.status != 400 || !strings.Contains(r.raw, want) {
			t.Fatalf("%s: %d %s, want 400 %q", body, r.status, r.raw, want)
		}
	}
	ann, ben, cid := dial(t, st, "ann", "p"), dial(t, st, "ben", "p"), dial(t, st, "cid", "p")
	id := postAlert(t, st, key, "rp-1", `{"to":["ann","ben","cid"],"title":"Pager","body":"","priority":"urgent","ack":{"options":["ack"]},"repeat":{"everySeconds":3,"times":2}}`)
	first := ann.next("message", 5*time.Second)
	ann.write(map[string]any{"action": "ack", "upTo": first.Seq})
	ann.readPushed(first)
	// ann read it and cid answers it at once: neither is pushed it again.
	if f := answer(t, cid, "c1", id, "ack"); f.Type != "answer" {
		t.Fatalf("cid's answer: %+v", f)
	}
	got := cid.next("message", 5*time.Second)
	cid.write(map[string]any{"action": "ack", "upTo": got.Seq})
	got = ben.next("message", 5*time.Second)
	ben.write(map[string]any{"action": "ack", "upTo": got.Seq}) // delivered, not read: re-pushed all the same
	for n := 1; n <= 2; n++ {
		f := ben.next("message", 15*time.Second)
		if mid, _, _ := f.pushed(t); mid != id || f.Renotify != n || !f.Urgent {
			t.Fatalf("ben's re-push %d: %s renotify %d urgent %v", n, mid, f.Renotify, f.Urgent)
		}
	}
	ann.quiet("message", 4*time.Second)
	cid.quiet("message", time.Second)
	r := call(t, st, "GET", "/v1/messages/"+id, key, nil, "")
	if rp, _ := r.body["repeat"].(map[string]any); rp["tick"] != float64(2) || rp["times"] != float64(2) || rp["everySeconds"] != float64(3) {
		t.Fatalf("status: %s", r.raw)
	}
	if got := traceDetails(t, st, key, id, "escalated"); strings.Join(got, ",") != "escalated:ben:urgent: re-push 1 of 2 (not read or answered),escalated:ben:urgent: re-push 2 of 2 (not read or answered)" {
		t.Fatalf("re-pushes traced: %v", got)
	}
	// A normal alert, or an urgent one with times 0, has none.
	plain := postAlert(t, st, key, "rp-2", `{"to":["ben"],"title":"FYI","body":""}`)
	if r := call(t, st, "GET", "/v1/messages/"+plain, key, nil, ""); strings.Contains(r.raw, `"repeat"`) {
		t.Fatalf("a normal alert repeats: %s", r.raw)
	}
}

// An urgent alert wakes the user's registered devices that are not
// connected even while another of their devices is: the on-call phone in
// a pocket while the laptop at the office is online was left asleep (a
// wake-up went only to a user with no connection at all). The connected
// device is pushed it and not woken; a normal alert wakes nobody while a
// device is connected, as before.
func TestAnUrgentAlertWakesTheUnconnectedDevicesOfAConnectedUser(t *testing.T) {
	t.Parallel()
	st := startPushStack(t)
	key := createApp(t, st, "pager", []string{"ann"}, 100)
	registeredOffline(t, st, "ann", "phone", "apns", "apns-token-ann-phone")
	laptop := dial(t, st, "ann", "laptop")
	register(t, laptop, "fcm", "fcm-token-ann-laptop")

	normal := postAlert(t, st, key, "n-1", `{"to":["ann"],"title":"Weekly report","body":""}`)
	f := laptop.next("message", 10*time.Second)
	if mid, _, _ := f.pushed(t); mid != normal {
		t.Fatalf("the laptop was pushed %s, want the normal alert", mid)
	}
	laptop.write(map[string]any{"action": "ack", "upTo": f.Seq}) // else redelivery gives up on it and wakes it
	hintsDrained(t, st)
	if got := wakes(t, st); len(got) != 0 {
		t.Fatalf("a normal alert woke a device of a connected user: %+v", got)
	}

	urgent := postAlert(t, st, key, "u-1", `{"to":["ann"],"title":"DB primary down","body":"","priority":"urgent"}`)
	f = laptop.next("message", 10*time.Second)
	if mid, _, _ := f.pushed(t); mid != urgent || !f.Urgent {
		t.Fatalf("the laptop was pushed %s (urgent %v), want the urgent alert", mid, f.Urgent)
	}
	laptop.write(map[string]any{"action": "ack", "upTo": f.Seq})
	waitFor(t, "the phone's wake-up", func() bool { return len(wakes(t, st)) > 0 })
	hintsDrained(t, st)
	got := wakes(t, st)
	if len(got) != 1 || !strings.Contains(got[0].TargetArn, ":endpoint/APNS/") {
		t.Fatalf("wake-ups %+v; want one, to the phone's APNs endpoint (the connected laptop is not woken)", got)
	}
	if id, isUrgent, _ := wakeIDs(t, got[0]); id != urgent || !isUrgent {
		t.Fatalf("the phone's wake-up names %s (urgent %v), want the urgent alert", id, isUrgent)
	}
	waitFor(t, "the wake-up traced", func() bool {
		return len(traceDetails(t, st, devstack.DefaultAdminKey, urgent, "woken")) > 0
	})
	if w := traceDetails(t, st, devstack.DefaultAdminKey, urgent, "woken"); len(w) != 1 || !strings.HasPrefix(w[0], "woken:ann:apns") {
		t.Fatalf("the urgent alert's woken events: %v", w)
	}
}

// A member of a group with no device connected is woken by a group
// message: the wake-up names the group and the message, with the member's
// inbox seq — 0 in a read-diffused group (the default), whose messages
// have no inbox seq — and is traced. The hints function once refused
// every read-diffused group's wake job as malformed and dropped it: no
// member was ever woken by such a group's message.
func TestAnOfflineMemberIsWokenByAGroupMessage(t *testing.T) {
	t.Parallel()
	for mode, seq := range map[string]float64{"read": 0, "write": 1} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			st := startStack(t, devstack.Options{Parameters: map[string]string{"OfflinePush": "on", "GroupDelivery": mode}, SNSEndpoint: testSNSEndpoint()})
			registeredOffline(t, st, "bob", "phone", "apns", "b0b0b0b0")
			alice := dial(t, st, "alice", "laptop")
			alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:oncall", "name": "On call", "users": []string{"bob"}}, nil)
			sent := alice.sendTo("w-1", "g:oncall", map[string]any{"text": "who has the pager?"})
			waitFor(t, "a wake-up", func() bool { return len(wakes(t, st)) > 0 })
			hintsDrained(t, st)
			got := wakes(t, st)
			if len(got) != 1 {
				t.Fatalf("%d wake-ups for one group message to one offline device, want 1: %+v", len(got), got)
			}
			id, urgent, apns := wakeIDs(t, got[0])
			sig, _ := apns["signet"].(map[string]any)
			if id != sent.MessageID || urgent || sig["conversationId"] != "g:oncall" || sig["seq"] != seq || strings.Contains(got[0].Message, "pager") {
				t.Fatalf("wake-up %s, want message %s of g:oncall, seq %v, ids only", got[0].Message, sent.MessageID, seq)
			}
			waitFor(t, "the wake-up traced", func() bool {
				return slices.Equal(traceDetails(t, st, devstack.DefaultAdminKey, sent.MessageID, "woken"), []string{"woken:bob:apns"})
			})
		})
	}
}

// A queue message its consumer cannot decode is dropped (retrying it
// would not help; one of a kind it does not know is retried) and is a
// fault of the stack, which fails the test:
// only the stack's own functions enqueue, so one wrote what another cannot
// read — as a read-diffused group's wake job once was for every message
// to an offline member, logged and unnoticed.
func TestAMalformedQueueMessageIsAFault(t *testing.T) {
	t.Parallel()
	st := startStackUnchecked(t, devstack.Options{Parameters: map[string]string{"OfflinePush": "on"}, SNSEndpoint: testSNSEndpoint()})
	t.Cleanup(st.Close)
	if f := st.Faults(); len(f) != 0 {
		t.Fatalf("faults before anything was sent: %v", f)
	}
	// A wake job for a 1:1 message with no inbox seq.
	url := st.Resources.Queues["PresenceQueue"]
	if _, err := st.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(`{"k":"w","u":"ann","c":"d:ann:bob","a":"m01"}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the malformed job reported", func() bool { return len(st.Faults()) > 0 })
	hintsDrained(t, st) // dropped: not left for a retry
	if f := st.Faults(); len(f) != 1 || !strings.Contains(f[0], "1 queue messages dropped as malformed") {
		t.Fatalf("faults %q, want the one dropped message", f)
	}
	// A job of a kind the consumer does not know is a fault too, but it is
	// left for retry, not dropped (a newer version's job during a deploy
	// must wait for the new code): it comes back, and counts each time.
	if _, err := st.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(`{"k":"z","u":"ann"}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unknown kind received twice", func() bool {
		f := st.Faults()
		return len(f) == 1 && (strings.HasPrefix(f[0], "3 queue messages") || strings.HasPrefix(f[0], "4 queue messages"))
	})
}
