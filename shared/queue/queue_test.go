package queue

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/signet-im/signet/shared/im"
)

// One check travels as the JSON object every version of the consumer
// reads; the checks of one invocation's pushes travel as an array in one
// message (issue 12). Both decode; malformed ones are refused.
func TestChecksRoundTripAsOneObjectOrAnArray(t *testing.T) {
	t.Parallel()
	one := im.Check{User: "bob", Device: "phone", Connection: "c1", Seq: 7, Attempt: 1}
	two := im.Check{User: "alice", Device: "laptop", Connection: "c2", Seq: 9, Attempt: 1}
	if body := Encode(one); !strings.HasPrefix(body, "{") {
		t.Fatalf("one check encodes as %s, want a JSON object", body)
	}
	old := `{"u":"bob","d":"phone","c":"c1","s":7,"a":1}` // as the consumer before arrays wrote it
	for _, tc := range []struct {
		body string
		want []im.Check
	}{
		{Encode(one), []im.Check{one}},
		{old, []im.Check{one}},
		{Encode(one, two), []im.Check{one, two}},
	} {
		got, err := Decode(tc.body)
		if err != nil {
			t.Fatalf("decode %s: %v", tc.body, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("decode %s (-want +got):\n%s", tc.body, diff)
		}
	}
	many := make([]im.Check, MaxChecksPerMessage+1)
	for i := range many {
		many[i] = one
	}
	for _, bad := range []string{``, `[]`, `[{"u":"bob"}]`, `{"u":"bob","c":"c1","s":0}`, `[` + Encode(one) + `,{"u":"","c":"c","s":1}]`, Encode(many...), `"x"`} {
		if got, err := Decode(bad); err == nil {
			t.Errorf("decode %q = %+v, want an error", bad, got)
		}
	}
}
