package dynamo_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// Issue 16: an answer is once per recipient and forward-only; with first
// answer wins, of recipients answering at once exactly one answer stands.
// (The store contract suite: minidyn here, memdyn and moto in make
// test-stores.)
func TestAnswersAreOncePerRecipientAndTheFirstCanWin(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	now := time.Now()
	begin := func(key string, ack *im.AckSpec) im.MessageID {
		a, err := st.BeginAlert(ctx, "ops", key, key, im.Alert{Message: im.Message{Conversation: "a:ops", From: "app.ops", Body: []byte(`{}`)},
			App: "ops", Recipients: []im.UserID{"ann", "ben", "cid"}, Title: "t", Priority: "urgent", Ack: ack}, now)
		if err != nil {
			t.Fatal(err)
		}
		return a.Alert.Message.ID
	}
	id := begin("k1", &im.AckSpec{Required: true, Options: []string{"ack", "decline"}})
	a, err := st.Alert(ctx, id)
	if err != nil || a.Ack == nil || !a.Ack.Required || a.Ack.FirstWins || !a.Ack.Allows("decline") || a.Ack.Allows("maybe") {
		t.Fatalf("the alert's ack spec reads back as %+v, %v", a.Ack, err)
	}
	if _, recorded, err := st.Answer(ctx, id, im.Answer{User: "ann", Device: "p", Option: "ack", At: now}, false); err != nil || !recorded {
		t.Fatalf("ann's answer: %v %v", recorded, err)
	}
	if got, recorded, err := st.Answer(ctx, id, im.Answer{User: "ann", Device: "q", Option: "ack", At: now.Add(time.Second)}, false); err != nil || recorded || got.Device != "p" {
		t.Fatalf("the same answer again: %+v %v %v (want the first, not recorded)", got, recorded, err)
	}
	if _, _, err := st.Answer(ctx, id, im.Answer{User: "ann", Option: "decline", At: now}, false); !errors.Is(err, im.ErrAlreadyAnswered) {
		t.Fatalf("a changed answer: %v, want ErrAlreadyAnswered", err)
	}
	if _, _, err := st.Answer(ctx, id, im.Answer{User: "ben", Option: "decline", At: now.Add(time.Millisecond)}, false); err != nil {
		t.Fatal(err)
	}
	list, err := st.Answers(ctx, id)
	if err != nil || len(list) != 2 || list[0].User != "ann" || list[1].Option != "decline" {
		t.Fatalf("answers %+v, %v", list, err)
	}

	first := begin("k2", &im.AckSpec{Required: true, Options: []string{"approve", "reject"}, FirstWins: true})
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, u := range []im.UserID{"ann", "ben", "cid"} {
		wg.Go(func() { _, _, errs[i] = st.Answer(ctx, first, im.Answer{User: u, Option: "approve", At: now}, true) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, im.ErrAlreadyAnswered):
			t.Fatal(err)
		}
	}
	list, err = st.Answers(ctx, first)
	if won != 1 || err != nil || len(list) != 1 {
		t.Fatalf("%d answers won, %d stored (%v): exactly one must stand", won, len(list), err)
	}
	if _, recorded, err := st.Answer(ctx, first, im.Answer{User: list[0].User, Option: "approve", At: now}, true); err != nil || recorded {
		t.Fatalf("the winner's answer again: %v %v", recorded, err)
	}
}
