package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

func TestDecodeConversationFrames(t *testing.T) {
	t.Parallel()
	many := `["` + strings.Repeat(`u","`, MaxUsersPerFrame) + `u"]`
	cases := []struct {
		name   string
		decode func(string) error
		body   string
		code   Code
	}{
		{"group create", groupDecoder, `{"action":"group","op":"create","name":"On-call","users":["bob"],"ref":"q1"}`, ""},
		{"group create with id", groupDecoder, `{"action":"group","op":"create","conversationId":"g:oncall","name":"On-call"}`, ""},
		{"group create without name", groupDecoder, `{"action":"group","op":"create"}`, CodeBadRequest},
		{"group create with a 1:1 id", groupDecoder, `{"action":"group","op":"create","conversationId":"d:a:b","name":"x"}`, CodeBadRequest},
		{"group add without users", groupDecoder, `{"action":"group","op":"add","conversationId":"g:x"}`, CodeBadRequest},
		{"group add bad user", groupDecoder, `{"action":"group","op":"add","conversationId":"g:x","users":["a b"]}`, CodeBadRequest},
		{"group add bad role", groupDecoder, `{"action":"group","op":"add","conversationId":"g:x","users":["a"],"role":"king"}`, CodeBadRequest},
		{"group role needs a role", groupDecoder, `{"action":"group","op":"role","conversationId":"g:x","users":["a"]}`, CodeBadRequest},
		{"group unknown op", groupDecoder, `{"action":"group","op":"rename","conversationId":"g:x"}`, CodeBadRequest},
		{"group too many users", groupDecoder, `{"action":"group","op":"add","conversationId":"g:x","users":` + many + `}`, CodeTooLarge},
		{"group remove with an op id", groupDecoder, `{"action":"group","op":"remove","conversationId":"g:x","users":["a"],"opId":"rm-1"}`, ""},
		{"group leave with an op id", groupDecoder, `{"action":"group","op":"leave","conversationId":"g:x","opId":"7f3a"}`, ""},
		{"group bad op id", groupDecoder, `{"action":"group","op":"add","conversationId":"g:x","users":["a"],"opId":"a b"}`, CodeBadRequest},
		{"group create names no op id", groupDecoder, `{"action":"group","op":"create","name":"x","opId":"c-1"}`, CodeBadRequest},
		{"group members names no op id", groupDecoder, `{"action":"group","op":"members","conversationId":"g:x","opId":"m-1"}`, CodeBadRequest},
		{"group bad ref", groupDecoder, `{"action":"group","op":"members","conversationId":"g:x","ref":"a b"}`, CodeBadRequest},
		{"receipts", receiptsDecoder, `{"action":"receipts","conversationId":"g:x","convSeq":3}`, ""},
		{"receipts without seq", receiptsDecoder, `{"action":"receipts","conversationId":"g:x"}`, CodeBadRequest},
		{"presence", presenceDecoder, `{"action":"presence","status":"dnd"}`, ""},
		{"presence offline is not a choice", presenceDecoder, `{"action":"presence","status":"offline"}`, CodeBadRequest},
		{"presence.query", presenceQueryDecoder, `{"action":"presence.query","users":["a","b"]}`, ""},
		{"presence.query empty", presenceQueryDecoder, `{"action":"presence.query","users":[]}`, CodeBadRequest},
		{"summary", summaryDecoder, `{"action":"summary"}`, ""},
		{"summary limit", summaryDecoder, `{"action":"summary","limit":201}`, CodeBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode(tc.body)
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if p := ProblemOf(err); err == nil || p.Code != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
		})
	}
}

func groupDecoder(b string) error         { _, err := DecodeGroup(b); return err }
func receiptsDecoder(b string) error      { _, err := DecodeReceipts(b); return err }
func presenceDecoder(b string) error      { _, err := DecodePresence(b); return err }
func presenceQueryDecoder(b string) error { _, err := DecodePresenceQuery(b); return err }
func summaryDecoder(b string) error       { _, err := DecodeSummary(b); return err }

// The frames of docs/protocol.md, as the server encodes them.
func TestConversationFrameShapes(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 9, 0, 0, 123e6, time.UTC)
	cases := []struct {
		v    any
		want string
	}{
		{GroupInfo{Type: TypeGroup, Op: GroupMembers, ConversationID: "g:oncall", Name: "On-call", Head: 12, Count: 2,
			Members: []Member{FromMember(im.Member{User: "alice", Role: im.RoleOwner}), FromMember(im.Member{User: "carol", Role: im.RoleMember, Removed: true, Left: 7})}},
			`{"type":"group","op":"members","conversationId":"g:oncall","name":"On-call","head":12,"count":2,"members":[{"userId":"alice","role":"owner","joined":0},{"userId":"carol","role":"member","joined":0,"removed":true,"left":7}]}`},
		{ReceiptsAnswer{Type: TypeReceipts, ConversationID: "g:oncall", ConvSeq: 12, From: "alice", Members: 2, Delivered: 2, Read: 1, DeliveredBy: []string{"bob", "carol"}, ReadBy: []string{"carol"}},
			`{"type":"receipts","conversationId":"g:oncall","convSeq":12,"from":"alice","members":2,"delivered":2,"read":1,"deliveredBy":["bob","carol"],"readBy":["carol"]}`},
		{PresenceAnswer{Type: TypePresence, Users: []UserPresence{{UserID: "alice", Status: "away"}}},
			`{"type":"presence","users":[{"userId":"alice","status":"away"}]}`},
		{SummaryPage{Type: TypeSummary, Conversations: []ConversationSummary{FromState(im.ConversationState{
			Conversation: "d:alice:bob", Last: 5, Read: 2, Delivered: 5, LastFrom: "alice", LastAt: at, Preview: `"hi"`})}, Next: "d:alice:bob"},
			`{"type":"summary","conversations":[{"conversationId":"d:alice:bob","unread":3,"last":5,"read":2,"delivered":5,"lastFrom":"alice","lastAt":"2026-11-29T09:00:00.123Z","preview":"\"hi\""}],"next":"d:alice:bob"}`},
	}
	for _, tc := range cases {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("got  %s\nwant %s", b, tc.want)
		}
	}
	if RefOf(`{"action":"summary","ref":"q7"}`) != "q7" || RefOf(`{"action":"summary","ref":"a b"}`) != "" || RefOf(`nope`) != "" {
		t.Error("RefOf")
	}
}
