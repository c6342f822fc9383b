package devstack_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/callcount"
	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
)

// BenchmarkSummary1000Conversations measures one user's full login summary
// (every page, through the SDK over a real WebSocket) with 1,000
// conversations: 990 1:1 conversations and 10 groups, each with messages,
// some read. It reports ms per full summary and DynamoDB calls per summary.
func BenchmarkSummary1000Conversations(b *testing.B) {
	const directs, groups = 990, 10
	counter := callcount.New()
	dynamoEndpoint, sqsEndpoint := testEndpoints()
	st, err := devstack.Start(context.Background(), devstack.Options{
		Prefix: fmt.Sprintf("sum%d", time.Now().UnixNano()), DynamoDBEndpoint: dynamoEndpoint, SQSEndpoint: sqsEndpoint,
		APIOptions: counter.APIOptions(), RateLimits: "off",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx, now := context.Background(), time.Now()
	// Seed through the store: 1:1 sends (each updates both users'
	// conversation index in its transaction) and groups with one message.
	for i := range directs {
		peer := im.UserID(fmt.Sprintf("p%04d", i))
		if _, err := st.Store.Send(ctx, im.Draft{From: peer, ClientMsgID: "m", Conversation: im.Direct("me", peer), Body: []byte(`{"text":"can you approve?"}`)}, now); err != nil {
			b.Fatal(err)
		}
		if i%3 == 0 {
			if _, _, err := st.Store.MarkRead(ctx, "me", im.Direct("me", peer), 1, now); err != nil {
				b.Fatal(err)
			}
		}
	}
	for g := range groups {
		conv := im.Group(fmt.Sprintf("team%d", g))
		if _, err := st.Store.CreateGroup(ctx, conv, fmt.Sprintf("Team %d", g), "me", nil, now); err != nil {
			b.Fatal(err)
		}
	}
	c, err := client.Dial(ctx, client.Options{
		URL: st.URL, Device: "laptop", Path: filepath.Join(b.TempDir(), "me.db"),
		Token: func(context.Context) (string, error) {
			return auth.Mint([]byte(devstack.DefaultSecret), "me", "", time.Now(), time.Hour)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	// Let the device finish its own sync and ack of the 990 messages, so
	// that only summaries are counted.
	for {
		devs, err := st.Store.Devices(ctx, "me")
		if err != nil {
			b.Fatal(err)
		}
		if devs["laptop"].Acked == directs {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	before := counter.Snapshot()
	start := time.Now()
	for b.Loop() {
		sum, err := c.Summary(ctx)
		if err != nil {
			b.Fatal(err)
		}
		unread := int64(0)
		for _, s := range sum {
			unread += s.Unread
		}
		if len(sum) != directs+groups || unread != directs-directs/3 {
			b.Fatalf("summary: %d conversations, %d unread", len(sum), unread)
		}
	}
	cost := counter.Snapshot().Sub(before)
	b.ReportMetric(float64(cost.Service("DynamoDB"))/float64(b.N), "ddb-calls/summary")
	fmt.Printf("%d full summaries of %d conversations in %s\n%s", b.N, directs+groups, time.Since(start).Round(time.Millisecond), cost.Table(b.N, "summary"))
}
