package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// A conversation index item whose inbox seq names another message's entry
// — a claim that lost its seq to another append, and whose run crashed
// before moving it — does not make the derived delivered watermark claim
// the unplaced message: the entry the index names is read, and where it is
// not that message the entries below the cursor settle it.
func TestDerivedDeliveredDoesNotTrustAClaimThatLostItsSeq(t *testing.T) {
	t.Parallel()
	st, ctx, now := testStore(t), context.Background(), time.Now()
	ab := im.Direct("alice", "bob")
	for _, d := range []im.Draft{
		{From: "alice", ClientMsgID: "a1", Conversation: ab, Body: []byte(`1`)},
		{From: "carol", ClientMsgID: "c1", Conversation: im.Direct("carol", "bob"), Body: []byte(`2`)},
	} {
		if _, err := st.Send(ctx, d, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", UpTo: 2, At: now}); err != nil {
		t.Fatal(err)
	}
	// alice's message #2 claimed bob's seq 2, which carol's message took.
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.tables.Inbox), Key: inboxKey("bob", convIndexSK(ab)),
		UpdateExpression:          aws.String("SET #last = :last, #iseq = :iseq"),
		ExpressionAttributeNames:  map[string]string{"#last": attrLast, "#iseq": attrInboxSeq},
		ExpressionAttributeValues: map[string]types.AttributeValue{":last": n(2), ":iseq": n(2)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.ConversationStates(ctx, ab, []im.UserID{"bob"})
	if err != nil || got["bob"].Delivered != 1 {
		t.Fatalf("delivered %+v, %v; want 1 (message 2 is not in bob's inbox)", got["bob"], err)
	}
}

// A delivered watermark the ack route stored before it was derived (1:1
// until the fifteenth session, groups until the sixteenth) still counts
// where it is higher than the device cursors show (an entry reaped since).
func TestAStoredDeliveredWatermarkStillCounts(t *testing.T) {
	t.Parallel()
	st, ctx, now := testStore(t), context.Background(), time.Now()
	cb, g := im.Direct("carol", "bob"), im.Group("ops")
	if _, err := st.Send(ctx, im.Draft{From: "carol", ClientMsgID: "c1", Conversation: cb, Body: []byte(`1`)}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Ack(ctx, im.AckRange{User: "bob", Device: "phone", UpTo: 1, At: now}); err != nil {
		t.Fatal(err)
	}
	for c, stored := range map[im.ConversationID]int64{cb: 7, g: 5} {
		// What AdvanceDelivered wrote.
		if _, _, err := st.advance(ctx, inboxKey("bob", convIndexSK(c)), attrDelivered, "deliveredAt", stored, now); err != nil {
			t.Fatal(err)
		}
		got, err := st.ConversationStates(ctx, c, []im.UserID{"bob"})
		if err != nil || got["bob"].Delivered != stored {
			t.Fatalf("%s: delivered %+v, %v; want the stored %d", c, got["bob"], err, stored)
		}
	}
}
