package handler

import (
	"context"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/im"
)

// tracer records the events it is asked to append.
type tracer struct{ appended []im.Event }

func (t *tracer) AppendEvents(_ context.Context, evs []im.Event) error {
	t.appended = append(t.appended, evs...)
	return nil
}

// Issue 12: a 1:1 send that went as expected leaves its trace to be derived
// (Store.Events) unless its id is in the sampled share; one event outside
// what is derived — a failed push, no connection, a re-push, a retry — and
// the whole trail is written, so that nothing a derivation cannot know is
// lost. Plain ids (groups, alerts) are always written.
func TestASendTrailIsWrittenUnlessDerivable(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var id im.MessageID
	for seq := int64(1); ; seq++ {
		if id = im.NewLocatedMessageID(t0, "d:alice:bob", seq); !id.Sampled(50) {
			break
		}
	}
	normal := []im.Event{
		{Message: id, Type: im.EventCreated}, {Message: id, Type: im.EventStored},
		{Message: id, Type: im.EventInboxed, User: "bob", Seq: 4}, {Message: id, Type: im.EventPushed, User: "bob", Detail: "in sent"},
		{Message: id, Type: im.EventRedeliveryScheduled, User: "bob"},
	}
	for _, c := range []struct {
		name   string
		id     im.MessageID
		sample int
		extra  []im.Event
		write  bool
	}{
		{"as expected", id, 50, nil, false},
		{"sampled", id, 1, nil, true},
		{"plain id", "m01JTESTPLAINID0000000000000", 50, nil, true},
		{"push failed", id, 50, []im.Event{{Message: id, Type: im.EventPushFailed}}, true},
		{"no connection", id, 50, []im.Event{{Message: id, Type: im.EventAwaitingPull}}, true},
		{"a re-push", id, 50, []im.Event{{Message: id, Type: im.EventPushed, Attempt: 1}}, true},
		{"a retry", id, 50, []im.Event{{Message: id, Type: im.EventCreated, Detail: "retry of clientMsgId c1"}}, true},
	} {
		tc := &tracer{}
		h := (&Deps{Tracer: tc}).delivery()
		tr := h.trail("send", "r1")
		tr.omitIfDerivable(c.id, c.sample)
		for _, e := range append(normal, c.extra...) {
			if c.id != id {
				e.Message = c.id
			}
			tr.add(e)
		}
		tr.add(im.Event{Message: "m-other", Type: im.EventStored}) // another message's events are written as ever
		tr.flush(context.Background())
		want := 1
		if c.write {
			want += len(normal) + len(c.extra)
		}
		if len(tc.appended) != want {
			t.Errorf("%s: %d events written, want %d", c.name, len(tc.appended), want)
		}
	}
}
