package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/signet-im/signet/shared/im"
)

func TestFanoutJobsRoundTripAndBadOnesAreRefused(t *testing.T) {
	t.Parallel()
	for _, j := range []im.FanoutJob{
		{Kind: im.FanoutMessages, Conversation: "g:ops", UpTo: 7},
		{Kind: im.FanoutMessages, Conversation: "g:ops", UpTo: 7, Members: []im.UserID{"a", "b"}},
		{Kind: im.FanoutMessages, Conversation: "g:ops", UpTo: 7, From: 5, Reads: true,
			Online: []im.Connection{{User: "a", Device: "phone", ID: "c1"}, {User: "b", Device: "web", ID: "c2"}}},
		{Kind: im.FanoutPresence, User: "alice"},
		{Kind: im.FanoutAlert, Alert: "m01", Members: []im.UserID{"ann", "ben"}},
		{Kind: im.FanoutEscalate, Alert: "m01", Tick: 3},
		{Kind: im.FanoutCallback, Alert: "m01"},
		{Kind: im.FanoutCallback, Alert: "m01", User: "ann"},
		{Kind: im.FanoutCoveredAlerts, User: "ann", UpTo: 40},
		{Kind: im.FanoutCoveredAlerts, User: "ann", From: 1000, UpTo: 5200},
		{Kind: im.FanoutCoveredAlerts, User: "ann", Conversation: "a:ops", From: 1000, UpTo: 5200},
		{Kind: im.FanoutRepeat, Alert: "m01", Tick: 2},
		{Kind: im.FanoutEscalate, Alert: "m01", Tick: 4, NotBefore: time.UnixMilli(1_800_000_000_123).UTC()},
		{Kind: im.FanoutWake, User: "ann", Device: "phone", Alert: "m01", Conversation: "a:ops", UpTo: 4, Urgent: true},
		{Kind: im.FanoutWake, User: "ann", Alert: "m01", Conversation: "a:ops", UpTo: 5, Urgent: true, Unconnected: true},
		// A read-diffused group's message: no inbox seq.
		{Kind: im.FanoutWake, User: "ann", Alert: "m01~3~g:ops", Conversation: "g:ops"},
	} {
		got, err := DecodeJob(EncodeJob(j))
		if err != nil {
			t.Fatalf("%+v: %v", j, err)
		}
		if diff := cmp.Diff(j, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
	// A job enqueued by a send function from before the log item recorded
	// the sending connection (twentieth session: "x") still decodes, as the
	// job without it: its sender is pushed its own message, which the SDKs
	// take as a duplicate.
	if got, err := DecodeJob(`{"k":"m","c":"g:ops","s":7,"x":"c9"}`); err != nil || !cmp.Equal(got, im.FanoutJob{Kind: im.FanoutMessages, Conversation: "g:ops", UpTo: 7}) {
		t.Errorf("an old job with a sender: %+v, %v", got, err)
	}
	for name, body := range map[string]string{
		"not json":          `{`,
		"no kind":           `{"c":"g:ops","s":1}`,
		"1:1 conv":          `{"k":"m","c":"d:a:b","s":1}`,
		"no seq":            `{"k":"m","c":"g:ops"}`,
		"presence nobody":   `{"k":"p"}`,
		"alert nobody":      `{"k":"a","a":"m01"}`,
		"alert no id":       `{"k":"a","m":["ann"]}`,
		"escalate no tick":  `{"k":"e","a":"m01"}`,
		"escalate no id":    `{"k":"e","t":1}`,
		"callback no id":    `{"k":"c"}`,
		"callback bad user": `{"k":"c","a":"m01","u":"a b"}`,
		"acked nobody":      `{"k":"k","s":40}`,
		"acked no span":     `{"k":"k","u":"ann","f":40,"s":40}`,
		"covered of chat":   `{"k":"k","u":"ann","c":"d:ann:bob","s":40}`,
		"wake no seq":       `{"k":"w","u":"ann","a":"m01"}`,
		"1:1 wake no seq":   `{"k":"w","u":"ann","a":"m01","c":"d:ann:bob"}`,
		"group wake no id":  `{"k":"w","u":"ann","c":"g:ops"}`,
	} {
		if _, err := DecodeJob(body); err == nil || errors.Is(err, ErrUnknownKind) {
			t.Errorf("%s: %v, want refused as malformed", name, err)
		}
	}
	// A kind this version does not know is not malformed: a newer version
	// may enqueue it during a deploy, so the consumer leaves it for retry.
	if _, err := DecodeJob(`{"k":"x","c":"g:ops","s":1}`); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("an unknown kind: %v, want ErrUnknownKind", err)
	}
}

func TestBatchesSplitMembers(t *testing.T) {
	t.Parallel()
	members := make([]im.UserID, 120)
	for i := range members {
		members[i] = im.UserID(string(rune('a'+i%26)) + "x")
	}
	b := im.FanoutJob{Kind: im.FanoutMessages, Conversation: "g:x", UpTo: 3}.Batches(members, 50)
	if len(b) != 3 || len(b[0].Members) != 50 || len(b[2].Members) != 20 || b[2].UpTo != 3 {
		t.Fatalf("batches = %d", len(b))
	}
}
