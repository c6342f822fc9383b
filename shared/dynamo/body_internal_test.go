package dynamo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/signet-im/signet/shared/im"
)

// Issue 12: a year of 1 KB bodies is most of the conversation log's bill.
// A body that deflate shrinks by an eighth or more is stored compressed;
// every read path — sync pages, one entry, history, the log — hands back
// the bytes as sent (invariant 13), and a short body stays plain.
func TestBodiesAreStoredCompressedAndReadBackExact(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx, now := context.Background(), time.Now()
	prose := fmt.Sprintf(`{"text":%q}`, strings.Repeat("The failover finished at 09:12; replicas caught up and the queue drained. ", 14))
	bodies := []string{prose, `{"text":"ok"}`, prose + " ", `{"text":"` + strings.Repeat("é€", 200) + `"}`}
	for i, b := range bodies {
		if _, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: fmt.Sprint(i), Conversation: im.Direct("alice", "bob"), Body: []byte(b)}, now); err != nil {
			t.Fatal(err)
		}
	}
	log := func(cseq int64) map[string]types.AttributeValue {
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(im.Direct("alice", "bob"), convSK(cseq)), ConsistentRead: aws.Bool(true)})
		if err != nil || out.Item == nil {
			t.Fatalf("log item %d: %v", cseq, err)
		}
		return out.Item
	}
	if it := log(1); it[attrBodyZ] == nil || it[attrBody] != nil || len(it[attrBodyZ].(*types.AttributeValueMemberB).Value) > len(prose)/2 {
		t.Errorf("a %d-byte body of prose is not stored compressed to under half: %v", len(prose), keys(it))
	}
	if it := log(2); it[attrBody] == nil || it[attrBodyZ] != nil {
		t.Errorf("a short body is not stored plain: %v", keys(it))
	}
	p, err := st.Page(ctx, "bob", 0, 100, func(e im.Entry) int { return len(e.Message.Body) })
	if err != nil || len(p.Entries) != len(bodies) {
		t.Fatalf("page = %+v, %v", p, err)
	}
	msgs, _, err := st.History(ctx, im.Direct("alice", "bob"), 0, 0, 100)
	if err != nil || len(msgs) != len(bodies) {
		t.Fatalf("history = %d messages, %v", len(msgs), err)
	}
	for i, want := range bodies {
		if got := string(p.Entries[i].Message.Body); got != want {
			t.Errorf("page entry %d body = %.40q…, want %.40q…", i+1, got, want)
		}
		if got := string(msgs[i].Body); got != want {
			t.Errorf("history %d body = %.40q…, want %.40q…", i+1, got, want)
		}
		e, err := st.Entry(ctx, "alice", int64(i+1))
		if err != nil || string(e.Message.Body) != want {
			t.Errorf("entry %d = %.40q, %v", i+1, e.Message.Body, err)
		}
	}
}

// A log item written before compression (body as a string) reads back as
// before, and a corrupt compressed body is an error, never an empty or cut
// message.
func TestPlainBodiesStillReadAndCorruptOnesFail(t *testing.T) {
	t.Parallel()
	m, err := messageFrom("d:a:b", map[string]types.AttributeValue{"cseq": n(3), attrBody: s(`{"old":true}`)})
	if err != nil || string(m.Body) != `{"old":true}` {
		t.Errorf("plain body = %q, %v", m.Body, err)
	}
	item := map[string]types.AttributeValue{}
	setBody(item, []byte(strings.Repeat(`{"k":"v"},`, 100)), true)
	z := item[attrBodyZ].(*types.AttributeValueMemberB).Value
	item[attrBodyZ] = &types.AttributeValueMemberB{Value: z[:len(z)/2]}
	if m, err := messageFrom("d:a:b", item); err == nil {
		t.Errorf("a cut compressed body read as %q, want an error", m.Body)
	}
}

func keys(it map[string]types.AttributeValue) []string {
	var out []string
	for k := range it {
		out = append(out, k)
	}
	return out
}

// With compression off (the first deploy of an upgrade, while functions
// that cannot read "bz" may still run) every body is stored as sent.
func TestCompressionOffStoresBodiesAsSent(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	st.CompressBodies = false
	ctx := context.Background()
	body := fmt.Sprintf(`{"text":%q}`, strings.Repeat("The replicas caught up and the queue drained. ", 20))
	if _, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: "1", Conversation: im.Direct("alice", "bob"), Body: []byte(body)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: convKey(im.Direct("alice", "bob"), convSK(1)), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		t.Fatalf("log item: %v", err)
	}
	if out.Item[attrBodyZ] != nil || getS(out.Item, attrBody) != body {
		t.Errorf("with compression off the log item is %v, want the body as sent", keys(out.Item))
	}
}
