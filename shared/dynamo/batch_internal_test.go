package dynamo

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// batchGet takes any number of keys (BatchGetItem takes 100, and refuses
// a duplicate), and queryAll reads every page.
func TestBatchGetAndQueryAllReadEverything(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	ctx := context.Background()
	var keys []map[string]types.AttributeValue
	for i := range 250 {
		item := inboxKey("bob", fmt.Sprintf("x#%03d", i))
		item["body"] = s(string(make([]byte, 5000))) // 1.25 MB in all: past one 1 MB Query page
		if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.tables.Inbox), Item: item}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, inboxKey("bob", fmt.Sprintf("x#%03d", i)), inboxKey("bob", fmt.Sprintf("x#%03d", i)))
	}
	keys = append(keys, inboxKey("bob", "missing"))
	got := map[string]int{}
	if err := st.batchGet(ctx, st.tables.Inbox, keys, true, func(it map[string]types.AttributeValue) { got[getS(it, attrSK)]++ }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 250 {
		t.Fatalf("batchGet found %d distinct items, want 250", len(got))
	}
	for sk, n := range got {
		if n != 1 {
			t.Fatalf("%s read %d times", sk, n)
		}
	}
	count := 0
	err := st.queryAll(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(st.tables.Inbox),
		KeyConditionExpression:    aws.String("#u = :u AND begins_with(#sk, :x)"),
		ExpressionAttributeNames:  map[string]string{"#u": attrUser, "#sk": attrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":u": s("bob"), ":x": s("x#")},
	}, func(map[string]types.AttributeValue) { count++ })
	if err != nil || count != 250 {
		t.Fatalf("queryAll read %d items, %v; want 250", count, err)
	}
}

// One classifier reads every transaction failure: a failed condition at the
// position asked about is its own outcome; other conditions, conflicts and
// throttling are races to retry; anything else is reported.
func TestClassifyTx(t *testing.T) {
	t.Parallel()
	cancelled := func(codes ...string) error {
		reasons := make([]types.CancellationReason, len(codes))
		for i, c := range codes {
			reasons[i] = types.CancellationReason{Code: aws.String(c)}
		}
		return &types.TransactionCanceledException{CancellationReasons: reasons}
	}
	for _, tc := range []struct {
		err  error
		at   int
		want txFailure
	}{
		{cancelled("ConditionalCheckFailed", "None"), 0, txCondition},
		{cancelled("ConditionalCheckFailed", "None"), -1, txRace},
		{cancelled("None", "ConditionalCheckFailed"), 0, txRace},
		{cancelled("None", "TransactionConflict"), 0, txRace},
		{cancelled("ThrottlingError", "None"), 0, txRace},
		{cancelled("ValidationError", "None"), 0, txOther},
		{&types.TransactionInProgressException{}, 0, txRace},
		{fmt.Errorf("wrapped: %w", cancelled("None", "None", "ConditionalCheckFailed")), 2, txCondition},
		{fmt.Errorf("network"), 0, txOther},
	} {
		if got := classifyTx(tc.err, tc.at); got != tc.want {
			t.Errorf("classifyTx(%v, %d) = %d, want %d", tc.err, tc.at, got, tc.want)
		}
	}
}
