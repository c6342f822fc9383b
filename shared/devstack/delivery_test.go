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
	tablet := dial(t, st, "alice", "tablet")

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
	// The sender's own inbox gets the message too: the sending connection
	// in "sent" (no push of its own), the sender's other devices by push.
	if ownID, from, body := sent.pushed(t); sent.Seq != 1 || ownID != sent.MessageID || from != "alice" || body != `{"text":"approve PO-7?"}` {
		t.Fatalf("sent carries own entry seq %d id %s from %s body %s; want seq 1 and the stored message", sent.Seq, ownID, from, body)
	}
	other := tablet.next("message", 5*time.Second)
	if otherID, _, _ := other.pushed(t); other.Seq != 1 || otherID != sent.MessageID {
		t.Fatalf("push to the sender's other device = %+v", other)
	}
}
