package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/client"
)

// A device connects, sends with a server ACK, and reads its messages as they
// are persisted. Run `signet local` first.
func Example() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{
		URL:    "ws://127.0.0.1:3001/",
		Device: "laptop",
		Path:   "/tmp/alice-laptop.db", // messages, cursor and outbox
		Token: func(context.Context) (string, error) {
			return auth.Mint([]byte("local-dev-secret"), "alice", "laptop", time.Now(), time.Hour)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Send returns once the message is durable in every recipient inbox. If
	// it times out, the message stays in the outbox and is retried.
	sent, err := c.Send(ctx, "bob", map[string]string{"text": "Approve PO-7?"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored as", sent.MessageID, "#", sent.ConvSeq)

	// Each message arrives after it is persisted here; the client acks it.
	for m := range c.Messages() {
		fmt.Printf("%d %s: %s\n", m.Seq, m.From, m.Body)
	}
}
