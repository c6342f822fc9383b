package handler

import (
	"testing"

	"github.com/signet-im/signet/shared/im"
)

// An entry is urgent only as an alert whose body says so: a chat message
// saying "priority":"urgent" is not, and neither is a normal alert.
func TestUrgentEntries(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		conv im.ConversationID
		body string
		want bool
	}{
		{"a:pager", `{"title":"DB down","priority":"urgent"}`, true},
		{"a:pager", `{"title":"report","priority":"normal"}`, false},
		{"a:pager", `not json`, false},
		{"d:alice:bob", `{"priority":"urgent"}`, false},
	} {
		e := im.Entry{Seq: 1, Message: im.Message{Conversation: c.conv, Body: []byte(c.body)}}
		if got := urgentEntry(e); got != c.want {
			t.Errorf("%s %s: urgent %v", c.conv, c.body, got)
		}
	}
}
