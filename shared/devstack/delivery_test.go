package devstack_test

import (
	"testing"
	"time"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
)

func TestOnlineDeliveryWithServerAck(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{})
	alice := dial(t, st, "alice", "laptop")
	bob := dial(t, st, "bob", "phone")

	alice.send("c-1", "bob", map[string]string{"text": "approve PO-7?"})
	sent := alice.next("sent", 5*time.Second)
	if sent.ClientMsgID != "c-1" || sent.MessageID == "" || sent.ConvSeq != 1 || sent.Conversation != string(im.Direct("alice", "bob")) {
		t.Fatalf("sent = %+v", sent)
	}
	got := bob.next("message", 5*time.Second)
	id, from, body := got.pushed(t)
	if got.Seq != 1 || id != sent.MessageID || from != "alice" || body != `{"text":"approve PO-7?"}` {
		t.Fatalf("push = %+v (id %s from %s body %s)", got, id, from, body)
	}
	// The sender's own inbox gets the message too, for their other devices.
	own := alice.next("message", 5*time.Second)
	if ownID, _, _ := own.pushed(t); own.Seq != 1 || ownID != sent.MessageID {
		t.Fatalf("own push = %+v", own)
	}
}
