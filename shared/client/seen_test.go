package client

import (
	"encoding/json"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/signet-im/signet/shared/wire"
)

// Issue 12: a 1:1 send frame whose id only this device sends says the
// newest convSeq of its conversation the device holds ("seen"), fixed when
// it is queued (a retry resends the
// stored frame), so the server finds an earlier try without an
// idempotency item; a group send says nothing; a resync forgets it (the
// server's sequence may have restarted), and a store written before the
// index is indexed when opened.
func TestSendFramesSayWhatTheDeviceHasSeen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "alice.db")
	st, err := openStore(path)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(seq, convSeq int64, conv string) wire.Entry {
		e := wire.Entry{Seq: seq}
		e.Message.MessageID, e.Message.ConversationID, e.Message.ConvSeq = "m"+conv+string(rune('0'+seq)), conv, convSeq
		return e
	}
	for _, e := range []wire.Entry{entry(1, 4, "d:alice:bob"), entry(2, 9, "d:alice:carol"), entry(3, 5, "d:alice:bob"), entry(4, 2, "g:team")} {
		if applied, _, err := st.apply(e); err != nil || !applied {
			t.Fatalf("apply %+v: %v %v", e, applied, err)
		}
	}
	frameSeen := func(d Draft) *int64 {
		t.Helper()
		if _, err := enqueueDraft(st, d); err != nil {
			t.Fatal(err)
		}
		items, err := st.outbox()
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.ID == d.ClientMsgID {
				var f wire.Send
				if err := json.Unmarshal([]byte(it.Frame), &f); err != nil {
					t.Fatal(err)
				}
				return f.Seen
			}
		}
		t.Fatalf("%s not queued", d.ClientMsgID)
		return nil
	}
	body := json.RawMessage(`"hi"`)
	// By recipient, the conversation is known once the device knows its
	// user: before its first 1:1 ACK the frame says nothing.
	if got := frameSeen(Draft{ClientMsgID: "0", DeviceOnly: true, To: "bob", Body: body}); got != nil {
		t.Errorf("before the device knows its user: seen %d", *got)
	}
	own := entry(6, 10, "d:alice:dave")
	own.Message.From = "alice"
	if err := st.settle("0", &wire.Sent{Type: "sent", ClientMsgID: "0", ConversationID: "d:alice:dave", Message: &own.Message}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		d    Draft
		want int64
	}{
		{Draft{ClientMsgID: "1", DeviceOnly: true, To: "bob", Body: body}, 5},
		{Draft{ClientMsgID: "2", DeviceOnly: true, ConversationID: "d:alice:carol", Body: body}, 9},
		{Draft{ClientMsgID: "3", DeviceOnly: true, To: "erin", Body: body}, 0},
		// A note to oneself: its own conversation, not any other of alice's.
		{Draft{ClientMsgID: "3b", DeviceOnly: true, To: "alice", Body: body}, 0},
	} {
		if got := frameSeen(c.d); got == nil || *got != c.want {
			t.Errorf("%+v: seen %v, want %d", c.d, got, c.want)
		}
	}
	if got := frameSeen(Draft{ClientMsgID: "4", DeviceOnly: true, ConversationID: "g:team", Body: body}); got != nil {
		t.Errorf("a group send says seen %d", *got)
	}
	// An id the app may retry from another device of the user says
	// nothing: that device's seen could be past the first try.
	if got := frameSeen(Draft{ClientMsgID: "4b", To: "bob", Body: body}); got != nil {
		t.Errorf("a send with an app's id (not DeviceOnly) says seen %d", *got)
	}
	// Queued again (a retry through the outbox): the stored frame stands.
	if _, _, err := st.apply(entry(5, 12, "d:alice:bob")); err != nil {
		t.Fatal(err)
	}
	if got := frameSeen(Draft{ClientMsgID: "1", DeviceOnly: true, To: "bob", Body: body}); got == nil || *got != 5 {
		t.Errorf("requeued: seen %v, want the first frame's 5", got)
	}
	if err := st.reset("e2"); err != nil {
		t.Fatal(err)
	}
	if got := frameSeen(Draft{ClientMsgID: "5", DeviceOnly: true, To: "bob", Body: body}); got == nil || *got != 0 {
		t.Errorf("after a resync: seen %v, want 0", got)
	}
	// A store without the index (written before it) is indexed on open.
	if _, _, err := st.apply(entry(1, 3, "d:alice:frank")); err != nil {
		t.Fatal(err)
	}
	if err := st.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketConvs) }); err != nil {
		t.Fatal(err)
	}
	st.close()
	if st, err = openStore(path); err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if got := frameSeen(Draft{ClientMsgID: "6", DeviceOnly: true, To: "frank", Body: body}); got == nil || *got != 3 {
		t.Errorf("reopened old store: seen %v, want 3", got)
	}
}
