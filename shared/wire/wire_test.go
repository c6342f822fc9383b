package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

func TestDecodeSend(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string
		conv im.ConversationID
		code Code
	}{
		{"to", `{"action":"send","clientMsgId":"c1","to":"bob","body":{"t":"hi"}}`, "d:alice:bob", ""},
		{"conversation", `{"action":"send","clientMsgId":"c1","conversationId":"d:alice:bob","body":1}`, "d:alice:bob", ""},
		{"unknown fields ignored", `{"action":"send","clientMsgId":"c1","to":"bob","body":1,"x":2}`, "d:alice:bob", ""},
		{"both to and conversation", `{"action":"send","clientMsgId":"c1","to":"bob","conversationId":"d:alice:bob","body":1}`, "", CodeBadRequest},
		{"null body", `{"action":"send","clientMsgId":"c1","to":"bob","body":null}`, "", CodeBadRequest},
		{"bad json", `{`, "", CodeBadRequest},
		{"wrong type", `{"action":"send","clientMsgId":"c1","to":5,"body":1}`, "", CodeBadRequest},
		{"oversize", `{"action":"send","clientMsgId":"c1","to":"bob","body":"` + strings.Repeat("a", im.MaxBodyBytes) + `"}`, "", CodeTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := DecodeSend(tc.body)
			d := f.Draft("alice")
			if tc.code != "" {
				if p := ProblemOf(err); err == nil || p.Code != tc.code {
					t.Fatalf("err = %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil || d.Conversation != tc.conv || d.From != "alice" || d.ClientMsgID != "c1" {
				t.Fatalf("draft = %+v, %v", d, err)
			}
		})
	}
}

func TestDecodeSendCompactsBodyAndLimitsEncodedSize(t *testing.T) {
	t.Parallel()
	f, err := DecodeSend(`{"action":"send","clientMsgId":"c","to":"bob","body": { "a" : [1, 2] } }`)
	if d := f.Draft("alice"); err != nil || string(d.Body) != `{"a":[1,2]}` {
		t.Fatalf("body %s, %v", d.Body, err)
	}
	// Whitespace does not count: exactly the limit once compacted passes.
	exact := `"` + strings.Repeat("a", im.MaxBodyBytes-2) + `"`
	if _, err := DecodeSend(`{"action":"send","clientMsgId":"c","to":"bob","body":   ` + exact + `}`); err != nil {
		t.Fatalf("body of exactly the limit: %v", err)
	}
}

func TestDecodeSyncAndAck(t *testing.T) {
	t.Parallel()
	if f, err := DecodeSync(`{"action":"sync","cursor":7}`); err != nil || *f.Cursor != 7 || f.Limit != 100 {
		t.Fatalf("sync default limit: %+v %v", f, err)
	}
	for _, bad := range []string{`{"action":"sync"}`, `{"action":"sync","cursor":-1}`, `{"action":"sync","cursor":0,"limit":0.5}`, `{"action":"sync","cursor":0,"limit":-1}`} {
		if _, err := DecodeSync(bad); ProblemOf(err).Code != CodeBadRequest {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if f, err := DecodeAck(`{"action":"ack","upTo":0}`); err != nil || *f.UpTo != 0 {
		t.Fatalf("ack 0: %+v %v", f, err)
	}
}

func TestProblemOfNeverLeaksInternalText(t *testing.T) {
	t.Parallel()
	p := ProblemOf(fmt.Errorf("dynamodb: table arn:aws:secret exploded"))
	if p.Code != CodeInternal || strings.Contains(p.Msg, "arn") {
		t.Fatalf("problem = %+v", p)
	}
	if p := ProblemOf(fmt.Errorf("ctx: %w", im.ErrNotMember)); p.Code != CodeForbidden {
		t.Fatalf("not member = %+v", p)
	}
	if p := ProblemOf(fmt.Errorf("ctx: %w", im.ErrContention)); p.Code != CodeRateLimited || p.RetryAfterMs <= 0 {
		t.Fatalf("contention = %+v", p)
	}
	var target *Problem
	if !errors.As(Problemf(CodeTooLarge, "x"), &target) {
		t.Fatal("Problem must be an error")
	}
}

// The frame shapes are the protocol: pin them.
func TestServerFrameShapes(t *testing.T) {
	t.Parallel()
	m := im.Message{ID: "m1", Conversation: "d:a:b", ConvSeq: 3, From: "a", Body: []byte(`{"t":1}`), SentAt: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)}
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"sent", NewSent("c1", m), `{"type":"sent","clientMsgId":"c1","messageId":"m1","conversationId":"d:a:b","convSeq":3,"sentAt":"2026-01-02T03:04:05.006Z"}`},
		{"message", NewPush(im.Entry{Seq: 9, Message: m}), `{"type":"message","seq":9,"message":{"messageId":"m1","conversationId":"d:a:b","convSeq":3,"from":"a","body":{"t":1},"sentAt":"2026-01-02T03:04:05.006Z"}}`},
		{"sync", NewSyncPage(im.Page{Entries: []im.Entry{{Seq: 9, Message: m}}, Next: 9, More: true, Head: 12, Epoch: "e"}, 5*time.Second), `{"type":"sync","messages":[{"seq":9,"message":{"messageId":"m1","conversationId":"d:a:b","convSeq":3,"from":"a","body":{"t":1},"sentAt":"2026-01-02T03:04:05.006Z"}}],"nextCursor":9,"hasMore":true,"head":12,"epoch":"e","pushTimeoutMs":5000}`},
		{"empty sync", NewSyncPage(im.Page{Head: 0, Epoch: ""}, 0), `{"type":"sync","messages":[],"nextCursor":0,"hasMore":false,"head":0,"epoch":""}`},
		{"pong", Pong{Type: TypePong, Head: 57, Epoch: "m3x1k2-a9f"}, `{"type":"pong","head":57,"epoch":"m3x1k2-a9f"}`},
		{"notify", Notify{Type: TypeNotify, Head: 57, Epoch: "m3x1k2-a9f"}, `{"type":"notify","head":57,"epoch":"m3x1k2-a9f"}`},
		{"resync", NewError(&im.HeadError{Err: im.ErrCursorBeyondHead, Position: 9, Head: 0, Epoch: "e2"}, "r1", ""), `{"type":"error","code":"resync","message":"cursor is beyond the inbox head: the inbox's sequence restarted; sync from 0","requestId":"r1","head":0,"epoch":"e2"}`},
		{"error", NewError(RateLimited("slow down", 1500), "r1", ""), `{"type":"error","code":"rate_limited","message":"slow down","requestId":"r1","retryAfterMs":1500}`},
		{"send error", NewError(Problemf(CodeTooLarge, "big"), "r2", "c9"), `{"type":"error","code":"too_large","message":"big","requestId":"r2","clientMsgId":"c9"}`},
	}
	for _, tc := range cases {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, b, tc.want)
		}
	}
}

// A decoder that refuses a frame still hands back what it could read for
// the error frame — a valid ref, a send's clientMsgId — and never an invalid
// ref.
func TestRefusedFramesKeepTheirRefAndClientMsgID(t *testing.T) {
	t.Parallel()
	if f, err := DecodeReceipts(`{"action":"receipts","ref":"q7","conversationId":"g:x"}`); err == nil || f.Ref != "q7" {
		t.Errorf("receipts without convSeq: ref %q, %v", f.Ref, err)
	}
	if f, err := DecodeGroup(`{"action":"group","op":"rename","ref":"q8"}`); err == nil || f.Ref != "q8" {
		t.Errorf("group with a bad op: ref %q, %v", f.Ref, err)
	}
	if f, err := DecodeSummary(`{"action":"summary","ref":"a b"}`); err == nil || f.Ref != "" {
		t.Errorf("summary with a bad ref: ref %q, %v; want no ref", f.Ref, err)
	}
	if f, err := DecodeSend(`{"action":"send","clientMsgId":"c9","to":"bob"}`); err == nil || f.ClientMsgID != "c9" {
		t.Errorf("send without body: clientMsgId %q, %v", f.ClientMsgID, err)
	}
}
