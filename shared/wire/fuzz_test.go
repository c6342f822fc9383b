package wire

import (
	"testing"

	"github.com/signet-im/signet/shared/im"
)

// frameSeeds are the probe's cases (issue 11) and ordinary frames.
var frameSeeds = []string{
	`{"action":"send","clientMsgId":"c1","to":"bob","body":{"t":"hi"}}`,
	"{\"action\":\"send\",\"clientMsgId\":\"c1\",\"to\":\"bob\",\"body\":\"a\xffb\"}",
	`{"action":"send","clientMsgId":"c1","to":"bob","body":"\ud800"}`,
	`{"action":"send","clientMsgId":"c1","to":"bob","body":{"a":1,"a":2}}`,
	`{"action":"send","clientMsgId":"c1","to":"bob","body":1e309}`,
	`{"action":"send","clientMsgId":"c1","to":"app.monitoring","body":1}`,
	`{"action":"send","clientMsgId":"c1","conversationId":"g:ops","body":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"action":"ack","upTo":5}`, `{"action":"ack","upTo":-1}`, `{"action":"sync","cursor":0,"limit":101}`,
	`{"action":"read","conversationId":"a:payroll","upTo":1}`,
	`{"action":"history","conversationId":"d:alice:bob","before":40,"limit":50}`,
	`{"action":"group","op":"create","name":"On\u202ecall","users":["bob","bob","app.x"]}`,
	`{"action":"group","op":"add","conversationId":"g:ops","users":["bob"],"role":"owner"}`,
	`{"action":"receipts","conversationId":"g:ops","convSeq":12}`,
	`{"action":"presence","status":"away"}`, `{"action":"presence.query","users":["bob","carol"]}`,
	`{"action":"summary","limit":20}`, `{`, `[]`, `null`, `{"action":7}`,
}

// FuzzDecodeFrames runs every client frame decoder on the same input: none
// may panic, every refusal is a client error (never internal), and an
// accepted send carries a canonical body of at most the limit.
func FuzzDecodeFrames(f *testing.F) {
	for _, s := range frameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame string) {
		refused := func(name string, err error) {
			if err != nil && ProblemOf(err).Code == CodeInternal {
				t.Fatalf("%s(%q) answered internal: %v", name, frame, err)
			}
		}
		d, err := DecodeSend(frame)
		refused("DecodeSend", err)
		if err == nil {
			if canon, cerr := CanonicalBody(d.Body); cerr != nil || string(canon) != string(d.Body) || len(d.Body) > im.MaxBodyBytes {
				t.Fatalf("DecodeSend(%q) kept body %q (%v)", frame, d.Body, cerr)
			}
		}
		_, err = DecodeAck(frame)
		refused("DecodeAck", err)
		_, err = DecodeSync(frame)
		refused("DecodeSync", err)
		_, err = DecodeRead(frame)
		refused("DecodeRead", err)
		_, err = DecodeHistory(frame)
		refused("DecodeHistory", err)
		g, err := DecodeGroup(frame)
		refused("DecodeGroup", err)
		if err == nil {
			seen := map[string]bool{}
			for _, u := range g.Users {
				if seen[u] || !im.UserID(u).Person() {
					t.Fatalf("DecodeGroup(%q) kept users %q", frame, g.Users)
				}
				seen[u] = true
			}
		}
		_, err = DecodeReceipts(frame)
		refused("DecodeReceipts", err)
		_, err = DecodePresence(frame)
		refused("DecodePresence", err)
		_, err = DecodePresenceQuery(frame)
		refused("DecodePresenceQuery", err)
		_, err = DecodeSummary(frame)
		refused("DecodeSummary", err)
	})
}
