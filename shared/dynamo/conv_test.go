package dynamo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

func TestConversationsPagesThroughTheIndex(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	var want []im.ConversationID
	for i := range 5 {
		peer := im.UserID(fmt.Sprintf("p%d", i))
		if _, err := st.Send(ctx, im.Draft{From: peer, ClientMsgID: "x", Conversation: im.Direct("bob", peer), Body: []byte(`"hi"`)}, now); err != nil {
			t.Fatal(err)
		}
		want = append(want, im.Direct("bob", peer))
	}
	for _, limit := range []int{1, 2, 5, 7} {
		var got []im.ConversationID
		after := im.ConversationID("")
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("limit %d: no end", limit)
			}
			states, next, err := st.Conversations(ctx, "bob", after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(states) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(states))
			}
			for _, s := range states {
				got = append(got, s.Conversation)
			}
			if next == "" {
				break
			}
			after = next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("limit %d: %v, want %v", limit, got, want)
		}
	}
}

func TestAckCursorsReadManyDevicesAtOnce(t *testing.T) {
	t.Parallel()
	st, ctx, now := newStore(t), context.Background(), time.Now()
	var users []im.UserID
	for i := range 120 {
		u := im.UserID(fmt.Sprintf("u%03d", i))
		users = append(users, u)
		if i%2 == 0 {
			continue
		}
		if _, err := st.Send(ctx, im.Draft{From: "boss", ClientMsgID: string(u), Conversation: im.Direct("boss", u), Body: []byte(`"hi"`)}, now); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.Ack(ctx, u, "phone", 1, now); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.AckCursors(ctx, "phone", users)
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range users {
		if want := int64(i % 2); got[u] != want {
			t.Fatalf("%s acked %d, want %d", u, got[u], want)
		}
	}
}
