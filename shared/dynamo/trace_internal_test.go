package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/go-cmp/cmp"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/provision"
)

// Issue 12: a trace event was an item of its own (a write unit each, seven
// per 1:1 send). One invocation's events of a message are now one item; the
// items written before that must still read back (a stack upgraded in place).
func TestTraceEventsOfOneCallAreOneItemAndOldItemsStillRead(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	st.tables.Trace = provision.Name("rt", "TraceTable")
	ctx, at := context.Background(), time.UnixMilli(1_800_000_000_000).UTC()
	id := im.MessageID("m1")
	// An event as the code before packing wrote it: one item, its fields
	// beside the key.
	old := eventFields(im.Event{Type: im.EventCreated, At: at, Function: "send", User: "alice"})
	old["messageId"], old[attrSK], old[attrTTL] = s(string(id)), s("1800000000000#0000#00000000"), n(at.Add(TraceRetention).Unix())
	if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Trace), Item: old}); err != nil {
		t.Fatal(err)
	}
	later := at.Add(time.Millisecond)
	evs := []im.Event{
		{Message: id, Type: im.EventStored, At: later, Function: "send", Detail: "d:alice:bob #1"},
		{Message: id, Type: im.EventInboxed, At: later, Function: "send", User: "bob", Seq: 4},
		{Message: "m2", Type: im.EventCreated, At: later, Function: "send"},
		{Message: id, Type: im.EventPushed, At: later, Function: "send", User: "bob", Device: "phone", Connection: "c1", Seq: 4},
		{Message: id, Type: im.EventRedeliveryScheduled, At: later, Function: "send", User: "bob", Seq: 4, Delay: 5 * time.Second},
	}
	var puts []int
	calls := 0
	st.db = dynamodb.New(st.db.Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, countPuts(func(n int) { calls++; puts = append(puts, n) }))
	})
	if err := st.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || len(puts) != 1 || puts[0] != 2 {
		t.Fatalf("%d calls putting %v items; want one call of 2 items (one per message)", calls, puts)
	}
	got, err := st.Events(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]im.Event{{Message: id, Type: im.EventCreated, At: at, Function: "send", User: "alice"}}, evs[0], evs[1], evs[3], evs[4])
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("trace (-want +got):\n%s", diff)
	}
}

// countPuts reports the number of items each BatchWriteItem puts.
func countPuts(f func(n int)) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("countPuts", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if b, ok := in.Parameters.(*dynamodb.BatchWriteItemInput); ok {
				n := 0
				for _, reqs := range b.RequestItems {
					n += len(reqs)
				}
				f(n)
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
	}
}
