package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/signet-im/signet/shared/im"
)

// The protocol's machine-readable description, docs/protocol.schema.json,
// is what the TypeScript SDK's frame types are generated from. These tests
// keep it and the Go wire types from drifting: every frame the wire types
// make validates against it, every wire type names exactly the properties
// its definition does, and so does every example in docs/protocol.md.

const schemaPath = "../../docs/protocol.schema.json"

// protocolSchema compiles one definition of the protocol schema.
func protocolSchema(t *testing.T, def string) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("protocol.json", bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("protocol.json#/$defs/" + def)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validate fails t unless frame, marshalled, is valid against s.
func validate(t *testing.T, s *jsonschema.Schema, what string, frame any) {
	t.Helper()
	b, err := json.Marshal(frame)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s %s is not valid against the protocol schema: %v", what, b, err)
	}
}

func sampleMessage() im.Message {
	return im.Message{ID: im.NewMessageID(time.Unix(1_764_000_000, 0)), Conversation: "d:alice:bob", ConvSeq: 12, From: "alice", Body: []byte(`{"text":"Approve PO-7?"}`), SentAt: time.Unix(1_764_000_000, 123_000_000)}
}

// schemaFrames pairs each definition of a frame with a frame the wire
// types make, as full as they make it (every optional field set).
func schemaFrames() map[string]any {
	m := sampleMessage()
	e := im.Entry{Seq: 56, Message: m}
	head := int64(7)
	cur, upTo, cs := int64(40), int64(42), int64(12)
	page := NewSyncPage(im.Page{Entries: []im.Entry{e}, Next: 56, More: true, Head: 60, Epoch: "m3x1k2-a9f", Truncated: true, FirstSeq: 56}, 5*time.Second)
	page.Groups = []GroupHead{{ConversationID: "g:oncall", Head: 12}}
	errFrame := NewError(&im.HeadError{Head: head, Epoch: "m3x1k2-a9f"}, "r1", "c1")
	errFrame.Ref, errFrame.RetryAfterMs = "q1", 250
	return map[string]any{
		"SendFrame":           Send{Action: ActionSend, ClientMsgID: "7f3c-01", To: "bob", Body: json.RawMessage(`"hi"`)},
		"AckFrame":            Ack{Action: ActionAck, ConversationID: "g:oncall", UpTo: &upTo, Proof: "bYI4wr2sOOUw5pYmwk1q6A"},
		"SyncFrame":           Sync{Action: ActionSync, ConversationID: "g:oncall", Cursor: &cur, Limit: 100},
		"ReadFrame":           Read{Action: ActionRead, ConversationID: "d:alice:bob", UpTo: &cs},
		"HistoryFrame":        History{Action: ActionHistory, Query: Query{Ref: "q1"}, ConversationID: "d:alice:bob", Before: 40, Limit: 50},
		"GroupFrame":          Group{Action: ActionGroup, Query: Query{Ref: "q1"}, Op: GroupAdd, ConversationID: "g:oncall", Name: "On-call", Users: []string{"dave"}, Role: "member"},
		"ReceiptsFrame":       Receipts{Action: ActionReceipts, Query: Query{Ref: "q1"}, ConversationID: "g:oncall", ConvSeq: &cs},
		"PresenceFrame":       Presence{Action: ActionPresence, Query: Query{Ref: "q1"}, Status: "away"},
		"PresenceQueryFrame":  PresenceQuery{Action: ActionPresenceQuery, Query: Query{Ref: "q1"}, Users: []string{"alice"}},
		"SummaryFrame":        Summary{Action: ActionSummary, Query: Query{Ref: "q1"}, After: "d:alice:zed", Limit: 100},
		"PingFrame":           Envelope{Action: ActionPing},
		"KeepaliveFrame":      Envelope{Action: ActionKeepalive},
		"SentFrame":           NewSentEntry("7f3c-01", e),
		"MessageFrame":        Push{Type: TypeMessage, Entry: FromEntry(e), Urgent: true, Renotify: 2},
		"SyncPageFrame":       page,
		"GroupMessageFrame":   NewGroupPush(im.Message{ID: m.ID, Conversation: "g:oncall", ConvSeq: 12, From: "alice", Body: m.Body, SentAt: m.SentAt}, make([]byte, im.GroupProofKeySize)),
		"GroupSyncPageFrame":  NewGroupSyncPage("g:oncall", im.GroupPage{Messages: []im.Message{{ID: m.ID, Conversation: "g:oncall", ConvSeq: 12, From: "alice", Body: m.Body, SentAt: m.SentAt}}, Next: 12, More: true, Head: 20, Truncated: true, FirstSeq: 12}, 5*time.Second, make([]byte, im.GroupProofKeySize)),
		"ReceiptFrame":        Receipt{Type: TypeReceipt, Kind: ReceiptDelivered, ConversationID: "d:alice:bob", UserID: "bob", UpTo: 12},
		"GroupInfoFrame":      GroupInfo{Type: TypeGroup, Ref: "q1", Op: GroupMembers, ConversationID: "g:oncall", Name: "On-call", Head: 12, Count: 2, Members: []Member{{UserID: "carol", Role: "member", Removed: true, Left: 7}}, Changed: []string{"carol"}},
		"MembershipFrame":     Membership{Type: TypeMembership, Change: "added", ConversationID: "g:oncall", Name: "On-call", By: "alice", Head: &cs},
		"ReceiptsAnswerFrame": ReceiptsAnswer{Type: TypeReceipts, Ref: "q1", ConversationID: "g:oncall", ConvSeq: 12, From: "alice", Members: 2, Delivered: 2, Read: 1, DeliveredBy: []string{"bob", "carol"}, ReadBy: []string{"carol"}},
		"PresenceAnswerFrame": PresenceAnswer{Type: TypePresence, Ref: "q1", Users: []UserPresence{{UserID: "alice", Status: "away"}}},
		"SummaryPageFrame":    SummaryPage{Type: TypeSummary, Ref: "q1", Conversations: []ConversationSummary{{ConversationID: "g:oncall", Title: "On-call", Unread: 1, Last: 12, Read: 11, Delivered: 12, Removed: true, Left: 12, LastFrom: "bob", LastAt: Timestamp(m.SentAt), Preview: `"ok"`}}, Next: "g:oncall"},
		"HistoryPageFrame":    HistoryPage{Type: TypeHistory, Ref: "q1", ConversationID: "d:alice:bob", Messages: []Message{FromMessage(m)}, HasMore: true, Before: 12},
		"ReadSyncFrame":       ReadSync{Type: TypeRead, ConversationID: "d:alice:bob", UpTo: 12},
		"PongFrame":           Pong{Type: TypePong, Head: 57, Epoch: "m3x1k2-a9f"},
		"NotifyFrame":         Notify{Type: TypeNotify, Head: 57, Epoch: "m3x1k2-a9f", Groups: []GroupHead{{ConversationID: "g:oncall", Head: 12}}},
		"ErrorFrame":          errFrame,
		"AnswerFrame":         Answer{Action: ActionAnswer, Query: Query{Ref: "q1"}, MessageID: string(m.ID), Option: "approve"},
		"AnswerResultFrame":   AnswerResult{Type: TypeAnswer, Ref: "q1", MessageID: string(m.ID), UserID: "bob", Option: "approve", AnsweredAt: Timestamp(m.SentAt)},
		"RegisterFrame":       Register{Action: ActionRegister, Query: Query{Ref: "q1"}, Platform: "apns", Token: new("740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad")},
		"RegisteredFrame":     Registered{Type: TypeRegistered, Ref: "q1", DeviceID: "phone", Platform: "apns", Registered: true},
	}
}

func TestEveryFrameTheWireTypesMakeIsValidAgainstTheProtocolSchema(t *testing.T) {
	for def, frame := range schemaFrames() {
		validate(t, protocolSchema(t, def), def, frame)
		union := "ServerFrame"
		if isClientFrame(def) {
			union = "ClientFrame"
		}
		validate(t, protocolSchema(t, union), def+" as a "+union, frame)
	}
	// What a frame may leave out still validates: a sent without the
	// sender's entry (a group send), a sync page with nothing optional, an
	// error with only its code.
	validate(t, protocolSchema(t, "SentFrame"), "group sent", NewSent("c1", sampleMessage()))
	validate(t, protocolSchema(t, "SyncPageFrame"), "empty page", NewSyncPage(im.Page{Head: 0, Epoch: "e"}, 0))
	validate(t, protocolSchema(t, "ErrorFrame"), "plain error", NewError(errors.New("boom"), "r1", ""))
	validate(t, protocolSchema(t, "ReceiptsAnswerFrame"), "receipts of nobody", ReceiptsAnswer{Type: TypeReceipts, ConversationID: "g:x", ConvSeq: 1, From: "alice"})
}

func TestTheProtocolSchemaRefusesWhatTheServerRefuses(t *testing.T) {
	client := protocolSchema(t, "ClientFrame")
	for _, bad := range []string{
		`{"action":"send","clientMsgId":"c1","to":"bob"}`,                                   // no body
		`{"action":"send","clientMsgId":"c1","to":"bob","body":null}`,                       // null body
		`{"action":"send","clientMsgId":"c1","body":"x"}`,                                   // no recipient
		`{"action":"send","clientMsgId":"c1","to":"bob","conversationId":"d:a:b","body":1}`, // both
		`{"action":"ack"}`, `{"action":"ack","upTo":-1}`, `{"action":"sync","cursor":0,"limit":101}`,
		`{"action":"presence","status":"busy"}`, `{"action":"nope"}`, `{"action":"ack","upTo":1,"extra":true}`,
		`{"action":"ack","conversationId":"d:alice:bob","upTo":1}`, `{"action":"sync","conversationId":"a:app","cursor":0}`, // groups only
	} {
		var v any
		if err := json.Unmarshal([]byte(bad), &v); err != nil {
			t.Fatal(err)
		}
		if client.Validate(v) == nil {
			t.Errorf("the schema takes %s, which the server refuses", bad)
		}
		_, err := decodeFor(bad)
		if err == nil && !strings.Contains(bad, "nope") && !strings.Contains(bad, "extra") {
			t.Errorf("the server takes %s", bad)
		}
	}
}

// decodeFor decodes a client frame as its route's handler does.
func decodeFor(body string) (any, error) {
	var env Envelope
	_ = json.Unmarshal([]byte(body), &env)
	switch env.Action {
	case ActionSend:
		return DecodeSend(body)
	case ActionAck:
		return DecodeAck(body)
	case ActionSync:
		return DecodeSync(body)
	case ActionPresence:
		return DecodePresence(body)
	}
	return nil, nil
}

func isClientFrame(def string) bool {
	return slices.Contains([]string{"SendFrame", "AckFrame", "SyncFrame", "ReadFrame", "HistoryFrame", "GroupFrame", "ReceiptsFrame", "PresenceFrame", "PresenceQueryFrame", "SummaryFrame", "PingFrame", "KeepaliveFrame", "AnswerFrame", "RegisterFrame"}, def)
}

// jsonFields lists the JSON names of a struct's fields, embedded ones included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func TestEveryWireTypeNamesTheSchemasProperties(t *testing.T) {
	raw, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	pairs := schemaFrames()
	for def, v := range map[string]any{"Message": Message{}, "Entry": Entry{}, "Member": Member{}, "UserPresence": UserPresence{}, "ConversationSummary": ConversationSummary{}} {
		pairs[def] = v
	}
	for def, v := range pairs {
		d, ok := doc.Defs[def]
		if !ok {
			t.Errorf("the schema has no %s", def)
			continue
		}
		var props []string
		for p := range d.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		if def == "PingFrame" || def == "KeepaliveFrame" {
			continue // Envelope: only action
		}
		if got := jsonFields(reflect.TypeOf(v)); !slices.Equal(got, props) {
			t.Errorf("%s: the Go type %T has JSON fields %v, the schema's properties are %v", def, v, got, props)
		}
	}
}

// TestTheProtocolDocExamplesAreValidFrames checks every JSON example of
// docs/protocol.md against the schema: a client frame or a server frame.
func TestTheProtocolDocExamplesAreValidFrames(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	client := protocolSchema(t, "ClientFrame")
	server := protocolSchema(t, "ServerFrame")
	var block []string
	in, n := false, 0
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(nil, 1<<20)
	check := func(text string) {
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Errorf("protocol.md example is not JSON: %s: %v", text, err)
			return
		}
		n++
		if client.Validate(v) != nil && server.Validate(v) != nil {
			t.Errorf("protocol.md example is no frame of the schema: %s\nas a client frame: %v\nas a server frame: %v", text, client.Validate(v), server.Validate(v))
		}
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "```json":
			in, block = true, nil
		case in && line == "```":
			in = false
			whole := strings.Join(block, "\n")
			if json.Valid([]byte(whole)) {
				check(whole)
				continue
			}
			for _, l := range block {
				check(l)
			}
		case in:
			block = append(block, line)
		}
	}
	if n < 30 {
		t.Fatalf("found %d examples in protocol.md; expected every frame's", n)
	}
}
