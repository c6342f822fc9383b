package im

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDirectIsSymmetricAndNormalised(t *testing.T) {
	t.Parallel()
	if Direct("bob", "alice") != Direct("alice", "bob") || Direct("alice", "bob") != "d:alice:bob" {
		t.Fatalf("Direct = %q / %q", Direct("bob", "alice"), Direct("alice", "bob"))
	}
}

func TestConversationPeer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		conv ConversationID
		user UserID
		peer UserID
		err  error
	}{
		{"first member", "d:alice:bob", "alice", "bob", nil},
		{"second member", "d:alice:bob", "bob", "alice", nil},
		{"self conversation", "d:alice:alice", "alice", "alice", nil},
		{"outsider", "d:bob:carol", "alice", "", ErrNotMember},
		{"unsorted", "d:bob:alice", "alice", "", ErrMalformedConversation},
		{"missing part", "d:alice", "alice", "", ErrMalformedConversation},
		{"bad user id", "d:al ice:bob", "bob", "", ErrMalformedConversation},
		{"group", "g:ops", "alice", "", ErrNotDirect},
		{"empty", "", "alice", "", ErrNotDirect},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			peer, err := tc.conv.Peer(tc.user)
			if !errors.Is(err, tc.err) || peer != tc.peer {
				t.Fatalf("Peer = %q, %v; want %q, %v", peer, err, tc.peer, tc.err)
			}
		})
	}
}

func TestIDValidation(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "alice.smith@corp", "A-1_b", strings.Repeat("x", 64)} {
		if !UserID(ok).Valid() {
			t.Errorf("%q should be valid", ok)
		}
	}
	for _, bad := range []string{"", "a:b", "a b", "ü", strings.Repeat("x", 65)} {
		if UserID(bad).Valid() {
			t.Errorf("%q should be invalid", bad)
		}
	}
	if ValidClientMsgID("") || ValidClientMsgID("a b") || ValidClientMsgID(strings.Repeat("x", 65)) || !ValidClientMsgID("uuid-1:2/3") {
		t.Error("client message id rules broken")
	}
}

// Issue 11 findings 8 and 12.
func TestPeopleAndDisplayText(t *testing.T) {
	t.Parallel()
	if !UserID("alice").Person() || !UserID("apple").Person() || !UserID("my.app.x").Person() || UserID("app.monitoring").Person() || UserID("").Person() {
		t.Error("app. must be reserved for app senders, and only as a prefix")
	}
	for _, ok := range []string{"On-call", "Équipe 東京 🚀", "a\u200db"} {
		if !ValidDisplayText(ok, 100) {
			t.Errorf("%q should be valid", ok)
		}
	}
	for _, bad := range []string{"", "nul\x00", "tab\t", "del\x7f", "c1\u0085", "rlo\u202egnp.exe", "isolate\u2066x", "rlm\u200f", "alm\u061c", "bad\xff", strings.Repeat("x", 101)} {
		if ValidDisplayText(bad, 100) {
			t.Errorf("%q should be refused", bad)
		}
	}
}

func TestRecipientsIncludeSenderOnce(t *testing.T) {
	t.Parallel()
	got, err := Draft{From: "alice", Conversation: "d:alice:bob"}.Recipients()
	if err != nil || !cmp.Equal(got, []UserID{"bob", "alice"}) {
		t.Fatalf("Recipients = %v, %v", got, err)
	}
	got, err = Draft{From: "alice", Conversation: "d:alice:alice"}.Recipients()
	if err != nil || !cmp.Equal(got, []UserID{"alice"}) {
		t.Fatalf("self Recipients = %v, %v", got, err)
	}
}

func TestFingerprintCoversConversationAndBody(t *testing.T) {
	t.Parallel()
	a := Draft{Conversation: "d:a:b", Body: []byte(`"x"`)}
	b := a
	b.Body = []byte(`"y"`)
	c := a
	c.Conversation = "d:a:c"
	if a.Fingerprint() == b.Fingerprint() || a.Fingerprint() == c.Fingerprint() || a.Fingerprint() != (Draft{Conversation: "d:a:b", Body: []byte(`"x"`)}).Fingerprint() {
		t.Fatal("fingerprint must change with body and conversation and be stable")
	}
}

// The production defaults are part of the contract (DESIGN invariant 6).
func TestDefaultRedeliveryPolicy(t *testing.T) {
	t.Parallel()
	r := DefaultRedelivery()
	var got []time.Duration
	for attempt := 0; ; attempt++ {
		d, ok := r.CheckDelay(attempt)
		if !ok {
			break
		}
		got = append(got, d)
	}
	want := []time.Duration{5 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("check delays (-want +got):\n%s", diff)
	}
	if r.MaxRetries() != 5 || r.Window() != 35*time.Second || r.Validate() != nil {
		t.Fatalf("retries %d window %s validate %v", r.MaxRetries(), r.Window(), r.Validate())
	}
}

func TestRedeliveryValidateRejectsUnboundedPolicies(t *testing.T) {
	t.Parallel()
	cases := map[string]Redelivery{
		"too many retries": {PushTimeout: time.Second, Backoff: []time.Duration{1, 1, 1, 1, 1}},
		"window over 60s":  {PushTimeout: 30 * time.Second, Backoff: []time.Duration{31 * time.Second}},
		"negative delay":   {PushTimeout: time.Second, Backoff: []time.Duration{-time.Second}},
		"beyond SQS delay": {PushTimeout: 901 * time.Second},
	}
	for name, r := range cases {
		if r.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestFitKeepsPagesWithinLimits(t *testing.T) {
	t.Parallel()
	entries := make([]Entry, 10)
	for i := range entries {
		entries[i].Seq = int64(i + 1)
	}
	size := func(Entry) int { return 40 }
	if got := Fit(entries, 4, 1000, size); len(got) != 4 {
		t.Errorf("limit: got %d entries", len(got))
	}
	if got := Fit(entries, 100, 100, size); len(got) != 2 {
		t.Errorf("bytes: got %d entries, want 2", len(got))
	}
	if got := Fit(entries, 100, 10, size); len(got) != 1 {
		t.Errorf("one oversize entry must still be returned, got %d", len(got))
	}
}

func TestNewPage(t *testing.T) {
	t.Parallel()
	p := NewPage(5, []Entry{{Seq: 6}, {Seq: 7}}, 9, "e1")
	if p.Next != 7 || !p.More || p.Head != 9 {
		t.Fatalf("page = %+v", p)
	}
	// Regression: everything after the cursor expired gave an empty page
	// with More set, forever.
	if p := NewPage(2, nil, 8, "e1"); !p.Truncated || p.FirstSeq != 9 || p.Next != 8 || p.More {
		t.Errorf("all expired: %+v", p)
	}
	if p := NewPage(9, nil, 9, "e1"); p.Next != 9 || p.More {
		t.Fatalf("empty page = %+v", p)
	}
}

func TestMessageIDsAreUniqueAndTimeOrdered(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_700_000_000_000)
	a, b := NewMessageID(t0), NewMessageID(t0.Add(time.Millisecond))
	if len(a) != 27 || a[0] != 'm' || !(a < b) || NewMessageID(t0) == a {
		t.Fatalf("ids %s %s", a, b)
	}
}

func TestProgressIsForwardOnlyAndTakesTheAckCursorAsTruth(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	d := Delivery{User: "bob"}
	evs := []Event{
		{User: "bob", Type: EventInboxed, At: t0},
		{User: "bob", Type: EventPushed, At: t0.Add(time.Second)},
		{User: "bob", Type: EventPushed, At: t0.Add(3 * time.Second)},
		{User: "ann", Type: EventAcked, At: t0},
	}
	if p := Progress(d, 0, nil, evs); p.State != "queued" {
		t.Fatalf("not inboxed: %+v", p)
	}
	if p := Progress(d, 7, nil, nil); p.State != "stored" {
		t.Fatalf("stored: %+v", p)
	}
	p := Progress(d, 7, map[DeviceID]DeviceCursor{"phone": {Acked: 6}}, evs)
	if p.State != "pushed" || p.Pushes != 2 || !p.PushedAt.Equal(t0.Add(time.Second)) || !p.StoredAt.Equal(t0) {
		t.Fatalf("pushed: %+v", p)
	}
	// A later cursor covers the message even without an acked event.
	p = Progress(d, 7, map[DeviceID]DeviceCursor{"phone": {Acked: 6}, "laptop": {Acked: 9, AckedAt: t0.Add(5 * time.Second)}}, evs)
	if p.State != "delivered" || !p.DeliveredAt.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("delivered: %+v", p)
	}
	if got := StatesUpTo("delivered"); len(got) != 3 || got[2] != "delivered" {
		t.Fatalf("StatesUpTo = %v", got)
	}
}

func TestParseAppKey(t *testing.T) {
	t.Parallel()
	id, secret, ok := ParseAppKey("sk_monitoring_abc123")
	if !ok || id != "monitoring" || secret != "abc123" {
		t.Fatalf("%q %q %v", id, secret, ok)
	}
	for _, bad := range []string{"", "sk_", "sk__x", "sk_a_", "pk_a_b", "sk_a:b_c"} {
		if _, _, ok := ParseAppKey(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	a := App{KeyHash: HashSecret("s3")}
	if !a.Matches("s3") || a.Matches("s4") {
		t.Fatal("Matches")
	}
}

func TestLocatedMessageIDsNameTheirConversationAndSeq(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	c := Direct("bob.b@corp", "alice_a-1")
	id := NewLocatedMessageID(t0, c, 4711)
	if got, seq, ok := id.Locate(); !ok || got != c || seq != 4711 {
		t.Fatalf("Locate(%s) = %q, %d, %v", id, got, seq, ok)
	}
	if !strings.HasPrefix(string(id), "m") || id[:27] >= NewLocatedMessageID(t0.Add(time.Millisecond), c, 1)[:27] {
		t.Errorf("located ids keep NewMessageID's time order: %s", id)
	}
	for _, plain := range []MessageID{NewMessageID(t0), "", "m", MessageID(string(NewMessageID(t0)) + "~0~" + string(c)),
		MessageID(string(NewMessageID(t0)) + "~07~" + string(c)), MessageID(string(NewMessageID(t0)) + "~5~"),
		MessageID(string(NewMessageID(t0)) + "~x~" + string(c)), MessageID(string(NewMessageID(t0)) + "-5~" + string(c))} {
		if c, seq, ok := plain.Locate(); ok {
			t.Errorf("Locate(%q) = %q, %d, true; want not located", plain, c, seq)
		}
	}
}

func TestSampledIsOneInNAndTheSameForEveryCaller(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	sampled := 0
	const total = 20000
	for i := range total {
		id := NewLocatedMessageID(t0, "d:a:b", int64(i+1))
		again := MessageID(strings.Clone(string(id))) // another caller, the same id
		if id.Sampled(50) != again.Sampled(50) {
			t.Fatalf("Sampled(%s) differs between calls", id)
		}
		if id.Sampled(50) {
			sampled++
		}
		if !id.Sampled(1) || !id.Sampled(0) {
			t.Fatalf("n ≤ 1 samples every message")
		}
	}
	if sampled < total/50/2 || sampled > total/50*2 {
		t.Errorf("%d of %d sampled at one in 50", sampled, total)
	}
}
