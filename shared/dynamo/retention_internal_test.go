package dynamo

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	miniserver "github.com/truora/minidyn/server"

	"github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/provision"
	"github.com/signet-im/signet/shared/template"
)

// Both retention settings reach the items: inbox entries expire with the
// inbox retention, the conversation log with the (longer) history one.
func TestRetentionSettingsBecomeTTLs(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	st.Retention, st.HistoryRetention = 30*24*time.Hour, 365*24*time.Hour
	ctx, now := context.Background(), time.Unix(1_800_000_000, 0)
	if _, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: "c", Conversation: im.Direct("alice", "bob"), Body: []byte(`"hi"`)}, now); err != nil {
		t.Fatal(err)
	}
	ttl := func(table string, key map[string]types.AttributeValue) int64 {
		out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key})
		if err != nil || out.Item == nil {
			t.Fatalf("get %v: %v", key, err)
		}
		return getN(out.Item, attrTTL)
	}
	if got, want := ttl(st.tables.Inbox, inboxKey("bob", entrySK(1))), now.Add(30*24*time.Hour).Unix(); got != want {
		t.Errorf("inbox entry ttl = %d, want %d", got, want)
	}
	if got, want := ttl(st.tables.Messages, convKey(im.Direct("alice", "bob"), convSK(1))), now.Add(365*24*time.Hour).Unix(); got != want {
		t.Errorf("log entry ttl = %d, want %d", got, want)
	}
	// The conversation index has no TTL: it outlives the inbox.
	if got := ttl(st.tables.Inbox, inboxKey("bob", convIndexSK(im.Direct("alice", "bob")))); got != 0 {
		t.Errorf("index ttl = %d, want none", got)
	}
	st.HistoryRetention = 0
	if _, err := st.Send(ctx, im.Draft{From: "alice", ClientMsgID: "d", Conversation: im.Direct("alice", "bob"), Body: []byte(`"kept"`)}, now); err != nil {
		t.Fatal(err)
	}
	if got := ttl(st.tables.Messages, convKey(im.Direct("alice", "bob"), convSK(2))); got != 0 {
		t.Errorf("log entry ttl with retention 0 = %d, want none", got)
	}
}

// testStore is a store over a fresh in-process minidyn with the template's
// tables (the external tests use devstack, which this package cannot import).
func testStore(t *testing.T) *Store {
	t.Helper()
	return testStoreOn(t, miniserver.NewServer())
}

// testStoreOn is testStore on another in-process emulator (memdyn where a
// test needs DynamoDB's 1 MB pages, which minidyn does not cut).
func testStoreOn(t *testing.T, emulator http.Handler) *Store {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: emulator, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	db := dynamodb.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")},
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String("http://" + ln.Addr().String()) })
	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		t.Fatal(err)
	}
	names, err := provision.Tables(context.Background(), tmpl, db, "rt", nil)
	if err != nil {
		t.Fatal(err)
	}
	return New(db, Tables{Connections: names["ConnectionsTable"], Inbox: names["InboxTable"], Messages: names["MessagesTable"]})
}
